package bus

import (
	"fmt"
	"strconv"

	"github.com/switchboard-chat/switchboard/internal/jsonwire"
)

// AppendEvent appends the JSON of e with data as its Data (e.Data is not
// used): the bytes json.Marshal writes for e with Data set to
// json.Marshal(data), encoded once. Agents publish every event this way.
func AppendEvent(b []byte, e *Event, data any) ([]byte, error) {
	b = append(b, `{"v":`...)
	b = strconv.AppendInt(b, int64(e.V), 10)
	b = jsonwire.AppendKeyString(b, `,"type":`, e.Type)
	b = jsonwire.AppendKeyString(b, `,"session":`, e.Session)
	b = jsonwire.AppendKeyString(b, `,"channel":`, e.Channel)
	b = jsonwire.AppendKeyString(b, `,"chat_id":`, e.ChatID)
	b = appendOmitEmpty(b, `,"thread_id":`, e.ThreadID)
	b = appendOmitEmpty(b, `,"in_reply_to":`, e.InReplyTo)
	b = appendOmitEmpty(b, `,"agent":`, e.Agent)
	b = append(b, `,"time":"`...)
	b, err := e.Time.AppendText(b) // time.Time's MarshalJSON: RFC 3339, year 0-9999
	if err != nil {
		return b, fmt.Errorf("bus: encode event time: %w", err)
	}
	b = append(b, `","data":`...)
	if b, err = jsonwire.AppendValue(b, data); err != nil {
		return b, fmt.Errorf("bus: encode event data: %w", err)
	}
	return append(b, '}'), nil
}

// AppendOutbound appends the JSON of o: the bytes json.Marshal writes for
// it. Agents publish typing signals, deltas and finals this way.
func AppendOutbound(b []byte, o *Outbound) []byte {
	b = append(b, `{"v":`...)
	b = strconv.AppendInt(b, int64(o.V), 10)
	b = jsonwire.AppendKeyString(b, `,"id":`, o.ID)
	b = jsonwire.AppendKeyString(b, `,"channel":`, o.Channel)
	b = jsonwire.AppendKeyString(b, `,"chat_id":`, o.ChatID)
	b = appendOmitEmpty(b, `,"thread_id":`, o.ThreadID)
	b = appendOmitEmpty(b, `,"in_reply_to":`, o.InReplyTo)
	b = jsonwire.AppendKeyString(b, `,"kind":`, o.Kind)
	b = appendOmitEmpty(b, `,"text":`, o.Text)
	b = append(b, `,"seq":`...)
	b = strconv.AppendInt(b, int64(o.Seq), 10)
	if o.Final {
		b = append(b, `,"final":true`...)
	}
	if len(o.Attachments) > 0 {
		b = append(b, `,"attachments":[`...)
		for i := range o.Attachments {
			if i > 0 {
				b = append(b, ',')
			}
			b = appendAttachment(b, &o.Attachments[i])
		}
		b = append(b, ']')
	}
	if len(o.Meta) > 0 {
		b = jsonwire.AppendStringMap(append(b, `,"meta":`...), o.Meta)
	}
	return append(b, '}')
}

func appendAttachment(b []byte, a *Attachment) []byte {
	b = jsonwire.AppendKeyString(b, `{"kind":`, a.Kind)
	b = appendOmitEmpty(b, `,"url":`, a.URL)
	b = appendOmitEmpty(b, `,"data":`, a.Data)
	b = appendOmitEmpty(b, `,"mime":`, a.MIME)
	b = appendOmitEmpty(b, `,"name":`, a.Name)
	if a.Size != 0 {
		b = append(b, `,"size":`...)
		b = strconv.AppendInt(b, a.Size, 10)
	}
	return append(b, '}')
}

// appendOmitEmpty is jsonwire.AppendKeyString for an omitempty field:
// nothing when s is empty.
func appendOmitEmpty(b []byte, key, s string) []byte {
	if s == "" {
		return b
	}
	return jsonwire.AppendKeyString(b, key, s)
}

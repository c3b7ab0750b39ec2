// Package tail is `switchboard bus tail`: a live, read-only view of a bus's
// traffic in a terminal, one line per message. [Run] subscribes with core
// NATS to the inbound, outbound, event and dead-letter subjects of every
// channel or of one, and [Printer] renders each message: the direction
// (IN, OUT, EVENT, DLQ), the conversation, the ids that link a reply to
// its message, texts quoted on one line and cut to 100 characters, and,
// for an inbound envelope the runtime would refuse, why (validated by
// [bus.ParseInbound], the runtime's own parser). Nothing is published or
// acknowledged: tailing never changes what the daemon or a bridge sees.
//
// When the terminal cannot keep up, messages beyond a buffer of 8192 are
// dropped, and the drop is reported on the error writer given to [Dial].
package tail

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/nats-io/nats.go"

	"github.com/switchboard-chat/switchboard/bus"
)

// Bounds of the tail.
const (
	textRunes   = 100  // longest text shown per line
	buffer      = 8192 // messages buffered between NATS and the printer
	dialTimeout = 3 * time.Second
)

// Dial connects to the bus at url with opts (the operator's credentials,
// natsbus.Operator.Options) for a tail; the connection's asynchronous
// errors (dropped messages) are written to errOut. The caller closes the
// connection.
func Dial(url string, opts []nats.Option, errOut io.Writer) (*nats.Conn, error) {
	opts = append(opts, nats.Name("switchboard-tail"), nats.Timeout(dialTimeout),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
			if errors.Is(err, nats.ErrSlowConsumer) {
				err = errors.New("messages dropped: the terminal cannot keep up")
			}
			fmt.Fprintln(errOut, "switchboard bus tail:", err)
		}))
	nc, err := nats.Connect(url, opts...)
	if err != nil {
		return nil, fmt.Errorf("bus tail: connect to the bus at %s (is `switchboard serve` running?): %w", bus.RedactURL(url), err)
	}
	return nc, nil
}

// Run subscribes on nc to the traffic of channel (every channel when
// empty) and prints one line per message to out until ctx ends; it returns
// nil then. The banner, naming the bus as shown (a redacted URL), is
// printed once the server has the subscriptions.
func Run(ctx context.Context, nc *nats.Conn, p Printer, channel, shown string, out io.Writer) error {
	subj := p.Subjects
	subjects := []string{subj.InAll(), subj.OutAll(), subj.EventAll(), subj.DLQAll()}
	what := "all channels"
	if channel != "" {
		subjects = []string{
			subj.Prefix + ".in." + channel + ".>",
			subj.OutChannel(channel),
			subj.Prefix + ".event." + channel + ".>",
			subj.DLQ(channel),
		}
		what = "channel " + channel
	}
	msgs := make(chan *nats.Msg, buffer)
	for _, s := range subjects {
		sub, err := nc.ChanSubscribe(s, msgs)
		if err != nil {
			return fmt.Errorf("bus tail: subscribe %s: %w", s, err)
		}
		defer func() { _ = sub.Unsubscribe() }()
	}
	if err := nc.Flush(); err != nil {
		return fmt.Errorf("bus tail: subscribe: %w", err)
	}
	fmt.Fprintf(out, "Tailing %s on %s (Ctrl-C to stop)\n", what, shown)
	for {
		select {
		case <-ctx.Done():
			return nil
		case m := <-msgs:
			fmt.Fprintln(out, p.Line(time.Now(), m))
		}
	}
}

// Printer formats bus messages for `switchboard bus tail`, one line each.
type Printer struct {
	// Subjects is the bus's subject scheme (bus.subject_prefix).
	Subjects bus.Subjects
	// MaxTextBytes is bus.max_text_bytes, to flag inbound envelopes the
	// runtime rejects (0: the default).
	MaxTextBytes int
}

// Line formats one message received at t:
//
//	15:04:05.000 IN    wechat/room@1       #4711 Ann: "hello"  +1 image  group mentioned
//	15:04:05.100 IN    chat.in.wechat.r1   #9 u: "hi"  INVALID: bus: field "v": must be 1, got 2...
//	15:04:05.210 OUT   wechat/room@1       typing   ↩4711 seq 1
//	15:04:06.020 OUT   wechat/room@1       reply    ↩4711 seq 4 final "Hello, Ann!"
//	15:04:05.300 EVENT wechat/room@1       tool_call ↩4711 {"name":"read_file",...}
//	15:04:05.400 DLQ   wechat              bus: field "v": must be 1, got 2 (chat.in.wechat.room1, 16 bytes) "{\"v\":2..."
func (p Printer) Line(t time.Time, m *nats.Msg) string {
	ts := t.Format("15:04:05.000")
	rest := strings.TrimPrefix(m.Subject, p.Subjects.Prefix+".")
	kind, rest, _ := strings.Cut(rest, ".")
	switch kind {
	case "in":
		return ts + " IN    " + p.inbound(m)
	case "out":
		return ts + " OUT   " + p.outbound(m)
	case "event":
		return ts + " EVENT " + p.event(m)
	case "dlq":
		return ts + " DLQ   " + p.deadLetter(rest, m)
	}
	return ts + " ?     " + m.Subject + " " + quoteShort(string(m.Data))
}

func chatLabel(channel, chatID, threadID string) string {
	s := channel + "/" + chatID
	if threadID != "" {
		s += "/" + threadID
	}
	return fmt.Sprintf("%-20s", s)
}

func (p Printer) inbound(m *nats.Msg) string {
	var in bus.Inbound
	if json.Unmarshal(m.Data, &in) != nil {
		return fmt.Sprintf("%-20s not an envelope: %s", m.Subject, quoteShort(string(m.Data)))
	}
	_, invalid := bus.ParseInbound(p.Subjects, m.Subject, m.Data, p.MaxTextBytes)
	var b strings.Builder
	if invalid != nil {
		b.WriteString(fmt.Sprintf("%-20s", m.Subject))
	} else {
		b.WriteString(chatLabel(in.Channel, in.ChatID, in.ThreadID))
	}
	fmt.Fprintf(&b, " #%s ", in.ID)
	who := in.UserName
	if who == "" {
		who = in.UserID
	}
	b.WriteString(who + ": ")
	b.WriteString(quoteShort(in.Text))
	if n := len(in.Attachments); n > 0 {
		fmt.Fprintf(&b, "  +%d %s", n, attachmentWord(in.Attachments))
	}
	if in.ReplyTo != "" {
		b.WriteString("  reply to #" + in.ReplyTo)
	}
	if in.IsGroup {
		b.WriteString("  group")
	}
	if in.Mentioned {
		b.WriteString(" mentioned")
	}
	if invalid != nil {
		b.WriteString("  INVALID: " + invalid.Error())
	}
	return b.String()
}

func attachmentWord(atts []bus.Attachment) string {
	kind := atts[0].Kind
	for _, a := range atts[1:] {
		if a.Kind != kind {
			return "attachments"
		}
	}
	if len(atts) > 1 {
		return kind + "s"
	}
	return kind
}

func (p Printer) outbound(m *nats.Msg) string {
	var o bus.Outbound
	if json.Unmarshal(m.Data, &o) != nil {
		return fmt.Sprintf("%-20s not an envelope: %s", m.Subject, quoteShort(string(m.Data)))
	}
	var b strings.Builder
	b.WriteString(chatLabel(o.Channel, o.ChatID, o.ThreadID))
	fmt.Fprintf(&b, " %-8s", o.Kind)
	if o.InReplyTo != "" {
		b.WriteString(" ↩" + o.InReplyTo)
	}
	fmt.Fprintf(&b, " seq %d", o.Seq)
	if o.Final {
		b.WriteString(" final")
	}
	if o.Text != "" {
		b.WriteString(" " + quoteShort(o.Text))
	}
	if n := len(o.Attachments); n > 0 {
		fmt.Fprintf(&b, "  +%d %s", n, attachmentWord(o.Attachments))
	}
	return b.String()
}

func (p Printer) event(m *nats.Msg) string {
	var ev bus.Event
	if json.Unmarshal(m.Data, &ev) != nil {
		return fmt.Sprintf("%-20s not an event: %s", m.Subject, quoteShort(string(m.Data)))
	}
	var b strings.Builder
	b.WriteString(chatLabel(ev.Channel, ev.ChatID, ev.ThreadID))
	b.WriteString(" " + ev.Type)
	if ev.InReplyTo != "" {
		b.WriteString(" ↩" + ev.InReplyTo)
	}
	if len(ev.Data) > 0 && string(ev.Data) != "null" {
		b.WriteString(" " + cut(oneLine(string(ev.Data)), textRunes))
	}
	return b.String()
}

func (p Printer) deadLetter(channel string, m *nats.Msg) string {
	var r bus.DLQRecord
	if json.Unmarshal(m.Data, &r) != nil {
		return fmt.Sprintf("%-20s not a dead-letter record: %s", channel, quoteShort(string(m.Data)))
	}
	payload := r.Payload
	if r.PayloadBase64 {
		payload = "(base64) " + payload
	}
	return fmt.Sprintf("%-20s %s (%s, %d bytes) %s", channel, r.Reason, r.Subject, r.Size, quoteShort(payload))
}

// quoteShort quotes s on one line, cut to textRunes characters.
func quoteShort(s string) string {
	if s == "" {
		return `""`
	}
	return `"` + cut(oneLine(s), textRunes) + `"`
}

// oneLine writes line breaks and tabs as ↵ and spaces.
func oneLine(s string) string {
	return strings.NewReplacer("\r\n", "↵", "\n", "↵", "\r", "↵", "\t", " ").Replace(s)
}

// cut shortens s to at most n characters, ending with … when cut.
func cut(s string, n int) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	i, count := 0, 0
	for i = range s {
		if count == n-1 {
			break
		}
		count++
	}
	return s[:i] + "…"
}

package bus_test

import (
	"bytes"
	"encoding/json"
	"math"
	"testing"
	"time"

	"github.com/switchboard-chat/switchboard/bus"
)

// marshalEvent is the reference: the envelope and its data marshalled by
// encoding/json, the way agents encoded events before AppendEvent.
func marshalEvent(t *testing.T, e bus.Event, data any) ([]byte, bool) {
	t.Helper()
	raw, err := json.Marshal(data)
	if err != nil {
		return nil, false
	}
	e.Data = raw
	b, err := json.Marshal(e)
	if err != nil {
		return nil, false
	}
	return b, true
}

func eventCases() []struct {
	name string
	e    bus.Event
	data any
} {
	at := time.Date(2026, 12, 1, 19, 42, 20, 123456789, time.UTC)
	full := bus.Event{V: bus.Version, Type: bus.EventToolResult, Session: "wechat/room@1/t<1>", Channel: "wechat",
		ChatID: "room@1", ThreadID: "t<1>", InReplyTo: "m&1", Agent: "main", Time: at}
	bare := bus.Event{V: bus.Version, Type: bus.EventTurnStart, Session: "s", Channel: "c", ChatID: "x", Time: at.Truncate(time.Second)}
	return []struct {
		name string
		e    bus.Event
		data any
	}{
		{"delta", full, map[string]any{"text": "hello <b>\u2028 & \xff"}},
		{"tool result", full, map[string]any{"id": "call_1", "name": "read_file", "error": false, "text": "ok\n", "duration_ms": int64(12)}},
		{"nested", full, map[string]any{"subagent": "a", "data": map[string]any{"z": 1, "a": []string{"x"}, "m": nil}}},
		{"float and uint", bare, map[string]any{"ratio": 0.000001, "big": 1e21, "n": uint64(1 << 63), "i32": int32(-4)}},
		{"struct data", bare, struct {
			In  int    `json:"in"`
			Out string `json:"out,omitempty"`
		}{In: 3}},
		{"nil data", bare, nil},
		{"nil map", bare, map[string]any(nil)},
		{"empty map", bare, map[string]any{}},
		{"string data", bare, "<tag>"},
		{"raw data", bare, json.RawMessage(`{ "a" : "<&>" }`)},
		{"zero time", bus.Event{}, true},
		{"offset time", bus.Event{Time: time.Date(2026, 1, 2, 3, 4, 5, 600, time.FixedZone("x", 3600))}, 7},
	}
}

// TestAppendEvent: AppendEvent writes what encoding/json writes for the
// envelope and its data, byte for byte.
func TestAppendEvent(t *testing.T) {
	for _, tc := range eventCases() {
		t.Run(tc.name, func(t *testing.T) {
			want, ok := marshalEvent(t, tc.e, tc.data)
			if !ok {
				t.Fatal("reference marshal failed")
			}
			got, err := bus.AppendEvent([]byte("prefix"), &tc.e, tc.data)
			if err != nil {
				t.Fatalf("AppendEvent: %v", err)
			}
			if !bytes.Equal(got, append([]byte("prefix"), want...)) {
				t.Fatalf("AppendEvent =\n%s\nwant\n%s", got[len("prefix"):], want)
			}
		})
	}
}

// TestAppendEventErrors: what encoding/json refuses, AppendEvent refuses.
func TestAppendEventErrors(t *testing.T) {
	for name, tc := range map[string]struct {
		e    bus.Event
		data any
	}{
		"year 10000":   {bus.Event{Time: time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC)}, 1},
		"func in data": {bus.Event{}, map[string]any{"x": 1.0, "y": func() {}}},
		"NaN in data":  {bus.Event{}, map[string]any{"x": math.NaN()}},
		"channel":      {bus.Event{}, map[string]any{"c": make(chan int)}},
	} {
		if _, ok := marshalEvent(t, tc.e, tc.data); ok {
			t.Fatalf("%s: encoding/json accepted it", name)
		}
		if _, err := bus.AppendEvent(nil, &tc.e, tc.data); err == nil {
			t.Errorf("%s: AppendEvent accepted what encoding/json refuses", name)
		}
	}
}

func outboundCases() []bus.Outbound {
	in := &bus.Inbound{V: 1, ID: "m<1>", Channel: "wechat", ChatID: "room@1", ThreadID: "t&1"}
	reply := bus.ReplyTo(in)
	reply.ID, reply.Kind, reply.Text, reply.Seq, reply.Final = "out1", bus.KindReply, "answer <b>\u2029", 3, true
	withAll := reply
	withAll.Attachments = []bus.Attachment{{Kind: "image", URL: "https://x/y?a=1&b=2", MIME: "image/png", Name: "y.png", Size: 42},
		{Kind: "file", Data: "aGk="}}
	withAll.Meta = map[string]string{"z": "1", "a": "<2>", "m": ""}
	return []bus.Outbound{
		{V: 1, ID: "t1", Channel: "c", ChatID: "x", Kind: bus.KindTyping, Seq: 1},
		{V: 1, ID: "d1", Channel: "c", ChatID: "x", Kind: bus.KindDelta, Text: "so far\n\"quoted\"", Seq: 2},
		reply,
		withAll,
		{Attachments: []bus.Attachment{}, Meta: map[string]string{}},
		{},
	}
}

// TestAppendOutbound: AppendOutbound writes what json.Marshal writes.
func TestAppendOutbound(t *testing.T) {
	for i, o := range outboundCases() {
		want, err := json.Marshal(o)
		if err != nil {
			t.Fatal(err)
		}
		if got := bus.AppendOutbound(nil, &o); !bytes.Equal(got, want) {
			t.Errorf("case %d: AppendOutbound =\n%s\nwant\n%s", i, got, want)
		}
	}
}

// FuzzAppendEnvelopes checks both envelope encoders against encoding/json
// for arbitrary strings, numbers and times.
func FuzzAppendEnvelopes(f *testing.F) {
	f.Add("wechat", "room@1", "t<1>", "hello & \u2028", "m1", int64(1764618140123456789), 3, true, "k")
	f.Add("", "", "", "\xff\xfe", "", int64(0), 0, false, "")
	f.Add("c", "x", "", "", "\x00", int64(-62135596800000000), -7, false, "\u2029")
	f.Fuzz(func(t *testing.T, channel, chat, thread, text, id string, nanos int64, n int, flag bool, key string) {
		at := time.Unix(0, nanos).UTC()
		e := bus.Event{V: n, Type: key, Session: channel + "/" + chat, Channel: channel, ChatID: chat, ThreadID: thread,
			InReplyTo: id, Agent: text, Time: at}
		data := map[string]any{"text": text, key: n, "flag": flag, "nested": map[string]any{thread: id}}
		want, ok := marshalEvent(t, e, data)
		got, err := bus.AppendEvent(nil, &e, data)
		switch {
		case ok != (err == nil):
			t.Fatalf("AppendEvent error %v, encoding/json ok %v", err, ok)
		case ok && !bytes.Equal(got, want):
			t.Fatalf("AppendEvent =\n%s\nwant\n%s", got, want)
		}
		o := bus.Outbound{V: n, ID: id, Channel: channel, ChatID: chat, ThreadID: thread, InReplyTo: key, Kind: key,
			Text: text, Seq: n, Final: flag}
		if flag {
			o.Attachments = []bus.Attachment{{Kind: key, URL: text, Data: id, MIME: chat, Name: thread, Size: nanos}}
			o.Meta = map[string]string{key: text, thread: id}
		}
		wantOut, err := json.Marshal(o)
		if err != nil {
			t.Fatal(err)
		}
		if got := bus.AppendOutbound(nil, &o); !bytes.Equal(got, wantOut) {
			t.Fatalf("AppendOutbound =\n%s\nwant\n%s", got, wantOut)
		}
	})
}

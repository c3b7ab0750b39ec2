package bus_test

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/switchboard-chat/switchboard/bus"
)

func TestNewDLQRecord(t *testing.T) {
	now := time.Date(2026, 3, 1, 10, 0, 0, 0, time.UTC)
	reason := errors.New(`bus: field "v": must be 1, got 2: invalid envelope`)

	t.Run("small text", func(t *testing.T) {
		r := bus.NewDLQRecord("chat.in.x.y", []byte(`{"v":2}`), reason, now)
		want := bus.DLQRecord{V: 1, Reason: reason.Error(), Subject: "chat.in.x.y", Payload: `{"v":2}`, Size: 7, Time: now}
		if r != want {
			t.Errorf("got %+v, want %+v", r, want)
		}
	})

	t.Run("nil reason", func(t *testing.T) {
		if r := bus.NewDLQRecord("s", nil, nil, now); r.Reason != "unknown" || r.Payload != "" || r.Size != 0 || r.PayloadBase64 {
			t.Errorf("got %+v", r)
		}
	})

	t.Run("long ASCII cut at 4 KiB", func(t *testing.T) {
		data := []byte(strings.Repeat("a", 10000))
		r := bus.NewDLQRecord("s", data, reason, now)
		if len(r.Payload) != bus.DLQPayloadBytes || r.Size != 10000 || r.PayloadBase64 {
			t.Errorf("payload %d bytes, size %d, base64 %v", len(r.Payload), r.Size, r.PayloadBase64)
		}
	})

	t.Run("rune straddling the cut", func(t *testing.T) {
		// 4095 ASCII bytes, then "é" (2 bytes) crossing byte 4096.
		data := []byte(strings.Repeat("a", bus.DLQPayloadBytes-1) + "éxyz")
		r := bus.NewDLQRecord("s", data, reason, now)
		if r.PayloadBase64 || len(r.Payload) != bus.DLQPayloadBytes-1 || !utf8.ValidString(r.Payload) {
			t.Errorf("payload %d bytes, base64 %v, want %d bytes of text", len(r.Payload), r.PayloadBase64, bus.DLQPayloadBytes-1)
		}
	})

	t.Run("4-byte rune straddling the cut", func(t *testing.T) {
		data := []byte(strings.Repeat("a", bus.DLQPayloadBytes-2) + "😀")
		r := bus.NewDLQRecord("s", data, reason, now)
		if r.PayloadBase64 || len(r.Payload) != bus.DLQPayloadBytes-2 {
			t.Errorf("payload %d bytes, base64 %v, want %d bytes of text", len(r.Payload), r.PayloadBase64, bus.DLQPayloadBytes-2)
		}
	})

	t.Run("cut right before a stray continuation byte", func(t *testing.T) {
		data := []byte(strings.Repeat("a", bus.DLQPayloadBytes) + "\x80")
		r := bus.NewDLQRecord("s", data, reason, now)
		if r.PayloadBase64 || len(r.Payload) != bus.DLQPayloadBytes {
			t.Errorf("payload %d bytes, base64 %v, want the full 4 KiB prefix as text", len(r.Payload), r.PayloadBase64)
		}
	})

	t.Run("binary", func(t *testing.T) {
		data := make([]byte, 5000)
		for i := range data {
			data[i] = byte(i)
		}
		r := bus.NewDLQRecord("s", data, reason, now)
		if !r.PayloadBase64 || r.Size != 5000 {
			t.Fatalf("got base64 %v size %d", r.PayloadBase64, r.Size)
		}
		raw, err := base64.StdEncoding.DecodeString(r.Payload)
		if err != nil || string(raw) != string(data[:bus.DLQPayloadBytes]) {
			t.Errorf("payload does not decode to the first 4 KiB: %v", err)
		}
	})

	t.Run("json", func(t *testing.T) {
		b, err := json.Marshal(bus.NewDLQRecord("chat.in.x.y", []byte{0xff}, reason, now))
		if err != nil {
			t.Fatal(err)
		}
		want := `{"v":1,"reason":"bus: field \"v\": must be 1, got 2: invalid envelope","subject":"chat.in.x.y","payload":"/w==","payload_base64":true,"size":1,"time":"2026-03-01T10:00:00Z"}`
		if string(b) != want {
			t.Errorf("json = %s\nwant   %s", b, want)
		}
	})
}

func TestEventJSON(t *testing.T) {
	ev := bus.Event{
		V: 1, Type: bus.EventToolCall, Session: "console/demo", Channel: "console", ChatID: "demo",
		InReplyTo: "m1", Time: time.Date(2026, 3, 1, 10, 0, 0, 0, time.UTC),
		Data: json.RawMessage(`{"name":"read_file"}`),
	}
	b, err := json.Marshal(ev)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"v":1,"type":"tool_call","session":"console/demo","channel":"console","chat_id":"demo","in_reply_to":"m1","time":"2026-03-01T10:00:00Z","data":{"name":"read_file"}}`
	if string(b) != want {
		t.Errorf("json = %s\nwant   %s", b, want)
	}
	var back bus.Event
	if err := json.Unmarshal(b, &back); err != nil || back.Type != bus.EventToolCall || string(back.Data) != `{"name":"read_file"}` {
		t.Errorf("round trip = %+v, %v", back, err)
	}
}

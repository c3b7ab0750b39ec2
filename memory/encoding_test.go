package memory_test

import (
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/switchboard-chat/switchboard/memory"
)

// TestEncodeTurn: the stored form every store keeps. Zero times become
// the commit time, every receipt carries the record's session, turns are
// counted, and the bytes are the format history.db has always held (a
// receipt written before this encoding was shared still decodes, and the
// encoder writes the same bytes).
func TestEncodeTurn(t *testing.T) {
	now := time.Date(2025, 3, 4, 12, 0, 0, 0, time.UTC)
	earlier := now.Add(-time.Hour)
	rec := memory.TurnRecord{
		Session: "telegram/1",
		Messages: []memory.Message{
			{Role: memory.RoleUser, TurnStart: true, InboundID: "telegram:7", Blocks: []memory.Block{{Type: memory.BlockText, Text: "hi"}}},
			{Role: memory.RoleAssistant, Time: earlier, Blocks: []memory.Block{{Type: memory.BlockText, Text: "hello"}}},
		},
		Receipt: memory.Receipt{Key: "telegram:7", Final: json.RawMessage(`{"v":1}`)},
		Also:    []memory.Receipt{{Key: "telegram:8", Final: json.RawMessage(`{"v":1}`), Time: earlier}},
	}
	enc, err := memory.EncodeTurn(rec, now)
	if err != nil {
		t.Fatal(err)
	}
	if len(enc.Messages) != 2 || enc.Turns != 1 || len(enc.Receipts) != 2 || enc.Receipts[0].Key != "telegram:7" || enc.Receipts[1].Key != "telegram:8" {
		t.Fatalf("EncodeTurn = %d messages, %d turns, %+v", len(enc.Messages), enc.Turns, enc.Receipts)
	}
	const stored = `{"key":"telegram:7","session":"telegram/1","final":{"v":1},"time":"2025-03-04T12:00:00Z"}`
	if got := string(enc.Receipts[0].Value); got != stored {
		t.Errorf("stored receipt = %s, want %s", got, stored)
	}
	r, err := memory.DecodeReceipt([]byte(stored))
	if err != nil || r.Key != "telegram:7" || r.Session != "telegram/1" || !r.Time.Equal(now) || r.Published {
		t.Errorf("DecodeReceipt(old bytes) = %+v, %v", r, err)
	}
	if r, _ := memory.DecodeReceipt(enc.Receipts[1].Value); r.Session != "telegram/1" || !r.Time.Equal(earlier) {
		t.Errorf("second receipt = %+v, want the record's session and its own time", r)
	}
	const msg = `{"role":"user","blocks":[{"type":"text","text":"hi"}],"turn_start":true,"inbound_id":"telegram:7","time":"2025-03-04T12:00:00Z"}`
	if got := string(enc.Messages[0]); got != msg {
		t.Errorf("stored message = %s, want %s", got, msg)
	}
	m, err := memory.DecodeMessage(enc.Messages[1])
	if err != nil || m.Text() != "hello" || !m.Time.Equal(earlier) {
		t.Errorf("DecodeMessage = %+v, %v", m, err)
	}
	for _, bad := range []string{"", "{", `{"key":1}`} {
		if _, err := memory.DecodeReceipt([]byte(bad)); !errors.Is(err, memory.ErrInvalid) {
			t.Errorf("DecodeReceipt(%q) = %v, want ErrInvalid", bad, err)
		}
		if _, err := memory.DecodeMessage([]byte(bad)); !errors.Is(err, memory.ErrInvalid) && bad != `{"key":1}` {
			t.Errorf("DecodeMessage(%q) = %v, want ErrInvalid", bad, err)
		}
	}
	bad := rec
	bad.Messages = []memory.Message{{Role: memory.RoleUser, Blocks: []memory.Block{{Type: memory.BlockToolUse, Input: json.RawMessage(`{`)}}}}
	if _, err := memory.EncodeTurn(bad, now); err == nil {
		t.Error("EncodeTurn of unencodable input succeeded")
	}
}

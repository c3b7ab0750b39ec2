package bus_test

import (
	"encoding/json"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/switchboard-chat/switchboard/bus"
)

// TestProtocolDocExamples keeps docs/bus-protocol.md consistent with the
// code: the chat-id encoding table, the inbound example and the error
// messages it quotes.
func TestProtocolDocExamples(t *testing.T) {
	raw, err := os.ReadFile("../docs/bus-protocol.md")
	if err != nil {
		t.Fatalf("read protocol doc: %v", err)
	}
	doc := string(raw)

	// §2.2 encoding table.
	row := regexp.MustCompile("(?m)^\\| `([^`]*)` \\| `([^`]*)` \\|$")
	rows := row.FindAllStringSubmatch(doc, -1)
	if len(rows) < 5 {
		t.Fatalf("found %d encoding table rows, want the table", len(rows))
	}
	for _, r := range rows {
		if got := bus.EncodeToken(r[1]); got != r[2] {
			t.Errorf("doc says %q encodes as %q, EncodeToken gives %q", r[1], r[2], got)
		}
	}

	// §3 example envelope and its subject.
	start := strings.Index(doc, "Example:\n\n```json\n")
	if start < 0 {
		t.Fatal("inbound example not found")
	}
	body := doc[start+len("Example:\n\n```json\n"):]
	body = body[:strings.Index(body, "```")]
	subject := regexp.MustCompile("published on `([^`]+)` with header\n`Nats-Msg-Id: ([^`]+)`").FindStringSubmatch(doc)
	if subject == nil {
		t.Fatal("example subject not found")
	}
	subj := bus.Subjects{Prefix: "chat"}
	in, err := bus.ParseInbound(subj, subject[1], []byte(body), 0)
	if err != nil {
		t.Fatalf("doc example rejected: %v", err)
	}
	if in.DedupKey() != subject[2] {
		t.Errorf("doc header %q, DedupKey %q", subject[2], in.DedupKey())
	}

	// §3 quoted errors.
	m := validEnvelope()
	m["chat_id"] = "room@2"
	m["channel"] = "wechat"
	_, errChat := bus.ParseInbound(subj, "chat.in.wechat.room%401", mustJSON(t, m), 0)
	m = validEnvelope()
	m["v"] = 2
	_, errV := bus.ParseInbound(subj, testSubject, mustJSON(t, m), 0)
	m = validEnvelope()
	m["text"] = strings.Repeat("x", 70000)
	_, errText := bus.ParseInbound(subj, testSubject, mustJSON(t, m), 65536)
	_, _, errSubj := subj.ParseIn("chat.in.wechat")
	for _, err := range []error{errChat, errV, errText, errSubj} {
		if err == nil || !strings.Contains(doc, "\n"+err.Error()+"\n") {
			t.Errorf("doc does not quote the error %v", err)
		}
	}

	// §12 outbound examples: valid envelopes, one final, seq increasing.
	finals, lastSeq := 0, 0
	for _, line := range regexp.MustCompile(`(?m)^\{"v":1,"id":"m1\.[^\n]*$`).FindAllString(doc, -1) {
		var o bus.Outbound
		if err := json.Unmarshal([]byte(line), &o); err != nil {
			t.Fatalf("doc outbound example %s: %v", line, err)
		}
		if err := o.Validate(); err != nil {
			t.Errorf("doc outbound example %s: %v", line, err)
		}
		if o.Seq <= lastSeq {
			t.Errorf("doc outbound example seq %d after %d", o.Seq, lastSeq)
		}
		lastSeq = o.Seq
		if o.Final {
			finals++
		}
	}
	if finals != 1 || lastSeq < 3 {
		t.Errorf("doc outbound examples: %d finals, last seq %d; want one final after deltas", finals, lastSeq)
	}

	// §9 dead-letter example.
	rec := bus.NewDLQRecord("chat.in.wechat.room1", []byte(`{"v":2,"id":"9"}`), errV, time.Date(2026, 3, 1, 2, 0, 0, 0, time.UTC))
	b, err := json.Marshal(rec)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(doc, "\n"+string(b)+"\n") {
		t.Errorf("doc does not show the DLQ record %s", b)
	}
}

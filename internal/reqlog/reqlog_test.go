package reqlog

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"

	"go.uber.org/goleak"

	"github.com/switchboard-chat/switchboard/llm"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

type fakeModel struct{ err error }

func (f fakeModel) Stream(context.Context, llm.Request, func(llm.Delta)) (*llm.Response, error) {
	if f.err != nil {
		return nil, f.err
	}
	return &llm.Response{Text: "ok", FinishReason: "stop", Usage: llm.Usage{PromptTokens: 10, CompletionTokens: 2}}, nil
}

func TestRecordsRedactedAndBounded(t *testing.T) {
	r := New("live-api-key-123", "", "short")
	m := Model{Next: fakeModel{}, R: r}
	big := strings.Repeat("x", 100<<10)
	req := llm.Request{Model: "m", Tools: []llm.Tool{{Name: "read_file"}}, Messages: []llm.Message{
		{Role: "system", Content: "You are helpful."},
		{Role: "user", Content: "my key is live-api-key-123 and sk-proj-abcdefghijklmnop, token xoxb-1234567890-abcdef",
			Images: []llm.ImagePart{{URL: "data:image/png;base64," + big}}},
		{Role: "assistant", ToolCalls: []llm.ToolCall{{ID: "c1", Name: "read_file", Arguments: `{"auth":"Bearer abcdefghijklmnop"}`}}},
		{Role: "tool", ToolID: "c1", Content: big},
	}}
	if _, err := m.Stream(context.Background(), req, nil); err != nil {
		t.Fatal(err)
	}
	if len(r.Requests("")) != 0 {
		t.Fatal("a request without a session was recorded")
	}
	ctx := WithSession(t.Context(), "web/ann:c1")
	if _, err := m.Stream(ctx, req, nil); err != nil {
		t.Fatal(err)
	}
	recs := r.Requests("web/ann:c1")
	if len(recs) != 1 {
		t.Fatalf("%d records", len(recs))
	}
	body := string(recs[0].Request)
	for _, secret := range []string{"live-api-key-123", "sk-proj-abcdefghijklmnop", "xoxb-1234567890-abcdef", "abcdefghijklmnop", "base64"} {
		if strings.Contains(body, secret) {
			t.Errorf("record shows %q", secret)
		}
	}
	if len(body) > MaxRecordBytes || !recs[0].Truncated || !strings.Contains(body, `"images":1`) || !strings.Contains(body, `"tools":["read_file"]`) ||
		!strings.Contains(body, "You are helpful.") || recs[0].Usage.PromptTokens != 10 || recs[0].Finish != "stop" {
		t.Fatalf("record %+v: %.400s", recs[0], body)
	}
	var parsed recRequest
	if err := json.Unmarshal(recs[0].Request, &parsed); err != nil || len(parsed.Messages) != 4 {
		t.Fatalf("record does not decode to 4 messages: %v %d", err, len(parsed.Messages))
	}

	// Errors are kept (redacted); per-session and session counts bounded.
	me := Model{Next: fakeModel{err: errors.New("401: bad key live-api-key-123")}, R: r}
	_, _ = me.Stream(ctx, llm.Request{Messages: []llm.Message{{Role: "user", Content: "hi"}}}, nil)
	if e := r.Requests("web/ann:c1")[0].Error; e != "401: bad key (redacted)" {
		t.Fatalf("error %q", e)
	}
	for i := range 10 {
		_, _ = m.Stream(ctx, llm.Request{Messages: []llm.Message{{Role: "user", Content: fmt.Sprint("n", i)}}}, nil)
	}
	if recs := r.Requests("web/ann:c1"); len(recs) != DefaultPerSession || !strings.Contains(string(recs[0].Request), `"n9"`) {
		t.Fatalf("%d records, newest %s", len(recs), recs[0].Request)
	}
	for i := range DefaultSessions + 5 {
		_, _ = m.Stream(WithSession(t.Context(), fmt.Sprint("s", i)), llm.Request{}, nil)
	}
	if len(r.Requests("web/ann:c1")) != 0 || len(r.Requests("s0")) != 0 || len(r.Requests(fmt.Sprint("s", DefaultSessions+4))) != 1 {
		t.Fatal("the least recently active sessions were not dropped")
	}
	r.mu.Lock()
	n := len(r.recs)
	r.mu.Unlock()
	if n != DefaultSessions {
		t.Fatalf("%d sessions kept, want %d", n, DefaultSessions)
	}
}

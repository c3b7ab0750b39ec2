package agent

import (
	"strings"
	"testing"
	"time"

	"github.com/switchboard-chat/switchboard/bus"
	"github.com/switchboard-chat/switchboard/llm/llmtest"
)

// TestCutStreamRestarts: a stream cut after its first deltas (text cut
// mid-way, then text plus a tool call cut mid-arguments) is retried by the
// llm client; the user sees the partial text replaced by the retried
// stream's (every delta after the restart is a prefix of the answer, never
// the old text with the new appended), the cut tool call is never run, and
// the final is the retried answer.
func TestCutStreamRestarts(t *testing.T) {
	look := &testTool{name: "look"}
	h := newHarness(t, withTools(look), func(hc *harnessConfig) {
		hc.llm.MaxRetries = 2
		hc.modelOption = append(hc.modelOption, llmtest.WithStrict())
	})
	const answer = "The answer, streamed again from its start."
	slow := func(r llmtest.Reply) llmtest.Reply {
		r.ChunkSize, r.ChunkDelay = 4, 8*time.Millisecond
		return r
	}
	h.model.Enqueue(
		slow(llmtest.Reply{Text: "Let me look that up", ToolCalls: []llmtest.ToolCall{call("c1", "look", `{"what":"x"}`)}, Truncate: true}),
		slow(llmtest.Reply{Text: "Let me look", ToolCalls: []llmtest.ToolCall{call("c2", "look", `{"what":"x"}`)}}),
		slow(llmtest.Reply{Text: "The answer, streamed again", Truncate: true}),
		slow(llmtest.Reply{Text: answer}),
	)
	got := h.ask("m1", "go")
	if got.Text != answer || got.Kind != bus.KindReply {
		t.Fatalf("final = %q (%s), want the retried answer", got.Text, got.Kind)
	}
	if n := look.runs.Load(); n != 1 {
		t.Errorf("tool ran %d times, want once (never from the cut stream)", n)
	}
	if n := h.model.RequestCount(); n != 4 {
		t.Errorf("%d model requests, want 4", n)
	}
	// Deltas of the second step: after the restart each is a prefix of the
	// answer.
	var texts []string
	for _, o := range h.bus.Outbounds() {
		if o.InReplyTo == "m1" && o.Kind == bus.KindDelta {
			texts = append(texts, o.Text)
		}
	}
	sawCut := false
	for _, s := range texts {
		if strings.HasPrefix(s, "The answer") {
			sawCut = true
			if !strings.HasPrefix(answer, s) {
				t.Errorf("delta %q is not a prefix of the answer: the cut attempt's text was kept", s)
			}
		}
	}
	if !sawCut {
		t.Errorf("no delta of the answer step was published: %q", texts)
	}
	restarts := 0
	for _, e := range h.bus.Events() {
		if e.Type == bus.EventLLMDelta && strings.Contains(string(e.Data), `"restart":true`) {
			restarts++
		}
	}
	if restarts != 2 {
		t.Errorf("%d restart events, want 2", restarts)
	}
	if v := h.model.Violations(); len(v) > 0 {
		t.Errorf("invalid requests: %q", v)
	}
	h.checkRequestsValid()
	hist := strings.Join(h.history(), "\n")
	if strings.Contains(hist, "c1") || strings.Count(hist, "use:look") != 1 || !strings.HasSuffix(hist, "assistant|"+answer) {
		t.Errorf("history:\n%s", hist)
	}
}

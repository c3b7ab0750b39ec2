package agent

import (
	"strings"
	"testing"

	"github.com/switchboard-chat/switchboard/agent/loop"
	"github.com/switchboard-chat/switchboard/bus"
	"github.com/switchboard-chat/switchboard/llm/llmtest"
)

// TestStuckModelStopsEarly: a model that repeats the identical call
// forever is stopped by the CowAgent breaker (cowagent.md §1.8: 5
// consecutive identical calls, then the next is not run), whatever
// rollback does first. The run goes: the call runs once; the next 4
// repeats are rolled back (not run, but they count); the 5th repeat gets
// an error result telling the model to stop; repeating it once more ends
// the turn with the forced summary. That is 5 + 1 + 1 calls and the
// summary, with the defaults (5 rollbacks in a row, 30 steps, 20 extra
// attempts) that used to let it run 50 calls.
func TestStuckModelStopsEarly(t *testing.T) {
	for _, rollbacks := range []int{5, 0} {
		look := &testTool{name: "look"}
		h := newHarness(t, withTools(look), func(hc *harnessConfig) {
			hc.cfg.MaxConsecutiveRollbacks = rollbacks
			hc.modelOption = append(hc.modelOption, llmtest.WithStrict(), llmtest.WithResponder(func(r *llmtest.Request) llmtest.Reply {
				if len(r.Body.Tools) == 0 {
					return llmtest.TextReply("I kept looking up the same thing; here is what I found.")
				}
				return calling(call("", "look", `{"q": "same"}`))
			}))
		})
		got := h.ask("m1", "go")
		if got.Text != "I kept looking up the same thing; here is what I found." || got.Kind != bus.KindReply {
			t.Fatalf("rollbacks %d: final = %q (%s), want the forced summary", rollbacks, got.Text, got.Kind)
		}
		reqs := h.model.Requests()
		if n := len(reqs); n != loop.SameCallLimit+1+1+1 {
			t.Errorf("rollbacks %d: %d model calls, want %d (5 identical calls, the blocked one, the one that ends it, the summary)",
				rollbacks, n, loop.SameCallLimit+3)
		}
		if n := look.runs.Load(); n != 1 {
			t.Errorf("rollbacks %d: tool ran %d times, want once", rollbacks, n)
		}
		// The request after the blocked call ends with its error result,
		// which tells the model to stop.
		if len(reqs) >= 7 {
			msgs := reqs[6].Body.Messages
			last := msgs[len(msgs)-1]
			if text := llmtest.MessageText(last); last.Role != "tool" || !strings.HasPrefix(text, "Error: ") || !strings.Contains(text, "Stop calling it") {
				t.Errorf("rollbacks %d: result of the 5th repeat = %s %q, want an error that says to stop", rollbacks, last.Role, text)
			}
		}
		if len(reqs[len(reqs)-1].Body.Tools) != 0 {
			t.Errorf("rollbacks %d: the last call offers tools; want the forced summary", rollbacks)
		}
		end := h.bus.WaitEvent(t, wait, bus.EventTurnEnd)
		if !strings.Contains(string(end.Data), `"stop_reason":"circuit_breaker"`) {
			t.Errorf("rollbacks %d: turn_end = %s", rollbacks, end.Data)
		}
		if v := h.model.Violations(); len(v) > 0 {
			t.Errorf("rollbacks %d: invalid requests: %q", rollbacks, v)
		}
		h.checkRequestsValid()
	}
}

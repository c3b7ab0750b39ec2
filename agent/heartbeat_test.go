package agent

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/switchboard-chat/switchboard/agent/heartbeat"
	"github.com/switchboard-chat/switchboard/bus"
	"github.com/switchboard-chat/switchboard/llm/llmtest"
)

// TestHeartbeatSessionKeepsFewTurns (issue 20): a heartbeat session's
// requests carry at most its last heartbeat.KeepTurns turns, however
// many heartbeats ran (a chat's keep agent.max_context_turns), and an
// empty answer of a heartbeat turn is a silent final, not an error.
func TestHeartbeatSessionKeepsFewTurns(t *testing.T) {
	h := newHarness(t, func(hc *harnessConfig) {
		hc.cfg.MaxContextTurns = 100
		hc.modelOption = append(hc.modelOption, llmtest.WithResponder(func(req *llmtest.Request) llmtest.Reply {
			if strings.Contains(req.LastUserText(), "silent") {
				return llmtest.TextReply("")
			}
			return llmtest.TextReply("checked")
		}))
	})
	const beats = 8
	for i := range beats {
		id := fmt.Sprintf("hb:main:%d", i)
		in := heartbeat.Trigger("main", id, "beat "+id, time.Now())
		h.bus.Send(in)
		if out := h.final(id); out.Kind == bus.KindError {
			t.Fatalf("heartbeat turn %d: %+v", i, out)
		}
	}
	reqs := h.model.Requests()
	last := reqs[len(reqs)-1]
	users := 0
	for _, m := range last.Body.Messages {
		if m.Role == "user" {
			users++
		}
	}
	if users > heartbeat.KeepTurns {
		t.Errorf("the %dth heartbeat's request carries %d user turns, want at most %d", beats, users, heartbeat.KeepTurns)
	}
	in := heartbeat.Trigger("main", "hb:main:silent", "silent please", time.Now())
	h.bus.Send(in)
	if out := h.final("hb:main:silent"); out.Kind == bus.KindError || strings.TrimSpace(out.Text) != "" {
		t.Errorf("an empty heartbeat answer: %+v, want a silent final", out)
	}
	// A chat keeps more.
	for i := range 6 {
		h.ask(fmt.Sprintf("c%d", i), "hello")
	}
	reqs = h.model.Requests()
	users = 0
	for _, m := range reqs[len(reqs)-1].Body.Messages {
		if m.Role == "user" {
			users++
		}
	}
	if users != 6 {
		t.Errorf("a chat's request carries %d user turns, want 6 (the bound is the heartbeat session's only)", users)
	}
}

package agent

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/switchboard-chat/switchboard/agent/loop"
	"github.com/switchboard-chat/switchboard/bus"
	"github.com/switchboard-chat/switchboard/llm/llmtest"
	"github.com/switchboard-chat/switchboard/tools"
)

// temperatureOf returns the temperature sent in request n.
func temperatureOf(h *harness, n int) float32 { return h.request(n).Body.Temperature }

func hasRollbackEvent(h *harness, reason string) bool {
	for _, e := range h.bus.Events() {
		if e.Type == "rollback" && strings.Contains(string(e.Data), reason) {
			return true
		}
	}
	return false
}

// Behaviour 3: each rollback trigger drops the reply and resamples at a
// raised temperature; the dropped reply never reaches history.
func TestRollbackTriggers(t *testing.T) {
	for _, tc := range []struct {
		name   string
		bad    llmtest.Reply
		reason string
	}{
		{"markup", llmtest.TextReply(`<tool_call>{"name": "echo", "arguments": {}}</tool_call>`), "markup"},
		{"json-call", llmtest.TextReply("```json\n{\"name\": \"echo\", \"arguments\": {\"x\": 1}}\n```"), "markup"},
		{"unknown-tool", calling(call("u", "teleport", `{}`)), "not a tool"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			echo := &testTool{name: "echo"}
			h := newHarness(t, withTools(echo))
			h.model.Enqueue(tc.bad, llmtest.TextReply("clean answer"))
			if got := h.ask("m1", "go"); got.Text != "clean answer" {
				t.Fatalf("final = %+v", got)
			}
			if n := h.model.RequestCount(); n != 2 {
				t.Fatalf("%d requests", n)
			}
			if t0, t1 := temperatureOf(h, 0), temperatureOf(h, 1); t0 > 0.001 || t1 != 0.7 {
				t.Fatalf("temperatures %v then %v, want ~0 then 0.7", t0, t1)
			}
			if len(h.request(1).Body.Messages) != len(h.request(0).Body.Messages) {
				t.Fatal("the rolled-back reply was sent again")
			}
			if !hasRollbackEvent(h, tc.reason) {
				t.Fatalf("no rollback event about %q: %+v", tc.reason, h.bus.Events())
			}
			if strings.Contains(strings.Join(h.history(), "\n"), "teleport") || echo.runs.Load() != 0 {
				t.Fatal("the rolled-back reply left traces")
			}
		})
	}
}

func TestRollbackOnDuplicateCall(t *testing.T) {
	echo := &testTool{name: "echo"}
	h := newHarness(t, withTools(echo))
	h.model.Enqueue(calling(call("a", "echo", `{"x": 1}`)), calling(call("b", "echo", `{ "x":1 }`)), llmtest.TextReply("done"))
	h.ask("m1", "go")
	if echo.runs.Load() != 1 || !hasRollbackEvent(h, "duplicate") {
		t.Fatalf("runs %d, events %+v", echo.runs.Load(), h.bus.Events())
	}
	if temperatureOf(h, 2) != 0.7 {
		t.Fatal("duplicate not resampled at 0.7")
	}
}

// After max_consecutive_rollbacks in a row, the mistake goes to the model
// the CowAgent way.
func TestRollbackCap(t *testing.T) {
	t.Run("duplicate-served-from-cache", func(t *testing.T) {
		// With the default of 5, the breaker (5 identical calls, rolled
		// back or not) takes over first: TestStuckModelStopsEarly.
		echo := &testTool{name: "echo"}
		h := newHarness(t, withTools(echo), func(hc *harnessConfig) { hc.cfg.MaxConsecutiveRollbacks = 3 })
		h.model.Enqueue(calling(call("a", "echo", `{"x":1}`)))
		for i := range 4 {
			h.model.Enqueue(calling(call(fmt.Sprintf("d%d", i), "echo", `{"x":1}`)))
		}
		h.model.Enqueue(llmtest.TextReply("done"))
		if got := h.ask("m1", "go"); got.Text != "done" {
			t.Fatalf("final = %+v", got)
		}
		if echo.runs.Load() != 1 {
			t.Fatalf("the duplicate ran again (%d runs)", echo.runs.Load())
		}
		rollbacks := 0
		for _, e := range h.bus.Events() {
			if e.Type == "rollback" {
				rollbacks++
			}
		}
		if rollbacks != 3 {
			t.Fatalf("%d rollbacks, want exactly 3", rollbacks)
		}
		if _, r := h.lastMessage(h.model.RequestCount() - 1); !strings.Contains(r, `ok {"x":1}`) || !strings.Contains(r, "identical to an earlier one") {
			t.Fatalf("served duplicate = %q", r)
		}
	})
	t.Run("markup-stripped", func(t *testing.T) {
		h := newHarness(t)
		for range 6 {
			h.model.Enqueue(llmtest.TextReply("Here it is. <tool_call>{\"name\":\"x\"}</tool_call>"))
		}
		if got := h.ask("m1", "go"); got.Text != "Here it is." {
			t.Fatalf("final = %+v", got)
		}
	})
	t.Run("unknown-tool-error-result", func(t *testing.T) {
		h := newHarness(t, withTools(&testTool{name: "echo"}))
		for i := range 6 {
			h.model.Enqueue(calling(call(fmt.Sprintf("u%d", i), "teleport", `{}`)))
		}
		h.model.Enqueue(llmtest.TextReply("ok"))
		h.ask("m1", "go")
		if _, r := h.lastMessage(6); !strings.Contains(r, "unknown tool") {
			t.Fatalf("result = %q", r)
		}
		h.checkRequestsValid()
	})
}

// Behaviour 2: no sequence of rollbacks can loop forever.
func TestCountersBoundRollbacks(t *testing.T) {
	echo := &testTool{name: "echo"}
	h := newHarness(t, withTools(echo), func(hc *harnessConfig) {
		hc.cfg.MaxSteps, hc.cfg.ExtraAttempts = 3, 8
		hc.modelOption = append(hc.modelOption, llmtest.WithResponder(func(r *llmtest.Request) llmtest.Reply {
			if len(r.Body.Tools) == 0 {
				return llmtest.TextReply("summary")
			}
			return calling(call("", "echo", `{"same":true}`)) // always the same call
		}))
	})
	if got := h.ask("m1", "go"); got.Text != "summary" {
		t.Fatalf("final = %+v", got)
	}
	if n := h.model.RequestCount(); n > 3+8+1 {
		t.Fatalf("%d model calls, more than max_steps + extra_attempts + the summary", n)
	}
}

// Behaviour 1: a sub-agent run.
func TestSubagentRun(t *testing.T) {
	lookup := &testTool{name: "lookup", run: func(_ context.Context, c tools.Call) (tools.Result, error) {
		return tools.Result{Text: "X is 42 (from the registry)"}, nil
	}}
	secret := &testTool{name: "secret"}
	var subReqs []llmtest.Request
	var mu sync.Mutex
	h := newHarness(t, withTools(lookup, secret), func(hc *harnessConfig) {
		hc.cfg.Subagents = map[string]SubagentConfig{"researcher": {Description: "Finds facts.", Prompt: "You research facts.", Tools: []string{"lookup"}}}
		hc.modelOption = append(hc.modelOption, llmtest.WithResponder(func(r *llmtest.Request) llmtest.Reply {
			sys := r.Body.Messages[0].Content
			if strings.Contains(sys, `sub-agent "researcher"`) {
				mu.Lock()
				subReqs = append(subReqs, *r)
				n := len(subReqs)
				mu.Unlock()
				switch n {
				case 1:
					return calling(call("s1", "lookup", `{}`))
				case 2:
					return llmtest.TextReply("X is 42.")
				default:
					return llmtest.TextReply("<think>format it</think>Task: find X. Findings: X is 42. Sources: lookup. Uncertain: none.")
				}
			}
			if last, _ := r.LastMessage(); last.Role == "tool" {
				return llmtest.TextReply("X is 42, says my researcher.")
			}
			return calling(call("m1c", "agent-researcher", `{"subtask":"find X"}`))
		}))
	})
	if got := h.ask("m1", "what is X?"); got.Text != "X is 42, says my researcher." {
		t.Fatalf("final = %+v", got)
	}
	// The main model was offered the sub-agent tool.
	offered := map[string]bool{}
	for _, tl := range h.request(0).Body.Tools {
		offered[tl.Function.Name] = true
	}
	if !offered["agent-researcher"] || !offered["secret"] {
		t.Fatalf("main tools = %v", offered)
	}
	// The sub-agent: fresh history, allow-listed tools only, no agent-* tools.
	first := subReqs[0]
	if len(first.Body.Messages) != 2 || llmtest.MessageText(first.Body.Messages[1]) != "find X" {
		t.Fatalf("sub-agent's first request = %+v", first.Body.Messages)
	}
	if len(first.Body.Tools) != 1 || first.Body.Tools[0].Function.Name != "lookup" {
		t.Fatalf("sub-agent tools = %+v", first.Body.Tools)
	}
	report := subReqs[2]
	if len(report.Body.Tools) != 0 || !strings.Contains(report.LastUserText(), "final report") {
		t.Fatalf("report request: tools %d, last %q", len(report.Body.Tools), report.LastUserText())
	}
	if lookup.runs.Load() != 1 || secret.runs.Load() != 0 {
		t.Fatal("wrong tools ran")
	}
	// The report, without <think>, is the tool result the main model saw.
	_, result := h.lastMessage(h.model.RequestCount() - 1)
	if !strings.HasPrefix(result, "Task: find X.") || strings.Contains(result, "format it") {
		t.Fatalf("tool result = %q", result)
	}
	// Parent history holds no sub-agent messages.
	hist := strings.Join(h.history(), "\n")
	if strings.Contains(hist, "X is 42 (from the registry)") || strings.Contains(hist, "use:lookup") {
		t.Fatalf("sub-agent steps leaked into history:\n%s", hist)
	}
	// Its steps were published as tagged events.
	tagged := 0
	for _, e := range h.bus.Events() {
		if strings.Contains(string(e.Data), `"subagent":"researcher"`) {
			tagged++
		}
	}
	if tagged < 3 {
		t.Fatalf("%d tagged events", tagged)
	}
}

func TestSubagentsRunConcurrently(t *testing.T) {
	type span struct{ start, end time.Time }
	var mu sync.Mutex
	spans := map[string]*span{}
	arrived := make(chan struct{}, 2)
	both := make(chan struct{})
	var once sync.Once
	h := newHarness(t, func(hc *harnessConfig) {
		hc.cfg.Subagents = map[string]SubagentConfig{
			"a": {Description: "A.", Prompt: "You are A."},
			"b": {Description: "B.", Prompt: "You are B."},
		}
		hc.modelOption = append(hc.modelOption, llmtest.WithResponder(func(r *llmtest.Request) llmtest.Reply {
			sys := r.Body.Messages[0].Content
			for _, n := range []string{"a", "b"} {
				if strings.Contains(sys, fmt.Sprintf("sub-agent %q", n)) {
					if len(r.Body.Tools) == 0 && r.LastUserText() != "go "+n {
						return llmtest.TextReply("report " + n)
					}
					mu.Lock()
					spans[n] = &span{start: time.Now()}
					mu.Unlock()
					arrived <- struct{}{}
					if len(arrived) == 2 {
						once.Do(func() { close(both) })
					}
					select { // wait for the other sub-agent to be running too
					case <-both:
					case <-time.After(wait):
					}
					mu.Lock()
					spans[n].end = time.Now()
					mu.Unlock()
					return llmtest.TextReply("done " + n)
				}
			}
			if last, _ := r.LastMessage(); last.Role == "tool" {
				return llmtest.TextReply("both finished")
			}
			return calling(call("ca", "agent-a", `{"subtask":"go a"}`), call("cb", "agent-b", `{"subtask":"go b"}`))
		}))
	})
	if got := h.ask("m1", "run both"); got.Text != "both finished" {
		t.Fatalf("final = %+v", got)
	}
	a, b := spans["a"], spans["b"]
	if a == nil || b == nil || !a.start.Before(b.end) || !b.start.Before(a.end) {
		t.Fatalf("sub-agents did not overlap: a %+v, b %+v", a, b)
	}
	msgs := h.request(h.model.RequestCount() - 1).Body.Messages
	if r := msgs[len(msgs)-2]; r.ToolCallID != "ca" || r.Content != "report a" {
		t.Fatalf("results out of order: %+v", msgs[len(msgs)-2:])
	}
}

func TestStopCancelsSubagent(t *testing.T) {
	entered := make(chan struct{})
	var once sync.Once
	h := newHarness(t, func(hc *harnessConfig) {
		hc.cfg.Subagents = map[string]SubagentConfig{"slow": {Description: "Slow.", Prompt: "You are slow."}}
		hc.modelOption = append(hc.modelOption, llmtest.WithResponder(func(r *llmtest.Request) llmtest.Reply {
			if strings.Contains(r.Body.Messages[0].Content, `sub-agent "slow"`) {
				once.Do(func() { close(entered) })
				return llmtest.Reply{Text: "never", Block: make(chan struct{})} // held until cancelled
			}
			return calling(call("c", "agent-slow", `{"subtask":"wait"}`))
		}))
	})
	h.send("m1", "go")
	select {
	case <-entered:
	case <-time.After(wait):
		t.Fatal("sub-agent did not start")
	}
	h.ask("s", "/stop")
	if got := h.final("m1"); got.Text != "Stopped." {
		t.Fatalf("final = %+v", got)
	}
	if hist := strings.Join(h.history(), "\n"); !strings.Contains(hist, "cancelled") && !strings.Contains(hist, "Cancelled") {
		t.Fatalf("history:\n%s", hist)
	}
}

func TestFixedArgumentsReachToolAndEvent(t *testing.T) {
	read := &testTool{name: "read_file", schema: `{"type":"object","properties":{"path":{"type":"string"},"limit":{"type":"integer"}},"required":["path"]}`}
	h := newHarness(t, withTools(read))
	h.model.Enqueue(calling(call("a", "read_file", `{"filePath":"x.md","limit":"5","offset":null}`)), llmtest.TextReply("ok"))
	h.ask("m1", "read")
	if _, r := h.lastMessage(1); r != `ok {"limit":5,"path":"x.md"}` {
		t.Fatalf("tool saw %q", r)
	}
	found := false
	for _, e := range h.bus.Events() {
		if e.Type == bus.EventToolCall && strings.Contains(string(e.Data), `"fixed"`) {
			found = true
		}
	}
	if !found {
		t.Fatal("fixes not recorded in the tool_call event")
	}
}

// Behaviour 5: only the K newest tool results of the run are sent.
func TestKeepNewestToolResults(t *testing.T) {
	echo := &testTool{name: "echo"}
	h := newHarness(t, withTools(echo), func(hc *harnessConfig) { hc.cfg.KeepToolResults = 1 })
	h.model.Enqueue(calling(call("a", "echo", `{"n":1}`)), calling(call("b", "echo", `{"n":2}`)), calling(call("c", "echo", `{"n":3}`)), llmtest.TextReply("done"))
	h.ask("m1", "go")
	var results []string
	for _, m := range h.request(3).Body.Messages {
		if m.Role == "tool" {
			results = append(results, m.Content)
		}
	}
	if len(results) != 3 || results[0] != loop.OmittedResult || results[1] != loop.OmittedResult || results[2] != `ok {"n":3}` {
		t.Fatalf("results sent: %q", results)
	}
	if hist := strings.Join(h.history(), "\n"); !strings.Contains(hist, `ok {"n":1}`) {
		t.Fatal("history lost an elided result")
	}
}

// Behaviour 6: the in-run guard elides old results so requests fit, and
// stops before a request that cannot fit at all.
func TestGuardElidesOldResults(t *testing.T) {
	big := &testTool{name: "big", run: func(_ context.Context, c tools.Call) (tools.Result, error) {
		return tools.Result{Text: strings.Repeat("data ", 2000)}, nil // ~2,500 tokens
	}}
	h := newHarness(t, withTools(big), func(hc *harnessConfig) {
		hc.opt.ContextWindow, hc.opt.MaxOutputTokens = 6000, 500
	})
	for i := range 4 {
		h.model.Enqueue(calling(call(fmt.Sprintf("c%d", i), "big", fmt.Sprintf(`{"i":%d}`, i))))
	}
	h.model.Enqueue(llmtest.TextReply("answer from what fits"))
	if got := h.ask("m1", "collect everything"); got.Text != "answer from what fits" {
		t.Fatalf("final = %+v", got)
	}
	for i, r := range h.model.Requests() {
		if est := len(r.Raw) / 4; est > 6000-500 {
			t.Fatalf("request %d had ~%d tokens: it would not leave room for the reply", i, est)
		}
	}
	elided := 0
	for _, e := range h.bus.Events() {
		if e.Type == "context_guard" {
			elided++
		}
	}
	if elided == 0 {
		t.Fatal("no tool result was elided")
	}
	if hist := strings.Join(h.history(), "\n"); strings.Count(hist, "result:data data") != 4 {
		t.Fatal("elision changed the stored history")
	}
}

func TestGuardStopsBeforeOverflow(t *testing.T) {
	h := newHarness(t, func(hc *harnessConfig) {
		hc.opt.ContextWindow, hc.opt.MaxOutputTokens = 6000, 500
	})
	got := h.ask("m1", strings.Repeat("a very long question ", 1500)) // ~7,500 tokens
	if got.Text != loop.TextCutShortEmpty {
		t.Fatalf("final = %+v", got)
	}
	if n := h.model.RequestCount(); n != 0 {
		t.Fatalf("%d requests sent that were known not to fit", n)
	}
}

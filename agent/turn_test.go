package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/switchboard-chat/switchboard/agent/loop"
	"github.com/switchboard-chat/switchboard/bus"
	"github.com/switchboard-chat/switchboard/llm/llmtest"
	"github.com/switchboard-chat/switchboard/memory"
	"github.com/switchboard-chat/switchboard/tools"
)

// Behaviour 1: limits and the forced summary.
func TestMaxStepsForcedSummary(t *testing.T) {
	echo := &testTool{name: "echo"}
	h := newHarness(t, withTools(echo), func(hc *harnessConfig) { hc.cfg.MaxSteps = 2 })
	h.model.Enqueue(calling(call("a", "echo", `{"n":1}`)), calling(call("b", "echo", `{"n":2}`)), llmtest.TextReply("Here is where I got to."))
	got := h.ask("m1", "loop please")
	if got.Text != "Here is where I got to." || got.Kind != bus.KindReply {
		t.Fatalf("final = %+v", got)
	}
	if n := h.model.RequestCount(); n != 3 {
		t.Fatalf("%d requests, want 3", n)
	}
	summary := h.request(2)
	if len(summary.Body.Tools) != 0 {
		t.Fatalf("the summary call offered %d tools", len(summary.Body.Tools))
	}
	if role, text := h.lastMessage(2); role != "user" || !strings.Contains(text, "used all 2 steps") {
		t.Fatalf("summary prompt = %s %q", role, text)
	}
	for _, line := range h.history() {
		if strings.Contains(line, "steps allowed") {
			t.Fatalf("temporary prompt stored: %v", h.history())
		}
	}
	h.checkRequestsValid()
}

func TestMaxStepsFallbackWhenSummaryFails(t *testing.T) {
	echo := &testTool{name: "echo"}
	h := newHarness(t, withTools(echo), func(hc *harnessConfig) { hc.cfg.MaxSteps = 1 })
	h.model.Enqueue(calling(call("a", "echo", `{}`)), llmtest.ErrorReply(500, "", "down"))
	if got := h.ask("m1", "go"); !strings.Contains(got.Text, "I stopped after 1 steps") {
		t.Fatalf("final = %+v", got)
	}
}

// Behaviour 2: empty replies.
func TestEmptyReplyRetriedThenFallback(t *testing.T) {
	h := newHarness(t)
	h.model.Enqueue(llmtest.Reply{Empty: true}, llmtest.Reply{Empty: true})
	got := h.ask("m1", "hi")
	if got.Text != loop.TextEmptyFallback || got.Kind != bus.KindError || h.model.RequestCount() != 2 {
		t.Fatalf("final = %+v after %d requests", got, h.model.RequestCount())
	}
}

func TestEmptyAfterToolsNudgedOnce(t *testing.T) {
	echo := &testTool{name: "echo"}
	h := newHarness(t, withTools(echo))
	h.model.Enqueue(calling(call("a", "echo", `{"x":1}`)), llmtest.Reply{Empty: true}, llmtest.Reply{Empty: true}, llmtest.TextReply("The result is 1."))
	got := h.ask("m1", "run it")
	if got.Text != "The result is 1." {
		t.Fatalf("final = %+v", got)
	}
	if role, text := h.lastMessage(3); role != "user" || text != loop.NudgePrompt {
		t.Fatalf("nudge = %s %q", role, text)
	}
	if len(h.request(3).Body.Tools) != 0 {
		t.Fatal("the nudge offered tools")
	}
	hist := strings.Join(h.history(), "\n")
	if strings.Contains(hist, loop.NudgePrompt) || !strings.Contains(hist, "The result is 1.") {
		t.Fatalf("history:\n%s", hist)
	}
	// Still empty after the nudge: the fixed fallback.
	h.model.Enqueue(calling(call("b", "echo", `{"x":2}`)), llmtest.Reply{Empty: true}, llmtest.Reply{Empty: true}, llmtest.Reply{Empty: true})
	if got := h.ask("m2", "again"); got.Text != loop.TextEmptyFallback {
		t.Fatalf("final = %+v", got)
	}
}

// Behaviour 3: pairing whatever the tools do.
func TestPairingWhateverToolsDo(t *testing.T) {
	panics := &testTool{name: "panics", run: func(context.Context, tools.Call) (tools.Result, error) { panic("boom") }}
	slow := &testTool{name: "slow", run: func(ctx context.Context, _ tools.Call) (tools.Result, error) {
		<-ctx.Done()
		return tools.Result{}, nil
	}}
	h := newHarness(t, withTools(panics, slow), func(hc *harnessConfig) {
		hc.opt.ToolTimeout = 50 * time.Millisecond
		hc.cfg.MaxConsecutiveRollbacks = 0 // the unknown tool gets an error result, not a resample
	})
	h.model.Enqueue(calling(
		call("c1", "panics", `{}`),
		call("c2", "slow", `{}`),
		call("c3", "nosuchtool", `{}`),
		call("c4", "panics", `{"a":`),
	), llmtest.TextReply("done"))
	if got := h.ask("m1", "go"); got.Text != "done" {
		t.Fatalf("final = %+v", got)
	}
	msgs := h.request(1).Body.Messages
	results := msgs[len(msgs)-4:]
	want := []string{"failed unexpectedly", "timed out", "unknown tool", "cut off"}
	for i, r := range results {
		if r.Role != "tool" || r.ToolCallID != fmt.Sprintf("c%d", i+1) || !strings.HasPrefix(r.Content, "Error:") || !strings.Contains(r.Content, want[i]) {
			t.Errorf("result %d = %+v, want an error containing %q", i, r, want[i])
		}
	}
	h.checkRequestsValid()
}

// Behaviour 4: argument parsing.
func TestArgumentParsing(t *testing.T) {
	write := &testTool{name: "write_file", schema: `{"type":"object","properties":{"path":{"type":"string"},"content":{"type":"string"}},"required":["path","content"]}`}
	h := newHarness(t, withTools(write))
	cases := []struct {
		reply llmtest.Reply
		want  string // "" = the tool ran with wantArgs
		args  string
	}{
		{reply: calling(call("a", "write_file", `{"path":"a","content":"x"}`)), args: `{"path":"a","content":"x"}`},
		{reply: llmtest.Reply{ToolCalls: []llmtest.ToolCall{call("a", "write_file", `{"path":"a","content":"xx`)}, FinishReason: "length"}, want: "output token limit"},
		{reply: calling(call("a", "write_file", `{"path":"a","content":"xx`)), want: "end mid-JSON"},
		{reply: calling(call("a", "write_file", `{path:'a', content:'y',}`)), args: `{"path":"a","content":"y"}`},
		{reply: calling(call("a", "write_file", `["a"]`)), want: "must be a JSON object, got an array"},
		{reply: calling(call("a", "write_file", `"a"`)), want: "got a string"},
		{reply: calling(call("a", "write_file", `{"path":"a"}{"content":"b"}`)), want: "invalid JSON"},
		{reply: calling(call("a", "write_file", ``)), want: "requires: path, content"},
		{reply: calling(call("a", "write_file", `{"path":"big","content":"`+strings.Repeat("x", 2<<20)+`"}`)), want: "too large"},
	}
	for i, tc := range cases {
		before := write.runs.Load()
		h.model.Enqueue(tc.reply, llmtest.TextReply("ok"))
		h.ask(fmt.Sprintf("m%d", i), "write")
		_, result := h.lastMessage(h.model.RequestCount() - 1)
		ran := write.runs.Load() > before
		if tc.want == "" {
			if !ran || result != "ok "+tc.args {
				t.Errorf("case %d: ran %v, result %q, want ok %s", i, ran, result, tc.args)
			}
			continue
		}
		if ran || !strings.HasPrefix(result, "Error:") || !strings.Contains(result, tc.want) {
			t.Errorf("case %d: ran %v, result %.200q, want an error containing %q", i, ran, result, tc.want)
		}
		if strings.Contains(tc.want, "cut off") || tc.want == "output token limit" || tc.want == "end mid-JSON" || tc.want == "too large" {
			if !strings.Contains(result, "edit_file") {
				t.Errorf("case %d: no advice on splitting a large write: %q", i, result)
			}
		}
	}
	h.checkRequestsValid()
}

// Behaviour 5: circuit breakers (the same-call rule is unit-tested in
// breaker_test.go: identical calls are first rolled back, see rollback_test.go).
func TestBreakerFailures(t *testing.T) {
	failing := &testTool{name: "fails", run: func(context.Context, tools.Call) (tools.Result, error) {
		return tools.Result{}, errors.New("nope")
	}}
	h := newHarness(t, withTools(failing))
	// Same arguments: the 4th call is blocked.
	for i := range 4 {
		h.model.Enqueue(calling(call(fmt.Sprintf("c%d", i), "fails", `{"x":1}`)))
	}
	h.model.Enqueue(llmtest.TextReply("gave up"))
	h.ask("m1", "try")
	if n := failing.runs.Load(); n != 3 {
		t.Fatalf("ran %d times, want 3", n)
	}
	if _, r := h.lastMessage(4); !strings.Contains(r, "failed 3 times in a row with these arguments") {
		t.Fatalf("4th result = %q", r)
	}
	// Different arguments: 6 failures block, 8 end the run.
	failing.runs.Store(0)
	start := h.model.RequestCount()
	for i := range 12 {
		h.model.Enqueue(calling(call(fmt.Sprintf("d%d", i), "fails", fmt.Sprintf(`{"x":%d}`, i+10))))
	}
	got := h.ask("m2", "try harder")
	if got.Kind != bus.KindError || !strings.Contains(got.Text, "failed 8 times in a row") {
		t.Fatalf("final = %+v", got)
	}
	if n := failing.runs.Load(); n != 6 {
		t.Fatalf("ran %d times, want 6", n)
	}
	if used := h.model.RequestCount() - start; used != 9 {
		t.Fatalf("%d model calls, want 9 (6 runs, 2 blocked, then the abort)", used)
	}
	h.model.Enqueue(llmtest.TextReply("fresh"))
	if got := h.ask("m3", "next"); got.Text != "fresh" {
		t.Fatalf("next turn = %+v", got)
	}
	h.checkRequestsValid()
}

func TestBreakerIgnoresPermissionDenials(t *testing.T) {
	guarded := &testTool{name: "guarded", run: func(context.Context, tools.Call) (tools.Result, error) {
		return tools.Result{}, fmt.Errorf("not for you: %w", tools.ErrDenied)
	}}
	h := newHarness(t, withTools(guarded))
	for i := range 10 {
		h.model.Enqueue(calling(call(fmt.Sprintf("c%d", i), "guarded", fmt.Sprintf(`{"x":%d}`, i))))
	}
	h.model.Enqueue(llmtest.TextReply("ok"))
	if got := h.ask("m1", "go"); got.Text != "ok" || guarded.runs.Load() != 10 {
		t.Fatalf("final %+v, runs %d", got, guarded.runs.Load())
	}
}

// Behaviour 6: cancellation keeps partial text and leaves a valid history.
func TestStopKeepsPartialTextAndValidHistory(t *testing.T) {
	h := newHarness(t)
	h.model.Enqueue(llmtest.Reply{Text: "I was in the middle of", ChunkSize: 6, ChunkDelay: 20 * time.Millisecond, Stall: true})
	h.send("m1", "write an essay")
	h.bus.WaitFor(t, wait, func(o bus.Outbound) bool { return o.Kind == bus.KindDelta && o.Text == "I was in the middle of" })
	h.ask("s1", "/stop")
	got := h.final("m1")
	if got.Kind != bus.KindNotice || got.Text != "Stopped." {
		t.Fatalf("final = %+v", got)
	}
	hist := strings.Join(h.history(), "\n")
	if !strings.Contains(hist, "I was in the middle of") || !strings.Contains(hist, loop.TextStopped) {
		t.Fatalf("history:\n%s", hist)
	}
	h.model.Enqueue(llmtest.TextReply("ok"))
	h.ask("m2", "next")
	h.checkRequestsValid()
}

func TestStopInsideLongTool(t *testing.T) {
	started := make(chan struct{})
	long := &testTool{name: "long", run: func(ctx context.Context, _ tools.Call) (tools.Result, error) {
		close(started)
		<-ctx.Done()
		return tools.Result{}, ctx.Err()
	}}
	quick := &testTool{name: "quick"}
	h := newHarness(t, withTools(long, quick))
	h.model.Enqueue(calling(call("a", "long", `{}`), call("b", "quick", `{}`)))
	h.send("m1", "go")
	select {
	case <-started:
	case <-time.After(wait):
		t.Fatal("tool not started")
	}
	h.ask("s1", "/stop")
	if got := h.final("m1"); got.Text != "Stopped." {
		t.Fatalf("final = %+v", got)
	}
	if quick.runs.Load() != 0 {
		t.Fatal("a tool ran after /stop")
	}
	hist := h.history()
	if !strings.Contains(hist[2], "Cancelled by the user") || strings.Count(hist[2], "result:") != 2 {
		t.Fatalf("results = %q", hist[2])
	}
	h.model.Enqueue(llmtest.TextReply("ok"))
	h.ask("m2", "next")
	h.checkRequestsValid()
}

// Behaviour 7: steering.
func TestSteerRedirectsRunningTurn(t *testing.T) {
	echo := &testTool{name: "echo"}
	h := newHarness(t, withTools(echo))
	hold := make(chan struct{})
	r := calling(call("a", "echo", `{}`), call("b", "echo", `{}`))
	r.Block = hold
	h.model.Enqueue(r, llmtest.TextReply("Bonjour !"))
	h.send("m1", "say hello")
	h.model.WaitRequests(t, 1, wait)
	ack := h.ask("st", "/steer answer in French")
	if ack.Kind != bus.KindNotice || !strings.Contains(ack.Text, "next step") {
		t.Fatalf("/steer answer = %+v", ack)
	}
	close(hold)
	if got := h.final("m1"); got.Text != "Bonjour !" {
		t.Fatalf("final = %+v", got)
	}
	if echo.runs.Load() != 0 {
		t.Fatal("tools of the redirected step ran")
	}
	msgs := h.request(1).Body.Messages
	n := len(msgs)
	if msgs[n-3].Role != "tool" || !strings.Contains(msgs[n-3].Content, "redirected") || msgs[n-2].Role != "tool" ||
		msgs[n-1].Role != "user" || !strings.Contains(msgs[n-1].Content, "answer in French") {
		t.Fatalf("second request tail = %+v", msgs[n-3:])
	}
	h.checkRequestsValid()
}

func TestSteerOutsideTurnIsNormalMessage(t *testing.T) {
	h := newHarness(t)
	h.model.Enqueue(llmtest.TextReply("sure"))
	if got := h.ask("m1", "/steer tell me a joke"); got.Text != "sure" {
		t.Fatalf("final = %+v", got)
	}
	if _, text := h.lastMessage(0); text != "tell me a joke" {
		t.Fatalf("model saw %q", text)
	}
}

func TestSteerLimits(t *testing.T) {
	h := newHarness(t)
	hold := make(chan struct{})
	defer close(hold)
	h.model.Enqueue(llmtest.Reply{Text: "x", Block: hold})
	h.send("m1", "long")
	h.model.WaitRequests(t, 1, wait)
	if got := h.ask("big", "/steer "+strings.Repeat("é", maxSteerChars+1)); got.Kind != bus.KindError {
		t.Fatalf("oversize steer = %+v", got)
	}
	for i := range maxSteerItems {
		if got := h.ask(fmt.Sprintf("s%d", i), "/steer item"); got.Kind != bus.KindNotice {
			t.Fatalf("steer %d = %+v", i, got)
		}
	}
	if got := h.ask("full", "/steer one more"); got.Kind != bus.KindError || !strings.Contains(got.Text, "16") {
		t.Fatalf("17th steer = %+v", got)
	}
}

// Behaviour 8: parallel-safe tools run concurrently, results in order.
func TestParallelSafeToolsRunConcurrently(t *testing.T) {
	var wg sync.WaitGroup
	wg.Add(2)
	both := make(chan struct{})
	go func() { wg.Wait(); close(both) }()
	rendezvous := func(ctx context.Context, c tools.Call) (tools.Result, error) {
		wg.Done()
		select {
		case <-both: // only reachable if the other call runs at the same time
			return tools.Result{Text: "got " + string(c.Args)}, nil
		case <-ctx.Done():
			return tools.Result{}, errors.New("ran alone")
		}
	}
	p := &testTool{name: "fetch", parallel: true, run: rendezvous}
	h := newHarness(t, withTools(p), func(hc *harnessConfig) { hc.opt.ToolTimeout = wait })
	h.model.Enqueue(calling(call("a", "fetch", `{"n":1}`), call("b", "fetch", `{"n":2}`)), llmtest.TextReply("both"))
	h.ask("m1", "fetch two")
	msgs := h.request(1).Body.Messages
	a, b := msgs[len(msgs)-2], msgs[len(msgs)-1]
	if a.ToolCallID != "a" || a.Content != `got {"n":1}` || b.ToolCallID != "b" || b.Content != `got {"n":2}` {
		t.Fatalf("results = %+v, %+v", a, b)
	}
}

// Behaviour 9: truncation of results and reasoning.
func TestResultAndReasoningTruncation(t *testing.T) {
	big := &testTool{name: "big", run: func(context.Context, tools.Call) (tools.Result, error) {
		return tools.Result{Text: strings.Repeat("a", 30_000) + strings.Repeat("b", 40_000)}, nil
	}}
	h := newHarness(t, withTools(big))
	h.model.Enqueue(calling(call("a", "big", `{}`)), llmtest.Reply{Text: "<think>hidden</think>done", Reasoning: strings.Repeat("r", 10_000)})
	if got := h.ask("m1", "go"); got.Text != "done" {
		t.Fatalf("final = %q (think tags must be stripped)", got.Text)
	}
	_, current := h.lastMessage(1)
	if len(current) > loop.MaxToolResultChars+200 || !strings.Contains(current, "bytes omitted") || !strings.HasPrefix(current, "aaa") || !strings.HasSuffix(current, "bbb") {
		t.Fatalf("current-step result is %d bytes", len(current))
	}
	h.model.Enqueue(llmtest.TextReply("again"))
	h.ask("m2", "next")
	msgs := h.request(2).Body.Messages
	for _, m := range msgs {
		if m.Role == "tool" && len(m.Content) > loop.MaxOldToolResultChars+200 {
			t.Fatalf("older result sent with %d bytes", len(m.Content))
		}
		if m.Role == "assistant" && m.ReasoningContent != "" && (len(m.ReasoningContent) > loop.MaxStoredReasoning+100 || !strings.Contains(m.ReasoningContent, "omitted")) {
			t.Fatalf("stored reasoning is %d bytes", len(m.ReasoningContent))
		}
	}
}

// Behaviour 10: post-turn tools are never offered and run after the turn.
func TestPostTurnTools(t *testing.T) {
	got := make(chan string, 1)
	post := stagedTool{&testTool{name: "indexer", stage: tools.StagePostTurn, run: func(_ context.Context, c tools.Call) (tools.Result, error) {
		got <- string(c.Args)
		return tools.Result{Text: "indexed"}, nil
	}}}
	h := newHarness(t, withTools(&testTool{name: "echo"}, post))
	h.model.Enqueue(llmtest.TextReply("the <answer> & \"more\"\u2028\\"))
	final := h.ask("m1", "q")
	want, _ := json.Marshal(map[string]string{"reply": final.Text}) // the arguments' bytes are encoding/json's
	for _, tl := range h.request(0).Body.Tools {
		if tl.Function.Name == "indexer" {
			t.Fatal("post-turn tool offered to the model")
		}
	}
	select {
	case args := <-got:
		if args != string(want) || !strings.Contains(args, `\u003canswer\u003e \u0026 \"more\"\u2028\\`) {
			t.Fatalf("post-turn args = %s", args)
		}
	case <-time.After(wait):
		t.Fatal("post-turn tool did not run")
	}
}

// Behaviour 11: the context budget before the loop.
func TestContextTrimmedByHalvesWithSummary(t *testing.T) {
	h := newHarness(t, func(hc *harnessConfig) { hc.cfg.MaxContextTurns = 6 })
	for i := range 7 {
		h.model.Enqueue(llmtest.TextReply(fmt.Sprintf("answer %d", i)))
		h.ask(fmt.Sprintf("m%d", i), fmt.Sprintf("question %d", i))
	}
	// Turn 7 saw 6 earlier turns: over max_context_turns-1, so the older
	// half went into the summary.
	req := h.request(6).Body.Messages
	var users []string
	for _, m := range req {
		if m.Role == "user" {
			users = append(users, m.Content)
		}
	}
	if strings.Join(users, ",") != "question 3,question 4,question 5,question 6" {
		t.Fatalf("user messages sent: %v", users)
	}
	sys := req[0].Content
	if !strings.Contains(sys, "Earlier in this conversation") || !strings.Contains(sys, "question 0") || !strings.Contains(sys, "answer 2") {
		t.Fatalf("system prompt lacks the summary:\n%s", sys)
	}
	// The compaction is stored before the turn's turn_end event.
	h.bus.WaitEventWhere(t, wait, func(e bus.Event) bool { return e.Type == bus.EventTurnEnd && e.InReplyTo == "m6" })
	snap, err := h.store.Load(t.Context(), "console/c1", 100)
	if err != nil || !strings.Contains(snap.Summary, "question 1") || len(loop.TurnStarts(snap.Messages)) != 4 {
		t.Fatalf("stored summary %q, %d turns, %v", snap.Summary, len(loop.TurnStarts(snap.Messages)), err)
	}
}

func TestFitContextCompressesFewTurns(t *testing.T) {
	var hist []memory.Message
	for i := range 3 {
		hist = append(hist, userMsg(fmt.Sprintf("q%d", i)),
			memory.Message{Role: memory.RoleAssistant, Blocks: []memory.Block{{Type: memory.BlockToolUse, ToolID: "x", ToolName: "t", Input: []byte(`{}`)}}},
			memory.Message{Role: memory.RoleTool, Blocks: []memory.Block{{Type: memory.BlockToolResult, ToolID: "x", Text: strings.Repeat("z", 4000)}}},
			memory.Message{Role: memory.RoleAssistant, Blocks: []memory.Block{{Type: memory.BlockText, Text: fmt.Sprintf("a%d", i)}}})
	}
	kept, dropped := fitContext(hist, 10, 100)
	if len(dropped) != 0 || len(kept) != 6 || kept[1].Text() != "a0" {
		t.Fatalf("kept %d, dropped %d: %+v", len(kept), len(dropped), kept)
	}
	kept, dropped = fitContext(hist, 10, 10)
	if len(kept) != 2 || kept[0].Text() != "q2" || len(dropped) != 4 {
		t.Fatalf("kept %+v, dropped %d", kept, len(dropped))
	}
}

// Behaviour 12: overflow self-healing.
func TestOverflowCompactsAndRetries(t *testing.T) {
	h := newHarness(t)
	for i := range 4 {
		h.model.Enqueue(llmtest.TextReply(strings.Repeat("long answer ", 200)))
		h.ask(fmt.Sprintf("m%d", i), fmt.Sprintf("question %d", i))
	}
	h.model.Enqueue(llmtest.Reply{Status: 400, ErrorBody: `{"error":{"message":"This model's maximum context length is 2000 tokens. However, your messages resulted in 2600 tokens.","type":"invalid_request_error","code":"context_length_exceeded"}}`},
		llmtest.TextReply("fits now"))
	if got := h.ask("m4", "question 4"); got.Text != "fits now" {
		t.Fatalf("final = %+v", got)
	}
	before, after := len(h.request(4).Raw), len(h.request(5).Raw)
	if after >= before {
		t.Fatalf("retry was not smaller: %d -> %d bytes", before, after)
	}
	if _, text := h.lastMessage(5); text != "question 4" {
		t.Fatalf("retry lost the question: %q", text)
	}
}

func TestOverflowThatPersistsResetsContext(t *testing.T) {
	h := newHarness(t)
	h.model.Enqueue(llmtest.TextReply("first"))
	h.ask("m1", "hello")
	h.model.Enqueue(llmtest.ContextOverflowReply(), llmtest.ContextOverflowReply())
	got := h.ask("m2", "big question")
	if got.Kind != bus.KindError || got.Text != loop.TextOverflowReset {
		t.Fatalf("final = %+v", got)
	}
	if n := h.model.RequestCount(); n != 3 {
		t.Fatalf("%d requests: the overflow looped", n)
	}
	h.model.Enqueue(llmtest.TextReply("fresh"))
	h.ask("m3", "again")
	msgs := h.request(3).Body.Messages
	for _, m := range msgs {
		if llmtest.MessageText(m) == "hello" {
			t.Fatal("the reset context still holds the old turns")
		}
	}
}

// Behaviour 13: retries show typing.
func TestRateLimitRetryShowsTyping(t *testing.T) {
	h := newHarness(t, func(hc *harnessConfig) { hc.llm.MaxRetries = 3 })
	h.model.Enqueue(llmtest.RateLimitReply(""), llmtest.ErrorReply(503, "", "busy"), llmtest.TextReply("finally"))
	if got := h.ask("m1", "hi"); got.Text != "finally" {
		t.Fatalf("final = %+v", got)
	}
	typing := 0
	for _, o := range h.bus.Outbounds() {
		if o.InReplyTo == "m1" && o.Kind == bus.KindTyping {
			typing++
		}
	}
	if typing != 3 { // turn start + one per retry
		t.Fatalf("%d typing signals, want 3", typing)
	}
}

// Behaviour 14: events.
func TestEvents(t *testing.T) {
	echo := &testTool{name: "echo"}
	h := newHarness(t, withTools(echo))
	h.model.Enqueue(llmtest.Reply{Reasoning: "let me think", ToolCalls: []llmtest.ToolCall{call("a", "echo", `{}`)}},
		llmtest.Reply{Text: "all done here", ChunkSize: 3, ChunkDelay: 15 * time.Millisecond})
	h.ask("m1", "go")
	h.bus.WaitEvent(t, wait, bus.EventTurnEnd)
	seen := map[string]bus.Event{}
	var order []string
	for _, e := range h.bus.Events() {
		if _, ok := seen[e.Type]; !ok {
			order = append(order, e.Type)
		}
		seen[e.Type] = e
	}
	for _, want := range []string{bus.EventTurnStart, bus.EventReasoningDelta, bus.EventToolCall, bus.EventToolResult, bus.EventStepEnd, bus.EventLLMDelta, bus.EventTurnEnd} {
		if _, ok := seen[want]; !ok {
			t.Errorf("no %s event; saw %v", want, order)
		}
	}
	if d := string(seen[bus.EventToolResult].Data); !strings.Contains(d, `"duration_ms"`) || !strings.Contains(d, `"error":false`) {
		t.Errorf("tool_result = %s", d)
	}
	if d := string(seen[bus.EventTurnEnd].Data); !strings.Contains(d, `"stop_reason":"completed"`) || !strings.Contains(d, `"usage"`) {
		t.Errorf("turn_end = %s", d)
	}
}

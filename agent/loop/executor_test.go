package loop

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/switchboard-chat/switchboard/llm"
	"github.com/switchboard-chat/switchboard/memory"
	"github.com/switchboard-chat/switchboard/tools"
)

// scriptModel is an in-package Model fake: it returns scripted responses in
// order and records every request.
type scriptModel struct {
	mu    sync.Mutex
	steps []func(ctx context.Context, req llm.Request, onDelta func(llm.Delta)) (*llm.Response, error)
	reqs  []llm.Request
}

func (s *scriptModel) Stream(ctx context.Context, req llm.Request, onDelta func(llm.Delta)) (*llm.Response, error) {
	s.mu.Lock()
	s.reqs = append(s.reqs, req)
	if len(s.steps) == 0 {
		s.mu.Unlock()
		return nil, errors.New("script exhausted")
	}
	f := s.steps[0]
	s.steps = s.steps[1:]
	s.mu.Unlock()
	return f(ctx, req, onDelta)
}

func text(s string) func(context.Context, llm.Request, func(llm.Delta)) (*llm.Response, error) {
	return func(_ context.Context, _ llm.Request, on func(llm.Delta)) (*llm.Response, error) {
		on(llm.Delta{Text: s})
		return &llm.Response{Text: s, FinishReason: llm.FinishStop}, nil
	}
}

func calls(cs ...llm.ToolCall) func(context.Context, llm.Request, func(llm.Delta)) (*llm.Response, error) {
	return func(context.Context, llm.Request, func(llm.Delta)) (*llm.Response, error) {
		return &llm.Response{ToolCalls: cs, FinishReason: llm.FinishToolCalls}, nil
	}
}

// fakeTool is a configurable tool.
type fakeTool struct {
	name     string
	parallel bool
	run      func(ctx context.Context, c tools.Call) (tools.Result, error)
}

func (f *fakeTool) Name() string            { return f.name }
func (f *fakeTool) Description() string     { return "fake tool " + f.name }
func (f *fakeTool) Schema() json.RawMessage { return json.RawMessage(`{"type":"object"}`) }
func (f *fakeTool) Permission() string      { return tools.PermRead }
func (f *fakeTool) ParallelSafe() bool      { return f.parallel }
func (f *fakeTool) Run(ctx context.Context, c tools.Call) (tools.Result, error) {
	return f.run(ctx, c)
}

func newRegistry(t *testing.T, ts ...tools.Tool) *tools.Registry {
	t.Helper()
	r, err := tools.NewRegistry(ts...)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func userMsg(s string) memory.Message {
	return memory.Message{Role: memory.RoleUser, TurnStart: true, Blocks: []memory.Block{{Type: memory.BlockText, Text: s}}}
}

// assertPaired fails unless every tool_use is answered, in order, by the next message.
func assertPaired(t *testing.T, msgs []memory.Message) {
	t.Helper()
	if got := sanitize(msgs); len(got) != len(msgs) {
		t.Fatalf("history needed repair: %d messages became %d", len(msgs), len(got))
	}
	for i, m := range msgs {
		var ids []string
		for _, b := range m.Blocks {
			if b.Type == memory.BlockToolUse {
				ids = append(ids, b.ToolID)
			}
		}
		if len(ids) == 0 {
			continue
		}
		if i+1 >= len(msgs) || msgs[i+1].Role != memory.RoleTool || len(msgs[i+1].Blocks) != len(ids) {
			t.Fatalf("tool_use at %d not followed by its results: %+v", i, msgs)
		}
		for j, id := range ids {
			if msgs[i+1].Blocks[j].ToolID != id || msgs[i+1].Blocks[j].Text == "" {
				t.Fatalf("result %d = %+v, want id %s with text", j, msgs[i+1].Blocks[j], id)
			}
		}
	}
}

func TestExecutorPlainReply(t *testing.T) {
	m := &scriptModel{steps: []func(context.Context, llm.Request, func(llm.Delta)) (*llm.Response, error){text("hello there")}}
	e := New(m, nil, Options{ModelName: "m", Limits: Limits{MaxSteps: 5}}, nil)
	res, err := e.Run(t.Context(), Input{System: "sys", User: userMsg("hi")})
	if err != nil {
		t.Fatal(err)
	}
	if res.Text != "hello there" || res.Kind != KindReply || len(res.Messages) != 2 {
		t.Fatalf("res = %+v", res)
	}
	if got := m.reqs[0].Messages; got[0].Role != llm.RoleSystem || got[0].Content != "sys" || got[1].Content != "hi" {
		t.Fatalf("request messages = %+v", got)
	}
}

func TestExecutorToolRoundTripAndPanics(t *testing.T) {
	ok := &fakeTool{name: "ok", run: func(_ context.Context, c tools.Call) (tools.Result, error) {
		return tools.Result{Text: "ok:" + string(c.Args)}, nil
	}}
	boom := &fakeTool{name: "boom", run: func(context.Context, tools.Call) (tools.Result, error) { panic("kaboom") }}
	m := &scriptModel{steps: []func(context.Context, llm.Request, func(llm.Delta)) (*llm.Response, error){
		calls(
			llm.ToolCall{ID: "c1", Name: "ok", Arguments: `{"a":1}`},
			llm.ToolCall{ID: "c2", Name: "boom", Arguments: `{}`},
			llm.ToolCall{ID: "c3", Name: "missing", Arguments: ``},
			llm.ToolCall{ID: "c4", Name: "ok", Arguments: `{"a":`},
			llm.ToolCall{ID: "c5", Name: "ok", Arguments: `{'a': 2,}`},
		),
		text("done"),
	}}
	e := New(m, newRegistry(t, ok, boom), Options{ModelName: "m", Limits: Limits{MaxSteps: 5}}, nil)
	res, err := e.Run(t.Context(), Input{System: "s", User: userMsg("go")})
	if err != nil {
		t.Fatal(err)
	}
	if res.Text != "done" {
		t.Fatalf("text = %q", res.Text)
	}
	assertPaired(t, res.Messages)
	results := res.Messages[2].Blocks
	want := []struct {
		prefix string
		isErr  bool
	}{{`ok:{"a":1}`, false}, {"Error:", true}, {"Error:", true}, {"Error:", true}, {`ok:{"a":2}`, false}}
	for i, w := range want {
		if !strings.HasPrefix(results[i].Text, w.prefix) || results[i].IsError != w.isErr {
			t.Errorf("result %d = %q (err %v), want prefix %q err %v", i, results[i].Text, results[i].IsError, w.prefix, w.isErr)
		}
	}
	// The second request carries the tool results right after the calls.
	req := m.reqs[1].Messages
	if req[2].Role != llm.RoleAssistant || len(req[2].ToolCalls) != 5 || req[3].Role != llm.RoleTool || req[3].ToolID != "c1" {
		t.Fatalf("second request = %+v", req)
	}
}

func TestExecutorMaxStepsForcedSummary(t *testing.T) {
	loop := calls(llm.ToolCall{ID: "x", Name: "ok", Arguments: `{}`})
	var summaryReq llm.Request
	m := &scriptModel{steps: []func(context.Context, llm.Request, func(llm.Delta)) (*llm.Response, error){
		loop, loop,
		func(_ context.Context, r llm.Request, _ func(llm.Delta)) (*llm.Response, error) {
			summaryReq = r
			return &llm.Response{Text: "summary", FinishReason: llm.FinishStop}, nil
		},
	}}
	ok := &fakeTool{name: "ok", run: func(context.Context, tools.Call) (tools.Result, error) { return tools.Result{Text: "r"}, nil }}
	e := New(m, newRegistry(t, ok), Options{ModelName: "m", Limits: Limits{MaxSteps: 2}}, nil)
	res, err := e.Run(t.Context(), Input{User: userMsg("go")})
	if err != nil {
		t.Fatal(err)
	}
	if res.Text != "summary" || len(summaryReq.Tools) != 0 {
		t.Fatalf("text %q, tools sent %d", res.Text, len(summaryReq.Tools))
	}
	last := summaryReq.Messages[len(summaryReq.Messages)-1]
	if !strings.Contains(last.Content, "all 2 steps") {
		t.Fatalf("summary prompt = %q", last.Content)
	}
	for _, msg := range res.Messages {
		if strings.Contains(msg.Text(), "steps allowed") {
			t.Fatal("temporary summary prompt was stored")
		}
	}
	assertPaired(t, res.Messages)
}

func TestExecutorEmptyRetryThenFallback(t *testing.T) {
	empty := func(context.Context, llm.Request, func(llm.Delta)) (*llm.Response, error) {
		return &llm.Response{FinishReason: llm.FinishStop}, nil
	}
	m := &scriptModel{steps: []func(context.Context, llm.Request, func(llm.Delta)) (*llm.Response, error){empty, empty}}
	res, err := New(m, nil, Options{ModelName: "m", Limits: Limits{MaxSteps: 5}}, nil).Run(t.Context(), Input{User: userMsg("hi")})
	if err != nil {
		t.Fatal(err)
	}
	if len(m.reqs) != 2 || res.Text != TextEmptyFallback || res.Kind != KindError {
		t.Fatalf("requests %d, res %+v", len(m.reqs), res)
	}
}

func TestExecutorModelErrors(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want string
	}{
		{llm.ErrNotConfigured, "OPENAI_API_KEY"},
		{errors.New("boom"), "boom"},
	} {
		m := &scriptModel{steps: []func(context.Context, llm.Request, func(llm.Delta)) (*llm.Response, error){
			func(context.Context, llm.Request, func(llm.Delta)) (*llm.Response, error) { return nil, tc.err },
		}}
		res, err := New(m, nil, Options{ModelName: "m", Limits: Limits{MaxSteps: 5}}, nil).Run(t.Context(), Input{User: userMsg("hi")})
		if err != nil || res.Kind != KindError || !strings.Contains(res.Text, tc.want) {
			t.Errorf("%v: res %+v err %v", tc.err, res, err)
		}
	}
}

func TestExecutorStopDuringTool(t *testing.T) {
	started := make(chan struct{})
	slow := &fakeTool{name: "slow", run: func(ctx context.Context, _ tools.Call) (tools.Result, error) {
		close(started)
		<-ctx.Done()
		return tools.Result{}, ctx.Err()
	}}
	m := &scriptModel{steps: []func(context.Context, llm.Request, func(llm.Delta)) (*llm.Response, error){
		calls(llm.ToolCall{ID: "a", Name: "slow", Arguments: `{}`}, llm.ToolCall{ID: "b", Name: "slow", Arguments: `{}`}),
	}}
	ctx, cancel := context.WithCancelCause(t.Context())
	go func() { <-started; cancel(ErrStopped) }()
	res, err := New(m, newRegistry(t, slow), Options{ModelName: "m", Limits: Limits{MaxSteps: 5}}, nil).Run(ctx, Input{User: userMsg("go")})
	if err != nil {
		t.Fatal(err)
	}
	if res.Kind != KindNotice {
		t.Fatalf("kind = %q", res.Kind)
	}
	assertPaired(t, res.Messages)
	if got := res.Messages[2].Blocks[1].Text; !strings.Contains(got, "Cancelled") {
		t.Fatalf("second result = %q", got)
	}
}

func TestExecutorShutdownAborts(t *testing.T) {
	m := &scriptModel{steps: []func(context.Context, llm.Request, func(llm.Delta)) (*llm.Response, error){
		func(ctx context.Context, _ llm.Request, _ func(llm.Delta)) (*llm.Response, error) {
			<-ctx.Done()
			return nil, ctx.Err()
		},
	}}
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Millisecond)
	defer cancel()
	_, err := New(m, nil, Options{ModelName: "m", Limits: Limits{MaxSteps: 5}}, nil).Run(ctx, Input{User: userMsg("go")})
	if !errors.Is(err, ErrAborted) {
		t.Fatalf("err = %v, want ErrAborted", err)
	}
}

func TestStripThinkAndTruncate(t *testing.T) {
	if got := StripThink("<think>x</think>answer<think>partial"); got != "answer" {
		t.Fatalf("StripThink = %q", got)
	}
	s := strings.Repeat("é", 100)
	got := TruncateMiddle(s, 51)
	if !strings.Contains(got, "omitted") || !strings.HasPrefix(got, "ééé") || !strings.HasSuffix(got, "éé") {
		t.Fatalf("TruncateMiddle = %q", got)
	}
}

func TestProactiveTurnMayEndSilently(t *testing.T) {
	empty := func(context.Context, llm.Request, func(llm.Delta)) (*llm.Response, error) {
		return &llm.Response{FinishReason: llm.FinishStop}, nil
	}
	m := &scriptModel{steps: []func(context.Context, llm.Request, func(llm.Delta)) (*llm.Response, error){empty, empty}}
	res, err := New(m, nil, Options{Limits: Limits{MaxSteps: 3}}, nil).Run(t.Context(), Input{User: userMsg("tick"), Proactive: true})
	if err != nil || res.Text != "" || res.StopReason != StopEmpty {
		t.Fatalf("res %+v err %v", res, err)
	}
}

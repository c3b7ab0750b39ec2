package loop

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/switchboard-chat/switchboard/llm"
	"github.com/switchboard-chat/switchboard/memory"
	"github.com/switchboard-chat/switchboard/tools"
)

// duplicateNote follows an earlier result served again for a duplicate call.
const duplicateNote = "\n\n[Note: this call is identical to an earlier one in this task; this is the earlier result, the tool was not run again.]"

// toolEnv is what running one tool call needs: the toolbox (through the
// executor), the run's tool set, who the call is for and where its events
// go. Safe for use from tool goroutines.
type toolEnv struct {
	e       *Executor
	ts      *toolSet
	session tools.Session
	sink    Sink // may be nil
	log     *slog.Logger
	parent  runSpec // the run the calls belong to (sub-agents nest in it)
}

func (env *toolEnv) event(typ string, data any) {
	if env.sink != nil {
		env.sink.Event(typ, data)
	}
}

// toolStep runs the calls of one model step and produces exactly one
// result per call, in call order, whatever happens.
type toolStep struct {
	pol      *callPolicy
	env      *toolEnv
	steer    Steering // may be nil
	calls    []llm.ToolCall
	finish   string
	results  []memory.Block
	done     []bool
	preps    []prepared
	denied   []bool
	launched []bool
	// steered is the steering that arrived between calls: the calls not
	// yet run are skipped and it is applied at the next step.
	steered []string
}

func newToolStep(pol *callPolicy, env *toolEnv, steer Steering, calls []llm.ToolCall, finish string) *toolStep {
	n := len(calls)
	return &toolStep{pol: pol, env: env, steer: steer, calls: calls, finish: finish,
		results: make([]memory.Block, n), done: make([]bool, n), preps: make([]prepared, n),
		denied: make([]bool, n), launched: make([]bool, n)}
}

// run runs the calls and returns the tool message holding their results: a
// deferred fill covers panics in this function, cancellation, steering and
// the circuit breaker. Parse errors and blocked calls count as failures.
// It reports whether the circuit breaker ended the run, and why.
func (st *toolStep) run(ctx context.Context) (msg memory.Message, aborted bool, why string) {
	var wg sync.WaitGroup
	defer func() {
		rec := recover()
		msg = st.fill(ctx, aborted)
		if rec != nil {
			st.env.log.Error("tool step panicked", "panic", rec)
		}
	}()
	defer wg.Wait() // runs before the fill above

	parallel := st.launcher(ctx, &wg)
	for i, c := range st.calls {
		if ctx.Err() != nil {
			return msg, false, ""
		}
		if st.steer != nil {
			if items := st.steer.Take(); len(items) > 0 {
				wg.Wait()
				st.steered = items
				return msg, false, ""
			}
		}
		if stop, why := st.runCall(ctx, i, c, parallel); stop {
			return msg, true, why
		}
	}
	wg.Wait()
	for i := range st.calls {
		if st.launched[i] && st.done[i] {
			st.record(i)
		}
	}
	return msg, false, ""
}

// runCall prepares call i and answers it: with an error when it may not
// run, with the earlier result of a duplicate, on a goroutine when
// parallel takes it, else here. stop is set when the breaker ends the run.
func (st *toolStep) runCall(ctx context.Context, i int, c llm.ToolCall, parallel func(int, prepared) bool) (stop bool, why string) {
	st.preps[i] = st.pol.prepare(c, st.finish)
	p := st.preps[i]
	switch {
	case p.stop:
		st.pol.br.record(c.Name, p.hash, false)
		return true, p.err
	case p.err != "":
		st.answerRefused(i, p)
	case p.dup != "":
		st.answerDuplicate(i, p)
	case parallel(i, p):
	default:
		st.results[i], st.denied[i] = st.env.execute(ctx, p)
		st.done[i] = true
		st.record(i)
	}
	return false, ""
}

// launcher returns the function that runs a parallel-safe call on a
// goroutine of wg when the step has two or more of them (at most
// agent's ParallelTools at once, sub-agents at most Subagents.Concurrency),
// reporting whether it did; results are recorded after wg is done.
func (st *toolStep) launcher(ctx context.Context, wg *sync.WaitGroup) func(int, prepared) bool {
	nParallel := 0
	for _, c := range st.calls {
		if st.env.ts.parallel[c.Name] {
			nParallel++
		}
	}
	sem := make(chan struct{}, st.env.e.opt.Limits.ParallelTools)
	subSem := make(chan struct{}, st.env.e.opt.Subagents.Concurrency)
	return func(i int, p prepared) bool {
		if nParallel < 2 || !st.env.ts.parallel[p.call.Name] {
			return false
		}
		st.launched[i] = true
		s := sem
		if st.env.isSubagent(p.call.Name) {
			s = subSem
		}
		s <- struct{}{}
		wg.Go(func() {
			defer func() { <-s }()
			st.results[i], st.denied[i] = st.env.execute(ctx, p)
			st.done[i] = true
		})
		return true
	}
}

// fill builds the step's tool message, answering every call that has no
// result with an error saying why.
func (st *toolStep) fill(ctx context.Context, aborted bool) memory.Message {
	msg := memory.Message{Role: memory.RoleTool, Time: time.Now().UTC()}
	for i, c := range st.calls {
		if !st.done[i] {
			text := missingToolResult
			switch {
			case len(st.steered) > 0:
				text = "Error: " + textSkipped
			case ctx.Err() != nil:
				text = "Error: " + textCancelled
			case aborted:
				text = "Error: not run: the run was stopped after repeated failures."
			}
			st.results[i] = memory.Block{Type: memory.BlockToolResult, ToolID: c.ID, Text: text, IsError: true}
		}
		msg.Blocks = append(msg.Blocks, st.results[i])
	}
	return msg
}

// answerRefused answers a call that may not run with its error.
func (st *toolStep) answerRefused(i int, p prepared) {
	c := p.call
	st.results[i] = memory.Block{Type: memory.BlockToolResult, ToolID: c.ID, Text: "Error: " + p.err, IsError: true}
	st.done[i] = true
	st.pol.br.record(c.Name, p.hash, false)
	st.env.event(EventToolResult, map[string]any{"id": c.ID, "name": c.Name, "error": true, "text": p.err, "duration_ms": 0})
}

// answerDuplicate serves an earlier result again (rollbacks are used up)
// instead of running the same call twice.
func (st *toolStep) answerDuplicate(i int, p prepared) {
	c := p.call
	st.results[i] = memory.Block{Type: memory.BlockToolResult, ToolID: c.ID, Text: p.dup + duplicateNote}
	st.done[i] = true
	st.record(i)
	st.env.event(EventToolResult, map[string]any{"id": c.ID, "name": c.Name, "error": false, "duplicate": true, "duration_ms": 0})
}

func (st *toolStep) record(i int) {
	st.results[i].Text = st.pol.record(st.preps[i], st.results[i].Text, st.results[i].IsError, st.denied[i])
}

// execute runs one prepared call: a sub-agent or a tool. It reports
// whether the tool denied the call.
func (env *toolEnv) execute(ctx context.Context, p prepared) (memory.Block, bool) {
	if env.isSubagent(p.call.Name) {
		return env.runSubagent(ctx, p), false
	}
	return env.runTool(ctx, p)
}

// runTool runs one call with its own timeout; the toolbox turns errors and
// panics into error results. It reports whether the tool denied the call.
func (env *toolEnv) runTool(ctx context.Context, p prepared) (memory.Block, bool) {
	c := p.call
	ev := map[string]any{"id": c.ID, "name": c.Name, "arguments": string(p.args)}
	if len(p.fixed) > 0 {
		ev["fixed"] = p.fixed
	}
	env.event(EventToolCall, ev)
	start := time.Now()
	timeout := env.e.opt.Limits.ToolTimeout
	var r tools.Result
	if env.e.tools == nil {
		r = tools.Result{Text: "Error: no tools are available", IsError: true}
	} else {
		tctx, cancel := context.WithTimeout(ctx, timeout)
		r = env.e.tools.Run(tctx, c.Name, tools.Call{ID: c.ID, Args: p.args, Session: env.session})
		if tctx.Err() == context.DeadlineExceeded && ctx.Err() == nil && !r.IsError {
			r = tools.Result{Text: fmt.Sprintf("Error: %s timed out after %s", c.Name, timeout), IsError: true}
		}
		cancel()
	}
	text := TruncateMiddle(r.Text, MaxToolResultChars)
	if text == "" {
		text = emptyToolResult
	}
	env.event(EventToolResult, map[string]any{"id": c.ID, "name": c.Name, "error": r.IsError,
		"duration_ms": time.Since(start).Milliseconds(), "text": TruncateMiddle(text, 2000)})
	outcome, label := "ok", c.Name
	switch {
	case r.Denied:
		outcome = "denied"
	case r.IsError:
		outcome = "error"
	}
	if !env.ts.names[c.Name] {
		label = "_unknown"
	}
	env.e.opt.Observer.ToolDone(label, outcome, time.Since(start))
	return memory.Block{Type: memory.BlockToolResult, ToolID: c.ID, Text: text, IsError: r.IsError}, r.Denied
}

// uniqueIDs gives every call of a step a distinct, non-empty id (some
// providers repeat or omit them): "call_" and 24 random hex digits.
func uniqueIDs(calls []llm.ToolCall) []llm.ToolCall {
	seen := make(map[string]bool, len(calls))
	out := make([]llm.ToolCall, len(calls))
	for i, c := range calls {
		if c.ID == "" || seen[c.ID] {
			c.ID = newCallID()
		}
		seen[c.ID] = true
		out[i] = c
	}
	return out
}

func newCallID() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return "call_" + hex.EncodeToString(b[:])
}

// argsForHistory stores the arguments as sent when they are valid JSON
// objects, and an empty object otherwise (the problem is reported in the
// result).
func argsForHistory(raw string) []byte {
	if a, reason := normaliseArgs(raw, ""); reason == "" && len(raw) <= maxArgBytes {
		return a
	}
	return []byte("{}")
}

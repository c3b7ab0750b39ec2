package agent

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/switchboard-chat/switchboard/bus"
	"github.com/switchboard-chat/switchboard/llm"
	"github.com/switchboard-chat/switchboard/memory"
	"github.com/switchboard-chat/switchboard/tools"
)

// prepared is one tool call after argument and breaker checks.
type prepared struct {
	call  llm.ToolCall
	args  json.RawMessage
	hash  string
	fixed []string // argument fixes applied
	err   string   // set: the call is answered with this error without running
	stop  bool     // the breaker ended the run; err says why
	dup   string   // set: an identical call already answered; its result
}

// prepare parses a call's arguments and asks the circuit breaker.
func (t *turn) prepare(c llm.ToolCall, finish string) prepared {
	p := prepared{call: c, hash: argsHash([]byte(c.Arguments))}
	writes := c.Name == "write_file" || c.Name == "edit_file"
	switch args, reason := normaliseArgs(c.Arguments, finish); {
	case len(c.Arguments) > maxArgBytes:
		p.err = fmt.Sprintf("the arguments of this %s call are too large (%d bytes; the limit is %d). Send less per call.", c.Name, len(c.Arguments), maxArgBytes)
		if writes {
			p.err += splitWriteAdvice
		}
	case reason != "":
		p.err = reason
		if writes && strings.Contains(reason, "cut off") {
			p.err += splitWriteAdvice
		}
	default:
		args, p.fixed = fixArgs(t.ts.schemas[c.Name], t.ts.aliases[c.Name], args)
		p.args, p.hash = args, argsHash(args)
		if req := t.ts.required[c.Name]; len(req) > 0 && string(args) == "{}" {
			p.err = fmt.Sprintf("your %s call arrived with no arguments at all, but it requires: %s. It was probably cut off; send the call again with its arguments.",
				c.Name, strings.Join(req, ", "))
		}
	}
	if p.err != "" {
		return p
	}
	// The breaker comes first: a duplicate that is not run again still
	// counts as a call (cowagent.md §1.8).
	switch v, why := t.br.check(c.Name, p.hash); v {
	case block, halt: // halt within one step: the loop ends the run on the next
		t.e.opt.Observer.BreakerTrip("block")
		p.err = why
		return p
	case abort:
		t.e.opt.Observer.BreakerTrip("abort")
		p.err, p.stop = why, true
		return p
	}
	if prev, ok := t.answered[answerKey(c)]; ok {
		p.dup = prev
	}
	return p
}

// breakerHash is the hash prepare gives c for the breaker: of its fixed
// arguments when they parse, of the raw text otherwise.
func (t *turn) breakerHash(c llm.ToolCall, finish string) string {
	args, reason := normaliseArgs(c.Arguments, finish)
	if reason != "" || len(c.Arguments) > maxArgBytes {
		return argsHash([]byte(c.Arguments))
	}
	args, _ = fixArgs(t.ts.schemas[c.Name], t.ts.aliases[c.Name], args)
	return argsHash(args)
}

// stuck reports whether the breaker ends the run because the model repeats
// a call it was told to stop making, and why.
func (t *turn) stuck(calls []llm.ToolCall, finish string) (bool, string) {
	for _, c := range calls {
		if v, why := t.br.check(c.Name, t.breakerHash(c, finish)); v == halt {
			return true, why
		}
	}
	return false, ""
}

// runTools runs the calls of one step and appends exactly one result per
// call, in call order, whatever happens: a deferred fill covers panics in
// this function, cancellation, steering and the circuit breaker. Parse
// errors and blocked calls count as failures. It reports whether the
// circuit breaker ended the run, and why.
func (t *turn) runTools(calls []llm.ToolCall, finish string) (aborted bool, why string) {
	results := make([]memory.Block, len(calls))
	done := make([]bool, len(calls))
	preps := make([]prepared, len(calls))
	denied := make([]bool, len(calls))
	launched := make([]bool, len(calls))
	skipped := false
	var wg sync.WaitGroup
	defer func() {
		rec := recover()
		msg := memory.Message{Role: memory.RoleTool, Time: time.Now().UTC()}
		for i, c := range calls {
			if !done[i] {
				text := missingToolResult
				switch {
				case skipped:
					text = "Error: " + textSkipped
				case t.ctx.Err() != nil:
					text = "Error: " + textCancelled
				case aborted:
					text = "Error: not run: the run was stopped after repeated failures."
				}
				results[i] = memory.Block{Type: memory.BlockToolResult, ToolID: c.ID, Text: text, IsError: true}
			}
			msg.Blocks = append(msg.Blocks, results[i])
		}
		t.add(msg)
		t.lastResults = len(t.context) - 1
		if rec != nil {
			t.log.Error("tool step panicked", "panic", rec)
		}
	}()
	defer wg.Wait() // runs before the fill above

	nParallel := 0
	for _, c := range calls {
		if t.ts.parallel[c.Name] {
			nParallel++
		}
	}
	sem := make(chan struct{}, t.e.opt.ParallelTools)
	subSem := make(chan struct{}, t.e.opt.SubagentConcurrency)
	record := func(i int) {
		if !results[i].IsError && preps[i].dup == "" {
			t.answered[answerKey(calls[i])] = results[i].Text
		}
		if denied[i] {
			return // permission denials are not failures of the model's approach
		}
		if t.br.record(calls[i].Name, preps[i].hash, !results[i].IsError) {
			results[i].Text += repeatHint
		}
	}
	for i, c := range calls {
		if t.ctx.Err() != nil {
			return false, ""
		}
		if items := t.takeSteer(false); len(items) > 0 {
			wg.Wait()
			skipped = true
			t.pending = append(t.pending, items...)
			return false, ""
		}
		preps[i] = t.prepare(c, finish)
		p := preps[i]
		if p.stop {
			t.br.record(c.Name, p.hash, false)
			return true, p.err
		}
		if p.err != "" {
			results[i] = memory.Block{Type: memory.BlockToolResult, ToolID: c.ID, Text: "Error: " + p.err, IsError: true}
			done[i] = true
			t.br.record(c.Name, p.hash, false)
			t.event(bus.EventToolResult, map[string]any{"id": c.ID, "name": c.Name, "error": true, "text": p.err, "duration_ms": 0})
			continue
		}
		if p.dup != "" {
			// Rollbacks are used up: show the earlier result again instead
			// of running the same call twice.
			results[i] = memory.Block{Type: memory.BlockToolResult, ToolID: c.ID, Text: p.dup + duplicateNote}
			done[i] = true
			record(i)
			t.event(bus.EventToolResult, map[string]any{"id": c.ID, "name": c.Name, "error": false, "duplicate": true, "duration_ms": 0})
			continue
		}
		if nParallel >= 2 && t.ts.parallel[c.Name] {
			launched[i] = true
			s := sem
			if t.isSubagent(c.Name) {
				s = subSem
			}
			s <- struct{}{}
			wg.Go(func() {
				defer func() { <-s }()
				results[i], denied[i] = t.execute(p)
				done[i] = true
			})
			continue
		}
		results[i], denied[i] = t.execute(p)
		done[i] = true
		record(i)
	}
	wg.Wait()
	for i := range calls {
		if launched[i] && done[i] {
			record(i)
		}
	}
	return false, ""
}

// duplicateNote follows an earlier result served again for a duplicate call.
const duplicateNote = "\n\n[Note: this call is identical to an earlier one in this task; this is the earlier result, the tool was not run again.]"

// execute runs one prepared call: a sub-agent or a tool.
func (t *turn) execute(p prepared) (memory.Block, bool) {
	if t.isSubagent(p.call.Name) {
		return t.runSubagent(p), false
	}
	return t.runTool(p)
}

// runTool runs one call with its own timeout; the toolbox turns errors and
// panics into error results. It reports whether the tool denied the call.
func (t *turn) runTool(p prepared) (memory.Block, bool) {
	c := p.call
	ev := map[string]any{"id": c.ID, "name": c.Name, "arguments": string(p.args)}
	if len(p.fixed) > 0 {
		ev["fixed"] = p.fixed
	}
	t.event(bus.EventToolCall, ev)
	start := time.Now()
	var r tools.Result
	if t.e.tools == nil {
		r = tools.Result{Text: "Error: no tools are available", IsError: true}
	} else {
		ctx, cancel := context.WithTimeout(t.ctx, t.e.opt.ToolTimeout)
		r = t.e.tools.Run(ctx, c.Name, tools.Call{ID: c.ID, Args: p.args, Session: t.in.Session})
		if ctx.Err() == context.DeadlineExceeded && t.ctx.Err() == nil && !r.IsError {
			r = tools.Result{Text: fmt.Sprintf("Error: %s timed out after %s", c.Name, t.e.opt.ToolTimeout), IsError: true}
		}
		cancel()
	}
	text := truncateMiddle(r.Text, maxToolResultChars)
	if text == "" {
		text = emptyToolResult
	}
	t.event(bus.EventToolResult, map[string]any{"id": c.ID, "name": c.Name, "error": r.IsError,
		"duration_ms": time.Since(start).Milliseconds(), "text": truncateMiddle(text, 2000)})
	outcome, label := "ok", c.Name
	switch {
	case r.Denied:
		outcome = "denied"
	case r.IsError:
		outcome = "error"
	}
	if !t.ts.names[c.Name] {
		label = "_unknown"
	}
	t.e.opt.Observer.ToolDone(label, outcome, time.Since(start))
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

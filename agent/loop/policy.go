package loop

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/switchboard-chat/switchboard/llm"
)

// callPolicy decides about the model's tool calls in one run: whether a
// reply is rolled back, whether a call may run (arguments, circuit
// breaker) and which calls were answered already. Used from the run's
// goroutine only.
type callPolicy struct {
	ts  *toolSet
	obs Observer
	br  breaker
	// answered maps tool+canonical args of successful calls in this run
	// to their result, for duplicate detection; made at the first one (a
	// turn without tool calls needs none).
	answered map[string]string
}

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

// answerKey identifies a call for duplicate detection.
func answerKey(c llm.ToolCall) string { return c.Name + "\x00" + argsHash([]byte(c.Arguments)) }

// rollbackReason says why a reply should be dropped and resampled, or
// "": a kind for metrics (markup, unknown_tool, duplicate) and a text.
// A duplicate the breaker would block is not rolled back: the model gets
// the breaker's error result instead.
func (p *callPolicy) rollbackReason(text string, calls []llm.ToolCall, finish string) (kind, why string) {
	if len(calls) == 0 && hasCallMarkup(text, p.ts.isTool) {
		return "markup", "tool-call markup in the text instead of a tool call"
	}
	for _, c := range calls {
		if !p.ts.isTool(c.Name) {
			return "unknown_tool", fmt.Sprintf("call to %q, which is not a tool", c.Name)
		}
	}
	for _, c := range calls {
		if _, dup := p.answered[answerKey(c)]; dup {
			if v, _ := p.br.check(c.Name, p.breakerHash(c, finish)); v != allow {
				return "", ""
			}
			return "duplicate", fmt.Sprintf("exact duplicate of an earlier %s call in this task", c.Name)
		}
	}
	return "", ""
}

// noteDuplicates records the duplicate calls of a rolled-back reply in the
// breaker: they were not run, but the model made them, and the breaker
// counts identical calls however they were answered.
func (p *callPolicy) noteDuplicates(calls []llm.ToolCall, finish string) {
	for _, c := range calls {
		if _, dup := p.answered[answerKey(c)]; dup {
			p.br.note(c.Name, p.breakerHash(c, finish), true)
		}
	}
}

// prepare parses a call's arguments and asks the circuit breaker.
func (p *callPolicy) prepare(c llm.ToolCall, finish string) prepared {
	pr := prepared{call: c, hash: argsHash([]byte(c.Arguments))}
	writes := c.Name == "write_file" || c.Name == "edit_file"
	switch args, reason := normaliseArgs(c.Arguments, finish); {
	case len(c.Arguments) > maxArgBytes:
		pr.err = fmt.Sprintf("the arguments of this %s call are too large (%d bytes; the limit is %d). Send less per call.", c.Name, len(c.Arguments), maxArgBytes)
		if writes {
			pr.err += splitWriteAdvice
		}
	case reason != "":
		pr.err = reason
		if writes && strings.Contains(reason, "cut off") {
			pr.err += splitWriteAdvice
		}
	default:
		args, pr.fixed = fixArgs(p.ts.schemas[c.Name], p.ts.aliases[c.Name], args)
		pr.args, pr.hash = args, argsHash(args)
		if req := p.ts.required[c.Name]; len(req) > 0 && string(args) == "{}" {
			pr.err = fmt.Sprintf("your %s call arrived with no arguments at all, but it requires: %s. It was probably cut off; send the call again with its arguments.",
				c.Name, strings.Join(req, ", "))
		}
	}
	if pr.err != "" {
		return pr
	}
	// The breaker comes first: a duplicate that is not run again still
	// counts as a call (cowagent.md §1.8).
	switch v, why := p.br.check(c.Name, pr.hash); v {
	case block, halt: // halt within one step: the loop ends the run on the next
		p.obs.BreakerTrip("block")
		pr.err = why
		return pr
	case abort:
		p.obs.BreakerTrip("abort")
		pr.err, pr.stop = why, true
		return pr
	}
	if prev, ok := p.answered[answerKey(c)]; ok {
		pr.dup = prev
	}
	return pr
}

// breakerHash is the hash prepare gives c for the breaker: of its fixed
// arguments when they parse, of the raw text otherwise.
func (p *callPolicy) breakerHash(c llm.ToolCall, finish string) string {
	args, reason := normaliseArgs(c.Arguments, finish)
	if reason != "" || len(c.Arguments) > maxArgBytes {
		return argsHash([]byte(c.Arguments))
	}
	args, _ = fixArgs(p.ts.schemas[c.Name], p.ts.aliases[c.Name], args)
	return argsHash(args)
}

// stuck reports whether the breaker ends the run because the model repeats
// a call it was told to stop making, and why.
func (p *callPolicy) stuck(calls []llm.ToolCall, finish string) (bool, string) {
	for _, c := range calls {
		if v, why := p.br.check(c.Name, p.breakerHash(c, finish)); v == halt {
			return true, why
		}
	}
	return false, ""
}

// record notes the outcome of an answered call: a success is remembered
// for duplicate detection (unless it was served again), and the breaker
// counts it unless the tool denied it (permission denials are not failures
// of the model's approach). It returns the result text, with the "answer
// now" hint when the same successful call was repeated.
func (p *callPolicy) record(pr prepared, text string, isErr, denied bool) string {
	if !isErr && pr.dup == "" {
		if p.answered == nil {
			p.answered = map[string]string{}
		}
		p.answered[answerKey(pr.call)] = text
	}
	if denied {
		return text
	}
	if p.br.record(pr.call.Name, pr.hash, !isErr) {
		text += repeatHint
	}
	return text
}

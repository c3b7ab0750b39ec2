package agent

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/switchboard-chat/switchboard/bus"
	"github.com/switchboard-chat/switchboard/llm"
	"github.com/switchboard-chat/switchboard/memory"
)

const (
	defaultSubagentTimeout = 5 * time.Minute
	subagentRules          = "\n\n## How you work\n\nYou are the sub-agent %q, working for a main assistant on one subtask. " +
		"Use your tools to find what the subtask asks for. Report only facts you found; never invent. " +
		"When you are done, answer without calling tools.\n\nCurrent time: %s\n"
	reportPrompt = "This is a direct instruction from the runtime, not a tool result. Stop using tools now and write your final report " +
		"for the main assistant, in these sections:\n" +
		"1. Task — what you were asked.\n2. Findings — everything relevant you found, with details.\n" +
		"3. Sources — the files, URLs or tools each finding comes from.\n4. Uncertain — what is partial, conflicting or still open.\n" +
		"Report only what you actually found. If the subtask could not be answered, say so and give the partial findings. Do not invent anything."
)

// isSubagent reports whether name is a sub-agent tool offered in this run.
func (t *turn) isSubagent(name string) bool {
	_, ok := t.e.opt.Subagents[strings.TrimPrefix(name, SubagentToolPrefix)]
	return ok && strings.HasPrefix(name, SubagentToolPrefix) && t.ts.names[name]
}

// subSink forwards a sub-agent's activity to the parent's sink as events
// tagged with its name: nothing of it reaches the user's chat as text.
type subSink struct {
	parent TurnSink
	name   string
}

func (s subSink) Delta(text string) {
	s.parent.Event(bus.EventLLMDelta, map[string]any{"subagent": s.name, "text": text})
}

func (s subSink) Typing() { s.parent.Typing() }

func (s subSink) Event(typ string, data any) {
	s.parent.Event(typ, map[string]any{"subagent": s.name, "data": data})
}

// runSubagent runs agent-<name>: a nested loop with a fresh history holding
// only the subtask, the sub-agent's own prompt, allow-listed tools, step and
// attempt counters, then one more call (no tools) for a structured report,
// which becomes the tool result. Nothing of the sub-agent's history enters
// the parent's, and its token usage does not count toward the parent's
// in-run guard. Cancelling the parent cancels it.
func (t *turn) runSubagent(p prepared) memory.Block {
	c := p.call
	name := strings.TrimPrefix(c.Name, SubagentToolPrefix)
	spec := t.e.opt.Subagents[name]
	fail := func(format string, a ...any) memory.Block {
		msg := fmt.Sprintf(format, a...)
		t.event(bus.EventToolResult, map[string]any{"id": c.ID, "name": c.Name, "error": true, "text": msg})
		return memory.Block{Type: memory.BlockToolResult, ToolID: c.ID, Text: "Error: " + msg, IsError: true}
	}
	var args struct {
		Subtask string `json:"subtask"`
	}
	if err := json.Unmarshal(p.args, &args); err != nil || strings.TrimSpace(args.Subtask) == "" {
		return fail("%s needs a non-empty string argument \"subtask\"", c.Name)
	}
	prompt, err := spec.Prompt()
	if err != nil {
		return fail("the prompt of sub-agent %s could not be read: %v", name, err)
	}
	timeout := spec.Timeout
	if timeout <= 0 {
		timeout = defaultSubagentTimeout
	}
	ctx, cancel := context.WithTimeout(t.ctx, timeout)
	defer cancel()

	maxSteps := spec.MaxSteps
	if maxSteps <= 0 {
		maxSteps = max(t.maxSteps/2, 1)
	}
	allowed := map[string]bool{}
	for _, n := range spec.Tools {
		allowed[n] = true
	}
	var sink TurnSink = subSink{parent: nopSink{}, name: name}
	if t.in.Sink != nil {
		sink = subSink{parent: t.in.Sink, name: name}
	}
	start := time.Now()
	in := TurnInput{
		System:  prompt + fmt.Sprintf(subagentRules, name, start.Format("2006-01-02 15:04 Monday")),
		User:    memory.Message{Role: memory.RoleUser, TurnStart: true, Time: start.UTC(), Blocks: []memory.Block{{Type: memory.BlockText, Text: args.Subtask}}},
		Session: t.in.Session,
		Sink:    sink,
		Log:     t.log.With("subagent", name),
	}
	st := t.e.newTurn(ctx, in, maxSteps, t.depth+1, func(n string) bool { return allowed[n] })
	st.subName, st.model = name, spec.Model
	t.event("subagent_start", map[string]any{"id": c.ID, "subagent": name, "subtask": args.Subtask, "max_steps": maxSteps})

	err = st.loop()
	report := ""
	switch {
	case ctx.Err() != nil && t.ctx.Err() != nil:
		return fail("sub-agent %s was cancelled", name)
	case err != nil:
		return fail("sub-agent %s stopped: %v", name, err)
	case ctx.Err() != nil:
		report = ""
	default:
		report = st.report()
	}
	if report == "" {
		report = fmt.Sprintf("The sub-agent %s produced no report", name)
		if ctx.Err() != nil {
			report += fmt.Sprintf(" within its %s time limit", timeout)
		}
		if st.res.Text != "" && st.res.Kind == bus.KindReply {
			report += ". Its last answer was:\n\n" + st.res.Text
		} else {
			report += "."
		}
	}
	report = truncateMiddle(report, maxToolResultChars)
	t.event("subagent_end", map[string]any{"id": c.ID, "subagent": name, "steps": st.steps, "attempts": st.attempts,
		"stop_reason": st.res.StopReason, "usage": st.res.Usage, "duration_ms": time.Since(start).Milliseconds()})
	t.event(bus.EventToolResult, map[string]any{"id": c.ID, "name": c.Name, "error": false,
		"duration_ms": time.Since(start).Milliseconds(), "text": truncateMiddle(report, 2000)})
	return memory.Block{Type: memory.BlockToolResult, ToolID: c.ID, Text: report}
}

// report asks the finished sub-agent, continuing its own history and
// offering no tools, for its structured report. <think> content is
// stripped. It returns "" when the call fails or says nothing.
func (t *turn) report() string {
	extra := []llm.Message{{Role: llm.RoleUser, Content: reportPrompt}}
	if !t.guard(nil, extra) {
		return ""
	}
	resp, err := t.call(nil, extra)
	if err != nil {
		t.log.Warn("sub-agent report failed", "subagent", t.subName, "err", err)
		return ""
	}
	return cleanReply(resp.Text, t.isTool)
}

// nopSink discards everything (a sub-agent of a turn without a sink).
type nopSink struct{}

func (nopSink) Delta(string)      {}
func (nopSink) Typing()           {}
func (nopSink) Event(string, any) {}

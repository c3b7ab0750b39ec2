package loop

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

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
func (env *toolEnv) isSubagent(name string) bool {
	_, ok := env.e.opt.Subagents.Agents[strings.TrimPrefix(name, SubagentToolPrefix)]
	return ok && strings.HasPrefix(name, SubagentToolPrefix) && env.ts.names[name]
}

// subSink forwards a sub-agent's activity to the parent's sink as events
// tagged with its name: nothing of it reaches the user's chat as text.
type subSink struct {
	parent Sink
	name   string
}

func (s subSink) Delta(text string) {
	s.parent.Event(EventLLMDelta, map[string]any{"subagent": s.name, "text": text})
}

func (s subSink) Typing() { s.parent.Typing() }

func (s subSink) Event(typ string, data any) {
	s.parent.Event(typ, map[string]any{"subagent": s.name, "data": data})
}

// nopSink discards everything (a sub-agent of a turn without a sink).
type nopSink struct{}

func (nopSink) Delta(string)      {}
func (nopSink) Typing()           {}
func (nopSink) Event(string, any) {}

// subtask is a sub-agent call made ready to run.
type subtask struct {
	name    string
	spec    Subagent
	text    string // the subtask
	timeout time.Duration
	in      Input
}

// runSubagent runs agent-<name>: a nested loop with a fresh history holding
// only the subtask, the sub-agent's own prompt, allow-listed tools, step and
// attempt counters, then one more call (no tools) for a structured report,
// which becomes the tool result. Nothing of the sub-agent's history enters
// the parent's, and its token usage does not count toward the parent's
// in-run guard. Cancelling the parent cancels it.
func (env *toolEnv) runSubagent(ctx context.Context, p prepared) memory.Block {
	c := p.call
	sub, msg := env.subtask(p)
	if msg != "" {
		return env.subagentFailed(p, msg)
	}
	sctx, cancel := context.WithTimeout(ctx, sub.timeout)
	defer cancel()
	maxSteps := sub.spec.MaxSteps
	if maxSteps <= 0 {
		maxSteps = max(env.parent.maxSteps/2, 1)
	}
	allowed := map[string]bool{}
	for _, n := range sub.spec.Tools {
		allowed[n] = true
	}
	start := time.Now()
	st := env.e.newTurn(sub.in, runSpec{maxSteps: maxSteps, model: sub.spec.Model, depth: env.parent.depth + 1, subName: sub.name},
		func(n string) bool { return allowed[n] })
	env.event(EventSubagentStart, map[string]any{"id": c.ID, "subagent": sub.name, "subtask": sub.text, "max_steps": maxSteps})

	err := st.loop(sctx)
	switch {
	case sctx.Err() != nil && ctx.Err() != nil:
		return env.subagentFailed(p, fmt.Sprintf("sub-agent %s was cancelled", sub.name))
	case err != nil:
		return env.subagentFailed(p, fmt.Sprintf("sub-agent %s stopped: %v", sub.name, err))
	}
	report := ""
	if sctx.Err() == nil {
		report = st.report(sctx)
	}
	if report == "" {
		report = noReport(sub, st.res, sctx.Err() != nil)
	}
	report = TruncateMiddle(report, MaxToolResultChars)
	env.event(EventSubagentEnd, map[string]any{"id": c.ID, "subagent": sub.name, "steps": st.n.steps, "attempts": st.n.attempts,
		"stop_reason": st.res.StopReason, "usage": st.res.Usage, "duration_ms": time.Since(start).Milliseconds()})
	env.event(EventToolResult, map[string]any{"id": c.ID, "name": c.Name, "error": false,
		"duration_ms": time.Since(start).Milliseconds(), "text": TruncateMiddle(report, 2000)})
	return memory.Block{Type: memory.BlockToolResult, ToolID: c.ID, Text: report}
}

// subtask reads a sub-agent call: its arguments, its prompt and the input
// of its run; msg is set when the call cannot run.
func (env *toolEnv) subtask(p prepared) (sub subtask, msg string) {
	sub.name = strings.TrimPrefix(p.call.Name, SubagentToolPrefix)
	sub.spec = env.e.opt.Subagents.Agents[sub.name]
	var args struct {
		Subtask string `json:"subtask"`
	}
	if err := json.Unmarshal(p.args, &args); err != nil || strings.TrimSpace(args.Subtask) == "" {
		return sub, fmt.Sprintf("%s needs a non-empty string argument \"subtask\"", p.call.Name)
	}
	sub.text = args.Subtask
	prompt, err := sub.spec.Prompt()
	if err != nil {
		return sub, fmt.Sprintf("the prompt of sub-agent %s could not be read: %v", sub.name, err)
	}
	sub.timeout = sub.spec.Timeout
	if sub.timeout <= 0 {
		sub.timeout = defaultSubagentTimeout
	}
	var sink Sink = subSink{parent: nopSink{}, name: sub.name}
	if env.sink != nil {
		sink = subSink{parent: env.sink, name: sub.name}
	}
	now := time.Now()
	sub.in = Input{
		System:  prompt + fmt.Sprintf(subagentRules, sub.name, now.Format("2006-01-02 15:04 Monday")),
		User:    memory.Message{Role: memory.RoleUser, TurnStart: true, Time: now.UTC(), Blocks: []memory.Block{{Type: memory.BlockText, Text: args.Subtask}}},
		Session: env.session,
		Sink:    sink,
		Log:     env.log.With("subagent", sub.name),
	}
	return sub, ""
}

// subagentFailed answers a sub-agent call that produced no run with an
// error result.
func (env *toolEnv) subagentFailed(p prepared, msg string) memory.Block {
	c := p.call
	env.event(EventToolResult, map[string]any{"id": c.ID, "name": c.Name, "error": true, "text": msg})
	return memory.Block{Type: memory.BlockToolResult, ToolID: c.ID, Text: "Error: " + msg, IsError: true}
}

// noReport is the tool result of a sub-agent that wrote no report: why,
// and its last answer when it gave one.
func noReport(sub subtask, res Result, timedOut bool) string {
	report := fmt.Sprintf("The sub-agent %s produced no report", sub.name)
	if timedOut {
		report += fmt.Sprintf(" within its %s time limit", sub.timeout)
	}
	if res.Text != "" && res.Kind == KindReply {
		return report + ". Its last answer was:\n\n" + res.Text
	}
	return report + "."
}

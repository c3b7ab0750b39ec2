package memory

import (
	"context"
	"encoding/json"
	"fmt"

	"switchboard/memory/notes"
	"switchboard/tools"
)

type writeTool struct{ base }

func (*writeTool) Name() string { return "memory_write" }

func (*writeTool) Description() string {
	return "Save something to long-term memory so it is remembered in later conversations. " +
		"kind \"core\": a lasting fact or preference (added to MEMORY.md, which is shown to you at the start of every conversation); " +
		"kind \"daily\": a note about today (decisions, to-dos, events; found later with memory_search). " +
		"Write one short, self-contained statement per call, with names and dates instead of \"he\" or \"tomorrow\". " +
		"The file is chosen for you: your notes about this user, or the group's notes in a group chat."
}

func (*writeTool) Schema() json.RawMessage {
	return json.RawMessage(`{"type":"object","properties":{` +
		`"text":{"type":"string","description":"What to remember, as a short self-contained statement."},` +
		`"kind":{"type":"string","enum":["core","daily"],"description":"core: lasting fact shown in every conversation; daily: note for today's log."}` +
		`},"required":["text","kind"],"additionalProperties":false}`)
}

func (*writeTool) Permission() string { return tools.PermWrite }
func (*writeTool) ParallelSafe() bool { return false }

type writeArgs struct {
	Text string `json:"text"`
	Kind string `json:"kind"`
}

func (t *writeTool) Run(ctx context.Context, call tools.Call) (tools.Result, error) {
	var a writeArgs
	if err := tools.DecodeArgs(call.Args, &a); err != nil {
		return tools.Result{}, err
	}
	switch a.Kind {
	case notes.KindCore, notes.KindDaily:
	case "":
		return tools.Result{}, fmt.Errorf("%w: kind is required: \"core\" (lasting fact) or \"daily\" (note for today)", tools.ErrBadArgs)
	default:
		return tools.Result{}, fmt.Errorf("%w: kind must be \"core\" or \"daily\", got %q", tools.ErrBadArgs, a.Kind)
	}
	sc, err := scope(call.Session)
	if err != nil {
		return tools.Result{}, err
	}
	if err := ctx.Err(); err != nil {
		return tools.Result{}, err
	}
	rel, err := t.notes.Write(sc, a.Kind, a.Text, t.now())
	if err != nil {
		return tools.Result{}, fmt.Errorf("memory_write: %w", err)
	}
	if err := t.idx.Update(ctx, rel); err != nil {
		// The background rescan will pick the file up.
		t.log.WarnContext(ctx, "memory index not updated after a write", "file", rel, "err", err)
	}
	where := "today's notes"
	if a.Kind == notes.KindCore {
		where = "core memory (shown to you from the next message on)"
	}
	if sc.IsGroup && !t.notes.Shared() {
		where += " of this group"
	}
	return tools.Result{Text: fmt.Sprintf("Saved to %s: %s", where, rel)}, nil
}

package memory

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/switchboard-chat/switchboard/memory/notes"
	"github.com/switchboard-chat/switchboard/tools"
)

type writeTool struct{ base }

func (*writeTool) Name() string { return "memory_write" }

func (*writeTool) Description() string {
	return "Save something to long-term memory so it is remembered in later conversations. " +
		"kind \"core\": a lasting fact or preference (added to MEMORY.md, which is shown to you at the start of every conversation); " +
		"kind \"daily\": a note about today (decisions, to-dos, events; found later with memory_search). " +
		"Write one short, self-contained statement per call, with names and dates instead of \"he\" or \"tomorrow\". " +
		"The file is chosen for you: in a private chat, your notes about this user; in a group chat, your notes about " +
		"the person speaking made in this group (scope \"me\", the default), or the group's notes that every member's " +
		"messages see (scope \"group\")."
}

// writeToolSchema is writeTool's argument schema, built once (Schema hands out the
// same bytes; callers must not modify them).
var writeToolSchema = json.RawMessage(`{"type":"object","properties":{` +
	`"text":{"type":"string","description":"What to remember, as a short self-contained statement."},` +
	`"kind":{"type":"string","enum":["core","daily"],"description":"core: lasting fact shown in every conversation; daily: note for today's log."},` +
	`"scope":{"type":"string","enum":["me","group"],"description":"Group chats only: me (default) keeps the note about the person speaking, seen only in their messages in this group; group keeps it in the group's notes, seen by every member."}` +
	`},"required":["text","kind"],"additionalProperties":false}`)

func (*writeTool) Schema() json.RawMessage { return writeToolSchema }

func (*writeTool) Permission() string { return tools.PermWrite }
func (*writeTool) ParallelSafe() bool { return false }

type writeArgs struct {
	Text  string `json:"text"`
	Kind  string `json:"kind"`
	Scope string `json:"scope"`
}

// Scopes of memory_write in a group chat.
const (
	// ScopeMe keeps a note in the speaker's own notes made in the group.
	ScopeMe = "me"
	// ScopeGroup keeps a note in the group's notes.
	ScopeGroup = "group"
)

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
	switch a.Scope {
	case "", ScopeMe:
	case ScopeGroup:
		if !sc.IsGroup {
			return tools.Result{}, fmt.Errorf("%w: scope \"group\" is for group chats; this is a private chat, leave scope out", tools.ErrBadArgs)
		}
		sc.GroupNotes = true
	default:
		return tools.Result{}, fmt.Errorf("%w: scope must be \"me\" or \"group\", got %q", tools.ErrBadArgs, a.Scope)
	}
	if err := t.mayWrite(call.Session, sc); err != nil {
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
	switch {
	case !sc.IsGroup || t.notes.Shared():
	case sc.GroupNotes:
		where += " of this group, seen by every member"
	default:
		where += " about the person speaking in this group, seen only in their messages here"
	}
	return tools.Result{Text: fmt.Sprintf("Saved to %s: %s", where, rel)}, nil
}

// mayWrite refuses a write to the shared memory (memory.scope shared:
// MEMORY.md and memory/*.md, which every conversation sees) for a speaker
// who is not an owner: the shared memory is one of the agent's shared
// prompt inputs (tools.SharedWrites).
func (t *writeTool) mayWrite(s tools.Session, sc notes.Scope) error {
	f, err := t.notes.WriteFolder(sc)
	if err != nil || f.Kind != notes.FolderShared || s.Owner {
		return nil // an incomplete scope is reported by the write
	}
	return fmt.Errorf("%w: memory.scope is shared, so this note would go to the shared memory (MEMORY.md, memory/), "+
		"which shapes every user's conversations; only an owner (access.owners) or the operator's console may write it. "+
		"Tell the user it was not saved; an operator who wants per-person memory sets memory.scope: user", tools.ErrDenied)
}

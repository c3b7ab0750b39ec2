// Package memory provides the model's long-term memory tools:
// memory_write, memory_search and memory_get.
//
// Every call resolves its files from the call's session (channel, chat,
// user, group or not), never from a path the model chose: memory_write
// appends to the user's memory in a private chat and, in a group chat, to
// the speaker's own notes made in that group (scope "me", the default) or
// the group's notes (scope "group"); see [notes.Notes.WriteFolder]. With
// memory.scope shared the notes go to the shared memory, which only an
// owner ([tools.Session.Owner]) may write: anyone else is refused with
// [tools.ErrDenied] and told why.
// memory_search and memory_get see only the roots the caller may read
// ([notes.Notes.Readable]): in a group never a member's direct-chat
// memory (the speaker's included) nor another member's in-group notes.
// Asking memory_get for a file outside them fails with an error wrapping
// [tools.ErrDenied]. The tools are safe for concurrent use.
package memory

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/switchboard-chat/switchboard/memory/notes"
	"github.com/switchboard-chat/switchboard/memory/search"
	"github.com/switchboard-chat/switchboard/tools"
)

// Limits of the tools.
const (
	// DefaultResults and MaxResults bound memory_search's max_results.
	DefaultResults = 10
	MaxResults     = 50
	// DefaultGetLines and MaxGetLines bound memory_get's num_lines.
	DefaultGetLines = 200
	MaxGetLines     = 2000
	// MaxGetBytes bounds the text memory_get returns.
	MaxGetBytes = 50 * 1024
	// snippetBytes bounds one search result's text.
	snippetBytes = 700
)

// Index is what the tools need of the search index
// (*search.Index satisfies it).
type Index interface {
	Search(ctx context.Context, q search.Query) ([]search.Result, error)
	Update(ctx context.Context, rel string) error
}

var _ Index = (*search.Index)(nil)

// Options configure [New].
type Options struct {
	// Now is the clock for daily notes (default time.Now; the local time
	// zone names the day).
	Now func() time.Time
	// Log receives index update failures; nil discards.
	Log *slog.Logger
}

// New returns memory_write, memory_search and memory_get over n and idx,
// in that order. Both must stay open while the tools are used.
func New(n *notes.Notes, idx Index, opts Options) ([]tools.Tool, error) {
	if n == nil || idx == nil {
		return nil, errors.New("memory tools: notes and index are required")
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Log == nil {
		opts.Log = slog.New(slog.DiscardHandler)
	}
	b := base{notes: n, idx: idx, now: opts.Now, log: opts.Log}
	return []tools.Tool{&writeTool{b}, &searchTool{b}, &getTool{b}}, nil
}

type base struct {
	notes *notes.Notes
	idx   Index
	now   func() time.Time
	log   *slog.Logger
}

// scope turns the call's session into a memory scope. A session without a
// channel or user cannot own memory.
func scope(s tools.Session) (notes.Scope, error) {
	sc := notes.Scope{Speaker: s.Speaker}
	if err := sc.Validate(); err != nil {
		return notes.Scope{}, fmt.Errorf("%w: this conversation has no user to keep memory for (%v)", tools.ErrDenied, err)
	}
	return sc, nil
}

// readableHere says, for an error, which memory a caller can read.
func (b base) readableHere(sc notes.Scope) string {
	switch {
	case b.notes.Shared():
		return "the shared notes"
	case sc.IsGroup:
		return "in a group chat: the group's notes, your notes about the person speaking made in this group, and the shared notes; direct-chat memory is never readable in a group"
	}
	return "your notes about this user and the shared notes"
}

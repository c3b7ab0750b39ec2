// Package longterm is Switchboard's long-term memory as one part of the
// daemon: the scoped notes ([notes.Notes]), their search index
// ([search.Index]), the memory tools ([memtools.New]) and the optional
// nightly consolidation ([consolidate.Consolidator]), opened together by
// [Open], run by [System.Run] and released by [System.Close].
//
// A System is what the rest of the daemon sees of memory:
//
//   - the agent's scoped memory: [System.View] (what one speaker may see,
//     for the system prompt) and [System.NoteSummary] (summaries of trimmed
//     or finished conversations into the daily notes); the agent defines
//     that interface (agent.Memory) and speaks [bus.Speaker] and
//     [memory.View];
//   - the tools' privacy: [System.Guard], the path policy of every tool
//     that opens workspace paths, and [System.Private], the folders a bash
//     sandbox hides; [Public] for what is shown to every user alike;
//   - the memory tools themselves ([System.Tools]).
//
// Privacy is the contract: one user's private memory never reaches another
// user's turn; in a group no direct-chat memory and no other member's
// in-group notes are shown; another chat's inbox folder is hidden too.
// Those rules are [notes.Notes.Visible], [notes.Notes.PrivateFolders] and
// [workspace.InboxVisible]; this package only puts them together.
//
// Files: data_dir/memory-index.db (the search index) and, when
// memory.consolidate is set, data_dir/memory-state.db (consolidation
// state). Every method is safe for concurrent use.
//
// Several instances (memory.store jetstream, [Options.Shared]): the memory
// files are kept in a key-value bucket the instances share, one key per
// file ([notes.Replica]): every write is a read-modify-write of the shared
// copy checked on its revision, then the workspace file is written; and
// [System.Run] follows the bucket, writing what other instances wrote into
// this workspace ([notes.Notes.Install]) and touching the search index.
// The workspace files stay what everything reads (prompt, memory tools,
// file tools, bash), so the privacy rules are the same code in both modes.
// The search index is derived from the files and is not replicated: each
// instance keeps its own in its data_dir and rescans what changed, so a
// note written on one instance is found by memory_search on another once
// it arrived (within a rescan of the change).
package longterm

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/switchboard-chat/switchboard/bus"
	"github.com/switchboard-chat/switchboard/internal/kvstate"
	"github.com/switchboard-chat/switchboard/internal/retry"
	"github.com/switchboard-chat/switchboard/memory"
	"github.com/switchboard-chat/switchboard/memory/consolidate"
	"github.com/switchboard-chat/switchboard/memory/memcfg"
	"github.com/switchboard-chat/switchboard/memory/notes"
	"github.com/switchboard-chat/switchboard/memory/search"
	"github.com/switchboard-chat/switchboard/tools"
	memtools "github.com/switchboard-chat/switchboard/tools/memory"
	"github.com/switchboard-chat/switchboard/workspace"
)

// File names under the data folder.
const (
	// IndexFile is the search index.
	IndexFile = "memory-index.db"
	// StateFile is the consolidation state (only with memory.consolidate).
	StateFile = "memory-state.db"
)

// Options configure [Open].
type Options struct {
	// Config is the memory section (memory.*); it must be valid.
	Config memcfg.Config
	// Root is the workspace (required); it must stay open while the
	// System is used.
	Root *os.Root
	// DataDir holds IndexFile and StateFile (required; it must exist).
	DataDir string
	// LLMBaseURL and LLMAPIKey are what the embeddings endpoint inherits
	// when memory.embedding_base_url and memory.embedding_api_key are
	// empty: llm.base_url and llm.api_key.
	LLMBaseURL, LLMAPIKey string
	// Model rewrites the MEMORY.md files each night; required when
	// Config.Consolidate is set.
	Model consolidate.Model
	// Shared, when set (memory.store jetstream: the memory bucket), keeps
	// the memory files where every instance sees them; nil: the workspace
	// alone.
	Shared SharedStore
	// Lease, when set (memory.store jetstream: the lease "consolidate"),
	// runs the nightly consolidation on one instance at a time: the notes
	// are shared, so one rewrite is enough.
	Lease Exclusive
	// Log receives the parts' warnings and debug lines; nil discards.
	Log *slog.Logger
}

// SharedStore is the memory files shared by several instances, by
// kvstate.Key of their workspace path (a *kvstate.Bucket).
type SharedStore interface {
	Modify(ctx context.Context, key string, fn func(old []byte, ok bool) ([]byte, error)) ([]byte, uint64, error)
	Watch(ctx context.Context, fn func(kvstate.Change)) error
}

// Exclusive runs fn only while this instance holds its lease (a
// lease.Lease), until ctx ends.
type Exclusive interface {
	Run(ctx context.Context, fn func(context.Context) error) error
}

// Replica is kv as the notes' replica ([notes.Options.Replica]): one key
// per memory file, kvstate.Key of its workspace path.
func Replica(kv SharedStore) notes.Replica { return replica{kv} }

type replica struct{ kv SharedStore }

func (r replica) Modify(ctx context.Context, rel string, fn func([]byte, bool) ([]byte, error)) ([]byte, uint64, error) {
	return r.kv.Modify(ctx, kvstate.Key(rel), fn)
}

// Timing of following the shared memory files after a failed watch.
const (
	followFirst = time.Second
	followMax   = 30 * time.Second
)

// System is the daemon's long-term memory.
type System struct {
	shared SharedStore // nil: one instance
	lease  Exclusive   // nil: consolidate here
	log    *slog.Logger
	notes  *notes.Notes
	index  *search.Index
	state  *consolidate.BoltState // nil when consolidation is off
	cons   *consolidate.Consolidator
	tools  []tools.Tool
}

// Open opens the memory index (DataDir/IndexFile) and, when
// memory.consolidate is set, the consolidation state, and builds the notes
// and the memory tools over them. Nothing runs in the background until
// [System.Run]. On error nothing is left open; errors start with
// "memory: ".
func Open(opts Options) (*System, error) {
	log := opts.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if opts.Root == nil || opts.DataDir == "" {
		return nil, errors.New("memory: open: the workspace root and the data folder are required")
	}
	m := opts.Config
	var emb search.Embedder
	if m.EmbeddingModel != "" {
		e, err := search.NewOpenAIEmbedder(search.EmbedderConfig{BaseURL: cmp.Or(m.EmbeddingBaseURL, opts.LLMBaseURL),
			APIKey: cmp.Or(m.EmbeddingAPIKey, opts.LLMAPIKey), Model: m.EmbeddingModel})
		if err != nil {
			return nil, fmt.Errorf("memory: %w", err)
		}
		emb = e
	}
	idx, err := search.Open(search.Options{Root: opts.Root, Path: filepath.Join(opts.DataDir, IndexFile),
		Embedder: emb, Interval: m.IndexInterval, Log: log.With("component", "memory-index")})
	if err != nil {
		return nil, fmt.Errorf("memory: %w", err)
	}
	sys := &System{index: idx, shared: opts.Shared, lease: opts.Lease, log: log}
	nopts := notes.Options{Scope: m.Scope, OnWrite: func(string) { idx.Touch() }, Log: log}
	if opts.Shared != nil {
		nopts.Replica = Replica(opts.Shared)
	}
	sys.notes, err = notes.New(opts.Root, nopts)
	if err == nil {
		sys.tools, err = memtools.New(sys.notes, idx, memtools.Options{Log: log})
	}
	if err == nil && m.Consolidate != "" {
		if sys.state, err = consolidate.OpenState(filepath.Join(opts.DataDir, StateFile)); err == nil {
			sys.cons, err = consolidate.New(consolidate.Options{At: m.Consolidate, Notes: sys.notes, Model: opts.Model,
				State: sys.state, Log: log.With("component", "consolidate")})
		}
	}
	if err != nil {
		_ = sys.Close()
		return nil, fmt.Errorf("memory: %w", err)
	}
	return sys, nil
}

// Run runs the index rescans, the consolidation and, with a shared store,
// the following of other instances' writes until ctx ends, and returns
// when all have stopped.
func (m *System) Run(ctx context.Context) error {
	g, ctx := errgroup.WithContext(ctx)
	g.Go(func() error { return m.index.Run(ctx) })
	if m.shared != nil {
		g.Go(func() error { m.follow(ctx); return nil })
	}
	switch {
	case m.cons != nil && m.lease != nil:
		g.Go(func() error { return m.lease.Run(ctx, m.cons.Run) })
	case m.cons != nil:
		g.Go(func() error { return m.cons.Run(ctx) })
	}
	return g.Wait()
}

// follow writes the shared memory files into the workspace as they change
// (all of them first) until ctx ends, watching again after a failure.
func (m *System) follow(ctx context.Context) {
	_ = retry.Do(ctx, retry.Policy{Schedule: retry.Exponential(followFirst, followMax)}, func(ctx context.Context, _ int) error {
		err := m.shared.Watch(ctx, func(c kvstate.Change) {
			rel, ok := kvstate.KeyText(c.Key)
			switch {
			case c.Synced:
				m.log.Debug("shared memory files are in the workspace")
			case c.Deleted:
				m.log.Debug("a shared memory file was deleted; the workspace keeps its copy", "key", c.Key)
			case !ok:
				m.log.Warn("shared memory: a key that names no file is ignored", "key", c.Key)
			default:
				if err := m.notes.Install(rel, c.Value, c.Revision); err != nil {
					m.log.Warn("shared memory: a file could not be written to the workspace", "file", rel, "err", err)
				}
			}
		})
		if ctx.Err() != nil {
			return nil
		}
		if err == nil {
			err = errors.New("the watch ended")
		}
		m.log.Warn("shared memory: lost track of the other instances' notes; following them again", "err", err)
		return err
	})
}

// Close releases the index and the consolidation state. Call it after
// Run returned.
func (m *System) Close() error {
	var err error
	if m.state != nil {
		err = m.state.Close()
	}
	return errors.Join(err, m.index.Close())
}

// Tools returns the memory tools (memory_search, memory_get,
// memory_write), for the agent's tool set.
func (m *System) Tools() []tools.Tool { return m.tools }

// Guard is the path policy of every tool touching workspace files (file
// tools, search_files, send_message; a [tools.PathGuard]): other users'
// private memory (notes.Notes.Visible: in a group no direct-chat folder,
// no other member's in-group notes) and other chats' inbox folders
// (workspace.InboxVisible) are hidden. The tools apply it through a
// workspace.Guard, to the path as given and to its real path.
func (m *System) Guard(s tools.Session, rel string) bool {
	return m.notes.Visible(notes.Scope{Speaker: s.Speaker}, rel) &&
		workspace.InboxVisible(s.Channel, s.ChatID, rel)
}

// Private is what a bash command of a session must not see in the
// workspace, and the session's own folders inside (a bash.Private): every
// chat's inbox but the session's own (workspace.InboxFolder), and the
// memory folders of notes.Notes.PrivateFolders (unless memory is shared:
// every user's and chat's memory but the session's own; in a group the
// chat's folder without the other members' in-group notes).
func (m *System) Private(s tools.Session) (hide, allow []string) {
	hide = []string{workspace.InboxDir}
	if own, err := workspace.InboxFolder(s.Channel, s.ChatID); err == nil {
		allow = append(allow, own)
	}
	h, a := m.notes.PrivateFolders(notes.Scope{Speaker: s.Speaker})
	return append(hide, h...), append(allow, a...)
}

// View implements agent.Memory: the memory files notes.Notes.Prompt gives
// the speaker (in a group the group's notes and the speaker's notes made in
// it, never direct-chat memory or a per-user USER.md), titled for the
// prompt, and the memory rules.
func (m *System) View(s bus.Speaker) (memory.View, error) {
	p, err := m.notes.Prompt(notes.Scope{Speaker: s})
	if err != nil {
		return memory.View{}, err
	}
	v := memory.View{User: p.User, Rules: memtools.PromptRules(m.notes.Shared(), s.IsGroup)}
	for _, sec := range p.Memory {
		title := "Shared notes (MEMORY.md)"
		switch sec.Kind {
		case notes.FolderChat:
			title = "This group's notes"
		case notes.FolderUser:
			title = "Private notes about the speaker"
		case notes.FolderMember:
			title = "Notes about the speaker made in this group"
		}
		v.Sections = append(v.Sections, memory.Section{Title: title, Content: sec.Content, Truncated: sec.Truncated})
	}
	return v, nil
}

// NoteSummary implements agent.Memory: a group's conversation goes to the
// group's daily notes (it was said to everyone), a private chat's to the
// user's, under "## <heading> (15:04)".
func (m *System) NoteSummary(s bus.Speaker, at time.Time, heading, text string) error {
	_, err := m.notes.AppendDaily(notes.Scope{Speaker: s, GroupNotes: true}, at,
		"## "+heading+" ("+at.Format("15:04")+")\n\n"+text)
	return err
}

// Public reports whether rel lies outside every private area of the
// workspace: the memory folders of users and chats and the chat inboxes.
// It limits what is shown to every user alike (skills).
func Public(rel string) bool {
	for _, dir := range []string{notes.UsersDir, notes.ChatsDir, workspace.InboxDir} {
		if rel == dir || strings.HasPrefix(rel, dir+"/") {
			return false
		}
	}
	return true
}

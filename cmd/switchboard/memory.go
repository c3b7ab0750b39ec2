package main

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/switchboard-chat/switchboard/agent"
	"github.com/switchboard-chat/switchboard/memory/consolidate"
	"github.com/switchboard-chat/switchboard/memory/notes"
	"github.com/switchboard-chat/switchboard/memory/search"
	"github.com/switchboard-chat/switchboard/tools"
	memtools "github.com/switchboard-chat/switchboard/tools/memory"
	"github.com/switchboard-chat/switchboard/workspace"
)

// memorySystem is the long-term memory of the daemon: scoped notes, their
// search index, the memory tools and the nightly consolidation.
type memorySystem struct {
	notes *notes.Notes
	index *search.Index
	state *consolidate.BoltState // nil when consolidation is off
	cons  *consolidate.Consolidator
	tools []tools.Tool
}

// buildMemory opens the memory index (data_dir/memory-index.db) and, when
// memory.consolidate is set, the consolidation state. Close what it opened
// with close; run its background work with run.
func buildMemory(cfg Config, ws *workspace.Workspace, model agent.Model, log *slog.Logger) (*memorySystem, error) {
	m := cfg.Memory
	var emb search.Embedder
	if m.EmbeddingModel != "" {
		e, err := search.NewOpenAIEmbedder(search.EmbedderConfig{BaseURL: cmp.Or(m.EmbeddingBaseURL, cfg.LLM.BaseURL),
			APIKey: cmp.Or(m.EmbeddingAPIKey, cfg.LLM.APIKey), Model: m.EmbeddingModel})
		if err != nil {
			return nil, fmt.Errorf("memory: %w", err)
		}
		emb = e
	}
	idx, err := search.Open(search.Options{Root: ws.Root(), Path: filepath.Join(cfg.DataDir, "memory-index.db"),
		Embedder: emb, Interval: m.IndexInterval, Log: log.With("component", "memory-index")})
	if err != nil {
		return nil, fmt.Errorf("memory: %w", err)
	}
	sys := &memorySystem{index: idx}
	sys.notes, err = notes.New(ws.Root(), notes.Options{Scope: m.Scope, OnWrite: func(string) { idx.Touch() }, Log: log})
	if err == nil {
		sys.tools, err = memtools.New(sys.notes, idx, memtools.Options{Log: log})
	}
	if err == nil && m.Consolidate != "" {
		if sys.state, err = consolidate.OpenState(filepath.Join(cfg.DataDir, "memory-state.db")); err == nil {
			sys.cons, err = consolidate.New(consolidate.Options{At: m.Consolidate, Notes: sys.notes, Model: model,
				State: sys.state, Log: log.With("component", "consolidate")})
		}
	}
	if err != nil {
		sys.close()
		return nil, fmt.Errorf("memory: %w", err)
	}
	return sys, nil
}

// run runs the index rescans and the consolidation until ctx ends.
func (m *memorySystem) run(ctx context.Context) error {
	g, ctx := errgroup.WithContext(ctx)
	g.Go(func() error { return m.index.Run(ctx) })
	if m.cons != nil {
		g.Go(func() error { return m.cons.Run(ctx) })
	}
	return g.Wait()
}

func (m *memorySystem) close() {
	if m.state != nil {
		_ = m.state.Close()
	}
	_ = m.index.Close()
}

// guard is the path policy of every tool touching workspace files (file
// tools, search_files, send_message): other users' private memory
// (notes.Visible: in a group no direct-chat folder, no other member's
// in-group notes) and other chats' inbox folders (workspace.InboxVisible)
// are hidden. The tools apply it through a workspace.Guard, to the path as
// given and to its real path.
func (m *memorySystem) guard(s tools.Session, rel string) bool {
	return m.notes.Visible(notes.Scope{Channel: s.Channel, ChatID: s.ChatID, UserID: s.UserID, IsGroup: s.IsGroup}, rel) &&
		workspace.InboxVisible(s.Channel, s.ChatID, rel)
}

// privacy is the tools' view of this memory system: guard for the tools
// that open workspace paths, private for the bash sandbox.
func (m *memorySystem) privacy() privacy {
	return privacy{guard: m.guard, private: m.private}
}

// private is what a bash command of a session must not see in the
// workspace, and the session's own folders inside (bash.Private): every
// chat's inbox but the session's own (workspace.InboxFolder), and the
// memory folders of notes.Notes.PrivateFolders (unless memory is shared:
// every user's and chat's memory but the session's own; in a group the
// chat's folder without the other members' in-group notes).
func (m *memorySystem) private(s tools.Session) (hide, allow []string) {
	hide = []string{workspace.InboxDir}
	if own, err := workspace.InboxFolder(s.Channel, s.ChatID); err == nil {
		allow = append(allow, own)
	}
	h, a := m.notes.PrivateFolders(notes.Scope{Channel: s.Channel, ChatID: s.ChatID, UserID: s.UserID, IsGroup: s.IsGroup})
	return append(hide, h...), append(allow, a...)
}

// View implements agent.Memory: the memory files notes.Notes.Prompt gives
// the speaker (in a group the group's notes and the speaker's notes made in
// it, never direct-chat memory or a per-user USER.md).
func (m *memorySystem) View(s agent.Speaker) (agent.MemoryView, error) {
	p, err := m.notes.Prompt(notes.Scope{Channel: s.Channel, ChatID: s.ChatID, UserID: s.UserID, IsGroup: s.IsGroup})
	if err != nil {
		return agent.MemoryView{}, err
	}
	v := agent.MemoryView{User: p.User, Rules: memtools.PromptRules(m.notes.Shared(), s.IsGroup)}
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
		v.Sections = append(v.Sections, agent.MemorySection{Title: title, Content: sec.Content, Truncated: sec.Truncated})
	}
	return v, nil
}

// NoteSummary implements agent.Memory: a group's conversation goes to the
// group's daily notes (it was said to everyone), a private chat's to the
// user's.
func (m *memorySystem) NoteSummary(s agent.Speaker, at time.Time, heading, text string) error {
	_, err := m.notes.AppendDaily(notes.Scope{Channel: s.Channel, ChatID: s.ChatID, UserID: s.UserID, IsGroup: s.IsGroup, GroupNotes: true}, at,
		"## "+heading+" ("+at.Format("15:04")+")\n\n"+text)
	return err
}

// publicPath reports whether rel lies outside every private area of the
// workspace: the memory folders of users and chats and the chat inboxes.
// It limits what is shown to every user alike (skills).
func publicPath(rel string) bool {
	for _, dir := range []string{notes.UsersDir, notes.ChatsDir, workspace.InboxDir} {
		if rel == dir || strings.HasPrefix(rel, dir+"/") {
			return false
		}
	}
	return true
}

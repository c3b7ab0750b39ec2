package longterm_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"go.uber.org/goleak"

	"github.com/switchboard-chat/switchboard/bus"
	"github.com/switchboard-chat/switchboard/bus/bustest"
	"github.com/switchboard-chat/switchboard/internal/kvstate"
	"github.com/switchboard-chat/switchboard/memory/longterm"
	"github.com/switchboard-chat/switchboard/memory/memcfg"
	"github.com/switchboard-chat/switchboard/tools"
	"github.com/switchboard-chat/switchboard/workspace"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// open opens a System over a fresh workspace with the given memory scope
// and memory.store bolt.
func open(t *testing.T, scope string) (*longterm.System, *workspace.Workspace) {
	t.Helper()
	return openIn(t, memcfg.StoreBolt, scope)
}

// eachStore runs f with each memory.store: bolt (the workspace files
// alone) and jetstream (the files shared through the memory bucket on an
// embedded NATS server, the System running).
func eachStore(t *testing.T, f func(t *testing.T, store string)) {
	for _, store := range []string{memcfg.StoreBolt, memcfg.StoreJetStream} {
		t.Run(store, func(t *testing.T) { f(t, store) })
	}
}

// openIn opens a System over a fresh workspace with the given store and
// memory scope; with jetstream it runs until cleanup.
func openIn(t *testing.T, store, scope string) (*longterm.System, *workspace.Workspace) {
	t.Helper()
	var shared longterm.SharedStore
	if store == memcfg.StoreJetStream {
		shared = memoryBucket(t, bustest.StartServer(t))
	}
	return openShared(t, shared, scope)
}

// memoryBucket is the memory bucket on s, over a connection of its own (as
// one instance of the daemon has).
func memoryBucket(t *testing.T, s *server.Server) longterm.SharedStore {
	t.Helper()
	set, err := kvstate.Open(t.Context(), bustest.Connect(t, s), kvstate.Config{Prefix: "chat"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	return set.Memory
}

// openShared opens a System over a fresh workspace and data folder sharing
// its memory files through shared (nil: none) and runs it until the
// returned stop or cleanup.
func openShared(t *testing.T, shared longterm.SharedStore, scope string) (*longterm.System, *workspace.Workspace) {
	t.Helper()
	ws, err := workspace.Open(t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ws.Close() })
	cfg := memcfg.DefaultConfig()
	cfg.Scope = scope
	m, err := longterm.Open(longterm.Options{Config: cfg, Root: ws.Root(), DataDir: t.TempDir(), Shared: shared})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := m.Close(); err != nil {
			t.Error(err)
		}
	})
	if shared != nil {
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan error, 1)
		go func() { done <- m.Run(ctx) }()
		t.Cleanup(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("Run = %v", err)
			}
		})
	}
	return m, ws
}

// TestBashPrivate: the folders the wiring hides from a bash command, per
// chat kind and memory scope (the sandbox itself is tested in tools/bash):
// the memory system's notes.PrivateFolders and the inbox rule of
// workspace.InboxFolder.
func TestBashPrivate(t *testing.T) {
	direct := tools.Session{Speaker: bus.Speaker{Channel: "telegram", ChatID: "42", UserID: "42"}}
	group := tools.Session{Speaker: bus.Speaker{Channel: "telegram", ChatID: "-100", UserID: "7", IsGroup: true}}
	odd := tools.Session{Speaker: bus.Speaker{Channel: "wechat", ChatID: "room/1", UserID: "../alice", IsGroup: true}}
	tests := []struct {
		name        string
		shared      bool
		s           tools.Session
		hide, allow []string
	}{
		{"direct", false, direct, []string{"inbox", "memory/users", "memory/chats"},
			[]string{"inbox/telegram/42", "memory/users/telegram/42"}},
		{"group", false, group, []string{"inbox", "memory/users", "memory/chats", "memory/chats/telegram/-100/users"},
			[]string{"inbox/telegram/-100", "memory/chats/telegram/-100", "memory/chats/telegram/-100/users/7"}},
		{"ids are one path component", false, odd, []string{"inbox", "memory/users", "memory/chats", "memory/chats/wechat/room%2F1/users"},
			[]string{"inbox/wechat/room%2F1", "memory/chats/wechat/room%2F1", "memory/chats/wechat/room%2F1/users/%2E%2E%2Falice"}},
		{"shared memory", true, group, []string{"inbox"}, []string{"inbox/telegram/-100"}},
		{"no session", false, tools.Session{}, []string{"inbox", "memory/users", "memory/chats"}, nil},
	}
	eachStore(t, func(t *testing.T, store string) {
		for _, tt := range tests {
			scope := memcfg.ScopeUser
			if tt.shared {
				scope = memcfg.ScopeShared
			}
			m, _ := openIn(t, store, scope)
			hide, allow := m.Private(tt.s)
			if !slices.Equal(hide, tt.hide) || !slices.Equal(allow, tt.allow) {
				t.Errorf("%s: hide %q allow %q, want %q %q", tt.name, hide, allow, tt.hide, tt.allow)
			}
		}
	})
}

// TestGroupMembersViewAndGuard: two members of one group and one of them
// in a direct chat. What Alice wrote in private never reaches her group
// turn, Bob's in-group notes never reach hers, a summary of the group's
// conversation lands in the group's notes for both, and the file guard
// hides the same folders the view leaves out.
func TestGroupMembersViewAndGuard(t *testing.T) { eachStore(t, testGroupMembersViewAndGuard) }

func testGroupMembersViewAndGuard(t *testing.T, store string) {
	m, ws := openIn(t, store, memcfg.ScopeUser)
	write := func(rel, text string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Join(ws.Dir(), filepath.Dir(rel)), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(ws.Dir(), rel), []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("memory/users/telegram/alice/MEMORY.md", "- alice's private secret\n")
	write("memory/chats/telegram/-500/users/bob/MEMORY.md", "- bob's in-group note\n")
	write("memory/chats/telegram/-500/users/alice/MEMORY.md", "- alice's in-group note\n")
	aliceDM := bus.Speaker{Channel: "telegram", ChatID: "alice", UserID: "alice"}
	aliceInGroup := bus.Speaker{Channel: "telegram", ChatID: "-500", UserID: "alice", IsGroup: true}
	bobInGroup := bus.Speaker{Channel: "telegram", ChatID: "-500", UserID: "bob", IsGroup: true}

	at := time.Date(2025, 3, 4, 14, 5, 0, 0, time.UTC)
	if err := m.NoteSummary(bobInGroup, at, "Conversation", "- the group agreed on Friday"); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(ws.Dir(), "memory/chats/telegram/-500/2025-03-04.md"))
	if err != nil || !strings.Contains(string(b), "## Conversation (14:05)\n\n- the group agreed on Friday") {
		t.Fatalf("group summary = %q, %v; want it in the group's daily notes", b, err)
	}
	write("memory/chats/telegram/-500/MEMORY.md", "- the group meets on Friday\n")

	view := func(s bus.Speaker) string {
		t.Helper()
		v, err := m.View(s)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(v.Rules, "memory_write") {
			t.Errorf("View(%+v).Rules = %q, want the memory rules", s, v.Rules)
		}
		var out []string
		for _, sec := range v.Sections {
			out = append(out, sec.Title+": "+sec.Content)
		}
		return strings.Join(out, "\n")
	}
	alice := view(aliceInGroup)
	for _, want := range []string{"This group's notes: - the group meets on Friday", "Notes about the speaker made in this group: - alice's in-group note"} {
		if !strings.Contains(alice, want) {
			t.Errorf("Alice's group view lacks %q:\n%s", want, alice)
		}
	}
	for _, leak := range []string{"private secret", "bob's in-group"} {
		if strings.Contains(alice, leak) {
			t.Errorf("Alice's group view shows %q:\n%s", leak, alice)
		}
	}
	if dm := view(aliceDM); !strings.Contains(dm, "Private notes about the speaker: - alice's private secret") || strings.Contains(dm, "in-group") {
		t.Errorf("Alice's direct view:\n%s", dm)
	}
	if bob := view(bobInGroup); strings.Contains(bob, "alice") {
		t.Errorf("Bob's group view shows Alice's notes:\n%s", bob)
	}

	sess := tools.Session{Key: "telegram/-500", Speaker: aliceInGroup}
	for rel, want := range map[string]bool{
		"memory/chats/telegram/-500/MEMORY.md":             true,
		"memory/chats/telegram/-500/users/alice/MEMORY.md": true,
		"memory/chats/telegram/-500/users/bob/MEMORY.md":   false,
		"memory/users/telegram/alice/MEMORY.md":            false,
		"inbox/telegram/-500/photo.jpg":                    true,
		"inbox/telegram/alice/photo.jpg":                   false,
		"notes.txt":                                        true,
	} {
		if got := m.Guard(sess, rel); got != want {
			t.Errorf("Guard(alice in group, %q) = %v, want %v", rel, got, want)
		}
	}
}

// TestPublic: skills see nothing of the private areas.
func TestPublic(t *testing.T) {
	for rel, want := range map[string]bool{
		"skills/x/SKILL.md":          true,
		"MEMORY.md":                  true,
		"memory/2025-03-04.md":       true,
		"memory/users":               false,
		"memory/users/telegram/1/x":  false,
		"memory/chats/telegram/-5/x": false,
		"inbox":                      false,
		"inbox/telegram/1/a.png":     false,
		"inboxes/x":                  true,
	} {
		if got := longterm.Public(rel); got != want {
			t.Errorf("Public(%q) = %v, want %v", rel, got, want)
		}
	}
}

// TestOpenErrors: a bad configuration is refused with a clear error and
// nothing stays open (the index file can be opened again at once).
func TestOpenErrors(t *testing.T) {
	ws, err := workspace.Open(t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer ws.Close()
	dir := t.TempDir()
	if _, err := longterm.Open(longterm.Options{Config: memcfg.DefaultConfig(), DataDir: dir}); err == nil || !strings.HasPrefix(err.Error(), "memory: ") {
		t.Errorf("Open without a workspace = %v", err)
	}
	cfg := memcfg.DefaultConfig()
	cfg.Scope = "everybody"
	if _, err := longterm.Open(longterm.Options{Config: cfg, Root: ws.Root(), DataDir: dir}); err == nil || !strings.Contains(err.Error(), "memory.scope") {
		t.Errorf("Open with a bad scope = %v", err)
	}
	cfg = memcfg.DefaultConfig()
	cfg.Consolidate = "03:15" // no model
	if _, err := longterm.Open(longterm.Options{Config: cfg, Root: ws.Root(), DataDir: dir}); err == nil {
		t.Error("Open with consolidation but no model succeeded")
	}
	m, err := longterm.Open(longterm.Options{Config: memcfg.DefaultConfig(), Root: ws.Root(), DataDir: dir})
	if err != nil {
		t.Fatalf("Open after failed opens = %v (something stayed open)", err)
	}
	if err := m.Close(); err != nil {
		t.Error(err)
	}
}

// TestRunStops: Run returns once its ctx ends, with every goroutine
// joined (goleak checks the rest).
func TestRunStops(t *testing.T) {
	m, _ := open(t, memcfg.ScopeUser)
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- m.Run(ctx) }()
	cancel()
	select {
	case err := <-done:
		if err != nil && !errors.Is(err, context.Canceled) {
			t.Errorf("Run = %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return after its ctx ended")
	}
}

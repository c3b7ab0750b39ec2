package longterm_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/switchboard-chat/switchboard/bus"
	"github.com/switchboard-chat/switchboard/bus/bustest"
	"github.com/switchboard-chat/switchboard/internal/polltest"
	"github.com/switchboard-chat/switchboard/llm"
	"github.com/switchboard-chat/switchboard/memory/longterm"
	"github.com/switchboard-chat/switchboard/memory/memcfg"
	"github.com/switchboard-chat/switchboard/tools"
	"github.com/switchboard-chat/switchboard/workspace"
)

const sharedWait = 30 * time.Second

var (
	aliceDM    = tools.Session{Key: "telegram/100", Speaker: bus.Speaker{Channel: "telegram", ChatID: "100", UserID: "100"}}
	bobDM      = tools.Session{Key: "telegram/200", Speaker: bus.Speaker{Channel: "telegram", ChatID: "200", UserID: "200"}}
	aliceGroup = tools.Session{Key: "telegram/-500", Speaker: bus.Speaker{Channel: "telegram", ChatID: "-500", UserID: "100", IsGroup: true}}
)

// memTools calls one instance's memory tools.
type memTools struct{ reg *tools.Registry }

func toolsOf(t *testing.T, m *longterm.System) memTools {
	t.Helper()
	reg, err := tools.NewRegistry(m.Tools()...)
	if err != nil {
		t.Fatal(err)
	}
	return memTools{reg}
}

func (mt memTools) call(t *testing.T, s tools.Session, name string, args any) tools.Result {
	t.Helper()
	raw, err := json.Marshal(args)
	if err != nil {
		t.Fatal(err)
	}
	return mt.reg.Run(t.Context(), name, tools.Call{ID: "c1", Args: raw, Session: s})
}

func (mt memTools) write(t *testing.T, s tools.Session, args map[string]string) {
	t.Helper()
	if r := mt.call(t, s, "memory_write", args); r.IsError {
		t.Fatalf("memory_write %v as %s: %s", args, s.UserID, r.Text)
	}
}

// found waits until memory_search for query as s shows every one of want.
func (mt memTools) found(t *testing.T, name string, s tools.Session, query string, want ...string) {
	t.Helper()
	var last string
	polltest.Until(t, sharedWait, 20*time.Millisecond, func() bool {
		last = mt.call(t, s, "memory_search", map[string]any{"query": query, "max_results": 50}).Text
		for _, w := range want {
			if !strings.Contains(last, w) {
				return false
			}
		}
		return true
	}, func() string {
		return fmt.Sprintf("%s: memory_search %q never showed %q; last answer:\n%s", name, query, want, last)
	})
}

// Two instances (memory.store jetstream, one NATS): a note written through
// instance A is found by memory_search on instance B, notes written to
// one file on both instances are both kept, the privacy rules hold on B
// for what A wrote, and after a restart of NATS on the same store a third
// instance with an empty workspace finds every note.
func TestSharedNotesAcrossInstances(t *testing.T) {
	dir := t.TempDir()
	srv := bustest.StartServerIn(t, dir)
	a, _ := openShared(t, memoryBucket(t, srv), memcfg.ScopeUser)
	b, wsB := openShared(t, memoryBucket(t, srv), memcfg.ScopeUser)
	ta, tb := toolsOf(t, a), toolsOf(t, b)

	ta.write(t, aliceDM, map[string]string{"text": "Alice's cat is called Mochi", "kind": "core"})
	tb.write(t, aliceDM, map[string]string{"text": "Alice's other cat is called Tofu", "kind": "core"})
	ta.write(t, aliceGroup, map[string]string{"text": "the group hikes with Mochi on Sunday", "kind": "daily", "scope": "group"})

	tb.found(t, "B, Alice's direct chat", aliceDM, "cat Mochi", "Mochi", "Tofu")
	tb.found(t, "B, the group", aliceGroup, "Mochi hikes", "hikes with Mochi")
	ta.found(t, "A, Alice's direct chat", aliceDM, "cat Tofu", "Mochi", "Tofu")

	// Privacy on B for what A wrote: no direct-chat memory in the group,
	// nothing of Alice's for Bob.
	if got := tb.call(t, aliceGroup, "memory_search", map[string]any{"query": "cat Mochi Tofu", "max_results": 50}).Text; strings.Contains(got, "called") || strings.Contains(got, "users/telegram") {
		t.Errorf("B: Alice's direct-chat notes reached the group:\n%s", got)
	}
	if got := tb.call(t, bobDM, "memory_search", map[string]any{"query": "cat Mochi Tofu", "max_results": 50}).Text; strings.Contains(got, "called") || strings.Contains(got, "hikes") {
		t.Errorf("B: Bob finds Alice's notes:\n%s", got)
	}
	v, err := b.View(aliceGroup.Speaker)
	if err != nil {
		t.Fatal(err)
	}
	for _, sec := range v.Sections {
		if strings.Contains(sec.Content, "called") {
			t.Errorf("B: Alice's group prompt shows her direct-chat notes: %s: %s", sec.Title, sec.Content)
		}
	}
	core, err := os.ReadFile(filepath.Join(wsB.Dir(), "memory/users/telegram/100/MEMORY.md"))
	if err != nil || strings.Count(string(core), "- ") != 2 {
		t.Errorf("B's copy of Alice's MEMORY.md = %q, %v; want both notes", core, err)
	}

	// Restart NATS on the same store; a new instance starts empty.
	srv.Shutdown()
	srv.WaitForShutdown()
	srv = bustest.StartServerIn(t, dir)
	c, _ := openShared(t, memoryBucket(t, srv), memcfg.ScopeUser)
	tc := toolsOf(t, c)
	tc.found(t, "C after the restart, Alice's direct chat", aliceDM, "cat Mochi", "Mochi", "Tofu")
	tc.found(t, "C after the restart, the group", aliceGroup, "Mochi hikes", "hikes with Mochi")
	if r := tc.call(t, aliceDM, "memory_get", map[string]any{"path": "memory/users/telegram/100/MEMORY.md"}); r.IsError || !strings.Contains(r.Text, "Tofu") {
		t.Errorf("C: memory_get of Alice's MEMORY.md = %+v", r)
	}
}

// fakeLease records that the work was put under it and runs it.
type fakeLease struct{ ran chan struct{} }

func (l fakeLease) Run(ctx context.Context, fn func(context.Context) error) error {
	close(l.ran)
	return fn(ctx)
}

type noModel struct{}

func (noModel) Stream(context.Context, llm.Request, func(llm.Delta)) (*llm.Response, error) {
	return nil, errors.New("no model in this test")
}

// With a lease (memory.store jetstream), the nightly consolidation runs
// under it: one instance rewrites the shared notes, not every one.
func TestConsolidationRunsUnderTheLease(t *testing.T) {
	ws, err := workspace.Open(t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer ws.Close()
	cfg := memcfg.DefaultConfig()
	cfg.Consolidate = "03:15"
	l := fakeLease{ran: make(chan struct{})}
	m, err := longterm.Open(longterm.Options{Config: cfg, Root: ws.Root(), DataDir: t.TempDir(), Model: noModel{}, Lease: l})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- m.Run(ctx) }()
	select {
	case <-l.ran:
	case <-time.After(sharedWait):
		t.Error("the consolidation did not run under the lease")
	}
	cancel()
	if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
		t.Errorf("Run = %v", err)
	}
}

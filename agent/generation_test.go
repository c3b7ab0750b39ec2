package agent

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

// genManager is a manager (not running) whose agents are main and work;
// closes counts each profile's Close calls by a label.
func genManager(t *testing.T, closes *sync.Map) *Manager {
	t.Helper()
	cfg := DefaultConfig()
	m, err := NewManager(cfg, Options{ShutdownTimeout: time.Minute}, Deps{Source: &leanSource{}, Publisher: leanPublisher{}, Store: nullStore{},
		Main: genProfile(MainAgent, "main-1", closes), Agents: Agents{Profiles: []Profile{genProfile("work", "work-1", closes)}}})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// genProfile is a profile named name whose Close counts under label.
func genProfile(name, label string, closes *sync.Map) Profile {
	n, _ := closes.LoadOrStore(label, new(atomic.Int32))
	return Profile{Name: name, Config: DefaultConfig(), Settings: ModelSettings{ModelName: label}, Model: instantModel{}, Prompts: staticPrompts{},
		Close: func() error { n.(*atomic.Int32).Add(1); return nil }}
}

func closed(closes *sync.Map, label string) int32 {
	n, ok := closes.Load(label)
	if !ok {
		return 0
	}
	return n.(*atomic.Int32).Load()
}

// TestSwapClosesOnceAfterLastTurn: a generation swapped out while turns
// hold it stays open until the last of them releases it, then closes
// exactly once; the turns started after the swap get the new one
// (concurrent turns, under -race).
func TestSwapClosesOnceAfterLastTurn(t *testing.T) {
	var closes sync.Map
	m := genManager(t, &closes)
	ctx := t.Context()
	const turns = 16
	held := make([]*generation, turns)
	var wg sync.WaitGroup
	for i := range held {
		wg.Go(func() {
			g, ok := m.acquireAgent(ctx, "work")
			if !ok {
				t.Error("acquire failed")
			}
			held[i] = g
		})
	}
	wg.Wait()
	if err := m.Swap(genProfile("work", "work-2", &closes)); err != nil {
		t.Fatal(err)
	}
	g, _ := m.acquireAgent(ctx, "work")
	if g.env.opt.ModelName != "work-2" {
		t.Errorf("a turn after the swap got %q, want work-2", g.env.opt.ModelName)
	}
	m.releaseAgent(g)
	for _, g := range held[1:] {
		wg.Go(func() { m.releaseAgent(g) })
	}
	wg.Wait()
	if n := closed(&closes, "work-1"); n != 0 {
		t.Fatalf("the old generation closed %d times while a turn still held it", n)
	}
	m.releaseAgent(held[0])
	if n := closed(&closes, "work-1"); n != 1 {
		t.Errorf("the old generation closed %d times after its last turn, want 1", n)
	}
	m.agents.closeAll()
	if a, b, c := closed(&closes, "work-1"), closed(&closes, "work-2"), closed(&closes, "main-1"); a != 1 || b != 1 || c != 1 {
		t.Errorf("after closeAll: closes work-1 %d, work-2 %d, main-1 %d; want 1 each", a, b, c)
	}
}

// TestReplaceDrains: Replace waits for the running turn, holds new turns
// of the agent meanwhile (other agents go on), closes the old generation
// before opening the new one, then lets the waiting turn go with it.
func TestReplaceDrains(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var closes sync.Map
		m := genManager(t, &closes)
		ctx := t.Context()
		running, _ := m.acquireAgent(ctx, "work")
		replaced := make(chan error, 1)
		go func() {
			replaced <- m.Replace("work", func() (Profile, error) {
				if closed(&closes, "work-1") != 1 {
					t.Error("the new generation was opened before the old one closed")
				}
				return genProfile("work", "work-2", &closes), nil
			}, func() (Profile, error) { t.Error("fallback called"); return Profile{}, errors.New("no") })
		}()
		synctest.Wait()
		var waiter atomic.Pointer[generation]
		go func() {
			g, _ := m.acquireAgent(ctx, "work")
			waiter.Store(g)
		}()
		synctest.Wait()
		if waiter.Load() != nil {
			t.Fatal("a new turn of the agent being drained did not wait")
		}
		if g, ok := m.acquireAgent(ctx, MainAgent); !ok {
			t.Fatal("main waits while work drains")
		} else {
			m.releaseAgent(g)
		}
		m.releaseAgent(running)
		if err := <-replaced; err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		g := waiter.Load()
		if g == nil || g.env.opt.ModelName != "work-2" {
			t.Fatalf("the waiting turn got %v, want work-2", g)
		}
		m.releaseAgent(g)
		m.agents.closeAll()
	})
}

// TestReplaceBusyOrFailingKeepsTheAgent: an agent still busy after the
// shutdown timeout keeps its generation (not closed); a new profile that
// fails to open is reported and the running settings are reopened; the
// agent always has a generation.
func TestReplaceBusyOrFailingKeepsTheAgent(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var closes sync.Map
		m := genManager(t, &closes)
		ctx := t.Context()
		running, _ := m.acquireAgent(ctx, "work")
		err := m.Replace("work", func() (Profile, error) { t.Error("opened while busy"); return Profile{}, nil }, nil)
		if err == nil || !strings.Contains(err.Error(), "still busy after 1m0s") {
			t.Errorf("busy replace: %v", err)
		}
		if closed(&closes, "work-1") != 0 {
			t.Error("the busy generation was closed")
		}
		if g, ok := m.acquireAgent(ctx, "work"); !ok || g != running {
			t.Error("after a refused replace the agent has another generation")
		} else {
			m.releaseAgent(g)
		}
		m.releaseAgent(running)

		err = m.Replace("work", func() (Profile, error) { return Profile{}, errors.New("workspace: cannot create") },
			func() (Profile, error) { return genProfile("work", "work-1b", &closes), nil })
		if err == nil || !strings.Contains(err.Error(), "workspace: cannot create") {
			t.Errorf("failing replace: %v", err)
		}
		g, _ := m.acquireAgent(ctx, "work")
		if g.env.agent != "work" || g.env.opt.ModelName != "work-1b" {
			t.Errorf("after a failed open work runs %s/%s, want its reopened settings", g.env.agent, g.env.opt.ModelName)
		}
		m.releaseAgent(g)
		m.agents.closeAll()
	})
}

// TestRemoveHandsSessionsToMain: a removed agent's next turns get main;
// it closes after the turn that held it; an agent added is acquirable at
// once.
func TestRemoveHandsSessionsToMain(t *testing.T) {
	var closes sync.Map
	m := genManager(t, &closes)
	ctx := t.Context()
	running, _ := m.acquireAgent(ctx, "work")
	if err := m.Remove("work"); err != nil {
		t.Fatal(err)
	}
	if err := m.Remove(MainAgent); err == nil {
		t.Error("main removed")
	}
	g, _ := m.acquireAgent(ctx, "work")
	if g.env.agent != MainAgent {
		t.Errorf("a removed agent's turn got %s, want main", g.env.agent)
	}
	m.releaseAgent(g)
	if closed(&closes, "work-1") != 0 {
		t.Fatal("closed while its turn runs")
	}
	m.releaseAgent(running)
	if closed(&closes, "work-1") != 1 {
		t.Error("not closed after its last turn")
	}
	if err := m.Add("pets", func() (Profile, error) { return genProfile("pets", "pets-1", &closes), nil }); err != nil {
		t.Fatal(err)
	}
	g, _ = m.acquireAgent(context.Background(), "pets")
	if g.env.agent != "pets" {
		t.Errorf("added agent: got %s", g.env.agent)
	}
	m.releaseAgent(g)
	m.agents.closeAll()
}

// TestReplaceWaitsForEarlierGenerations: a generation swapped out (model
// change) shares the agent's files with the current one; a Replace that
// reopens the files waits for it too, not only for the current one.
func TestReplaceWaitsForEarlierGenerations(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var closes sync.Map
		m := genManager(t, &closes)
		ctx := t.Context()
		early, _ := m.acquireAgent(ctx, "work")
		if err := m.Swap(genProfile("work", "work-2", &closes)); err != nil {
			t.Fatal(err)
		}
		var opened atomic.Bool
		replaced := make(chan error, 1)
		go func() {
			replaced <- m.Replace("work", func() (Profile, error) { opened.Store(true); return genProfile("work", "work-3", &closes), nil }, nil)
		}()
		synctest.Wait()
		if opened.Load() {
			t.Fatal("the files were reopened while a swapped-out generation still ran")
		}
		m.releaseAgent(early)
		if err := <-replaced; err != nil || !opened.Load() {
			t.Fatalf("replace after the early turn ended: %v", err)
		}
		if a, b := closed(&closes, "work-1"), closed(&closes, "work-2"); a != 1 || b != 1 {
			t.Errorf("closes: work-1 %d, work-2 %d; want 1 each", a, b)
		}
		m.agents.closeAll()
	})
}

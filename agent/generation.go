package agent

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"
)

// A generation is one agent as built from one Profile: its environment
// (model, tools, prompts, memory, limits) and what closes it. A session
// keeps only its agent's name; each turn, background summary and daily
// note acquires the agent's current generation and releases it when done,
// so a configuration reload (Manager.Replace) applies from the next turn
// while a turn in flight finishes with the generation it started with. A
// generation that was replaced or removed is closed (Profile.Close: its
// tools stopped, its files closed) once, when its last holder released it.
type generation struct {
	env   *sessionEnv
	close func() error // Profile.Close; nil: nothing to close
	// refs, retired and idle are guarded by agentSet.mu.
	refs    int
	retired bool
	idle    chan struct{} // set while a Replace waits for refs to reach 0; closed then
	closed  chan struct{} // closed once close ran
	once    sync.Once     // close runs once
}

// agentSet is every agent's current generation by name. Acquiring and
// releasing take mu only for a counter; nothing is held across a model
// call. Replace, Add and Remove run one at a time (reconf).
type agentSet struct {
	base   *sessionEnv // the manager's shared environment (courier, counters, bus)
	reconf sync.Mutex  // one change at a time; taken before mu
	mu     sync.Mutex
	cur    map[string]*generation
	gate   map[string]chan struct{} // agents being drained: closed when the drain ends
	old    map[string][]*generation // retired generations still held by a turn, by agent
	done   bool                     // closeAll ran
}

// build checks p and returns its generation.
func (a *agentSet) build(p Profile) (*generation, error) {
	if p.Name == "" || p.Model == nil || p.Prompts == nil {
		return nil, fmt.Errorf("agent %q: a name, Model and Prompts are required", p.Name)
	}
	c := p.Config
	c.MaxConcurrentTurns, c.Partitions, c.SessionIdle = a.base.cfg.MaxConcurrentTurns, a.base.cfg.Partitions, a.base.cfg.SessionIdle
	if err := c.Validate(); err != nil {
		return nil, fmt.Errorf("agent %s: %w", p.Name, err)
	}
	return &generation{env: profileEnv(a.base, p), close: p.Close, closed: make(chan struct{})}, nil
}

// acquire returns the current generation of agent name, or main's when
// there is no such agent (it was removed), waiting while the agent is
// being drained for a replacement; ok is false when ctx ended first. The
// caller must release it.
func (a *agentSet) acquire(ctx context.Context, name string) (g *generation, ok bool) {
	for {
		a.mu.Lock()
		if a.done {
			a.mu.Unlock()
			return nil, false // Run ended
		}
		if gate := a.gate[name]; gate != nil {
			a.mu.Unlock()
			select {
			case <-gate:
				continue
			case <-ctx.Done():
				return nil, false
			}
		}
		g = a.cur[name]
		if g == nil {
			if name == MainAgent {
				a.mu.Unlock()
				return nil, false // shut down
			}
			name = MainAgent
			a.mu.Unlock()
			continue
		}
		g.refs++
		a.mu.Unlock()
		return g, true
	}
}

// release gives back a generation acquire returned; the last release of
// a retired one closes it.
func (a *agentSet) release(g *generation) {
	a.mu.Lock()
	g.refs--
	last := g.refs == 0
	if last && g.idle != nil {
		close(g.idle)
		g.idle = nil
	}
	last = last && g.retired
	a.mu.Unlock()
	if last {
		a.closeGen(g)
	}
}

// current is agent name's environment (main's when there is none) without
// acquiring it, for settings read between turns (queue mode).
func (a *agentSet) current(name string) *sessionEnv {
	a.mu.Lock()
	defer a.mu.Unlock()
	if g := a.cur[name]; g != nil {
		return g.env
	}
	if g := a.cur[MainAgent]; g != nil {
		return g.env
	}
	return a.base
}

// closeGen closes a retired generation nobody holds (the caller saw
// retired and no refs under mu, or made it so); it runs Profile.Close once.
func (a *agentSet) closeGen(g *generation) {
	g.once.Do(func() {
		if g.close != nil {
			if err := g.close(); err != nil {
				a.base.log.Warn("closing an agent's replaced generation failed", "agent", g.env.agent, "err", err)
			}
		}
		close(g.closed)
	})
	a.mu.Lock()
	name := g.env.agent
	if i := slices.Index(a.old[name], g); i >= 0 {
		a.old[name] = slices.Delete(a.old[name], i, i+1)
	}
	if len(a.old[name]) == 0 {
		delete(a.old, name)
	}
	a.mu.Unlock()
}

// retire marks g retired; it returns true when nobody holds it (the
// caller closes it then), else keeps it among the agent's retired ones
// until its last release. The caller holds mu.
func (a *agentSet) retire(g *generation) (closeNow bool) {
	g.retired = true
	if g.refs == 0 {
		return true
	}
	a.old[g.env.agent] = append(a.old[g.env.agent], g)
	return false
}

// waitRetired waits until every retired generation of agent name is
// closed (they may hold its files), or until expired fires: false then.
func (a *agentSet) waitRetired(name string, expired <-chan time.Time) bool {
	a.mu.Lock()
	pending := slices.Clone(a.old[name])
	a.mu.Unlock()
	for _, g := range pending {
		select {
		case <-g.closed:
		case <-expired:
			return false
		}
	}
	return true
}

// replace drains agent name (new turns wait, running ones finish, for at
// most timeout), closes its generation, opens the next with open and puts
// it in force. When the agent stays busy, the old generation stays and the
// error says so; when open fails (or its profile is invalid), fallback
// reopens the old settings and the error says why the new ones were not
// applied. An agent is never left without a generation: if fallback fails
// too, a non-main agent is removed (its sessions go to main) and main
// keeps its closed generation (its turns answer with an error until a
// reload reopens it); the error says so.
func (a *agentSet) replace(name string, timeout time.Duration, open, fallback func() (Profile, error)) error {
	a.reconf.Lock()
	defer a.reconf.Unlock()
	a.mu.Lock()
	old := a.cur[name]
	if a.done || old == nil {
		a.mu.Unlock()
		return fmt.Errorf("no running agent %s", name)
	}
	gate := make(chan struct{})
	defer close(gate)
	a.gate[name] = gate
	var idle chan struct{}
	if old.refs > 0 {
		old.idle = make(chan struct{})
		idle = old.idle
	}
	a.mu.Unlock()
	t := time.NewTimer(timeout)
	defer t.Stop()
	busy := false
	if idle != nil {
		select {
		case <-idle:
		case <-t.C:
			busy = true
		}
	}
	if busy || !a.waitRetired(name, t.C) { // an earlier generation still running shares its files
		a.mu.Lock()
		delete(a.gate, name)
		old.idle = nil
		a.mu.Unlock()
		return fmt.Errorf("still busy after %s (shutdown_timeout); the running settings stay", timeout)
	}
	a.mu.Lock()
	old.retired = true
	a.mu.Unlock()
	a.closeGen(old) // its files (tools.db, the memory index) are free now
	next, why := a.open(open)
	if why != nil {
		var err error
		if next, err = a.open(fallback); err != nil {
			why = fmt.Errorf("%w; reopening the running settings failed too: %w", why, err)
		}
	}
	a.mu.Lock()
	switch {
	case next != nil:
		a.cur[name] = next
	case name != MainAgent:
		delete(a.cur, name)
		why = fmt.Errorf("%w; the agent is removed until the next reload (main answers its sessions)", why)
	default:
		old.retired = false // main keeps its closed generation: its turns fail (files closed) until the next reload
		why = fmt.Errorf("%w; main's files are closed: its turns fail until a reload reopens them", why)
	}
	delete(a.gate, name)
	a.mu.Unlock()
	return why
}

// swap puts p in force for the running agent p.Name at once, without a
// drain: turns already holding the agent's generation finish with it, and
// it is closed after the last of them.
func (a *agentSet) swap(p Profile) error {
	g, err := a.build(p)
	if err != nil {
		return err
	}
	a.reconf.Lock()
	defer a.reconf.Unlock()
	a.mu.Lock()
	old := a.cur[p.Name]
	if a.done || old == nil {
		a.mu.Unlock()
		return fmt.Errorf("no running agent %s", p.Name)
	}
	a.cur[p.Name] = g
	now := a.retire(old)
	a.mu.Unlock()
	if now {
		a.closeGen(old)
	}
	return nil
}

// open opens a profile and builds its generation, closing the profile
// when it is invalid.
func (a *agentSet) open(open func() (Profile, error)) (*generation, error) {
	p, err := open()
	if err != nil {
		return nil, err
	}
	g, err := a.build(p)
	if err != nil && p.Close != nil {
		_ = p.Close()
	}
	return g, err
}

// add opens agent name and puts it in force at once, first waiting (for at
// most timeout) for a removed generation of that name still held by a turn
// to close.
func (a *agentSet) add(name string, timeout time.Duration, open func() (Profile, error)) error {
	a.reconf.Lock()
	defer a.reconf.Unlock()
	a.mu.Lock()
	_, exists := a.cur[name]
	done := a.done
	a.mu.Unlock()
	if exists || done {
		return fmt.Errorf("agent %s is running already", name)
	}
	t := time.NewTimer(timeout)
	defer t.Stop()
	if !a.waitRetired(name, t.C) {
		return fmt.Errorf("its removed instance is still busy after %s (shutdown_timeout)", timeout)
	}
	g, err := a.open(open)
	if err != nil {
		return err
	}
	a.mu.Lock()
	a.cur[name] = g
	a.mu.Unlock()
	return nil
}

// remove takes agent name out of force: its sessions get main from their
// next turn; its generation closes after the turns holding it.
func (a *agentSet) remove(name string) error {
	if name == MainAgent {
		return errors.New("main cannot be removed")
	}
	a.reconf.Lock()
	defer a.reconf.Unlock()
	a.mu.Lock()
	g := a.cur[name]
	if g == nil {
		a.mu.Unlock()
		return fmt.Errorf("no running agent %s", name)
	}
	delete(a.cur, name)
	now := a.retire(g)
	a.mu.Unlock()
	if now {
		a.closeGen(g)
	}
	return nil
}

// closeAll retires every generation (Run's end: no turn holds one any
// more) and closes them; later changes are refused.
func (a *agentSet) closeAll() {
	a.reconf.Lock()
	defer a.reconf.Unlock()
	a.mu.Lock()
	a.done = true
	var now []*generation
	for _, g := range a.cur {
		g.retired = true
		if g.refs == 0 {
			now = append(now, g)
		}
	}
	a.mu.Unlock()
	for _, g := range now {
		a.closeGen(g)
	}
}

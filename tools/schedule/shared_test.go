package schedule

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/switchboard-chat/switchboard/bus/bustest"
	"github.com/switchboard-chat/switchboard/internal/kvstate"
	"github.com/switchboard-chat/switchboard/internal/polltest"
	"github.com/switchboard-chat/switchboard/tools"
)

const sharedWait = 30 * time.Second

// fakeClock is the instances' shared wall clock, moved by the test.
type fakeClock struct{ unix atomic.Int64 }

func (c *fakeClock) now() time.Time          { return time.Unix(c.unix.Load(), 0).UTC() }
func (c *fakeClock) advance(d time.Duration) { c.unix.Add(int64(d / time.Second)) }

// instancePub is one instance's way to the shared bus; a dead instance
// publishes nothing.
type instancePub struct {
	bus  *fakeBus
	dead atomic.Bool
}

func (p *instancePub) Publish(ctx context.Context, subject string, data []byte, msgID string) error {
	if p.dead.Load() {
		return errors.New("instance is dead")
	}
	return p.bus.Publish(ctx, subject, data, msgID)
}

// instance is one daemon's scheduler: its own NATS connection, the shared
// schedules bucket and the scheduler lease.
type instance struct {
	s    *Scheduler
	nc   *nats.Conn
	pub  *instancePub
	stop func()
}

func startInstance(t *testing.T, srv *server.Server, b *fakeBus, clock *fakeClock) *instance {
	t.Helper()
	nc, err := nats.Connect(srv.ClientURL(), nats.MaxReconnects(0))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	set, err := kvstate.Open(t.Context(), nc, kvstate.Config{Prefix: "chat", LeaseTTL: 2 * time.Second}, nil)
	if err != nil {
		t.Fatal(err)
	}
	pub := &instancePub{bus: b}
	s, err := NewShared(Shared{Store: set.Schedules.(SharedStore), Lease: set.Leases.Exclusive("scheduler")}, pub, subj,
		tools.ScheduleConfig{Timezone: "UTC"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	s.now = clock.now
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = s.Run(ctx)
	}()
	var once sync.Once
	stop := func() { once.Do(func() { cancel(); <-done }) }
	t.Cleanup(stop)
	return &instance{s: s, nc: nc, pub: pub, stop: stop}
}

// kill makes the instance die as a killed process would for the others:
// it publishes nothing more and its connection is gone, so its lease lapses.
func (in *instance) kill() {
	in.pub.dead.Store(true)
	in.nc.Close()
}

// fired waits until the bus holds a run of task id.
func fired(t *testing.T, b *fakeBus, id string, pokes ...*Scheduler) {
	t.Helper()
	polltest.Until(t, sharedWait, 20*time.Millisecond, func() bool {
		for _, s := range pokes {
			s.poke()
		}
		return runsOf(b, id) > 0
	}, func() string { return fmt.Sprintf("task %s never fired; bus holds %d runs", id, len(b.all())) })
}

func runsOf(b *fakeBus, id string) int {
	n := 0
	for _, in := range b.all() {
		if in.Meta["scheduled_task"] == id {
			n++
		}
	}
	return n
}

// waitHeld waits until in holds exactly the tasks ids of ann.
func waitHeld(t *testing.T, name string, in *instance, ids ...string) {
	t.Helper()
	polltest.Until(t, sharedWait, 20*time.Millisecond, func() bool {
		got := in.s.Tasks(ann)
		if len(got) != len(ids) {
			return false
		}
		for i := range got {
			if got[i].ID != ids[i] {
				return false
			}
		}
		return true
	}, func() string { return fmt.Sprintf("%s holds %+v, want %q", name, in.s.Tasks(ann), ids) })
}

// Two instances share the tasks (memory.store jetstream). A task created on
// A fires on A, the holder of the scheduler lease; a task created on A
// afterwards is seen by B and fired by A alone; A dies, its lease lapses,
// and B fires the task A created last: once, not lost, not twice. After a
// restart of NATS on the same store a third instance finds the tasks.
func TestSharedScheduleFiresOnceAcrossInstances(t *testing.T) {
	dir := t.TempDir()
	srv := bustest.StartServerIn(t, dir)
	b := newFakeBus()
	clock := &fakeClock{}
	clock.unix.Store(time.Date(2026, 3, 1, 8, 0, 0, 0, time.UTC).Unix())

	a := startInstance(t, srv, b, clock)
	t1 := taskID(t, call(t, a.s, ann, `{"action":"create","prompt":"first, on A","at":"in 5m"}`))
	clock.advance(10 * time.Minute)
	fired(t, b, t1, a.s) // A holds the lease

	bi := startInstance(t, srv, b, clock)
	t2 := taskID(t, call(t, a.s, ann, `{"action":"create","prompt":"second, created on A","at":"in 5m"}`))
	waitHeld(t, "B", bi, t2)
	clock.advance(10 * time.Minute)
	fired(t, b, t2, bi.s, a.s) // both are woken; only the holder fires
	waitHeld(t, "A", a)
	waitHeld(t, "B", bi)

	t3 := taskID(t, call(t, a.s, ann, `{"action":"create","prompt":"third, created on A","at":"in 5m"}`))
	waitHeld(t, "B", bi, t3)
	a.kill()
	clock.advance(10 * time.Minute)
	fired(t, b, t3, bi.s) // B took the lease over after A's lapsed
	b.mu.Lock()
	dups := b.dups
	b.mu.Unlock()
	for _, id := range []string{t1, t2, t3} {
		if n := runsOf(b, id); n != 1 {
			t.Errorf("task %s ran %d times, want once", id, n)
		}
	}
	if dups != 0 {
		t.Errorf("%d runs published twice (the bus dropped the copies); want every run published once", dups)
	}
	t4 := taskID(t, call(t, bi.s, ann, `{"action":"create","prompt":"every hour","every":"1h"}`))
	waitHeld(t, "B", bi, t4)

	// Restart everything: the instance and NATS, on the same store.
	bi.stop()
	bi.nc.Close()
	srv.Shutdown()
	srv.WaitForShutdown()
	srv = bustest.StartServerIn(t, dir)
	c := startInstance(t, srv, newFakeBus(), clock)
	r := call(t, c.s, ann, `{"action":"list"}`)
	if !strings.HasPrefix(r.Text, "1 scheduled tasks") || !strings.Contains(r.Text, t4) {
		t.Fatalf("after the restart: %s", r.Text)
	}
}

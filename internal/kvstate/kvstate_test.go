package kvstate_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/goleak"

	"github.com/switchboard-chat/switchboard/bus/bustest"
	"github.com/switchboard-chat/switchboard/internal/kvstate"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// Two clients (two instances) appending to one key at once lose nothing:
// Modify is checked on the revision it read.
func TestModifyFromTwoInstancesLosesNothing(t *testing.T) {
	s := bustest.StartServer(t)
	cfg := kvstate.Config{Prefix: "chat", Replicas: 1}
	a, err := kvstate.Open(t.Context(), bustest.Connect(t, s), cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	b, err := kvstate.Open(t.Context(), bustest.Connect(t, s), cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	const each = 20
	var wg sync.WaitGroup
	for i, st := range []kvstate.Store{a.Memory, b.Memory} {
		wg.Go(func() {
			for n := range each {
				if _, _, err := st.Modify(t.Context(), "k", func(old []byte, _ bool) ([]byte, error) {
					return fmt.Appendf(old, "%d-%d\n", i, n), nil
				}); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	v, _, ok, err := b.Memory.Get(t.Context(), "k")
	if err != nil || !ok {
		t.Fatalf("get: %v %v", ok, err)
	}
	if got := strings.Count(string(v), "\n"); got != 2*each {
		t.Fatalf("%d lines kept, want %d:\n%s", got, 2*each, v)
	}
}

// A watch replays what is there, then streams changes; what is stored
// survives a restart of the server on the same store directory.
func TestWatchAndRestart(t *testing.T) {
	dir := t.TempDir()
	s := bustest.StartServerIn(t, dir)
	nc := bustest.Connect(t, s)
	set, err := kvstate.Open(t.Context(), nc, kvstate.Config{Prefix: "chat"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	key := kvstate.Key("memory/users/telegram/42/MEMORY.md")
	if txt, ok := kvstate.KeyText(key); !ok || txt != "memory/users/telegram/42/MEMORY.md" {
		t.Fatalf("KeyText(Key) = %q, %v", txt, ok)
	}
	if _, err := set.Schedules.Put(t.Context(), "t1", []byte("one")); err != nil {
		t.Fatal(err)
	}
	changes := make(chan kvstate.Change, 16)
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- set.Schedules.Watch(ctx, func(c kvstate.Change) { changes <- c }) }()
	next := func() kvstate.Change {
		t.Helper()
		select {
		case c := <-changes:
			return c
		case <-time.After(10 * time.Second):
			t.Fatal("no change seen")
		}
		return kvstate.Change{}
	}
	if c := next(); c.Key != "t1" || string(c.Value) != "one" || !c.Replayed {
		t.Fatalf("replayed %+v", c)
	}
	if c := next(); !c.Synced || c.Key != "" {
		t.Fatalf("after the replay: %+v, want the Synced mark", c)
	}
	if _, err := set.Schedules.Put(t.Context(), "t2", []byte("two")); err != nil {
		t.Fatal(err)
	}
	if c := next(); c.Key != "t2" || c.Replayed || c.Deleted {
		t.Fatalf("update %+v", c)
	}
	if err := set.Schedules.Delete(t.Context(), "t1"); err != nil {
		t.Fatal(err)
	}
	if c := next(); c.Key != "t1" || !c.Deleted {
		t.Fatalf("delete %+v", c)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("watch: %v", err)
	}

	nc.Close()
	s.Shutdown()
	s.WaitForShutdown()
	s = bustest.StartServerIn(t, dir)
	set, err = kvstate.Open(t.Context(), bustest.Connect(t, s), kvstate.Config{Prefix: "chat"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	all, err := set.Schedules.All(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if len(all) != 1 || string(all["t2"]) != "two" {
		t.Fatalf("after restart: %q", all)
	}
}

// An outbound id one instance showed is seen by another (the instance that
// took the channel over drops the repeat); ids are per channel; the
// delivered bucket's values expire after Config.DeliveredTTL.
func TestSeenAcrossInstances(t *testing.T) {
	s := bustest.StartServer(t)
	nc := bustest.Connect(t, s)
	cfg := kvstate.Config{Prefix: "chat", DeliveredTTL: 3 * time.Hour}
	a, err := kvstate.Open(t.Context(), nc, cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	b, err := kvstate.Open(t.Context(), bustest.Connect(t, s), cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	shownA := kvstate.Seen{Store: a.Delivered, Channel: "telegram"}
	if err := shownA.Record(t.Context(), "out-1", time.Now()); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		channel, id string
		want        bool
	}{{"telegram", "out-1", true}, {"telegram", "out-2", false}, {"slack", "out-1", false}} {
		got, err := kvstate.Seen{Store: b.Delivered, Channel: tt.channel}.Seen(t.Context(), tt.id)
		if err != nil || got != tt.want {
			t.Errorf("instance b: Seen(%s, %s) = %v, %v; want %v", tt.channel, tt.id, got, err, tt.want)
		}
	}
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	kv, err := js.KeyValue(t.Context(), "chat_"+kvstate.NameDelivered)
	if err != nil {
		t.Fatal(err)
	}
	if st, err := kv.Status(t.Context()); err != nil || st.TTL() != 3*time.Hour {
		t.Errorf("delivered bucket TTL = %v (%v), want 3h", st.TTL(), err)
	}
}

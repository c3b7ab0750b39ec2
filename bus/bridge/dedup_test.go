package bridge_test

import (
	"context"
	"encoding/json"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	bolt "go.etcd.io/bbolt"

	"github.com/switchboard-chat/switchboard/bus"
	"github.com/switchboard-chat/switchboard/bus/bridge"
	"github.com/switchboard-chat/switchboard/bus/bridge/boltseen"
	"github.com/switchboard-chat/switchboard/bus/bustest"
)

const dedupWait = 10 * time.Second

// shownLog records what a handler showed, in order.
type shownLog struct {
	mu      sync.Mutex
	ids     []string
	changed chan struct{}
}

func newShownLog() *shownLog { return &shownLog{changed: make(chan struct{})} }

func (l *shownLog) handler(_ context.Context, out bus.Outbound) error {
	l.mu.Lock()
	l.ids = append(l.ids, out.ID)
	close(l.changed)
	l.changed = make(chan struct{})
	l.mu.Unlock()
	return nil
}

// waitFor waits until id was shown and returns everything shown so far.
func (l *shownLog) waitFor(t *testing.T, id string) []string {
	t.Helper()
	timer := time.NewTimer(dedupWait)
	defer timer.Stop()
	for {
		l.mu.Lock()
		got, changed := append([]string(nil), l.ids...), l.changed
		l.mu.Unlock()
		for _, g := range got {
			if g == id {
				return got
			}
		}
		select {
		case <-changed:
		case <-timer.C:
			t.Fatalf("%s not shown within %s; shown: %v", id, dedupWait, got)
		}
	}
}

func count(ids []string, id string) int {
	n := 0
	for _, s := range ids {
		if s == id {
			n++
		}
	}
	return n
}

type dedupEnv struct {
	nc   *nats.Conn
	js   jetstream.JetStream
	subj bus.Subjects
}

func newDedupEnv(t *testing.T) *dedupEnv {
	t.Helper()
	nc := bustest.Connect(t, bustest.StartServer(t))
	js := bustest.Streams(t, nc)
	return &dedupEnv{nc: nc, js: js, subj: bus.Subjects{Prefix: "chat"}}
}

func final(id, inReplyTo string) bus.Outbound {
	return bus.Outbound{V: 1, ID: id, Channel: "tg", ChatID: "c1", InReplyTo: inReplyTo, Kind: bus.KindReply,
		Text: "answer " + id, Seq: 3, Final: true}
}

// publish publishes o through JetStream as the daemon does, with the
// Nats-Msg-Id header set to msgID ("" for none: the second copy of a final
// re-published after the stream's de-duplication window).
func (e *dedupEnv) publish(t *testing.T, o bus.Outbound, msgID string) *jetstream.PubAck {
	t.Helper()
	data, err := json.Marshal(o)
	if err != nil {
		t.Fatal(err)
	}
	var opts []jetstream.PublishOpt
	if msgID != "" {
		opts = append(opts, jetstream.WithMsgID(msgID))
	}
	ack, err := e.js.Publish(t.Context(), e.subj.Out(o.Channel, o.ChatID), data, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return ack
}

func (e *dedupEnv) client(t *testing.T, store bridge.SeenStore, dups *atomic.Int64) *bridge.Client {
	t.Helper()
	c, err := bridge.New(e.nc, bridge.Options{Channel: "tg", SeenStore: store,
		Backoff:     func(int) time.Duration { return time.Millisecond },
		OnDuplicate: func(bus.Outbound) { dups.Add(1) }})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// run runs f (ConsumeOutbound or SubscribeOutbound) until the returned stop
// is called.
func run(t *testing.T, f func(context.Context, bridge.Handler) error, h bridge.Handler) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- f(ctx, h) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			select {
			case err := <-done:
				if err != nil {
					t.Errorf("consumer returned %v", err)
				}
			case <-time.After(dedupWait):
				t.Fatal("consumer did not stop")
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

// waitAcked waits until the durable consumer holds nothing unacknowledged.
func (e *dedupEnv) waitAcked(t *testing.T, durable string) {
	t.Helper()
	deadline := time.Now().Add(dedupWait)
	for {
		cons, err := e.js.Consumer(t.Context(), "CHAT_OUT", durable)
		if err != nil {
			t.Fatal(err)
		}
		info, err := cons.Info(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		if info.NumAckPending == 0 && info.NumPending == 0 && info.NumRedelivered == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("consumer: %d ack pending, %d pending, %d redelivered", info.NumAckPending, info.NumPending, info.NumRedelivered)
		}
		select {
		case <-t.Context().Done():
			t.Fatal(t.Context().Err())
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// TestConsumeOutboundShowsARepublishedFinalOnce: the daemon re-publishes a
// final with the same id after a crash; once the stream's de-duplication
// window is over the stream stores the copy and the durable consumer
// delivers it. The kit shows it once, acknowledges the copy (no
// redelivery), counts it, and with a SeenStore still drops it after the
// bridge restarted.
func TestConsumeOutboundShowsARepublishedFinalOnce(t *testing.T) {
	e := newDedupEnv(t)
	store, err := boltseen.Open(openBolt(t, filepath.Join(t.TempDir(), "state.db")), "seen", time.Hour, nil)
	if err != nil {
		t.Fatal(err)
	}
	var dups atomic.Int64
	log := newShownLog()
	c := e.client(t, store, &dups)
	stop := run(t, c.ConsumeOutbound, log.handler)
	// The first ConsumeOutbound creates the consumer ("deliver new"): wait
	// until it exists before publishing.
	waitConsumer(t, e.js, "bridge_tg")

	e.publish(t, final("f1", "m1"), "f1")
	log.waitFor(t, "f1")
	e.publish(t, final("f1", "m1"), "") // the copy stored after the window
	e.publish(t, final("f2", "m2"), "f2")
	got := log.waitFor(t, "f2")
	if count(got, "f1") != 1 {
		t.Fatalf("shown %v: the re-published final f1 was shown %d times", got, count(got, "f1"))
	}
	e.waitAcked(t, "bridge_tg")
	if dups.Load() != 1 {
		t.Fatalf("OnDuplicate called %d times, want 1", dups.Load())
	}
	stop()
	_ = c.Close()

	// Restart: a new client with the same store drops the copy too.
	log2 := newShownLog()
	c2 := e.client(t, store, &dups)
	run(t, c2.ConsumeOutbound, log2.handler)
	e.publish(t, final("f1", "m1"), "")
	e.publish(t, final("f3", "m3"), "f3")
	got = log2.waitFor(t, "f3")
	if count(got, "f1") != 0 {
		t.Fatalf("after a restart with the same store the re-published f1 was shown again: %v", got)
	}
	e.waitAcked(t, "bridge_tg")
	if dups.Load() != 2 {
		t.Fatalf("OnDuplicate called %d times, want 2", dups.Load())
	}
}

// TestSubscribeOutboundShowsARepublishedFinalOnce: within the stream's
// de-duplication window the stream drops the copy, but a core subscriber
// receives both publishes; the kit shows the final once.
func TestSubscribeOutboundShowsARepublishedFinalOnce(t *testing.T) {
	e := newDedupEnv(t)
	var dups atomic.Int64
	log := newShownLog()
	c := e.client(t, nil, &dups)
	sub := make(chan struct{})
	// Wait for the subscription: a typing message published until one
	// arrives (core messages before the subscription are lost).
	h := func(ctx context.Context, out bus.Outbound) error {
		if out.Kind == bus.KindTyping {
			select {
			case <-sub:
			default:
				close(sub)
			}
			return nil
		}
		return log.handler(ctx, out)
	}
	run(t, c.SubscribeOutbound, h)
	typing := bus.Outbound{V: 1, ID: "t0", Channel: "tg", ChatID: "c1", InReplyTo: "m0", Kind: bus.KindTyping, Seq: 1}
	data, _ := json.Marshal(typing)
	deadline := time.After(dedupWait)
	for ready := false; !ready; {
		if err := e.nc.Publish(e.subj.Out("tg", "c1"), data); err != nil {
			t.Fatal(err)
		}
		select {
		case <-sub:
			ready = true
		case <-time.After(20 * time.Millisecond):
		case <-deadline:
			t.Fatal("subscription never received a message")
		}
	}

	if ack := e.publish(t, final("f1", "m1"), "f1"); ack.Duplicate {
		t.Fatal("first publish is a duplicate")
	}
	if ack := e.publish(t, final("f1", "m1"), "f1"); !ack.Duplicate {
		t.Fatal("second publish within the window is not a duplicate")
	}
	e.publish(t, final("f2", "m2"), "f2")
	got := log.waitFor(t, "f2")
	if count(got, "f1") != 1 {
		t.Fatalf("shown %v: f1 shown %d times, want once", got, count(got, "f1"))
	}
	if dups.Load() != 1 {
		t.Fatalf("OnDuplicate called %d times, want 1", dups.Load())
	}
}

func waitConsumer(t *testing.T, js jetstream.JetStream, durable string) {
	t.Helper()
	deadline := time.Now().Add(dedupWait)
	for {
		if _, err := js.Consumer(t.Context(), "CHAT_OUT", durable); err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("consumer %s not created", durable)
		}
		select {
		case <-t.Context().Done():
			t.Fatal(t.Context().Err())
		case <-time.After(10 * time.Millisecond):
		}
	}
}

func openBolt(t *testing.T, path string) *bolt.DB {
	t.Helper()
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	return db
}

// TestSeenSetBounds: the in-memory set forgets the oldest id first, when it
// is full or its time is up.
func TestSeenSetBounds(t *testing.T) {
	s := bridge.NewSeenSet(3, time.Hour)
	for _, id := range []string{"a", "b", "c", "d"} {
		if !s.Add(id) {
			t.Fatalf("Add(%s) not new", id)
		}
	}
	if s.Has("a") || !s.Has("b") || !s.Has("d") || s.Len() != 3 {
		t.Fatalf("after 4 adds to a set of 3: a %v b %v d %v len %d", s.Has("a"), s.Has("b"), s.Has("d"), s.Len())
	}
	if s.Add("b") {
		t.Fatal("Add of a remembered id reported new")
	}
	short := bridge.NewSeenSet(10, time.Nanosecond)
	short.Add("x")
	deadline := time.Now().Add(dedupWait)
	for short.Has("x") {
		if time.Now().After(deadline) {
			t.Fatal("id not forgotten after its time")
		}
	}
}

// TestBoltSeenRetention: the store forgets ids older than its retention
// and keeps the others across a reopen.
func TestBoltSeenRetention(t *testing.T) {
	path := filepath.Join(t.TempDir(), "s.db")
	db := openBolt(t, path)
	now := time.Now()
	clock := func() time.Time { return now }
	s, err := boltseen.Open(db, "seen", time.Hour, clock)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Record(t.Context(), "old", now.Add(-2*time.Hour)); err != nil {
		t.Fatal(err)
	}
	if err := s.Record(t.Context(), "new", now); err != nil {
		t.Fatal(err)
	}
	if ok, _ := s.Seen(t.Context(), "old"); ok {
		t.Fatal("id older than the retention is seen")
	}
	if ok, _ := s.Seen(t.Context(), "new"); !ok {
		t.Fatal("recorded id not seen")
	}
	s2, err := boltseen.Open(db, "seen", time.Hour, clock)
	if err != nil {
		t.Fatal(err)
	}
	if n, _ := s2.Len(); n != 1 {
		t.Fatalf("after reopen %d ids stored, want 1 (the old one pruned)", n)
	}
}

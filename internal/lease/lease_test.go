package lease_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/goleak"

	"github.com/switchboard-chat/switchboard/internal/lease"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// ttl is short so that expiry tests finish quickly; waits are bounded by
// deadline, never by the TTL itself.
const (
	ttl      = time.Second
	deadline = 15 * time.Second
)

func startServer(t *testing.T) *server.Server {
	t.Helper()
	s, err := server.NewServer(&server.Options{ServerName: "lease-test", Host: "127.0.0.1", Port: server.RANDOM_PORT,
		JetStream: true, StoreDir: t.TempDir(), NoSigs: true, NoLog: true})
	if err != nil {
		t.Fatalf("new server: %v", err)
	}
	s.Start()
	t.Cleanup(func() { s.Shutdown(); s.WaitForShutdown() })
	if !s.ReadyForConnections(10 * time.Second) {
		t.Fatal("server not ready")
	}
	return s
}

func connect(t *testing.T, s *server.Server) *nats.Conn {
	t.Helper()
	nc, err := nats.Connect(s.ClientURL())
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	t.Cleanup(nc.Close)
	return nc
}

// bucket opens the test bucket (TTL ttl) on nc.
func bucket(t *testing.T, nc *nats.Conn) jetstream.KeyValue {
	t.Helper()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	kv, err := js.CreateOrUpdateKeyValue(t.Context(), jetstream.KeyValueConfig{Bucket: "leases", TTL: ttl, History: 1})
	if err != nil {
		t.Fatalf("bucket: %v", err)
	}
	return kv
}

// holder runs a Lease in a goroutine and reports what its fn does.
type holder struct {
	started chan context.Context // fn's ctx, each time fn starts
	standby chan struct{}        // each time Run stands by
	done    chan error           // Run's result
	cancel  context.CancelFunc
}

// running counts fns running at once across holders of one test.
type running struct {
	now, max atomic.Int32
}

func (r *running) enter() {
	n := r.now.Add(1)
	for {
		m := r.max.Load()
		if n <= m || r.max.CompareAndSwap(m, n) {
			return
		}
	}
}

func startHolder(t *testing.T, kv jetstream.KeyValue, name string, rn *running) *holder {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	h := &holder{started: make(chan context.Context, 16), standby: make(chan struct{}, 16), done: make(chan error, 1), cancel: cancel}
	l := lease.Lease{KV: kv, Key: "work", Holder: name, TTL: ttl, OnStandby: func() { h.standby <- struct{}{} }}
	go func() {
		h.done <- l.Run(ctx, func(ctx context.Context) error {
			if rn != nil {
				rn.enter()
				defer rn.now.Add(-1)
			}
			h.started <- ctx
			<-ctx.Done()
			return ctx.Err()
		})
	}()
	t.Cleanup(func() { h.stop(t) })
	return h
}

// stop cancels Run and waits for it (idempotent).
func (h *holder) stop(t *testing.T) {
	t.Helper()
	h.cancel()
	select {
	case err, ok := <-h.done:
		if ok && err != nil {
			t.Errorf("Run: %v", err)
		}
		if ok {
			close(h.done)
		}
	case <-time.After(deadline):
		t.Fatal("Run did not return after its ctx ended")
	}
}

func recv[T any](t *testing.T, c <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-c:
		return v
	case <-time.After(deadline):
		t.Fatalf("timed out waiting for %s", what)
		panic("unreachable")
	}
}

func waitDone(t *testing.T, ctx context.Context, what string) {
	t.Helper()
	select {
	case <-ctx.Done():
	case <-time.After(deadline):
		t.Fatalf("timed out waiting for %s", what)
	}
}

// watchPuts reports every put on the key.
func watchPuts(t *testing.T, kv jetstream.KeyValue) <-chan jetstream.KeyValueEntry {
	t.Helper()
	w, err := kv.Watch(t.Context(), "work", jetstream.UpdatesOnly(), jetstream.IgnoreDeletes())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = w.Stop() })
	return w.Updates()
}

// TestAcquireRenewRelease: the holder runs fn, renews the key past its TTL
// (the key would have expired otherwise) and deletes it when stopped.
func TestAcquireRenewRelease(t *testing.T) {
	kv := bucket(t, connect(t, startServer(t)))
	puts := watchPuts(t, kv)
	h := startHolder(t, kv, "a", nil)
	fctx := recv(t, h.started, "fn to start")
	first := time.Now()
	var last jetstream.KeyValueEntry
	for time.Since(first) < 2*ttl { // renewals keep it alive past two TTLs
		last = recv(t, puts, "a renewal")
	}
	e, err := kv.Get(t.Context(), "work")
	if err != nil {
		t.Fatalf("key after two TTLs of renewals: %v", err)
	}
	if e.Revision() < last.Revision() || string(e.Value()) != string(last.Value()) {
		t.Fatalf("key %d %q, last renewal %d %q", e.Revision(), e.Value(), last.Revision(), last.Value())
	}
	h.stop(t)
	waitDone(t, fctx, "fn's ctx to end on stop")
	if _, err := kv.Get(t.Context(), "work"); !errors.Is(err, jetstream.ErrKeyNotFound) {
		t.Fatalf("key after stop: %v, want it released (not found)", err)
	}
}

// TestSecondHolderWaits: a second holder stands by while the first runs,
// through the first's renewals; stopping the first hands over at once.
func TestSecondHolderWaits(t *testing.T) {
	s := startServer(t)
	kvA, kvB := bucket(t, connect(t, s)), bucket(t, connect(t, s))
	var rn running
	a := startHolder(t, kvA, "a", &rn)
	recv(t, a.started, "a to start")
	puts := watchPuts(t, kvA)
	b := startHolder(t, kvB, "b", &rn)
	recv(t, b.standby, "b to stand by")
	for range 4 { // a renews across more than a TTL; b must not start
		recv(t, puts, "a renewal")
		select {
		case <-b.started:
			t.Fatal("b started while a held the lease")
		default:
		}
	}
	a.stop(t)
	recv(t, b.started, "b to take over after a's release")
	if m := rn.max.Load(); m != 1 {
		t.Fatalf("%d fns ran at once, want 1", m)
	}
}

// TestHolderConnectionClosed: the holder's connection dies; its fn is
// cancelled (the renewal fails) and the other instance takes over once the
// key expired.
func TestHolderConnectionClosed(t *testing.T) {
	s := startServer(t)
	ncA := connect(t, s)
	kvA, kvB := bucket(t, ncA), bucket(t, connect(t, s))
	var rn running
	a := startHolder(t, kvA, "a", &rn)
	actx := recv(t, a.started, "a to start")
	b := startHolder(t, kvB, "b", &rn)
	recv(t, b.standby, "b to stand by")
	ncA.Close()
	waitDone(t, actx, "a's fn to be cancelled when its renewal fails")
	recv(t, b.started, "b to take over after the TTL")
	if m := rn.max.Load(); m != 1 {
		t.Fatalf("%d fns ran at once, want 1", m)
	}
}

// TestDeadHolderExpires: a key written by a holder that never renews (a
// killed process) expires after the TTL and the waiting holder takes it.
func TestDeadHolderExpires(t *testing.T) {
	kv := bucket(t, connect(t, startServer(t)))
	if _, err := kv.Create(t.Context(), "work", []byte("dead 0")); err != nil {
		t.Fatal(err)
	}
	b := startHolder(t, kv, "b", nil)
	recv(t, b.standby, "b to stand by")
	recv(t, b.started, "b to take over after the dead holder's TTL")
	e, err := kv.Get(t.Context(), "work")
	if err != nil || string(e.Value()[:2]) != "b " {
		t.Fatalf("key after takeover: %v %q", err, e.Value())
	}
}

// TestChangedHandsCancelsFn: a write that is not the holder's (an operator
// overwrote the key) cancels fn at once; the holder stands by and takes
// the lease again when the key is deleted.
func TestChangedHandsCancelsFn(t *testing.T) {
	kv := bucket(t, connect(t, startServer(t)))
	a := startHolder(t, kv, "a", nil)
	actx := recv(t, a.started, "a to start")
	if _, err := kv.Put(t.Context(), "work", []byte("intruder 1")); err != nil {
		t.Fatal(err)
	}
	waitDone(t, actx, "a's fn to be cancelled when the key changed hands")
	recv(t, a.standby, "a to stand by")
	if err := kv.Delete(t.Context(), "work"); err != nil {
		t.Fatal(err)
	}
	recv(t, a.started, "a to acquire again after the delete")
}

// TestFnReturnsReleases: fn returning on its own ends Run with its error
// and releases the key.
func TestFnReturnsReleases(t *testing.T) {
	kv := bucket(t, connect(t, startServer(t)))
	boom := errors.New("token rejected")
	l := lease.Lease{KV: kv, Key: "work", Holder: "a", TTL: ttl}
	if err := l.Run(t.Context(), func(context.Context) error { return boom }); !errors.Is(err, boom) {
		t.Fatalf("Run = %v, want %v", err, boom)
	}
	if _, err := kv.Get(t.Context(), "work"); !errors.Is(err, jetstream.ErrKeyNotFound) {
		t.Fatalf("key after fn returned: %v, want released", err)
	}
}

// fakeChannel counts its Runs and how many run at once.
type fakeChannel struct {
	rn      *running
	runs    atomic.Int32
	started chan struct{}
}

func (f *fakeChannel) Name() string { return "fake" }

func (f *fakeChannel) Run(ctx context.Context) error {
	f.runs.Add(1)
	f.rn.enter()
	defer f.rn.now.Add(-1)
	f.started <- struct{}{}
	<-ctx.Done()
	return nil
}

// TestChannelRunsOnce: two instances wrap the same channel (same token) on
// one NATS; only one runs at a time, stopping it hands over; another token
// is another lease; without leases (bolt) the channel is not wrapped.
func TestChannelRunsOnce(t *testing.T) {
	s := startServer(t)
	open := func() *lease.Leases {
		ls, err := lease.Open(t.Context(), connect(t, s), lease.Config{Prefix: "sb", TTL: ttl}, nil)
		if err != nil {
			t.Fatalf("Open: %v", err)
		}
		return ls
	}
	ls1, ls2 := open(), open()
	var rn running
	c1 := &fakeChannel{rn: &rn, started: make(chan struct{}, 4)}
	c2 := &fakeChannel{rn: &rn, started: make(chan struct{}, 4)}
	ready2 := make(chan struct{}, 16)
	w1 := ls1.Channel(c1, "telegram", "123:tok", nil)
	w2 := ls2.Channel(c2, "telegram", "123:tok", func(err error) {
		if err == nil {
			select {
			case ready2 <- struct{}{}:
			default:
			}
		}
	})
	if w1.Name() != "fake" {
		t.Fatalf("wrapped name %q", w1.Name())
	}
	ctx1, stop1 := context.WithCancel(t.Context())
	var wg sync.WaitGroup
	defer wg.Wait()
	ctx2, stop2 := context.WithCancel(t.Context())
	defer stop2()
	defer stop1()
	wg.Go(func() { _ = w1.Run(ctx1) })
	recv(t, c1.started, "the first instance's channel to run")
	wg.Go(func() { _ = w2.Run(ctx2) })
	// The second instance stands by and is ready meanwhile.
	recv(t, ready2, "the standby instance to report ready")
	if n := c2.runs.Load(); n != 0 {
		t.Fatalf("second channel ran %d times while the first held the lease", n)
	}
	stop1()
	recv(t, c2.started, "the second instance to take over")
	if m := rn.max.Load(); m != 1 || c1.runs.Load() != 1 || c2.runs.Load() != 1 {
		t.Fatalf("max at once %d, runs %d/%d, want 1, 1/1", m, c1.runs.Load(), c2.runs.Load())
	}

	// Another bot token is another lease: it runs beside the first.
	c3 := &fakeChannel{rn: &running{}, started: make(chan struct{}, 4)}
	wg.Go(func() { _ = ls1.Channel(c3, "telegram", "456:other", nil).Run(ctx2) })
	recv(t, c3.started, "a second bot to run under its own lease")

	var none *lease.Leases
	if got := none.Channel(c1, "telegram", "123:tok", nil); got != lease.Runner(c1) {
		t.Fatal("nil Leases (one instance) must not wrap the channel")
	}
	if lease.Key("telegram", "a") == lease.Key("telegram", "b") || lease.Key("openai", "") != "openai" {
		t.Fatal("Key must tell tokens apart and keep a bare name")
	}
}

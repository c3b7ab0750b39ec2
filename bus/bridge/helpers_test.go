package bridge

import (
	"context"
	"encoding/json"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/goleak"

	"github.com/switchboard-chat/switchboard/bus"
	"github.com/switchboard-chat/switchboard/bus/bustest"
	"github.com/switchboard-chat/switchboard/bus/natsbus"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// waitTimeout bounds every wait for an event in these tests.
const waitTimeout = 10 * time.Second

// env is a JetStream server with the bus streams and a test connection.
type env struct {
	s    *server.Server
	nc   *nats.Conn
	js   jetstream.JetStream
	subj bus.Subjects
}

// newEnv starts a server (bustest.StartServer) and creates the streams of
// prefix "chat" with the daemon's configurations.
func newEnv(t *testing.T) *env {
	t.Helper()
	s := bustest.StartServer(t)
	nc := bustest.Connect(t, s)
	return &env{s: s, nc: nc, js: createStreams(t, nc, "chat"), subj: bus.Subjects{Prefix: "chat"}}
}

func createStreams(t *testing.T, nc *nats.Conn, prefix string) jetstream.JetStream {
	t.Helper()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatalf("jetstream: %v", err)
	}
	for _, cfg := range natsbus.StreamConfigs(prefix) {
		if _, err := js.CreateStream(t.Context(), cfg); err != nil {
			t.Fatalf("create stream %s: %v", cfg.Name, err)
		}
	}
	return js
}

// newClient returns a Client over the env's connection with fast retries.
func (e *env) newClient(t *testing.T, opts Options) *Client {
	t.Helper()
	if opts.Channel == "" {
		opts.Channel = "tg"
	}
	if opts.Backoff == nil {
		opts.Backoff = func(int) time.Duration { return time.Millisecond }
	}
	c, err := New(e.nc, opts)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// out builds a valid outbound envelope of channel "tg".
func out(id, chat, thread, inReplyTo, kind string, seq int, final bool) bus.Outbound {
	return bus.Outbound{V: 1, ID: id, Channel: "tg", ChatID: chat, ThreadID: thread, InReplyTo: inReplyTo,
		Kind: kind, Text: "text of " + id, Seq: seq, Final: final}
}

// publishOut publishes o on its outbound subject through JetStream.
func (e *env) publishOut(t *testing.T, o bus.Outbound) {
	t.Helper()
	data, err := json.Marshal(o)
	if err != nil {
		t.Fatal(err)
	}
	e.publishRaw(t, e.subj.Out(o.Channel, o.ChatID), data)
}

func (e *env) publishRaw(t *testing.T, subject string, data []byte) {
	t.Helper()
	if _, err := e.js.Publish(t.Context(), subject, data); err != nil {
		t.Fatalf("publish %s: %v", subject, err)
	}
}

// consumerInfo returns the durable consumer's state.
func (e *env) consumerInfo(t *testing.T, durable string) *jetstream.ConsumerInfo {
	t.Helper()
	cons, err := e.js.Consumer(t.Context(), "CHAT_OUT", durable)
	if err != nil {
		t.Fatalf("consumer %s: %v", durable, err)
	}
	info, err := cons.Info(t.Context())
	if err != nil {
		t.Fatalf("consumer info %s: %v", durable, err)
	}
	return info
}

// waitSettled polls the durable consumer (server state the test cannot be
// notified of: acks are processed asynchronously) until nothing is pending
// or waiting for an ack, and returns its last state.
func (e *env) waitSettled(t *testing.T, durable string) *jetstream.ConsumerInfo {
	t.Helper()
	deadline := time.Now().Add(waitTimeout)
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		info := e.consumerInfo(t, durable)
		if info.NumAckPending == 0 && info.NumPending == 0 {
			return info
		}
		if time.Now().After(deadline) {
			t.Fatalf("consumer %s: %d ack pending, %d pending after %s; want 0, 0", durable, info.NumAckPending, info.NumPending, waitTimeout)
		}
		<-tick.C
	}
}

// recorder records handled envelopes and signals each one.
type recorder struct {
	mu      sync.Mutex
	got     []bus.Outbound
	changed chan struct{}
}

func newRecorder() *recorder { return &recorder{changed: make(chan struct{})} }

func (r *recorder) add(o bus.Outbound) {
	r.mu.Lock()
	r.got = append(r.got, o)
	close(r.changed)
	r.changed = make(chan struct{})
	r.mu.Unlock()
}

func (r *recorder) all() []bus.Outbound {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]bus.Outbound(nil), r.got...)
}

// waitN waits until at least n envelopes were recorded and returns them.
func (r *recorder) waitN(t *testing.T, n int) []bus.Outbound {
	t.Helper()
	timer := time.NewTimer(waitTimeout)
	defer timer.Stop()
	for {
		r.mu.Lock()
		got, changed := append([]bus.Outbound(nil), r.got...), r.changed
		r.mu.Unlock()
		if len(got) >= n {
			return got
		}
		select {
		case <-changed:
		case <-timer.C:
			t.Fatalf("handled %d envelopes within %s, want %d: %v", len(got), waitTimeout, n, ids(got))
			return nil
		}
	}
}

func ids(outs []bus.Outbound) []string {
	s := make([]string, len(outs))
	for i, o := range outs {
		s[i] = o.ID
	}
	return s
}

// consuming runs c.ConsumeOutbound(h) in a goroutine. stop cancels it and
// returns its result; cleanup stops it if the test did not.
type consuming struct {
	cancel context.CancelFunc
	errc   chan error
	once   sync.Once
	err    error
}

func startConsume(t *testing.T, c *Client, h Handler) *consuming {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	r := &consuming{cancel: cancel, errc: make(chan error, 1)}
	go func() { r.errc <- c.ConsumeOutbound(ctx, h) }()
	t.Cleanup(func() { _ = r.stop(t) })
	return r
}

func (r *consuming) stop(t *testing.T) error {
	t.Helper()
	r.once.Do(func() {
		r.cancel()
		select {
		case r.err = <-r.errc:
		case <-time.After(waitTimeout):
			t.Fatalf("ConsumeOutbound did not return within %s of cancel", waitTimeout)
		}
	})
	return r.err
}

// waitDone waits for ConsumeOutbound to return on its own.
func (r *consuming) waitDone(t *testing.T) error {
	t.Helper()
	select {
	case err := <-r.errc:
		r.once.Do(func() { r.err = err })
		return err
	case <-time.After(waitTimeout):
		t.Fatalf("ConsumeOutbound did not return within %s", waitTimeout)
		return nil
	}
}

// waitClosed waits for ch to be closed.
func waitClosed(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(waitTimeout):
		t.Fatalf("timed out after %s waiting for %s", waitTimeout, what)
	}
}

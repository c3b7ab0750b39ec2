// Package bustest provides helpers for tests that talk to the bus: a real
// nats-server with JetStream on a random local port, connections, a
// collector of published messages, and an inbound publisher; and
// [RunSourcePublisher], the conformance suite of the agent runtime's bus
// (agent.Source and agent.Publisher, restated here as [Source] and
// [Publisher] since bus does not import agent) that both the NATS bus and
// the in-memory agenttest.Bus pass.
//
// Every helper takes a testing.TB, fails the test (never panics) on error,
// and registers its own cleanup. Helpers that fail the test must be called
// from the test's goroutine.
package bustest

import (
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/switchboard-chat/switchboard/bus"
	"github.com/switchboard-chat/switchboard/bus/natsbus"
)

// StartServer starts a nats-server with JetStream on 127.0.0.1 and a random
// port, storing under t.TempDir(). Cleanup shuts it down and waits for it.
// Its client URL is s.ClientURL().
func StartServer(t testing.TB) *server.Server {
	t.Helper()
	return StartServerIn(t, t.TempDir())
}

// StartServerIn is [StartServer] storing under dir: a server started again
// on the same dir finds what the last one stored (a restart).
func StartServerIn(t testing.TB, dir string) *server.Server {
	t.Helper()
	opts := &server.Options{
		ServerName: "bustest",
		Host:       "127.0.0.1",
		Port:       server.RANDOM_PORT,
		JetStream:  true,
		StoreDir:   dir,
		NoSigs:     true,
		NoLog:      true,
	}
	s, err := server.NewServer(opts)
	if err != nil {
		t.Fatalf("bustest: new server: %v", err)
	}
	s.Start()
	t.Cleanup(func() {
		s.Shutdown()
		s.WaitForShutdown()
	})
	if !s.ReadyForConnections(10 * time.Second) {
		t.Fatalf("bustest: server not ready for connections")
	}
	return s
}

// Connect connects to s over TCP; cleanup closes the connection.
func Connect(t testing.TB, s *server.Server) *nats.Conn {
	t.Helper()
	nc, err := nats.Connect(s.ClientURL(), nats.Name("bustest"))
	if err != nil {
		t.Fatalf("bustest: connect %s: %v", s.ClientURL(), err)
	}
	t.Cleanup(nc.Close)
	return nc
}

// Streams creates the daemon's streams (natsbus.StreamConfigs, subject
// prefix "chat") on nc's server, as a daemon would at start, and returns
// the JetStream context.
func Streams(t testing.TB, nc *nats.Conn) jetstream.JetStream {
	t.Helper()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	for _, cfg := range natsbus.StreamConfigs("chat") {
		if _, err := js.CreateStream(t.Context(), cfg); err != nil {
			t.Fatalf("create stream %s: %v", cfg.Name, err)
		}
	}
	return js
}

// PublishInbound publishes in on its inbound subject through JetStream with
// the Nats-Msg-Id "<channel>:<id>" and waits for the stream's
// acknowledgement (a de-duplicated publish counts as success). A stream must
// capture the subject (natsbus creates it).
func PublishInbound(t testing.TB, nc *nats.Conn, subj bus.Subjects, in bus.Inbound) {
	t.Helper()
	data, err := json.Marshal(in)
	if err != nil {
		t.Fatalf("bustest: marshal inbound: %v", err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatalf("bustest: jetstream: %v", err)
	}
	subject := subj.In(in.Channel, in.ChatID)
	if _, err := js.Publish(t.Context(), subject, data, jetstream.WithMsgID(in.DedupKey())); err != nil {
		t.Fatalf("bustest: publish inbound %s on %s: %v", in.DedupKey(), subject, err)
	}
}

// Collector records every message a core subscription receives. It is safe
// for concurrent use.
type Collector struct {
	sub *nats.Subscription

	mu      sync.Mutex
	msgs    []*nats.Msg
	changed chan struct{} // closed and replaced on every new message
}

// Collect subscribes to subject (wildcards allowed) with core NATS and
// records what arrives from the moment it returns (the subscription is
// flushed to the server). Cleanup unsubscribes.
func Collect(t testing.TB, nc *nats.Conn, subject string) *Collector {
	t.Helper()
	c := &Collector{changed: make(chan struct{})}
	sub, err := nc.Subscribe(subject, func(m *nats.Msg) {
		c.mu.Lock()
		c.msgs = append(c.msgs, m)
		close(c.changed)
		c.changed = make(chan struct{})
		c.mu.Unlock()
	})
	if err != nil {
		t.Fatalf("bustest: subscribe %s: %v", subject, err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	if err := nc.Flush(); err != nil {
		t.Fatalf("bustest: flush subscription %s: %v", subject, err)
	}
	c.sub = sub
	return c
}

// All returns a snapshot of the messages received so far, in arrival order.
func (c *Collector) All() []*nats.Msg {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]*nats.Msg(nil), c.msgs...)
}

// WaitFor returns the first message, in arrival order, for which pred is
// true, waiting up to timeout for it to arrive. At the deadline it fails the
// test, listing what was received.
func (c *Collector) WaitFor(t testing.TB, timeout time.Duration, pred func(*nats.Msg) bool) *nats.Msg {
	t.Helper()
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	seen := 0
	for {
		c.mu.Lock()
		msgs, changed := c.msgs, c.changed
		c.mu.Unlock()
		for ; seen < len(msgs); seen++ {
			if pred(msgs[seen]) {
				return msgs[seen]
			}
		}
		select {
		case <-changed:
		case <-timer.C:
			t.Fatalf("bustest: no matching message on %s within %s; received %d:\n%s", c.sub.Subject, timeout, len(msgs), describe(msgs))
			return nil
		}
	}
}

// Outbounds decodes the received messages as outbound envelopes, skipping
// those that do not decode.
func (c *Collector) Outbounds() []bus.Outbound {
	var out []bus.Outbound
	for _, m := range c.All() {
		var o bus.Outbound
		if json.Unmarshal(m.Data, &o) == nil {
			out = append(out, o)
		}
	}
	return out
}

// DLQRecords decodes the received messages as dead-letter records; one
// that does not decode fails the test (a collector of a dead-letter
// subject receives nothing else).
func (c *Collector) DLQRecords(t testing.TB) []bus.DLQRecord {
	t.Helper()
	var recs []bus.DLQRecord
	for _, m := range c.All() {
		var r bus.DLQRecord
		if err := json.Unmarshal(m.Data, &r); err != nil {
			t.Fatalf("dead letter %q: %v", m.Data, err)
		}
		recs = append(recs, r)
	}
	return recs
}

// WaitOutbound returns the first received outbound envelope for which pred
// is true, waiting up to timeout; messages that do not decode as an
// outbound envelope never match. At the deadline it fails the test.
func (c *Collector) WaitOutbound(t testing.TB, timeout time.Duration, pred func(bus.Outbound) bool) bus.Outbound {
	t.Helper()
	var got bus.Outbound
	c.WaitFor(t, timeout, func(m *nats.Msg) bool {
		var o bus.Outbound
		if json.Unmarshal(m.Data, &o) != nil || !pred(o) {
			return false
		}
		got = o
		return true
	})
	return got
}

// describe lists messages for a failure report, each payload cut short.
func describe(msgs []*nats.Msg) string {
	const maxShown, maxData = 20, 200
	var b strings.Builder
	for i, m := range msgs {
		if i == maxShown {
			fmt.Fprintf(&b, "  ... and %d more\n", len(msgs)-maxShown)
			break
		}
		data := string(m.Data)
		if len(data) > maxData {
			data = data[:maxData] + "..."
		}
		fmt.Fprintf(&b, "  %s %s\n", m.Subject, data)
	}
	return b.String()
}

package openai

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	goopenai "github.com/sashabaranov/go-openai"
	"go.uber.org/goleak"

	"github.com/switchboard-chat/switchboard/bus"
	"github.com/switchboard-chat/switchboard/bus/bustest"
	"github.com/switchboard-chat/switchboard/bus/natsbus"
	"github.com/switchboard-chat/switchboard/internal/polltest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// wait bounds every wait of the tests.
const wait = 15 * time.Second

// Test keys (at least 16 bytes).
const (
	keyAnn = "sk-ann-0123456789abcdef"
	keyBob = "sk-bob-0123456789abcdef"
)

// env is a bus with the daemon's streams, a fake agent on it, and the
// channel's configuration and state path.
type env struct {
	nc    *nats.Conn
	js    jetstream.JetStream
	subj  bus.Subjects
	state string
	agent *fakeAgent
	logs  *syncBuffer
	// onStore, when set, is the started channels' store hook.
	onStore func(*store)
}

func newEnv(t *testing.T) *env {
	t.Helper()
	s := bustest.StartServer(t)
	nc := bustest.Connect(t, s)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	for _, cfg := range natsbus.StreamConfigs("chat") {
		if _, err := js.CreateStream(t.Context(), cfg); err != nil {
			t.Fatalf("create stream %s: %v", cfg.Name, err)
		}
	}
	e := &env{nc: nc, js: js, subj: bus.Subjects{Prefix: "chat"}, state: filepath.Join(t.TempDir(), "openai.db"), logs: &syncBuffer{}}
	e.agent = newFakeAgent(t, e)
	return e
}

func (e *env) config() Config {
	cfg := DefaultConfig()
	cfg.Listen = "127.0.0.1:0"
	cfg.Keys = []Key{{Key: keyAnn, User: "ann"}, {Key: keyBob, User: "bob"}}
	return cfg
}

// running is a channel started by start.
type running struct {
	c      *Channel
	url    string // http://host:port
	cancel context.CancelFunc
	done   chan error
	once   sync.Once
	err    error
}

// start runs a channel with cfg until the test ends (or stop).
func (e *env) start(t *testing.T, cfg Config, mod ...func(*Deps)) *running {
	t.Helper()
	addr := make(chan net.Addr, 1)
	deps := Deps{Conn: e.nc, Subjects: e.subj, StatePath: e.state, Log: slog.New(slog.NewTextHandler(e.logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
		Ready: func(a net.Addr) { addr <- a }}
	for _, m := range mod {
		m(&deps)
	}
	c, err := New(cfg, deps)
	if err != nil {
		t.Fatal(err)
	}
	c.onStore = e.onStore
	ctx, cancel := context.WithCancel(context.Background())
	r := &running{c: c, cancel: cancel, done: make(chan error, 1)}
	go func() { r.done <- c.Run(ctx) }()
	t.Cleanup(func() { _ = r.stop(t) })
	select {
	case a := <-addr:
		r.url = "http://" + a.String()
	case err := <-r.done:
		t.Fatalf("Run = %v before listening", err)
	case <-time.After(wait):
		t.Fatal("the channel did not listen")
	}
	e.waitConsumer(t)
	return r
}

func (r *running) stop(t *testing.T) error {
	t.Helper()
	r.once.Do(func() {
		r.cancel()
		select {
		case r.err = <-r.done:
		case <-time.After(wait):
			t.Errorf("Run did not return within %s of cancel", wait)
		}
	})
	return r.err
}

// waitConsumer waits until the channel's durable consumer exists (the
// server announces no such event: it looks every few milliseconds).
func (e *env) waitConsumer(t *testing.T) {
	t.Helper()
	polltest.Until(t, wait, 5*time.Millisecond, func() bool {
		_, err := e.js.Consumer(t.Context(), "CHAT_OUT", "bridge_"+Name)
		return err == nil
	}, func() string { return "the outbound consumer was never created; log:\n" + e.logs.String() })
}

// client is a go-openai client for the running channel with key.
func (r *running) client(key string) *goopenai.Client {
	cfg := goopenai.DefaultConfig(key)
	cfg.BaseURL = r.url + "/v1"
	return goopenai.NewClientWithConfig(cfg)
}

// script answers one inbound envelope: it returns what the agent
// publishes (deltas and typing through core NATS, finals through
// JetStream), or nil to answer nothing.
type script func(in bus.Inbound) []bus.Outbound

// fakeAgent stands for the agent runtime: it reads the channel's inbound
// envelopes with a core subscription and answers with its script.
type fakeAgent struct {
	e *env

	mu      sync.Mutex
	script  script
	seen    []bus.Inbound
	changed chan struct{}
}

func newFakeAgent(t *testing.T, e *env) *fakeAgent {
	a := &fakeAgent{e: e, changed: make(chan struct{}), script: func(in bus.Inbound) []bus.Outbound {
		return []bus.Outbound{reply(in, bus.KindReply, "echo: "+in.Text)}
	}}
	sub, err := e.nc.Subscribe(e.subj.Prefix+".in."+Name+".>", func(m *nats.Msg) {
		var in bus.Inbound
		if err := json.Unmarshal(m.Data, &in); err != nil {
			t.Errorf("fake agent: %v", err)
			return
		}
		a.mu.Lock()
		a.seen = append(a.seen, in)
		s := a.script
		close(a.changed)
		a.changed = make(chan struct{})
		a.mu.Unlock()
		for _, o := range s(in) {
			a.publish(t, o)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	return a
}

func (a *fakeAgent) set(s script) {
	a.mu.Lock()
	a.script = s
	a.mu.Unlock()
}

func (a *fakeAgent) inbounds() []bus.Inbound {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]bus.Inbound(nil), a.seen...)
}

// waitInbound waits until an inbound envelope satisfies pred.
func (a *fakeAgent) waitInbound(t *testing.T, what string, pred func(bus.Inbound) bool) bus.Inbound {
	t.Helper()
	deadline := time.After(wait)
	for {
		a.mu.Lock()
		ch := a.changed
		for _, in := range a.seen {
			if pred(in) {
				a.mu.Unlock()
				return in
			}
		}
		a.mu.Unlock()
		select {
		case <-ch:
		case <-deadline:
			t.Fatalf("no inbound %s within %s; got %+v", what, wait, a.inbounds())
		}
	}
}

func (a *fakeAgent) publish(t *testing.T, o bus.Outbound) {
	data, err := json.Marshal(o)
	if err != nil {
		t.Error(err)
		return
	}
	subject := a.e.subj.Out(o.Channel, o.ChatID)
	if !o.Final {
		if err := a.e.nc.Publish(subject, data); err != nil {
			t.Error(err)
		}
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	if _, err := a.e.js.Publish(ctx, subject, data, jetstream.WithMsgID(o.ID)); err != nil {
		t.Errorf("publish final: %v", err)
	}
}

// event publishes an agent event for in.
func (a *fakeAgent) event(t *testing.T, in bus.Inbound, typ string, data any) {
	raw, _ := json.Marshal(data)
	ev := bus.Event{V: 1, Type: typ, Session: in.SessionKey(), Channel: in.Channel, ChatID: in.ChatID, InReplyTo: in.ID, Time: time.Now(), Data: raw}
	b, _ := json.Marshal(ev)
	if err := a.e.nc.Publish(a.e.subj.Event(in.Channel, in.ChatID), b); err != nil {
		t.Error(err)
	}
}

var outSeq sync.Mutex
var outN int

// reply is an outbound envelope answering in; a final unless kind is
// delta or typing.
func reply(in bus.Inbound, kind, text string) bus.Outbound {
	outSeq.Lock()
	outN++
	n := outN
	outSeq.Unlock()
	final := kind != bus.KindDelta && kind != bus.KindTyping
	return bus.Outbound{V: 1, ID: fmt.Sprintf("%s.%d", in.ID, n), Channel: in.Channel, ChatID: in.ChatID, InReplyTo: in.ID,
		Kind: kind, Text: text, Seq: n, Final: final}
}

// syncBuffer is a bytes.Buffer safe for concurrent writers (the log).
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

package openai

import (
	"context"
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
	"github.com/switchboard-chat/switchboard/channels/channeltest"
	"github.com/switchboard-chat/switchboard/internal/polltest"
	"github.com/switchboard-chat/switchboard/internal/syncbuf"
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
	agent *channeltest.Agent
	logs  *syncbuf.Buffer
	// onStore, when set, is the started channels' store hook.
	onStore func(*store)
}

func newEnv(t *testing.T) *env {
	t.Helper()
	s := bustest.StartServer(t)
	nc := bustest.Connect(t, s)
	js := bustest.Streams(t, nc)
	e := &env{nc: nc, js: js, subj: bus.Subjects{Prefix: "chat"}, state: filepath.Join(t.TempDir(), "openai.db"), logs: &syncbuf.Buffer{}}
	e.agent = channeltest.NewAgent(t, e.nc, e.js, e.subj, Name, wait)
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

// reply is an outbound envelope answering in (channeltest.Reply).
func reply(in bus.Inbound, kind, text string) bus.Outbound { return channeltest.Reply(in, kind, text) }

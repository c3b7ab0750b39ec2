package telegram

import (
	"context"
	"encoding/json"
	"flag"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/goleak"
	"golang.org/x/time/rate"

	"github.com/switchboard-chat/switchboard/bus"
	"github.com/switchboard-chat/switchboard/bus/bridge"
	"github.com/switchboard-chat/switchboard/bus/bustest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var verbose = flag.Bool("tglog", false, "write the adapter's log to stderr")

// waitTimeout bounds every wait for an event in these tests.
const waitTimeout = 10 * time.Second

// env is a JetStream server with the bus streams, a fake Telegram, and a
// workspace folder.
type env struct {
	t      *testing.T
	nc     *nats.Conn
	js     jetstream.JetStream
	subj   bus.Subjects
	bot    *fakeBot
	dir    string
	root   *os.Root
	status *statusLog
	in     *bustest.Collector // every inbound publish
}

func newEnv(t *testing.T) *env {
	t.Helper()
	s := bustest.StartServer(t)
	nc := bustest.Connect(t, s)
	js := bustest.Streams(t, nc)
	// The consumer the adapter's bridge client uses, created up front with
	// the kit's settings but delivering from the start, so that outbound
	// messages published before the adapter runs are not missed.
	if _, err := js.CreateConsumer(t.Context(), "CHAT_OUT", jetstream.ConsumerConfig{
		Durable:       "bridge_telegram",
		Description:   "Switchboard bridge for channel telegram",
		FilterSubject: "chat.out.telegram.>",
		DeliverPolicy: jetstream.DeliverAllPolicy,
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       bridge.AckWait,
		MaxAckPending: bridge.MaxAckPending,
		MaxDeliver:    -1,
	}); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	ws := filepath.Join(dir, "workspace")
	if err := os.Mkdir(ws, 0o750); err != nil {
		t.Fatal(err)
	}
	root, err := os.OpenRoot(ws)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { root.Close() })
	return &env{t: t, nc: nc, js: js, subj: bus.Subjects{Prefix: "chat"}, bot: newFakeBot(t), dir: dir, root: root,
		status: &statusLog{changed: make(chan struct{})}, in: bustest.Collect(t, nc, "chat.in.>")}
}

// config is a valid polling configuration for the fake, allowing everyone.
func (e *env) config() Config {
	c := DefaultConfig()
	c.Token = fakeToken
	c.APIEndpoint = e.bot.endpoint()
	c.AllowUsers = UserList{"*"}
	c.PollTimeout = time.Second
	return c
}

func testLogger() *slog.Logger {
	if *verbose {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.DiscardHandler)
}

// newAdapter builds an adapter for e with fast clocks: retries after 5 ms,
// retry_after counted in milliseconds, no rate limits.
func (e *env) newAdapter(t *testing.T, cfg Config, deps Deps) *Adapter {
	t.Helper()
	deps.Conn = e.nc
	deps.Subjects = e.subj
	if deps.StatePath == "" {
		deps.StatePath = filepath.Join(e.dir, "telegram.db")
	}
	if deps.Files == nil {
		deps.Files = e.root
	}
	deps.Log = testLogger()
	deps.Status = e.status.record
	a, err := New(cfg, deps)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	a.tune.retryBackoff = func(int) time.Duration { return 5 * time.Millisecond }
	a.api.unit = time.Millisecond
	a.lim = newLimits(rate.Inf, rate.Inf, rate.Inf, 1)
	return a
}

// running is an adapter running in the background.
type running struct {
	cancel context.CancelFunc
	done   chan error
	once   sync.Once
	err    error
}

// run starts a.Run; the returned stop cancels it and returns Run's result.
// Cleanup stops it too.
func run(t *testing.T, a *Adapter) *running {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	r := &running{cancel: cancel, done: make(chan error, 1)}
	go func() { r.done <- a.Run(ctx) }()
	t.Cleanup(func() { r.stop(t) })
	return r
}

func (r *running) stop(t testing.TB) error {
	t.Helper()
	r.once.Do(func() {
		r.cancel()
		select {
		case r.err = <-r.done:
		case <-time.After(waitTimeout):
			t.Fatalf("Run did not return within %s of cancellation", waitTimeout)
		}
	})
	return r.err
}

// wait returns Run's result once it returns on its own.
func (r *running) wait(t testing.TB) error {
	t.Helper()
	select {
	case err := <-r.done:
		r.once.Do(func() { r.err = err })
		return err
	case <-time.After(waitTimeout):
		t.Fatalf("Run did not return within %s", waitTimeout)
		return nil
	}
}

// statusLog records what the adapter reports through Deps.Status.
type statusLog struct {
	mu      sync.Mutex
	errs    []error // nil entries are "healthy"
	changed chan struct{}
}

func (s *statusLog) record(err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.errs = append(s.errs, err)
	close(s.changed)
	s.changed = make(chan struct{})
}

// waitFor waits until some reported status satisfies pred.
func (s *statusLog) waitFor(t testing.TB, what string, pred func(error) bool) error {
	t.Helper()
	timer := time.NewTimer(waitTimeout)
	defer timer.Stop()
	for {
		s.mu.Lock()
		errs, ch := append([]error(nil), s.errs...), s.changed
		s.mu.Unlock()
		for _, err := range errs {
			if pred(err) {
				return err
			}
		}
		select {
		case <-ch:
		case <-timer.C:
			t.Fatalf("no status %s; got %v", what, errs)
			return nil
		}
	}
}

// inbound returns the messages stored in CHAT_IN, in order, with their
// Nats-Msg-Id headers.
func (e *env) inbound(t testing.TB) ([]bus.Inbound, []string) {
	t.Helper()
	st, err := e.js.Stream(t.Context(), "CHAT_IN")
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	var ins []bus.Inbound
	var ids []string
	for seq := info.State.FirstSeq; seq <= info.State.LastSeq && info.State.Msgs > 0; seq++ {
		m, err := st.GetMsg(t.Context(), seq)
		if err != nil {
			continue // deleted
		}
		var in bus.Inbound
		if err := json.Unmarshal(m.Data, &in); err != nil {
			t.Fatalf("CHAT_IN seq %d: %v", seq, err)
		}
		ins = append(ins, in)
		ids = append(ids, m.Header.Get(bus.HeaderMsgID))
	}
	return ins, ids
}

// waitPublished waits until the adapter has published at least n inbound
// messages (as seen by a core subscriber: re-publications the stream
// drops as duplicates are seen too) and returns them in order.
func (e *env) waitPublished(t testing.TB, n int) []bus.Inbound {
	t.Helper()
	var ins []bus.Inbound
	e.in.WaitFor(t, waitTimeout, func(*nats.Msg) bool {
		ins = ins[:0]
		for _, m := range e.in.All() {
			var in bus.Inbound
			if err := json.Unmarshal(m.Data, &in); err != nil {
				t.Fatalf("published inbound %s: %v", m.Data, err)
			}
			ins = append(ins, in)
		}
		return len(ins) >= n
	})
	return ins
}

// publishOut publishes an outbound envelope through JetStream, as the
// runtime does.
func (e *env) publishOut(t testing.TB, o bus.Outbound) {
	t.Helper()
	if o.V == 0 {
		o.V = bus.Version
	}
	o.Channel = Name
	data, err := json.Marshal(o)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.js.Publish(t.Context(), e.subj.Out(o.Channel, o.ChatID), data, jetstream.WithMsgID(o.ID)); err != nil {
		t.Fatalf("publish outbound %s: %v", o.ID, err)
	}
}

// runtimeStub stands in for the agent runtime: it consumes CHAT_IN and
// answers every inbound envelope with the outbound envelopes answer
// returns, published through JetStream on the chat's outbound subject.
type runtimeStub struct {
	mu      sync.Mutex
	seen    []bus.Inbound
	changed chan struct{}
}

func (e *env) startRuntime(t *testing.T, answer func(in bus.Inbound) []bus.Outbound) *runtimeStub {
	t.Helper()
	rs := &runtimeStub{changed: make(chan struct{})}
	cons, err := e.js.CreateConsumer(t.Context(), "CHAT_IN", jetstream.ConsumerConfig{
		Durable: "runtime", AckPolicy: jetstream.AckExplicitPolicy, FilterSubject: "chat.in.>",
	})
	if err != nil {
		t.Fatal(err)
	}
	cc, err := cons.Consume(func(m jetstream.Msg) {
		var in bus.Inbound
		if err := json.Unmarshal(m.Data(), &in); err != nil {
			_ = m.Term()
			return
		}
		for _, o := range answer(in) {
			o.V, o.Channel, o.ChatID, o.ThreadID, o.InReplyTo = bus.Version, in.Channel, in.ChatID, in.ThreadID, in.ID
			o.Meta = in.Meta
			data, _ := json.Marshal(o)
			if _, err := e.js.Publish(context.Background(), e.subj.Out(o.Channel, o.ChatID), data, jetstream.WithMsgID(o.ID)); err != nil {
				_ = m.Nak()
				return
			}
		}
		_ = m.Ack()
		rs.mu.Lock()
		rs.seen = append(rs.seen, in)
		close(rs.changed)
		rs.changed = make(chan struct{})
		rs.mu.Unlock()
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cc.Stop)
	return rs
}

// waitSeen waits until the stub answered n inbound messages.
func (rs *runtimeStub) waitSeen(t testing.TB, n int) []bus.Inbound {
	t.Helper()
	timer := time.NewTimer(waitTimeout)
	defer timer.Stop()
	for {
		rs.mu.Lock()
		seen, ch := append([]bus.Inbound(nil), rs.seen...), rs.changed
		rs.mu.Unlock()
		if len(seen) >= n {
			return seen
		}
		select {
		case <-ch:
		case <-timer.C:
			t.Fatalf("runtime stub saw %d inbound messages, want %d", len(seen), n)
			return nil
		}
	}
}

// Update builders, in Telegram's JSON shapes.

func user(id int64, first, username string) map[string]any {
	u := map[string]any{"id": id, "is_bot": false, "first_name": first}
	if username != "" {
		u["username"] = username
	}
	return u
}

func privateMsg(msgID int, from map[string]any, text string) map[string]any {
	id := from["id"]
	return map[string]any{"message": map[string]any{
		"message_id": msgID, "date": 1700000000, "text": text, "from": from,
		"chat": map[string]any{"id": id, "type": "private", "first_name": from["first_name"]},
	}}
}

func groupMsg(msgID int, chat int64, from map[string]any, text string, entities ...map[string]any) map[string]any {
	m := map[string]any{
		"message_id": msgID, "date": 1700000000, "text": text, "from": from,
		"chat": map[string]any{"id": chat, "type": "supergroup", "title": "Team"},
	}
	if len(entities) > 0 {
		m["entities"] = entities
	}
	return map[string]any{"message": m}
}

func entity(typ string, offset, length int) map[string]any {
	return map[string]any{"type": typ, "offset": offset, "length": length}
}

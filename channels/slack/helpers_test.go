package slack

import (
	"context"
	"encoding/json"
	"flag"
	"net"
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
	"github.com/switchboard-chat/switchboard/bus/bustest"
)

var update = flag.Bool("update", false, "update golden files")

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// waitTimeout bounds every wait for an event in these tests.
const waitTimeout = 10 * time.Second

// clock is a settable clock for the adapter's now hook.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) Add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// sleeps records the waits the adapter asked for, without waiting.
type sleeps struct {
	mu sync.Mutex
	d  []time.Duration
}

func (s *sleeps) sleep(ctx context.Context, d time.Duration) error {
	s.mu.Lock()
	s.d = append(s.d, d)
	s.mu.Unlock()
	return ctx.Err()
}

func (s *sleeps) all() []time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]time.Duration(nil), s.d...)
}

// env is a NATS server with the bus streams, a fake Slack and a
// workspace folder.
type env struct {
	t     *testing.T
	nc    *nats.Conn
	js    jetstream.JetStream
	subj  bus.Subjects
	slack *fakeSlack
	root  *os.Root
	store string // slack.db path
	clock *clock
	naps  *sleeps
}

func newEnv(t *testing.T) *env {
	t.Helper()
	s := bustest.StartServer(t)
	nc := bustest.Connect(t, s)
	js := bustest.Streams(t, nc)
	dir := t.TempDir()
	root, err := os.OpenRoot(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = root.Close() })
	return &env{
		t: t, nc: nc, js: js, subj: bus.Subjects{Prefix: "chat"}, slack: newFakeSlack(t), root: root,
		store: filepath.Join(t.TempDir(), "slack.db"),
		clock: &clock{t: time.Date(2026, 3, 1, 10, 0, 0, 0, time.UTC)},
		naps:  &sleeps{},
	}
}

// config returns a socket mode configuration against the fake that
// allows everyone.
func (e *env) config() Config {
	return Config{AppToken: appToken, BotToken: botToken, APIURL: e.slack.apiURL(), AllowUsers: []string{"*"}}
}

// adapter builds an adapter with test hooks: the env's clock and sleep
// recorder, no post pacing, fast retries.
func (e *env) adapter(cfg Config) *Adapter {
	e.t.Helper()
	a, err := New(cfg, Options{Conn: e.nc, Inbox: e.root, StorePath: e.store})
	if err != nil {
		e.t.Fatalf("New: %v", err)
	}
	a.now = e.clock.Now
	a.sleep = e.naps.sleep
	a.rate = rate.Inf
	a.backoff = func(int) time.Duration { return time.Millisecond }
	a.kitBackoff = func(int) time.Duration { return time.Millisecond }
	a.pingInterval = 5 * time.Second
	return a
}

// running is an adapter whose Run goroutine the test owns.
type running struct {
	a      *Adapter
	cancel context.CancelFunc
	done   chan error
	addr   net.Addr // http mode
}

// start runs a and waits until it serves: the outbound consumer exists
// and, in socket mode, the websocket is connected (in http mode, the
// server listens). Cleanup stops it and checks that Run returned nil.
func (e *env) start(a *Adapter) *running {
	e.t.Helper()
	ctx, cancel := context.WithCancel(context.WithoutCancel(e.t.Context()))
	r := &running{a: a, cancel: cancel, done: make(chan error, 1)}
	listening := make(chan net.Addr, 1)
	a.onListen = func(addr net.Addr) { listening <- addr }
	e.slack.mu.Lock()
	conns := e.slack.conns
	e.slack.mu.Unlock()
	go func() { r.done <- a.Run(ctx) }()
	e.t.Cleanup(func() { r.stop(e.t) })
	if a.cfg.Mode == ModeHTTP {
		select {
		case r.addr = <-listening:
		case err := <-r.done:
			e.t.Fatalf("Run returned early: %v", err)
		case <-time.After(waitTimeout):
			e.t.Fatal("http server did not start")
		}
	} else {
		e.slack.waitFor(e.t, "a socket mode connection", func() bool { return e.slack.conns > conns })
	}
	e.waitConsumer()
	return r
}

// stop cancels Run and checks it returned nil; it is idempotent.
func (r *running) stop(t *testing.T) {
	t.Helper()
	r.cancel()
	select {
	case err, ok := <-r.done:
		if ok && err != nil {
			t.Errorf("Run returned %v, want nil", err)
		}
		if ok {
			close(r.done)
		}
	case <-time.After(waitTimeout):
		t.Fatal("Run did not return after cancel")
	}
}

// waitConsumer polls (server state with no notification) until the
// adapter's durable outbound consumer exists, so that outbound messages
// published next reach it.
func (e *env) waitConsumer() {
	e.t.Helper()
	deadline := time.Now().Add(waitTimeout)
	for {
		if _, err := e.js.Consumer(e.t.Context(), "CHAT_OUT", "bridge_slack"); err == nil {
			return
		}
		if time.Now().After(deadline) {
			e.t.Fatal("outbound consumer bridge_slack was not created")
		}
		tick := time.NewTimer(5 * time.Millisecond)
		<-tick.C
	}
}

// collectIn records the inbound messages of channel slack.
func (e *env) collectIn() *bustest.Collector {
	return bustest.Collect(e.t, e.nc, "chat.in.slack.>")
}

// inbound decodes a collected inbound message.
func inbound(t testing.TB, m *nats.Msg) bus.Inbound {
	t.Helper()
	var in bus.Inbound
	if err := json.Unmarshal(m.Data, &in); err != nil {
		t.Fatalf("inbound %s: %v", m.Data, err)
	}
	return in
}

// waitInbound waits for the inbound message whose text is text.
func waitInbound(t testing.TB, c *bustest.Collector, text string) (bus.Inbound, *nats.Msg) {
	t.Helper()
	m := c.WaitFor(t, waitTimeout, func(m *nats.Msg) bool { return inbound(t, m).Text == text })
	return inbound(t, m), m
}

// texts returns the texts of the collected inbound messages.
func texts(t testing.TB, c *bustest.Collector) []string {
	var out []string
	for _, m := range c.All() {
		out = append(out, inbound(t, m).Text)
	}
	return out
}

// streamMsgs returns how many messages CHAT_IN holds.
func (e *env) streamMsgs() uint64 {
	e.t.Helper()
	s, err := e.js.Stream(e.t.Context(), "CHAT_IN")
	if err != nil {
		e.t.Fatal(err)
	}
	info, err := s.Info(e.t.Context())
	if err != nil {
		e.t.Fatal(err)
	}
	return info.State.Msgs
}

// publishOut publishes an outbound envelope through JetStream.
func (e *env) publishOut(o bus.Outbound) {
	e.t.Helper()
	if o.V == 0 {
		o.V = 1
	}
	if o.Channel == "" {
		o.Channel = ChannelName
	}
	data, err := json.Marshal(o)
	if err != nil {
		e.t.Fatal(err)
	}
	if _, err := e.js.Publish(e.t.Context(), e.subj.Out(o.Channel, o.ChatID), data, jetstream.WithMsgID(o.ID)); err != nil {
		e.t.Fatalf("publish outbound: %v", err)
	}
}

// answer runs a stand-in agent runtime: every inbound message of channel
// slack is answered with the envelopes reply returns, published on its
// outbound subject. Cleanup unsubscribes.
func (e *env) answer(reply func(in bus.Inbound) []bus.Outbound) {
	e.t.Helper()
	sub, err := e.nc.Subscribe("chat.in.slack.>", func(m *nats.Msg) {
		var in bus.Inbound
		if json.Unmarshal(m.Data, &in) != nil {
			return
		}
		for _, o := range reply(in) {
			data, _ := json.Marshal(o)
			ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
			_, _ = e.js.Publish(ctx, e.subj.Out(o.Channel, o.ChatID), data, jetstream.WithMsgID(o.ID))
			cancel()
		}
	})
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { _ = sub.Unsubscribe() })
}

// outFor builds an outbound envelope answering in.
func outFor(in bus.Inbound, kind, text string, seq int, final bool) bus.Outbound {
	return bus.Outbound{V: 1, ID: in.ID + "." + kind + "." + itoa(seq), Channel: in.Channel, ChatID: in.ChatID, ThreadID: in.ThreadID,
		InReplyTo: in.ID, Kind: kind, Text: text, Seq: seq, Final: final, Meta: in.Meta}
}

func itoa(i int) string {
	b, _ := json.Marshal(i)
	return string(b)
}

// payload builds an Events API event_callback payload.
func payload(eventID string, ev map[string]any) []byte {
	b, _ := json.Marshal(map[string]any{
		"token": "x", "team_id": teamID, "api_app_id": "A1", "type": "event_callback",
		"event_id": eventID, "event_time": 1700000000, "event": ev,
	})
	return b
}

// dm builds a message.im event.
func dm(user, channel, ts, text string) map[string]any {
	return map[string]any{"type": "message", "channel_type": "im", "user": user, "channel": channel, "ts": ts, "text": text, "event_ts": ts}
}

// channelMsg builds a message.channels event (threadTS may be "").
func channelMsg(user, channel, ts, threadTS, text string) map[string]any {
	m := map[string]any{"type": "message", "channel_type": "channel", "user": user, "channel": channel, "ts": ts, "text": text, "event_ts": ts}
	if threadTS != "" {
		m["thread_ts"] = threadTS
	}
	return m
}

// mention builds an app_mention event (threadTS may be "").
func mention(user, channel, ts, threadTS, text string) map[string]any {
	m := map[string]any{"type": "app_mention", "user": user, "channel": channel, "ts": ts, "text": text, "event_ts": ts}
	if threadTS != "" {
		m["thread_ts"] = threadTS
	}
	return m
}

// send delivers an event over Socket Mode and waits for its ack.
func (e *env) send(envelopeID string, ev map[string]any) {
	e.t.Helper()
	e.slack.sendEnvelope(envelopeID, 0, payload("Ev"+envelopeID, ev))
	e.slack.waitAck(e.t, envelopeID)
}

package channeltest_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/goleak"

	"github.com/switchboard-chat/switchboard/bus"
	"github.com/switchboard-chat/switchboard/bus/bridge"
	"github.com/switchboard-chat/switchboard/bus/bustest"
	"github.com/switchboard-chat/switchboard/channels/channeltest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestBridgeKitConformance runs the suite against the smallest bridge the
// kit allows: inbound events go through Client.PublishInbound, outbound
// messages through Client.ConsumeOutbound to an in-memory platform.
func TestBridgeKitConformance(t *testing.T) {
	channeltest.Run(t, func(t *testing.T) channeltest.Harness {
		s := bustest.StartServer(t)
		nc := bustest.Connect(t, s)
		js := bustest.Streams(t, nc)
		return &kitHarness{nc: nc, js: js, plat: &platform{changed: make(chan struct{}), sent: map[string][]string{}}}
	})
}

// platform is the fake chat service of the kit bridge.
type platform struct {
	mu      sync.Mutex
	changed chan struct{}
	sent    map[string][]string // conversation → accepted texts
	refused int
	failing bool
}

var errRefused = errors.New("platform: 503 service unavailable")

func (p *platform) send(conv, text string) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	defer func() { close(p.changed); p.changed = make(chan struct{}) }()
	if p.failing {
		p.refused++
		return errRefused
	}
	p.sent[conv] = append(p.sent[conv], text)
	return nil
}

// event is a platform event handed to the bridge; done is closed once the
// bridge handled it (the platform's delivery confirmed).
type event struct {
	conv, id, text string
	done           chan error
}

type kitHarness struct {
	nc   *nats.Conn
	js   jetstream.JetStream
	plat *platform

	events chan event
	cancel context.CancelFunc
	done   chan error
}

func (h *kitHarness) Conn() *nats.Conn       { return h.nc }
func (h *kitHarness) Subjects() bus.Subjects { return bus.Subjects{Prefix: "chat"} }
func (h *kitHarness) Channel() string        { return "kit" }
func (h *kitHarness) Durable() string        { return "bridge_kit" }
func (h *kitHarness) Chat(conv string) string {
	return "chat-" + conv
}

// Start runs the bridge: ConsumeOutbound and a loop publishing the
// platform's events, each under its platform id.
func (h *kitHarness) Start(t *testing.T) {
	t.Helper()
	c, err := bridge.New(h.nc, bridge.Options{Channel: h.Channel(), Backoff: func(int) time.Duration { return time.Millisecond }})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	h.events, h.cancel, h.done = make(chan event), cancel, make(chan error, 1)
	events := h.events
	var wg sync.WaitGroup
	errs := make(chan error, 2)
	wg.Go(func() {
		errs <- c.ConsumeOutbound(ctx, func(ctx context.Context, out bus.Outbound) error {
			return h.plat.send(out.ChatID[len("chat-"):], out.Text)
		})
	})
	wg.Go(func() {
		for {
			select {
			case <-ctx.Done():
				errs <- nil
				return
			case ev := <-events:
				ev.done <- c.PublishInbound(ctx, bus.Inbound{V: bus.Version, ID: ev.id, Channel: h.Channel(),
					ChatID: h.Chat(ev.conv), UserID: "u1", Text: ev.text})
			}
		}
	})
	go func() {
		wg.Wait()
		close(errs)
		var err error
		for e := range errs {
			err = errors.Join(err, e)
		}
		_ = c.Close()
		h.done <- err
	}()
	t.Cleanup(func() { _ = h.Stop(t) })
	// The outbound consumer exists once ConsumeOutbound set it up.
	deadline := time.Now().Add(10 * time.Second)
	for {
		if _, err := h.js.Consumer(t.Context(), "CHAT_OUT", h.Durable()); err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("the outbound consumer was not created")
		}
		tick := time.NewTimer(5 * time.Millisecond)
		<-tick.C
	}
}

func (h *kitHarness) Stop(t *testing.T) error {
	t.Helper()
	if h.cancel == nil {
		return nil
	}
	h.cancel()
	h.cancel = nil
	select {
	case err := <-h.done:
		return err
	case <-time.After(10 * time.Second):
		t.Fatal("the bridge did not stop")
		return nil
	}
}

func (h *kitHarness) Event(t *testing.T, conv, id, text string) string {
	t.Helper()
	ev := event{conv: conv, id: id, text: text, done: make(chan error, 1)}
	h.events <- ev
	if err := <-ev.done; err != nil {
		t.Fatalf("PublishInbound: %v", err)
	}
	return id
}

func (h *kitHarness) FailSends(fail bool) {
	h.plat.mu.Lock()
	defer h.plat.mu.Unlock()
	h.plat.failing = fail
}

func (h *kitHarness) Sent(conv string) ([]string, int) {
	h.plat.mu.Lock()
	defer h.plat.mu.Unlock()
	return append([]string(nil), h.plat.sent[conv]...), h.plat.refused
}

func (h *kitHarness) Changed() <-chan struct{} {
	h.plat.mu.Lock()
	defer h.plat.mu.Unlock()
	return h.plat.changed
}

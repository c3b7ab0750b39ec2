package web

import (
	"errors"
	"net/http"
	"sync"
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/switchboard-chat/switchboard/bus"
	"github.com/switchboard-chat/switchboard/channels/channeltest"
)

// TestConformance runs the channel adapter suite. The "platform" of the
// console is its browsers and its state file: a platform event is a
// message POSTed by a logged-in browser (conversation = conversation,
// event id = the page's message id), and a message the platform accepted
// is an agent message stored in the conversation's history, from which
// every browser is served (FailSends makes that store refuse writes).
func TestConformance(t *testing.T) {
	channeltest.Run(t, func(t *testing.T) channeltest.Harness {
		h := &harness{e: newEnv(t), sent: map[string][]string{}, changed: make(chan struct{})}
		h.e.onStore = h.hook
		return h
	})
}

type harness struct {
	e *env
	r *running
	b *browser

	mu      sync.Mutex
	failing bool
	refused int
	sent    map[string][]string // chat → texts stored
	changed chan struct{}
}

func (h *harness) Conn() *nats.Conn        { return h.e.nc }
func (h *harness) Subjects() bus.Subjects  { return h.e.subj }
func (h *harness) Channel() string         { return Name }
func (h *harness) Durable() string         { return "bridge_" + Name }
func (h *harness) Chat(conv string) string { return chatID("ann", conv) }

func (h *harness) Start(t *testing.T) {
	t.Helper()
	h.e.agent.Set(func(bus.Inbound) []bus.Outbound { return nil })
	h.r = h.e.start(t, h.e.config())
	h.b = h.r.browser(t)
	h.b.login("ann", h.e.logCode(t))
}

func (h *harness) hook(st *store) {
	st.failPut = func() error {
		h.mu.Lock()
		defer h.mu.Unlock()
		if !h.failing {
			return nil
		}
		h.refused++
		h.notify()
		return errors.New("state file refuses writes (test)")
	}
	st.onPut = func(chat string, m message) {
		h.mu.Lock()
		defer h.mu.Unlock()
		h.sent[chat] = append(h.sent[chat], m.Text)
		h.notify()
	}
}

func (h *harness) notify() {
	close(h.changed)
	h.changed = make(chan struct{})
}

func (h *harness) Stop(t *testing.T) error {
	t.Helper()
	h.b.hc.CloseIdleConnections()
	return h.r.stop(t)
}

// Event posts the page's message id in conversation conv; the envelope id
// is derived from user, conversation and id.
func (h *harness) Event(t *testing.T, conv, id, text string) string {
	t.Helper()
	if resp, body := h.b.send(conv, id, text, nil); resp.StatusCode != http.StatusAccepted {
		t.Fatalf("post message: %d %s", resp.StatusCode, body)
	}
	return inboundID("ann", conv, id)
}

func (h *harness) FailSends(fail bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.failing = fail
}

func (h *harness) Sent(conv string) ([]string, int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]string(nil), h.sent[h.Chat(conv)]...), h.refused
}

func (h *harness) Changed() <-chan struct{} {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.changed
}

package slack

import (
	"fmt"
	"net/http"
	"sync"
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/switchboard-chat/switchboard/bus"
	"github.com/switchboard-chat/switchboard/channels/channeltest"
)

// TestConformance runs the channel adapter suite against the adapter in
// socket mode and the fake Slack.
func TestConformance(t *testing.T) {
	channeltest.Run(t, func(t *testing.T) channeltest.Harness {
		return &slackHarness{e: newEnv(t), ts: map[string]string{}}
	})
}

// slackHarness maps the suite's conversations to the direct messages D1
// (user U1) and D2 (user U2), its event ids to Events API event ids, and
// reads what the fake accepted from its chat.postMessage calls.
type slackHarness struct {
	e *env
	r *running

	mu       sync.Mutex
	ts       map[string]string // suite event id → message ts
	envelope int
	// refused holds [from, to) ranges of chat.postMessage calls (by
	// index) that the fake refused; failingFrom while it refuses.
	refused     [][2]int
	failingFrom int
	failing     bool
}

func (h *slackHarness) Conn() *nats.Conn       { return h.e.nc }
func (h *slackHarness) Subjects() bus.Subjects { return h.e.subj }
func (h *slackHarness) Channel() string        { return ChannelName }
func (h *slackHarness) Durable() string        { return "bridge_" + ChannelName }

func (h *slackHarness) Chat(conv string) string {
	return map[string]string{"c1": "D1", "c2": "D2"}[conv]
}

func (h *slackHarness) Start(t *testing.T) {
	t.Helper()
	h.r = h.e.start(h.e.adapter(h.e.config()))
}

func (h *slackHarness) Stop(t *testing.T) error {
	t.Helper()
	h.r.stop(t) // reports a non-nil result of Run itself
	return nil
}

// Event sends the direct message over Socket Mode (a known event id again
// as Slack's retry: a new envelope, retry_attempt 1) and waits for the
// adapter's ack of the envelope.
func (h *slackHarness) Event(t *testing.T, conv, id, text string) string {
	t.Helper()
	h.mu.Lock()
	ts, again := h.ts[id]
	if !again {
		ts = fmt.Sprintf("1700000000.%06d", len(h.ts)+1)
		h.ts[id] = ts
	}
	h.envelope++
	env := fmt.Sprintf("env-%d", h.envelope)
	h.mu.Unlock()
	retry := 0
	if again {
		retry = 1
	}
	user := map[string]string{"c1": "U1", "c2": "U2"}[conv]
	h.e.slack.sendEnvelope(env, retry, payload("Ev"+id, dm(user, h.Chat(conv), ts, text)))
	h.e.slack.waitAck(t, env)
	return teamID + ":" + h.Chat(conv) + ":" + ts
}

func (h *slackHarness) posts() int {
	n := 0
	for _, c := range h.e.slack.calls {
		if c.method == "chat.postMessage" {
			n++
		}
	}
	return n
}

// FailSends answers every chat.postMessage with an HTTP 500 until turned
// off.
func (h *slackHarness) FailSends(fail bool) {
	f := h.e.slack
	f.mu.Lock()
	defer f.mu.Unlock()
	switch {
	case fail && !h.failing:
		h.failing, h.failingFrom = true, h.posts()
		for range 1 << 16 {
			f.fail["chat.postMessage"] = append(f.fail["chat.postMessage"], failure{status: http.StatusInternalServerError})
		}
	case !fail && h.failing:
		h.failing = false
		h.refused = append(h.refused, [2]int{h.failingFrom, h.posts()})
		delete(f.fail, "chat.postMessage")
	}
}

func (h *slackHarness) Sent(conv string) (accepted []string, refused int) {
	f := h.e.slack
	f.mu.Lock()
	ranges := h.refused
	var posts []apiCall
	for _, c := range f.calls {
		if c.method == "chat.postMessage" {
			posts = append(posts, c)
		}
	}
	if h.failing {
		ranges = append(ranges, [2]int{h.failingFrom, len(posts)})
	}
	f.mu.Unlock()
	for i, c := range posts {
		isRefused := false
		for _, rg := range ranges {
			isRefused = isRefused || i >= rg[0] && i < rg[1]
		}
		switch {
		case isRefused:
			refused++
		case c.form.Get("channel") == h.Chat(conv):
			accepted = append(accepted, c.form.Get("text"))
		}
	}
	return accepted, refused
}

func (h *slackHarness) Changed() <-chan struct{} {
	h.e.slack.mu.Lock()
	defer h.e.slack.mu.Unlock()
	return h.e.slack.changed
}

package telegram

import (
	"fmt"
	"strconv"
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/switchboard-chat/switchboard/bus"
	"github.com/switchboard-chat/switchboard/channels/channeltest"
)

// TestConformance runs the channel adapter suite against the adapter in
// polling mode and the fake Bot API.
func TestConformance(t *testing.T) {
	channeltest.Run(t, func(t *testing.T) channeltest.Harness {
		return &tgHarness{e: newEnv(t), updates: map[string]int{}, next: 100}
	})
}

// tgHarness maps the suite's conversations to private chats with users 7
// and 8, its event ids to update ids, and reads what the fake Bot API
// accepted from its sendMessage requests.
type tgHarness struct {
	e       *env
	r       *running
	updates map[string]int // suite event id → update_id
	next    int

	// refused holds [from, to) ranges of sendMessage requests (by index)
	// that the fake refused; failingFrom ≥ 0 while it refuses.
	refused     [][2]int
	failingFrom int
	failing     bool
}

func (h *tgHarness) Conn() *nats.Conn       { return h.e.nc }
func (h *tgHarness) Subjects() bus.Subjects { return h.e.subj }
func (h *tgHarness) Channel() string        { return Name }
func (h *tgHarness) Durable() string        { return "bridge_" + Name }

func (h *tgHarness) Chat(conv string) string {
	return map[string]string{"c1": "7", "c2": "8"}[conv]
}

func (h *tgHarness) Start(t *testing.T) {
	t.Helper()
	seen := len(h.e.bot.all("getUpdates"))
	h.r = run(t, h.e.newAdapter(t, h.e.config(), Deps{}))
	// Receiving: the poll loop runs (consumer bridge_telegram exists from
	// newEnv).
	h.e.bot.waitN(t, "getUpdates", seen+1)
}

func (h *tgHarness) Stop(t *testing.T) error {
	t.Helper()
	return h.r.stop(t)
}

// Event queues the update for the long poll (again under the same update
// id for a known event id) and returns once the adapter confirmed it: a
// later getUpdates asks for an offset past it.
func (h *tgHarness) Event(t *testing.T, conv, id, text string) string {
	t.Helper()
	uid, ok := h.updates[id]
	if !ok {
		uid, h.next = h.next, h.next+1
		h.updates[id] = uid
	}
	userID, _ := strconv.ParseInt(h.Chat(conv), 10, 64)
	before := len(h.e.bot.all(""))
	h.e.bot.addUpdate(uid, privateMsg(uid, user(userID, "User"+conv, ""), text))
	h.e.bot.waitFor(t, fmt.Sprintf("update %d confirmed", uid), func(reqs []fakeReq) bool {
		for _, r := range reqs[min(before, len(reqs)):] {
			if off, _ := strconv.Atoi(r.params.Get("offset")); r.method == "getUpdates" && off > uid {
				return true
			}
		}
		return false
	})
	return strconv.Itoa(fakeBotID) + ":" + strconv.Itoa(uid)
}

// FailSends answers every sendMessage with a 502 from a proxy until
// turned off.
func (h *tgHarness) FailSends(fail bool) {
	f := h.e.bot
	f.mu.Lock()
	defer f.mu.Unlock()
	n := 0
	for _, r := range f.reqs {
		if r.method == "sendMessage" {
			n++
		}
	}
	switch {
	case fail && !h.failing:
		h.failing, h.failingFrom = true, n
		for range 1 << 16 {
			f.failures["sendMessage"] = append(f.failures["sendMessage"], fakeFailure{status: 502})
		}
	case !fail && h.failing:
		h.failing = false
		h.refused = append(h.refused, [2]int{h.failingFrom, n})
		delete(f.failures, "sendMessage")
	}
}

func (h *tgHarness) Sent(conv string) (accepted []string, refused int) {
	f := h.e.bot
	f.mu.Lock()
	failing, from := h.failing, h.failingFrom
	ranges := h.refused
	var sends []fakeReq
	for _, r := range f.reqs {
		if r.method == "sendMessage" {
			sends = append(sends, r)
		}
	}
	f.mu.Unlock()
	if failing {
		ranges = append(ranges, [2]int{from, len(sends)})
	}
	isRefused := func(i int) bool {
		for _, rg := range ranges {
			if i >= rg[0] && i < rg[1] {
				return true
			}
		}
		return false
	}
	for i, r := range sends {
		switch {
		case isRefused(i):
			refused++
		case r.params.Get("chat_id") == h.Chat(conv):
			accepted = append(accepted, r.params.Get("text"))
		}
	}
	return accepted, refused
}

func (h *tgHarness) Changed() <-chan struct{} {
	h.e.bot.mu.Lock()
	defer h.e.bot.mu.Unlock()
	return h.e.bot.changed
}

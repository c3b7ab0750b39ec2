// Package channeltest is the conformance suite every channel adapter
// passes (the Telegram and Slack adapters, and any bridge built on the
// bridge kit), in the style of memory/memtest: [Run] takes a factory of
// [Harness] values, one per subtest, each an adapter started against a
// fake platform and a real bus (a JetStream server with the daemon's
// streams, bus/bustest).
//
// The contract the suite checks, from outside:
//
//   - Inbound: each platform event is stored on the bus once, on
//     "<p>.in.<channel>.<chat>", with the envelope id the event maps to and
//     "Nats-Msg-Id: <channel>:<id>"; the platform delivering the event again
//     does not store it twice.
//   - Outbound: replies of one conversation reach the platform in the order
//     they were published; conversations do not hold each other up.
//   - Acknowledgement: an outbound message is acknowledged on the bus only
//     after the platform accepted it; while the platform refuses it, it
//     stays unacknowledged, and after a restart it is delivered (once).
//   - Shutdown: Run returns nil soon after its context ends, also while the
//     platform is failing, and leaves no goroutine of the adapter behind.
package channeltest

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/goleak"

	"github.com/switchboard-chat/switchboard/bus"
	"github.com/switchboard-chat/switchboard/bus/bridge"
	"github.com/switchboard-chat/switchboard/bus/bustest"
	"github.com/switchboard-chat/switchboard/bus/natsbus"
	"github.com/switchboard-chat/switchboard/internal/polltest"
)

// Harness is one adapter under test with its fake platform. Conversations
// are named by the suite ("c1", "c2"); the harness maps them to the
// platform's chats.
type Harness interface {
	// Conn is a connection to the bus server the adapter uses; the streams
	// of Subjects().Prefix exist on it.
	Conn() *nats.Conn
	// Subjects is the bus's subject scheme.
	Subjects() bus.Subjects
	// Channel is the adapter's channel name on the bus.
	Channel() string
	// Durable is the name of the adapter's outbound consumer.
	Durable() string
	// Start runs the adapter in the background and returns once it
	// receives platform events and its outbound consumer exists. It may be
	// called again after Stop (a restart on the same state).
	Start(t *testing.T)
	// Stop cancels the adapter and returns Run's result once Run returned,
	// failing t if it does not return in time.
	Stop(t *testing.T) error
	// Event makes the platform deliver a user's text message with platform
	// event id id in conversation conv; the same id again is the platform
	// delivering that event again. It returns the envelope id the adapter
	// must publish it with.
	Event(t *testing.T, conv, id, text string) string
	// Chat is the bus chat id of conversation conv.
	Chat(conv string) string
	// FailSends makes the platform refuse every message sent to it with a
	// transient error (a server error) until FailSends(false).
	FailSends(fail bool)
	// Sent returns the texts the platform accepted in conversation conv, in
	// order, and how many sends it refused in all.
	Sent(conv string) (accepted []string, refused int)
	// Changed returns a channel closed at the next change of what Sent
	// returns.
	Changed() <-chan struct{}
}

// wait bounds every wait of the suite.
const wait = 15 * time.Second

// Run is the conformance suite for channel adapters. open returns a fresh
// harness (a new bus and platform) for each subtest and registers its own
// cleanup; the adapter is not started yet.
func Run(t *testing.T, open func(t *testing.T) Harness) {
	t.Helper()
	tests := []struct {
		name string
		fn   func(t *testing.T, h Harness)
	}{
		{"InboundOncePerEvent", testInboundOnce},
		{"OutboundInOrderPerConversation", testOutboundOrder},
		{"AckOnlyAfterPlatformAccepted", testAckAfterAccept},
		{"ShutdownJoinsEverything", testShutdown},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) { tc.fn(t, open(t)) })
	}
}

func testInboundOnce(t *testing.T, h Harness) {
	h.Start(t)
	first := h.Event(t, "c1", "e1", "first words")
	if again := h.Event(t, "c1", "e1", "first words"); again != first {
		t.Fatalf("the same event maps to two envelope ids: %q and %q", first, again)
	}
	second := h.Event(t, "c2", "e2", "second words")
	if first == second {
		t.Fatalf("two events map to the same envelope id %q", first)
	}
	// Events of two conversations may be handled concurrently (Slack's
	// are): wait for both, and compare what is stored in any order. A
	// redelivered copy handled later still meets the stream's
	// de-duplication, which is what the stored messages show.
	// A core subscriber may see a message before the stream has stored
	// it: wait on the stream itself.
	waitStored(t, h, first, second)
	type stored struct{ ID, MsgID, Chat, Text string }
	var got []stored
	for _, m := range storedIn(t, h) {
		in := decodeIn(t, m.Data)
		got = append(got, stored{in.ID, m.Header.Get(bus.HeaderMsgID), in.ChatID, in.Text})
	}
	ch := h.Channel()
	want := []stored{
		{first, ch + ":" + first, h.Chat("c1"), "first words"},
		{second, ch + ":" + second, h.Chat("c2"), "second words"},
	}
	byID := func(a, b stored) int { return strings.Compare(a.ID, b.ID) }
	slices.SortFunc(got, byID)
	slices.SortFunc(want, byID)
	if !slices.Equal(got, want) {
		t.Errorf("stored on the bus:\n %+v\nwant (each event once, with its id):\n %+v", got, want)
	}
	if err := h.Stop(t); err != nil {
		t.Errorf("Run = %v, want nil", err)
	}
}

func testOutboundOrder(t *testing.T, h Harness) {
	h.Start(t)
	var want1, want2 []string
	for i := range 4 {
		t1, t2 := fmt.Sprintf("one %d", i), fmt.Sprintf("two %d", i)
		publishOut(t, h, "c1", fmt.Sprintf("o1-%d", i), t1)
		publishOut(t, h, "c2", fmt.Sprintf("o2-%d", i), t2)
		want1, want2 = append(want1, t1), append(want2, t2)
	}
	waitSent(t, h, "both conversations delivered", func() bool {
		a, _ := h.Sent("c1")
		b, _ := h.Sent("c2")
		return len(a) >= len(want1) && len(b) >= len(want2)
	})
	got1, _ := h.Sent("c1")
	got2, _ := h.Sent("c2")
	if !slices.Equal(got1, want1) || !slices.Equal(got2, want2) {
		t.Errorf("the platform received c1 %q, c2 %q; want c1 %q, c2 %q (in order, once)", got1, got2, want1, want2)
	}
	waitAcked(t, h)
	if err := h.Stop(t); err != nil {
		t.Errorf("Run = %v, want nil", err)
	}
}

func testAckAfterAccept(t *testing.T, h Harness) {
	h.Start(t)
	h.FailSends(true)
	publishOut(t, h, "c1", "o-refused", "refused at first")
	waitSent(t, h, "a refused send", func() bool { _, n := h.Sent("c1"); return n >= 1 })
	// The platform refused it: it must not be acknowledged.
	if info := consumerInfo(t, h); info.NumAckPending != 1 || info.AckFloor.Stream != 0 {
		t.Errorf("while the platform refuses the message: %d unacknowledged, ack floor %d; want 1 and 0",
			info.NumAckPending, info.AckFloor.Stream)
	}
	// A shutdown while failing returns, and leaves the message on the bus.
	if err := h.Stop(t); err != nil {
		t.Errorf("Run = %v, want nil", err)
	}
	if info := consumerInfo(t, h); info.AckFloor.Stream != 0 {
		t.Errorf("after a shutdown while failing: ack floor %d, want 0 (nothing acknowledged)", info.AckFloor.Stream)
	}
	h.FailSends(false)
	h.Start(t)
	waitSent(t, h, "the refused message delivered after the restart", func() bool { a, _ := h.Sent("c1"); return len(a) >= 1 })
	waitAcked(t, h)
	if got, _ := h.Sent("c1"); !slices.Equal(got, []string{"refused at first"}) {
		t.Errorf("the platform accepted %q, want the message once", got)
	}
	if err := h.Stop(t); err != nil {
		t.Errorf("Run = %v, want nil", err)
	}
}

func testShutdown(t *testing.T, h Harness) {
	in := bustest.Collect(t, h.Conn(), inAll(h))
	// A first run creates what outlives the adapter by design: the
	// durable consumer (and its goroutines in the server).
	h.Start(t)
	if err := h.Stop(t); err != nil {
		t.Errorf("Run = %v, want nil", err)
	}
	before := goleak.IgnoreCurrent()
	h.Start(t)
	id := h.Event(t, "c1", "e1", "hello")
	in.WaitFor(t, wait, func(m *nats.Msg) bool { return decodeIn(t, m.Data).ID == id })
	publishOut(t, h, "c1", "o1", "an answer")
	waitSent(t, h, "the answer delivered", func() bool { a, _ := h.Sent("c1"); return len(a) >= 1 })
	h.FailSends(true)
	publishOut(t, h, "c1", "o2", "refused")
	waitSent(t, h, "a refused send", func() bool { _, n := h.Sent("c1"); return n >= 1 })
	if err := h.Stop(t); err != nil {
		t.Errorf("Run = %v, want nil", err)
	}
	goleak.VerifyNone(t, before,
		// The fake platform's HTTP server belongs to the test, and
		// idle keep-alive connections to it are not the adapter's.
		goleak.IgnoreAnyFunction("net/http.(*conn).serve"),
		goleak.IgnoreAnyFunction("net/http.(*persistConn).readLoop"),
		goleak.IgnoreAnyFunction("net/http.(*persistConn).writeLoop"),
		// So does the bus server, which restarts a consumer's loops when
		// an adapter updates its consumer.
		goleak.IgnoreAnyFunction("github.com/nats-io/nats-server/v2/server.(*consumer).loopAndGatherMsgs"),
		goleak.IgnoreAnyFunction("github.com/nats-io/nats-server/v2/server.(*consumer).processInboundAcks"),
		goleak.IgnoreAnyFunction("github.com/nats-io/nats-server/v2/server.(*consumer).processInboundNextMsgReqs"),
		goleak.IgnoreAnyFunction("github.com/nats-io/nats-server/v2/server.(*consumerFileStore).flushLoop"),
	)
}

// publishOut publishes a final reply to conversation conv through
// JetStream, as the runtime does.
func publishOut(t *testing.T, h Harness, conv, id, text string) {
	t.Helper()
	o := bus.Outbound{V: bus.Version, ID: id, Channel: h.Channel(), ChatID: h.Chat(conv), Kind: bus.KindReply, Text: text, Final: true}
	data, err := json.Marshal(o)
	if err != nil {
		t.Fatal(err)
	}
	js, err := jetstream.New(h.Conn())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := js.Publish(t.Context(), h.Subjects().Out(o.Channel, o.ChatID), data, jetstream.WithMsgID(id)); err != nil {
		t.Fatalf("publish outbound %s: %v", id, err)
	}
}

// waitSent waits (on the platform's change notifications) until cond holds.
func waitSent(t *testing.T, h Harness, what string, cond func() bool) {
	t.Helper()
	deadline := time.NewTimer(wait)
	defer deadline.Stop()
	for {
		ch := h.Changed()
		if cond() {
			return
		}
		select {
		case <-ch:
		case <-deadline.C:
			a1, n := h.Sent("c1")
			a2, _ := h.Sent("c2")
			t.Fatalf("no %s within %s; platform has c1 %q, c2 %q, %d refused", what, wait, a1, a2, n)
		}
	}
}

func consumerInfo(t *testing.T, h Harness) *jetstream.ConsumerInfo {
	t.Helper()
	js, err := jetstream.New(h.Conn())
	if err != nil {
		t.Fatal(err)
	}
	cons, err := js.Consumer(t.Context(), bridge.StreamOut(h.Subjects().Prefix), h.Durable())
	if err != nil {
		t.Fatalf("outbound consumer %s: %v", h.Durable(), err)
	}
	info, err := cons.Info(t.Context())
	if err != nil {
		t.Fatalf("outbound consumer %s: %v", h.Durable(), err)
	}
	return info
}

// waitAcked waits until the adapter's outbound consumer holds nothing
// unacknowledged or pending. The server announces no such change: this
// looks every 10 ms, up to the deadline.
func waitAcked(t *testing.T, h Harness) {
	t.Helper()
	deadline := time.Now().Add(wait)
	for {
		info := consumerInfo(t, h)
		if info.NumAckPending == 0 && info.NumPending == 0 && info.AckFloor.Stream == info.Delivered.Stream {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("outbound consumer %s: %d unacknowledged, %d pending after %s", h.Durable(), info.NumAckPending, info.NumPending, wait)
		}
		tick := time.NewTimer(10 * time.Millisecond)
		<-tick.C
	}
}

// storedIn returns the channel's messages stored on the inbound stream, in
// order.
// waitStored waits until the channel's inbound stream holds an envelope
// with each of ids. The stream announces no event when it stores a
// message (and a work-queue stream takes no second consumer), so this
// looks at it again every few milliseconds until the deadline.
func waitStored(t *testing.T, h Harness, ids ...string) {
	t.Helper()
	var missing map[string]bool
	polltest.Until(t, wait, 5*time.Millisecond, func() bool {
		missing = map[string]bool{}
		for _, id := range ids {
			missing[id] = true
		}
		for _, m := range storedIn(t, h) {
			delete(missing, decodeIn(t, m.Data).ID)
		}
		return len(missing) == 0
	}, func() string {
		return fmt.Sprintf("the inbound stream never held %v", slices.Sorted(maps.Keys(missing)))
	})
}

func storedIn(t *testing.T, h Harness) []*jetstream.RawStreamMsg {
	t.Helper()
	js, err := jetstream.New(h.Conn())
	if err != nil {
		t.Fatal(err)
	}
	st, err := js.Stream(t.Context(), natsbus.StreamsFor(h.Subjects().Prefix).In)
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	prefix := strings.TrimSuffix(inAll(h), ">")
	var out []*jetstream.RawStreamMsg
	for seq := info.State.FirstSeq; info.State.Msgs > 0 && seq <= info.State.LastSeq; seq++ {
		m, err := st.GetMsg(t.Context(), seq)
		if err != nil {
			continue // deleted
		}
		if strings.HasPrefix(m.Subject, prefix) {
			out = append(out, m)
		}
	}
	return out
}

// inAll is the subject filter of the channel's inbound messages.
func inAll(h Harness) string {
	return h.Subjects().Prefix + ".in." + bus.EncodeToken(h.Channel()) + ".>"
}

func decodeIn(t *testing.T, data []byte) bus.Inbound {
	t.Helper()
	var in bus.Inbound
	if err := json.Unmarshal(data, &in); err != nil {
		t.Fatalf("inbound %s: %v", data, err)
	}
	return in
}

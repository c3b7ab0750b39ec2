package natsbus_test

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/switchboard-chat/switchboard/bus"
	"github.com/switchboard-chat/switchboard/bus/bustest"
	"github.com/switchboard-chat/switchboard/bus/natsbus"
)

// The attacks of issue 13 (findings 2 and 4): one bridge, with its own
// valid credentials, tries to touch another bridge's traffic.

const otherToken = "other-secret-token"

// twoBridges is isolatedConfig plus the bridge "other" (token, channel
// other).
func twoBridges() natsbus.Config {
	cfg := isolatedConfig()
	cfg.Bridges["other"] = natsbus.BridgeConfig{Channels: []string{"other"}, Token: otherToken, MaxMsgsPerSec: 1000}
	return cfg
}

// publishWithHeader publishes in on its inbound subject through JetStream
// with the given Nats-Msg-Id, as a bridge may.
func publishWithHeader(t *testing.T, c *client, subj bus.Subjects, in bus.Inbound, msgID string) (*jetstream.PubAck, error) {
	t.Helper()
	m := nats.NewMsg(subj.In(in.Channel, in.ChatID))
	m.Data = mustJSON(t, in)
	m.Header.Set(jetstream.MsgIDHeader, msgID)
	return c.js.PublishMsg(t.Context(), m)
}

// apiErrorCode returns the code of a JetStream API error, or 0.
func apiErrorCode(err error) int {
	var apiErr *jetstream.APIError
	if errors.As(err, &apiErr) {
		return apiErr.Code
	}
	return 0
}

// drainUntil reads deliveries, acknowledging each, until one with id
// marker; it returns the subjects and ids seen before it.
func drainUntil(t *testing.T, b *natsbus.Bus, agent *consumer, marker string) []string {
	t.Helper()
	var seen []string
	for {
		d := agent.next(t)
		doubleAck(t, d)
		in, err := bus.ParseInbound(b.Subjects(), d.Subject(), d.Data(), 0)
		if err == nil && in.ID == marker {
			return seen
		}
		id := "<invalid>"
		if err == nil {
			id = in.DedupKey()
		}
		seen = append(seen, d.Subject()+" "+id)
	}
}

// TestBridgeCannotSuppressAnotherChannelsMessage: the wechat bridge sends
// its own valid messages carrying other's de-duplication key; other's real
// message must still be stored and delivered. Same-channel duplicates are
// still dropped, whatever header the bridge sets.
func TestBridgeCannotSuppressAnotherChannelsMessage(t *testing.T) {
	b := open(t, twoBridges(), t.TempDir())
	agent := startConsume(t, b)
	wechat := asBridge(t, b, "wechat", nats.Token(wechatToken))
	other := asBridge(t, b, "other", nats.Token(otherToken))
	subj := b.Subjects()

	// The attack: wechat's own messages, with other's key in the header,
	// and one with other's envelope id too.
	for _, in := range []bus.Inbound{
		{V: 1, ID: "w-1", Channel: "wechat", ChatID: "room", UserID: "mallory", Text: "hi"},
		{V: 1, ID: "victim-1", Channel: "wechat", ChatID: "room", UserID: "mallory", Text: "hi"},
	} {
		if _, err := publishWithHeader(t, wechat, subj, in, "other:victim-1"); err != nil {
			t.Fatalf("wechat publish %s: %v", in.ID, err)
		}
	}
	// other's real message.
	victim := bus.Inbound{V: 1, ID: "victim-1", Channel: "other", ChatID: "o1", UserID: "alice", Text: "please answer"}
	ack, err := publishWithHeader(t, other, subj, victim, victim.DedupKey())
	if err != nil {
		t.Fatalf("other publish: %v", err)
	}
	if ack.Duplicate {
		t.Fatalf("other's message was taken for a duplicate: %+v", ack)
	}
	publishInbound(t, b, bus.Inbound{V: 1, ID: "marker", Channel: "console", ChatID: "c", UserID: "u", Text: "x"})
	got := drainUntil(t, b, agent, "marker")
	want := []string{"chat.in.wechat.room wechat:w-1", "chat.in.wechat.room wechat:victim-1", "chat.in.other.o1 other:victim-1"}
	if !slices.Equal(got, want) {
		t.Fatalf("agent got %q, want %q", got, want)
	}

	// Same-channel duplicates are still de-duplicated, by the envelope's key
	// and not by the header: other sends victim-1 again, wechat sends w-1
	// again under a fresh header.
	if ack, err := publishWithHeader(t, other, subj, victim, victim.DedupKey()); err != nil || !ack.Duplicate {
		t.Fatalf("other republish = %+v, %v, want a duplicate", ack, err)
	}
	w1 := bus.Inbound{V: 1, ID: "w-1", Channel: "wechat", ChatID: "room", UserID: "mallory", Text: "hi"}
	if ack, err := publishWithHeader(t, wechat, subj, w1, "fresh-header"); err != nil || !ack.Duplicate {
		t.Fatalf("wechat republish under another header = %+v, %v, want a duplicate", ack, err)
	}
	publishInbound(t, b, bus.Inbound{V: 1, ID: "marker2", Channel: "console", ChatID: "c", UserID: "u", Text: "x"})
	if got := drainUntil(t, b, agent, "marker2"); len(got) != 0 {
		t.Fatalf("duplicates delivered: %q", got)
	}
	wechat.noViolation(t)
	other.noViolation(t)
}

// TestReplySubjectCannotReachAnotherChannel: wechat publishes its own valid
// messages with reply subjects in line's space. Nothing may arrive there,
// nothing may be stored for line, and line's rate budget stays whole.
func TestReplySubjectCannotReachAnotherChannel(t *testing.T) {
	cfg := twoBridges()
	// line may send one message per 100 s: a single stray message on its
	// subjects would use its whole budget.
	cfg.Bridges["line"] = natsbus.BridgeConfig{Channels: []string{"line", "line2"}, User: "line", Password: linePassword, MaxMsgsPerSec: 0.01}
	b := open(t, cfg, t.TempDir())
	agent := startConsume(t, b)
	// Watchers in the daemon account and in line's.
	daemonChat := bustest.Collect(t, b.Conn(), "chat.>")
	daemonInbox := bustest.Collect(t, b.Conn(), "_INBOX_line.>")
	line := asBridge(t, b, "line", nats.UserInfo("line", linePassword))
	lineInbox := bustest.Collect(t, line.nc, "_INBOX_line.>")
	lineDLQ := bustest.Collect(t, line.nc, "chat.dlq.line")
	wechat := asBridge(t, b, "wechat", nats.Token(wechatToken))

	replies := []string{"chat.in.line.l1", "chat.in.line2.l1", "_INBOX_line.x", "_INBOX_line.x.y", "chat.out.line.l1"}
	for i, reply := range replies {
		in := bus.Inbound{V: 1, ID: fmt.Sprint("w", i), Channel: "wechat", ChatID: "c", UserID: "mallory", Text: "hi"}
		if err := wechat.nc.PublishRequest(subjIn(b, in), reply, mustJSON(t, in)); err != nil {
			t.Fatal(err)
		}
	}
	if err := wechat.nc.Flush(); err != nil {
		t.Fatal(err)
	}
	// Every attack message is wechat's own and is handled as such; nothing
	// else is delivered.
	for range replies {
		d := agent.next(t)
		doubleAck(t, d)
		if in, err := bus.ParseInbound(b.Subjects(), d.Subject(), d.Data(), 0); err != nil || in.Channel != "wechat" {
			t.Fatalf("agent got %s: %s (%v), want only wechat's messages", d.Subject(), d.Data(), err)
		}
	}

	// line's next real message is within its budget.
	real := bus.Inbound{V: 1, ID: "l-real", Channel: "line", ChatID: "l1", UserID: "bob", Text: "hello"}
	bustest.PublishInbound(t, line.nc, b.Subjects(), real)
	publishInbound(t, b, bus.Inbound{V: 1, ID: "marker", Channel: "console", ChatID: "c", UserID: "u", Text: "x"})
	if got := drainUntil(t, b, agent, "marker"); !slices.Equal(got, []string{"chat.in.line.l1 line:l-real"}) {
		t.Fatalf("agent got %q, want line's real message only", got)
	}

	// Nothing reached line's subjects or inboxes, in either account.
	for _, m := range daemonChat.All() {
		tok := strings.Split(m.Subject, ".")
		if slices.ContainsFunc(tok[1:], func(s string) bool { return strings.HasPrefix(s, "line") }) &&
			!strings.Contains(string(m.Data), `"l-real"`) {
			t.Errorf("daemon account saw %s: %s", m.Subject, m.Data)
		}
	}
	for name, col := range map[string]*bustest.Collector{"daemon _INBOX_line": daemonInbox, "line's DLQ": lineDLQ} {
		if n := len(col.All()); n != 0 {
			t.Errorf("%s received %d messages: %s", name, n, col.All()[0].Data)
		}
	}
	for _, m := range lineInbox.All() {
		// line's own publish acknowledgement is its only reply.
		if !strings.Contains(string(m.Data), `"stream":"CHAT_IN"`) || strings.Contains(string(m.Data), "error") {
			t.Errorf("line's inbox got %s: %s", m.Subject, m.Data)
		}
	}
	if n := len(lineInbox.All()); n > 1 {
		t.Errorf("line's inbox got %d messages, want only the acknowledgement of its own", n)
	}
	if n := streamMsgs(t, b, "CHAT_IN"); n != 0 {
		t.Errorf("CHAT_IN holds %d messages after every delivery was acknowledged", n)
	}
	wechat.noViolation(t)
}

func subjIn(b *natsbus.Bus, in bus.Inbound) string { return b.Subjects().In(in.Channel, in.ChatID) }

// TestInvalidMessagesSpendNoRateBudget: a bridge's invalid messages are
// refused with an error and dead-lettered on its own channel, before its
// rate limit; its valid messages then use the budget as usual.
func TestInvalidMessagesSpendNoRateBudget(t *testing.T) {
	cfg := twoBridges()
	cfg.Bridges["wechat"] = natsbus.BridgeConfig{Channels: []string{"wechat"}, Token: wechatToken, MaxMsgsPerSec: 0.01}
	b := open(t, cfg, t.TempDir())
	agent := startConsume(t, b)
	dlq := bustest.Collect(t, b.Conn(), "chat.dlq.>")
	wechat := asBridge(t, b, "wechat", nats.Token(wechatToken))

	invalid := []struct {
		subject string
		data    string
	}{
		{"chat.in.wechat.c", `{"v":1,"id":"x","channel":"wechat","chat_id":"c","user_id":"u"}`},            // no text
		{"chat.in.wechat.c", `{"v":1,"id":"x","channel":"other","chat_id":"c","user_id":"u","text":"t"}`},  // another channel
		{"chat.in.wechat.c", `{"v":1,"id":"x","channel":"wechat","chat_id":"d","user_id":"u","text":"t"}`}, // another chat
		{"chat.in.wechat.c", `not json`},
		{"chat.in.wechat.c.d", `{"v":1,"id":"x","channel":"wechat","chat_id":"c","user_id":"u","text":"t"}`}, // bad subject
	}
	for _, m := range invalid {
		_, err := wechat.js.Publish(t.Context(), m.subject, []byte(m.data))
		if apiErrorCode(err) != 400 || !strings.Contains(err.Error(), "bus:") {
			t.Errorf("publish %s on %s = %v, want a 400 API error naming the rule", m.data, m.subject, err)
		}
	}
	dlq.WaitFor(t, wait, func(*nats.Msg) bool { return len(dlq.All()) >= len(invalid) })
	for i, r := range dlq.DLQRecords(t) {
		if r.Subject != invalid[i].subject || r.Payload != invalid[i].data || !strings.HasPrefix(r.Reason, "bus:") {
			t.Errorf("DLQ record %d = %+v", i, r)
		}
	}
	for _, m := range dlq.All() {
		if m.Subject != "chat.dlq.wechat" {
			t.Errorf("dead letter on %s, want only wechat's own", m.Subject)
		}
	}

	// The budget (1 message) is whole: the first valid message passes, the
	// second is refused as rate-limited.
	first := bus.Inbound{V: 1, ID: "v1", Channel: "wechat", ChatID: "c", UserID: "u", Text: "hi"}
	if _, err := wechat.js.Publish(t.Context(), subjIn(b, first), mustJSON(t, first)); err != nil {
		t.Fatalf("first valid message: %v", err)
	}
	d := agent.next(t)
	if in := decode(t, b, d); in.ID != "v1" {
		t.Fatalf("agent got %s", in.ID)
	}
	doubleAck(t, d)
	second := bus.Inbound{V: 1, ID: "v2", Channel: "wechat", ChatID: "c", UserID: "u", Text: "hi"}
	_, err := wechat.js.Publish(t.Context(), subjIn(b, second), mustJSON(t, second))
	if apiErrorCode(err) != 429 || !strings.Contains(err.Error(), natsbus.RateLimitReason("wechat")) {
		t.Fatalf("second valid message = %v, want a 429 API error", err)
	}
	dlq.WaitFor(t, wait, func(*nats.Msg) bool { return len(dlq.All()) > len(invalid) })
	if r := dlq.DLQRecords(t)[len(invalid)]; r.Reason != natsbus.RateLimitReason("wechat") || r.Subject != "chat.in.wechat.c" {
		t.Errorf("rate-limit dead letter = %+v", r)
	}
	// A core publish (no reply) is judged the same, without an answer.
	if err := wechat.nc.Publish("chat.in.wechat.c", []byte("junk")); err != nil {
		t.Fatal(err)
	}
	dlq.WaitFor(t, wait, func(*nats.Msg) bool { return len(dlq.All()) > len(invalid)+1 })
	wechat.noViolation(t)
}

// TestInboundStreamBoundPerSubject floods one chat subject beyond
// [natsbus.InMaxMsgsPerSubject] while the runtime is not consuming: the
// excess is refused with an error to the publisher, the stored messages
// stay, and other chats and channels are unaffected.
func TestInboundStreamBoundPerSubject(t *testing.T) {
	b := open(t, twoBridges(), t.TempDir())
	wechat := asBridge(t, b, "wechat", nats.Token(wechatToken))
	other := asBridge(t, b, "other", nats.Token(otherToken))
	pub := func(c *client, channel, chat string, i int) error {
		in := bus.Inbound{V: 1, ID: fmt.Sprint(chat, i), Channel: channel, ChatID: chat, UserID: "u", Text: "hi"}
		_, err := c.js.Publish(t.Context(), subjIn(b, in), mustJSON(t, in))
		return err
	}
	for i := range natsbus.InMaxMsgsPerSubject {
		if err := pub(wechat, "wechat", "flood", i); err != nil {
			t.Fatalf("message %d within the bound: %v", i, err)
		}
	}
	err := pub(wechat, "wechat", "flood", natsbus.InMaxMsgsPerSubject)
	if apiErrorCode(err) != 503 || !strings.Contains(err.Error(), "maximum messages per subject") {
		t.Fatalf("message beyond the bound = %v, want a 503 API error", err)
	}
	if err := pub(wechat, "wechat", "calm", 0); err != nil {
		t.Errorf("another chat of the same channel: %v", err)
	}
	if err := pub(other, "other", "flood", 0); err != nil {
		t.Errorf("another channel: %v", err)
	}
	if n := streamMsgs(t, b, "CHAT_IN"); n != natsbus.InMaxMsgsPerSubject+2 {
		t.Errorf("CHAT_IN holds %d messages, want %d", n, natsbus.InMaxMsgsPerSubject+2)
	}
}

// TestOpenBoundsAnExistingInStream: a CHAT_IN created without bounds (by an
// earlier version) gets them at the next start, keeping its messages.
func TestOpenBoundsAnExistingInStream(t *testing.T) {
	dir := t.TempDir()
	b := open(t, inProcessConfig(), dir)
	publishInbound(t, b, inbound("kept", "hi"))
	old := natsbus.StreamConfigs("chat")[0]
	old.Discard, old.DiscardNewPerSubject, old.MaxMsgsPerSubject, old.MaxBytes = jetstream.DiscardOld, false, -1, -1
	if _, err := b.JetStream().UpdateStream(t.Context(), old); err != nil {
		t.Fatal(err)
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	b = open(t, inProcessConfig(), dir)
	s, err := b.JetStream().Stream(t.Context(), "CHAT_IN")
	if err != nil {
		t.Fatal(err)
	}
	c := s.CachedInfo().Config
	if c.Discard != jetstream.DiscardNew || !c.DiscardNewPerSubject || c.MaxMsgsPerSubject != natsbus.InMaxMsgsPerSubject || c.MaxBytes != natsbus.InMaxBytes {
		t.Errorf("CHAT_IN config after restart = %+v", c)
	}
	if n := s.CachedInfo().State.Msgs; n != 1 {
		t.Errorf("CHAT_IN holds %d messages, want the 1 kept", n)
	}
}

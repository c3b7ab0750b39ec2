package natsbus_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/switchboard-chat/switchboard/bus"
	"github.com/switchboard-chat/switchboard/bus/bridge"
	"github.com/switchboard-chat/switchboard/bus/bustest"
	"github.com/switchboard-chat/switchboard/bus/natsbus"
)

// kitInbox runs a bridge kit client with a bridge's own credentials and
// collects the outbound envelopes its durable consumer hands it.
type kitInbox struct {
	c    *bridge.Client
	outs chan bus.Outbound
}

func dialKit(t *testing.T, b *natsbus.Bus, name, token string) *kitInbox {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	c, err := bridge.Dial(t.Context(), b.ClientURL(), bridge.Credentials{Token: token},
		bridge.Options{Channel: name, MaxTextBytes: 1 << 20}) // the kit's own check lets 70,000 bytes through
	if err != nil {
		t.Fatalf("dial %s: %v", name, err)
	}
	k := &kitInbox{c: c, outs: make(chan bus.Outbound, 64)}
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = c.ConsumeOutbound(ctx, func(_ context.Context, out bus.Outbound) error {
			k.outs <- out
			return nil
		})
	}()
	t.Cleanup(func() {
		cancel()
		<-done
		_ = c.Close()
	})
	return k
}

// next returns the next outbound envelope, failing at the deadline.
func (k *kitInbox) next(t *testing.T) bus.Outbound {
	t.Helper()
	select {
	case out := <-k.outs:
		return out
	case <-time.After(wait):
		t.Fatalf("no outbound envelope for %s within %s", k.c.Channel(), wait)
		return bus.Outbound{}
	}
}

// TestRefusedBridgeMessageAnsweredToItsChat (issue 21): a bridge with its
// own credentials on the embedded server sends a 70,000-byte text and a
// bad attachment; each is refused by the ingress, dead-lettered, and
// answered with one error final on the bridge's own chat that says why
// (the limit, the attachment). A message with no valid chat is
// dead-lettered only; the other bridge never sees any of the answers.
func TestRefusedBridgeMessageAnsweredToItsChat(t *testing.T) {
	b := open(t, twoBridges(), t.TempDir())
	dlq := bustest.Collect(t, b.Conn(), "chat.dlq.wechat")
	wechat := dialKit(t, b, "wechat", wechatToken)
	other := dialKit(t, b, "other", otherToken)
	raw := asBridge(t, b, "wechat", nats.Token(wechatToken))

	big := bus.Inbound{V: 1, ID: "big1", Channel: "wechat", ChatID: "room 1", UserID: "u", Text: strings.Repeat("x", 70000)}
	err := wechat.c.PublishInbound(t.Context(), big)
	if apiErrorCode(err) != 400 || !strings.Contains(err.Error(), "too large") {
		t.Fatalf("70,000 bytes: publish error %v, want the ingress's 400", err)
	}
	got := wechat.next(t)
	if got.Kind != bus.KindError || !got.Final || got.InReplyTo != "big1" || got.ChatID != "room 1" ||
		!strings.Contains(got.Text, "70000 bytes") || !strings.Contains(got.Text, "limit is 65536 bytes") {
		t.Fatalf("answer to 70,000 bytes = %+v", got)
	}

	att := fmt.Sprintf(`{"v":1,"id":"att1","channel":"wechat","chat_id":"room 1","user_id":"u","text":"look",` +
		`"attachments":[{"kind":"image","name":"cat.png","data":"not base64!"}]}`)
	if _, err := raw.js.Publish(t.Context(), b.Subjects().In("wechat", "room 1"), []byte(att)); apiErrorCode(err) != 400 {
		t.Fatalf("bad attachment: publish error %v, want 400", err)
	}
	got = wechat.next(t)
	if got.Kind != bus.KindError || got.InReplyTo != "att1" || !strings.Contains(got.Text, `attachment 1 ("cat.png")`) ||
		!strings.Contains(got.Text, "base64") {
		t.Fatalf("answer to a bad attachment = %+v", got)
	}

	// Not addressable: the subject has no valid chat token.
	if _, err := raw.js.Publish(t.Context(), "chat.in.wechat.room.extra", mustJSON(t, big)); apiErrorCode(err) != 400 {
		t.Fatalf("unaddressable: publish error %v, want 400", err)
	}
	dlq.WaitFor(t, wait, func(m *nats.Msg) bool { return strings.Contains(string(m.Data), "chat.in.wechat.room.extra") })
	if n := len(dlq.All()); n != 3 {
		t.Fatalf("%d dead letters, want 3", n)
	}

	// Markers: each bridge's next envelope is its own marker, so nothing
	// else (an answer to the unaddressable message, or wechat's answers
	// reaching other) was queued before it.
	for _, ch := range []string{"wechat", "other"} {
		m := bus.Outbound{V: 1, ID: "marker-" + ch, Channel: ch, ChatID: "room 1", Kind: bus.KindReply, Text: "m", Seq: 1, Final: true}
		data, _ := json.Marshal(m)
		if err := b.Publish(t.Context(), b.Subjects().Out(ch, "room 1"), data, m.ID); err != nil {
			t.Fatal(err)
		}
	}
	if got := wechat.next(t); got.ID != "marker-wechat" {
		t.Fatalf("wechat got %+v, want only its marker after the two answers", got)
	}
	if got := other.next(t); got.ID != "marker-other" {
		t.Fatalf("other bridge got %+v: another bridge's answer", got)
	}
}

// TestRefusalAnswersWithinTheChannelsRate: a flood of invalid messages is
// not an amplifier: the answers of a channel follow its rate (here a
// bucket of one), and the flood spends nothing of the valid messages'
// budget.
func TestRefusalAnswersWithinTheChannelsRate(t *testing.T) {
	cfg := isolatedConfig()
	cfg.Bridges["wechat"] = natsbus.BridgeConfig{Channels: []string{"wechat"}, Token: wechatToken, MaxMsgsPerSec: 0.01}
	b := open(t, cfg, t.TempDir())
	wechat := dialKit(t, b, "wechat", wechatToken)
	agent := startConsume(t, b)
	raw := asBridge(t, b, "wechat", nats.Token(wechatToken))
	for i := range 5 {
		bad := fmt.Sprintf(`{"v":1,"id":"bad%d","channel":"wechat","chat_id":"c","user_id":"u"}`, i) // no text
		if _, err := raw.js.Publish(t.Context(), "chat.in.wechat.c", []byte(bad)); apiErrorCode(err) != 400 {
			t.Fatalf("invalid %d: publish error %v, want 400", i, err)
		}
	}
	ok := bus.Inbound{V: 1, ID: "ok1", Channel: "wechat", ChatID: "c", UserID: "u", Text: "hi"}
	if _, err := raw.js.Publish(t.Context(), "chat.in.wechat.c", mustJSON(t, ok)); err != nil {
		t.Fatalf("valid message after the flood refused: %v", err)
	}
	if in := decode(t, b, agent.next(t)); in.ID != "ok1" {
		t.Fatalf("stored %s, want the valid message", in.ID)
	}
	if got := wechat.next(t); got.InReplyTo != "bad0" || got.Kind != bus.KindError {
		t.Fatalf("first answer = %+v", got)
	}
	m := bus.Outbound{V: 1, ID: "marker", Channel: "wechat", ChatID: "c", Kind: bus.KindReply, Text: "m", Seq: 1, Final: true}
	data, _ := json.Marshal(m)
	if err := b.Publish(t.Context(), b.Subjects().Out("wechat", "c"), data, m.ID); err != nil {
		t.Fatal(err)
	}
	if got := wechat.next(t); got.ID != "marker" {
		t.Fatalf("got %+v: more answers than the channel's rate allows", got)
	}
}

package natsbus

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/switchboard-chat/switchboard/bus"
)

// TestAttackIngressFlood: the wechat bridge floods its inbound subject
// with 150 messages of 900 KB as fast as its connection takes them. The
// ingress holds at most a few MiB of them at a time (the excess is
// dropped and counted, never buffered without bound), and the line
// bridge's messages are stored and acknowledged during the flood and
// after it.
func TestAttackIngressFlood(t *testing.T) {
	const flood, size = 150, 900 << 10
	cfg := DefaultConfig()
	cfg.Listen = "127.0.0.1:0"
	cfg.Admin.Token = "ops-token-for-the-flood-test"
	cfg.Bridges = map[string]BridgeConfig{
		"wechat": {Channels: []string{"wechat"}, Token: "wechat-token-for-the-flood", MaxMsgsPerSec: 1000},
		"line":   {Channels: []string{"line"}, Token: "line-token-for-the-flood-test", MaxMsgsPerSec: 1000},
	}
	b, err := Open(t.Context(), cfg, t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	dial := func(name string) *nats.Conn {
		nc, err := nats.Connect(b.ClientURL(), nats.Token(cfg.Bridges[name].Token), nats.CustomInboxPrefix(BridgeInboxPrefix(name)))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(nc.Close)
		return nc
	}
	wechat, line := dial("wechat"), dial("line")
	lineJS, err := jetstream.New(line)
	if err != nil {
		t.Fatal(err)
	}
	sendLine := func(id string) {
		t.Helper()
		data, _ := json.Marshal(bus.Inbound{V: 1, ID: id, Channel: "line", ChatID: "g", UserID: "u", Text: "hi"})
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		defer cancel()
		if ack, err := lineJS.Publish(ctx, "chat.in.line.g", data); err != nil || ack.Stream != b.streams.In {
			t.Fatalf("line's %s during the flood: %+v, %v", id, ack, err)
		}
	}

	big, _ := json.Marshal(bus.Inbound{V: 1, ID: "big", Channel: "wechat", ChatID: "flood", UserID: "u", Text: strings.Repeat("x", size)})
	for i := range flood {
		if err := wechat.Publish("chat.in.wechat.flood", big); err != nil {
			t.Fatal(err)
		}
		if i == flood/2 {
			sendLine("during")
		}
	}
	if err := wechat.Flush(); err != nil {
		t.Fatal(err)
	}
	sendLine("after")

	var held int
	for _, sub := range b.ingress.subs {
		if b.ingress.bridgeOf[sub] != "wechat" {
			continue
		}
		_, bytes, err := sub.MaxPending()
		if err != nil {
			t.Fatal(err)
		}
		held = max(held, bytes)
	}
	// The client counts a message before it drops it: the high-water mark
	// may pass the limit by the one message dropped.
	limit := b.ingress.pendingBytes + int(b.nc.MaxPayload())
	if held > limit || limit > 8<<20 {
		t.Fatalf("the ingress held %d bytes of wechat's flood at once, want at most %d (a few MiB)", held, limit)
	}
	t.Logf("held at most %d bytes; dropped %v", held, b.IngressDropped())
}

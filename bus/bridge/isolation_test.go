package bridge

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"switchboard/bus"
	"switchboard/bus/natsbus"
)

func TestInboxPrefixMatchesDaemon(t *testing.T) {
	if got, want := InboxPrefix("wechat"), natsbus.BridgeInboxPrefix("wechat"); got != want {
		t.Fatalf("InboxPrefix = %q, want %q", got, want)
	}
}

// TestDialUnderIsolation runs a dialled bridge against the embedded server
// with bus.bridges declared: publishing inbound and consuming outbound work
// within the permissions the daemon grants it.
func TestDialUnderIsolation(t *testing.T) {
	cfg := natsbus.DefaultConfig()
	cfg.Listen = "127.0.0.1:0"
	cfg.Bridges = map[string]natsbus.BridgeConfig{"wx": {Channels: []string{"wechat"}, Token: "tok-wx"}}
	cfg.Admin = natsbus.AdminConfig{Token: "tok-admin"}
	b, err := natsbus.Open(t.Context(), cfg, t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()

	c, err := Dial(t.Context(), b.ClientURL(), Credentials{Token: "tok-wx"}, Options{Channel: "wechat", Bridge: "wx"})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.PublishInbound(t.Context(), bus.Inbound{ID: "1", ChatID: "room", UserID: "u", Text: "hi"}); err != nil {
		t.Fatalf("publish under isolation: %v", err)
	}

	ctx, cancel := context.WithCancel(t.Context())
	got := make(chan bus.Outbound, 1)
	done := make(chan error, 1)
	go func() {
		done <- c.ConsumeOutbound(ctx, func(_ context.Context, o bus.Outbound) error {
			got <- o
			return nil
		})
	}()
	out := bus.Outbound{V: 1, ID: "o1", Channel: "wechat", ChatID: "room", InReplyTo: "1", Kind: bus.KindReply, Text: "hello", Seq: 1, Final: true}
	data, _ := json.Marshal(out)
	if err := b.Publish(t.Context(), b.Subjects().Out("wechat", "room"), data, "o1"); err != nil {
		t.Fatal(err)
	}
	select {
	case o := <-got:
		if o.Text != "hello" {
			t.Fatalf("outbound = %+v", o)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no outbound through the bridge's own consumer")
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("consume: %v", err)
	}
}

// TestPublishInboundReportsRefusal: the daemon's ingress refuses a
// rate-limited message; the kit returns the refusal as a JetStream API
// error carrying the reason.
func TestPublishInboundReportsRefusal(t *testing.T) {
	cfg := natsbus.DefaultConfig()
	cfg.Listen = "127.0.0.1:0"
	cfg.Bridges = map[string]natsbus.BridgeConfig{"wx": {Channels: []string{"wechat"}, Token: "tok-wx", MaxMsgsPerSec: 0.01}}
	cfg.Admin = natsbus.AdminConfig{Token: "tok-admin"}
	b, err := natsbus.Open(t.Context(), cfg, t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	c, err := Dial(t.Context(), b.ClientURL(), Credentials{Token: "tok-wx"}, Options{Channel: "wechat", Bridge: "wx"})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.PublishInbound(t.Context(), bus.Inbound{ID: "1", ChatID: "room", UserID: "u", Text: "hi"}); err != nil {
		t.Fatalf("first publish: %v", err)
	}
	err = c.PublishInbound(t.Context(), bus.Inbound{ID: "2", ChatID: "room", UserID: "u", Text: "hi"})
	var apiErr *jetstream.APIError
	if !errors.As(err, &apiErr) || apiErr.Code != 429 || !strings.Contains(err.Error(), natsbus.RateLimitReason("wechat")) {
		t.Fatalf("second publish = %v, want a 429 API error", err)
	}
	if errors.Is(err, bus.ErrInvalid) {
		t.Fatalf("a rate-limited publish reads as invalid: %v", err)
	}
}

package bridge

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/switchboard-chat/switchboard/bus"
	"github.com/switchboard-chat/switchboard/bus/natsbus"
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

// TestDialURLCredentials dials the embedded server of a daemon with
// bridges declared, with the credentials in the URL as operators write them
// in configuration files and environment variables (nats://TOKEN@host:port,
// nats://user:password@host:port): the bridge logs in as itself, and the
// secrets never appear in its log or its errors.
func TestDialURLCredentials(t *testing.T) {
	cfg := natsbus.DefaultConfig()
	cfg.Listen = "127.0.0.1:0"
	cfg.Bridges = map[string]natsbus.BridgeConfig{
		"wx": {Channels: []string{"wechat"}, Token: "tok-wx-secret"},
		"ln": {Channels: []string{"line"}, User: "ln", Password: "pw-ln-secret"},
	}
	cfg.Admin = natsbus.AdminConfig{Token: "tok-admin"}
	b, err := natsbus.Open(t.Context(), cfg, t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	hostPort := strings.TrimPrefix(b.ClientURL(), "nats://")

	for _, tc := range []struct {
		name, url, channel, bridge string
	}{
		{"token", "nats://tok-wx-secret@" + hostPort, "wechat", "wx"},
		{"user and password", "nats://ln:pw-ln-secret@" + hostPort, "line", "ln"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var logs bytes.Buffer
			log := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
			c, err := Dial(t.Context(), tc.url, Credentials{}, Options{Channel: tc.channel, Bridge: tc.bridge, Log: log})
			if err != nil {
				t.Fatalf("Dial %s: %v", bus.RedactURL(tc.url), err)
			}
			if err := c.PublishInbound(t.Context(), bus.Inbound{ID: "1", ChatID: "room", UserID: "u", Text: "hi"}); err != nil {
				t.Fatalf("publish with URL credentials: %v", err)
			}
			// The credential is the bridge's own: another channel is refused.
			other := bus.Inbound{V: 1, ID: "2", Channel: "slack", ChatID: "room", UserID: "u", Text: "hi"}
			data, _ := json.Marshal(other)
			pctx, cancel := context.WithTimeout(t.Context(), time.Second) // refused: no acknowledgement comes
			defer cancel()
			if _, err := c.js.Publish(pctx, "chat.in.slack.room", data); err == nil {
				t.Fatal("a bridge publishing on another channel's subject was accepted")
			}
			_ = c.Close()
			if s := logs.String(); strings.Contains(s, "secret") || !strings.Contains(s, "bridge connected") {
				t.Fatalf("log leaks the credential or lacks the connect line:\n%s", s)
			}
		})
	}

	// A wrong secret in the URL is refused, and the error hides it.
	_, err = Dial(t.Context(), "nats://wrong-secret@"+hostPort, Credentials{}, Options{Channel: "wechat", Bridge: "wx"})
	if !errors.Is(err, nats.ErrAuthorization) || strings.Contains(err.Error(), "wrong-secret") {
		t.Fatalf("Dial with a wrong URL token = %v, want an authorization error without the token", err)
	}
	// Credentials in both places are ambiguous.
	_, err = Dial(t.Context(), "nats://tok-wx-secret@"+hostPort, Credentials{Token: "tok-wx-secret"}, Options{Channel: "wechat", Bridge: "wx"})
	if err == nil || !strings.Contains(err.Error(), "both in the URL and in Credentials") || strings.Contains(err.Error(), "tok-wx-secret") {
		t.Fatalf("Dial with credentials twice = %v, want a clear error", err)
	}
}

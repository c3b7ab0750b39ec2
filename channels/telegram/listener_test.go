package telegram

import (
	"net"
	"testing"
	"time"

	"github.com/switchboard-chat/switchboard/internal/httpserve"
	"github.com/switchboard-chat/switchboard/internal/httpserve/httpservetest"
)

// TestWebhookListenerBounded: the webhook's listener and server are the
// daemon's bounded ones (package httpserve), counted as "telegram".
func TestWebhookListenerBounded(t *testing.T) {
	httpservetest.CheckBounds(t, "telegram", func(t *testing.T, hs *httpserve.Servers) string {
		e := newEnv(t)
		cfg := e.config()
		cfg.Mode, cfg.WebhookListen, cfg.WebhookURL = ModeWebhook, "127.0.0.1:0", "https://bot.example.com/"
		cfg.WebhookSecret = "s3cret_-0123456789"
		a := e.newAdapter(t, cfg, Deps{HTTP: hs})
		addrs := make(chan net.Addr, 1)
		a.tune.webhookReady = func(addr net.Addr) { addrs <- addr }
		run(t, a)
		select {
		case addr := <-addrs:
			return addr.String()
		case <-time.After(waitTimeout):
			t.Fatal("webhook server did not start")
		}
		return ""
	})
}

package slack

import (
	"testing"

	"github.com/switchboard-chat/switchboard/internal/httpserve"
	"github.com/switchboard-chat/switchboard/internal/httpserve/httpservetest"
)

// TestHTTPModeListenerBounded: the Events API's listener and server are
// the daemon's bounded ones (package httpserve), counted as "slack".
func TestHTTPModeListenerBounded(t *testing.T) {
	httpservetest.CheckBounds(t, "slack", func(t *testing.T, hs *httpserve.Servers) string {
		e := newEnv(t)
		cfg := e.config()
		cfg.Mode, cfg.AppToken, cfg.SigningSecret, cfg.HTTPListen = ModeHTTP, "", signingSecret, "127.0.0.1:0"
		a := e.adapter(cfg)
		a.opts.HTTP = hs
		return e.start(a).addr.String()
	})
}

package web

import (
	"strings"
	"testing"

	"github.com/switchboard-chat/switchboard/internal/httpserve"
	"github.com/switchboard-chat/switchboard/internal/httpserve/httpservetest"
)

// TestListenerBounded: the console's listener and server are the
// daemon's bounded ones (package httpserve), counted as "web".
func TestListenerBounded(t *testing.T) {
	e := newEnv(t)
	httpservetest.CheckBounds(t, Name, func(t *testing.T, hs *httpserve.Servers) string {
		r := e.start(t, e.config(), func(d *Deps) { d.HTTP = hs })
		return strings.TrimPrefix(r.url, "http://")
	})
}

package metrics

import (
	"io"
	"net/http/httptest"
	"runtime"
	"strings"
	"testing"

	"github.com/switchboard-chat/switchboard/internal/httpserve"
)

type fakeListeners []httpserve.Stat

func (f fakeListeners) Stats() []httpserve.Stat { return f }

// TestHTTPConnections: the listeners' open, maximum and refused
// connections are exported by listener (and reason), beside the process's
// open file descriptors and their limit.
func TestHTTPConnections(t *testing.T) {
	m := New()
	m.HTTP(fakeListeners{{Listener: "openai", Open: 7, MaxConns: 512, RefusedFull: 3, RefusedPerIP: 11}})
	rec := httptest.NewRecorder()
	m.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	body, _ := io.ReadAll(rec.Body)
	want := []string{
		`switchboard_http_open_connections{listener="openai"} 7`,
		`switchboard_http_max_connections{listener="openai"} 512`,
		`switchboard_http_refused_connections_total{listener="openai",reason="max_conns"} 3`,
		`switchboard_http_refused_connections_total{listener="openai",reason="max_conns_per_ip"} 11`,
	}
	if runtime.GOOS == "linux" {
		want = append(want, "process_open_fds ", "process_max_fds ")
	}
	for _, w := range want {
		if !strings.Contains(string(body), w) {
			t.Errorf("metrics lack %s", w)
		}
	}
}

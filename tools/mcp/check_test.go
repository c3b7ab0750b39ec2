package mcp

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"

	"github.com/switchboard-chat/switchboard/internal/health"
)

// TestCheck starts the test server over stdio, lists its tools and stops
// it; a server that exits at once fails, a disabled one is skipped.
func TestCheck(t *testing.T) {
	cfg := Config{Servers: map[string]ServerConfig{
		"good":  stdioConfig(nil),
		"crash": {Command: os.Args[0], Args: []string{"-test.run=^$"}, Env: map[string]string{helperEnv: "0"}},
		"nope":  {Command: "switchboard-no-such-mcp-server"},
		"off":   {Command: os.Args[0], Disabled: true},
	}}
	got := Check(t.Context(), cfg, "test")
	want := []struct {
		name   string
		status health.Status
		detail string
	}{
		{"MCP crash", health.Fail, "check mcp.servers.crash"},
		{"MCP good", health.OK, "started, 11 tools listed: mcp_good_a_b, mcp_good_add"},
		{"MCP nope", health.Fail, `command "switchboard-no-such-mcp-server"`},
		{"MCP off", health.Skip, "disabled"},
	}
	if len(got) != len(want) {
		t.Fatalf("Check = %+v", got)
	}
	for i, w := range want {
		if got[i].Name != w.name || got[i].Status != w.status || !strings.Contains(got[i].Detail, w.detail) {
			t.Errorf("result %d = %+v, want %s %s %q", i, got[i], w.name, w.status, w.detail)
		}
	}
	if r := Check(t.Context(), Config{}, "test"); len(r) != 1 || r[0].Status != health.Skip {
		t.Fatalf("Check(no servers) = %+v", r)
	}
}

// TestServeHTTPStatus: GET /mcp shows each server with its tool count.
func TestServeHTTPStatus(t *testing.T) {
	m, err := New(Config{Servers: map[string]ServerConfig{"good": stdioConfig(nil), "off": {Command: "x", Disabled: true}}}, "test", nil)
	if err != nil {
		t.Fatal(err)
	}
	start(t, m)
	waitFor(t, m, "good ready", func() bool { return len(m.Tools()) > 0 })
	rec := httptest.NewRecorder()
	m.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/mcp", nil))
	var st []ServerStatus
	if err := json.Unmarshal(rec.Body.Bytes(), &st); err != nil {
		t.Fatalf("%v: %s", err, rec.Body)
	}
	if len(st) != 2 || st[0].Name != "good" || !st[0].Ready || st[0].Tools != len(m.Tools()) || !st[1].Disabled {
		t.Fatalf("GET /mcp = %s", rec.Body)
	}
}

package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/switchboard-chat/switchboard/internal/polltest"
	"github.com/switchboard-chat/switchboard/llm/llmtest"
	"github.com/switchboard-chat/switchboard/tools/mcp"
	"github.com/switchboard-chat/switchboard/tools/mcp/mcptest"
)

// doctorYAML is the configuration file of cfg as doctor reads it: the keys
// a test daemon sets (testConfig), plus mcp.servers.tools at mcpURL.
func doctorYAML(t *testing.T, cfg Config, mcpURL string) string {
	t.Helper()
	body := fmt.Sprintf(`data_dir: %q
bus:
  listen: %q
admin:
  listen: %q
llm:
  base_url: %q
  api_key: %q
  model: %q
  max_retries: 0
agent:
  workspace: %q
`, cfg.DataDir, cfg.Bus.Listen, cfg.Admin.Listen, cfg.LLM.BaseURL, cfg.LLM.APIKey, cfg.LLM.Model, cfg.Agent.Workspace)
	if mcpURL != "" {
		body += fmt.Sprintf("mcp:\n  servers:\n    tools:\n      url: %q\n", mcpURL)
	}
	path := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// runDoctor runs `switchboard doctor --config path args...`.
func runDoctor(t *testing.T, path string, args ...string) (int, string) {
	t.Helper()
	var out bytes.Buffer
	code := run(t.Context(), append([]string{"doctor", "--config", path}, args...), strings.NewReader(""), &out, &out)
	return code, out.String()
}

// liveDaemon starts a daemon on fixed ports (another process must find
// it) with the test MCP server configured, and waits until the MCP
// server's tools are listed.
func liveDaemon(t *testing.T, llmURL string) (*daemon, string) {
	t.Helper()
	mcpURL := mcptest.ServeHTTP(t)
	cfg := testConfig(t, llmURL)
	cfg.Bus.Listen, cfg.Admin.Listen = freePort(t), freePort(t)
	cfg.MCP.Servers = map[string]mcp.ServerConfig{"tools": {URL: mcpURL}}
	d := startDaemon(t, cfg)
	polltest.Until(t, wait, 20*time.Millisecond, func() bool {
		resp, err := http.Get("http://" + cfg.Admin.Listen + "/mcp")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		var st []struct{ Ready bool }
		return json.NewDecoder(resp.Body).Decode(&st) == nil && len(st) == 1 && st[0].Ready
	}, func() string { return "the daemon's MCP server did not become ready" })
	return d, doctorYAML(t, cfg, mcpURL)
}

// TestDoctorLiveAllGreen: against a running daemon, doctor reports every
// component ready, the MCP server with its tool count, the consumer's
// lag, no dead letters, the streams and a real tool-call request to the
// model; exit code 0. --json says the same.
func TestDoctorLiveAllGreen(t *testing.T) {
	model := llmtest.NewServer(t, llmtest.WithModels("test-model"))
	_, path := liveDaemon(t, model.URL())
	model.Enqueue(llmtest.ToolCallReply("ping", `{}`))
	code, out := runDoctor(t, path)
	if code != 0 {
		t.Fatalf("doctor = %d, want 0:\n%s", code, out)
	}
	wantLine(t, out, "daemon", "OK", "running: its admin listener http://")
	for _, c := range []string{"bus", "store", "workspace", "agent"} {
		wantLine(t, out, c, "OK", "ready")
	}
	wantLine(t, out, "MCP tools", "OK", "connected, 11 tools offered to the model")
	wantLine(t, out, "lag", "OK", "consumer CHAT_IN/agent: 0 waiting, 0 being answered")
	wantLine(t, out, "DLQ", "OK", "no dead letters")
	wantLine(t, out, "streams", "OK", "CHAT_IN 0 messages")
	wantLine(t, out, "sessions", "OK", "0 active")
	wantLine(t, out, "LLM", "OK", "model test-model is available")
	wantLine(t, out, "LLM call", "OK", "model test-model streams and makes tool calls (ping)")
	if strings.Contains(out, "NATS") || strings.Contains(out, "free to bind") {
		t.Fatalf("offline checks ran against a running daemon:\n%s", out)
	}

	model.Enqueue(llmtest.ToolCallReply("ping", `{}`))
	code, out = runDoctor(t, path, "--json")
	var rep struct {
		Mode     string
		Checks   []struct{ Name, Status, Detail string }
		Failures int
	}
	if err := json.Unmarshal([]byte(out), &rep); err != nil || code != 0 || rep.Mode != "live" || rep.Failures != 0 {
		t.Fatalf("doctor --json = %d, %v:\n%s", code, err, out)
	}
}

// TestDoctorLiveModelDown: a running daemon whose model endpoint does not
// answer: doctor says the model is down and exits 1, while the daemon's
// components are ready.
func TestDoctorLiveModelDown(t *testing.T) {
	_, path := liveDaemon(t, "http://"+freePort(t)+"/v1")
	code, out := runDoctor(t, path)
	if code != 1 {
		t.Fatalf("doctor = %d, want 1:\n%s", code, out)
	}
	wantLine(t, out, "daemon", "OK", "running")
	wantLine(t, out, "agent", "OK", "ready")
	wantLine(t, out, "LLM", "FAIL", "cannot reach GET http://")
	wantLine(t, out, "LLM call", "SKIP", "not tried")
}

// TestDoctorLiveDeadLetters: an invalid envelope on the bus shows up as a
// dead letter of its channel.
func TestDoctorLiveDeadLetters(t *testing.T) {
	model := llmtest.NewServer(t, llmtest.WithModels("test-model"))
	d, path := liveDaemon(t, model.URL())
	if err := d.nc.Publish("chat.in.console.c1", []byte("not json")); err != nil {
		t.Fatal(err)
	}
	var out string
	polltest.Until(t, wait, 50*time.Millisecond, func() bool {
		model.Enqueue(llmtest.ToolCallReply("ping", `{}`))
		_, out = runDoctor(t, path)
		return strings.Contains(out, "DLQ console")
	}, func() string { return "no DLQ console line:\n" + out })
	wantLine(t, out, "DLQ console", "WARN", "1 dead letter on chat.dlq.console: see why with `switchboard bus tail --channel console`")
}

// TestDoctorOffline: with no daemon running, doctor runs the offline
// checks, the MCP servers included (started, listed, stopped).
func TestDoctorOffline(t *testing.T) {
	cfg := testConfig(t, "http://"+freePort(t)+"/v1")
	cfg.Bus.Listen, cfg.Admin.Listen = freePort(t), freePort(t)
	path := doctorYAML(t, cfg, mcptest.ServeHTTP(t))
	code, out := runDoctor(t, path)
	if code != 1 { // the model endpoint does not answer
		t.Fatalf("doctor = %d, want 1:\n%s", code, out)
	}
	wantLine(t, out, "daemon", "SKIP", "not running (nothing answers on http://"+cfg.Admin.Listen)
	wantLine(t, out, "NATS", "OK", "is free to bind")
	wantLine(t, out, "admin", "OK", "is free to bind")
	wantLine(t, out, "MCP tools", "OK", "started, 11 tools listed: mcp_tools_a_b")
	wantLine(t, out, "LLM", "FAIL", "cannot reach")
}

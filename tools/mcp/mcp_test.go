package mcp

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
	"go.uber.org/goleak"

	"github.com/switchboard-chat/switchboard/tools"
	"github.com/switchboard-chat/switchboard/tools/mcp/mcptest"
)

// helperEnv makes the test binary run the test MCP server over stdio.
const helperEnv = "SWITCHBOARD_MCP_TEST_SERVER"

// stderrEnv names a variable the test server prints to its stderr at
// start, as a chatty server prints its configuration.
const stderrEnv = "SWITCHBOARD_MCP_TEST_STDERR"

func TestMain(m *testing.M) {
	if os.Getenv(helperEnv) == "1" {
		if name := os.Getenv(stderrEnv); name != "" {
			fmt.Fprintf(os.Stderr, "test server starting with token=%s\n", os.Getenv(name))
		}
		if err := mcptest.Server().Run(context.Background(), &sdk.StdioTransport{}); err != nil && !errors.Is(err, context.Canceled) {
			os.Exit(3)
		}
		os.Exit(0)
	}
	goleak.VerifyTestMain(m)
}

// start runs m until the test ends.
func start(t *testing.T, m *Manager) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- m.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run = %v", err)
		}
		if n := len(m.Tools()); n != 0 {
			t.Errorf("%d tools left after Run returned", n)
		}
	})
}

// waitFor waits for cond to hold, re-checking at every change of m.
func waitFor(t *testing.T, m *Manager, what string, cond func() bool) {
	t.Helper()
	deadline := time.NewTimer(30 * time.Second)
	defer deadline.Stop()
	for {
		ch := m.Changed()
		if cond() {
			return
		}
		select {
		case <-ch:
		case <-deadline.C:
			t.Fatalf("timed out waiting for %s; status %+v, tools %v", what, m.Status(), names(m.Tools()))
		}
	}
}

func names(ts []tools.Tool) []string {
	var out []string
	for _, t := range ts {
		out = append(out, t.Name())
	}
	return out
}

func has(m *Manager, name string) func() bool {
	return func() bool { return slices.Contains(names(m.Tools()), name) }
}

func toolbox(t *testing.T, m *Manager) *tools.Toolbox {
	t.Helper()
	tb, err := tools.NewToolbox(nil, nil, m)
	if err != nil {
		t.Fatal(err)
	}
	return tb
}

func runTool(t *testing.T, tb *tools.Toolbox, name, args string) tools.Result {
	t.Helper()
	return tb.Run(t.Context(), name, tools.Call{ID: "c1", Args: json.RawMessage(args)})
}

func stdioConfig(extraEnv map[string]string) ServerConfig {
	env := map[string]string{helperEnv: "1", "MCP_TEST_VALUE": "configured"}
	for k, v := range extraEnv {
		env[k] = v
	}
	return ServerConfig{Command: os.Args[0], Args: []string{"-test.run=^$"}, Env: env, Timeout: 500 * time.Millisecond}
}

// checkCommonTools exercises the test server's tools through a toolbox.
func checkCommonTools(t *testing.T, m *Manager, server string) {
	t.Helper()
	p := "mcp_" + server + "_"
	tb := toolbox(t, m)
	want := []string{p + "a_b", p + "add", p + "echo", p + "env", p + "exit", p + "fail", p + "grow", p + "image", p + "look", p + "slow", p + "weird_name_x"}
	got := names(m.Tools())
	slices.Sort(got)
	if !slices.Equal(got, want) {
		t.Errorf("tools = %v, want %v", got, want)
	}
	if r := runTool(t, tb, p+"echo", `{"text":"hi"}`); r.IsError || r.Text != "echo: hi" {
		t.Errorf("echo: %+v", r)
	}
	if r := runTool(t, tb, p+"add", `{"a":2,"b":40}`); r.IsError || r.Text != `{"sum":42}` {
		t.Errorf("add: %+v", r)
	}
	if r := runTool(t, tb, p+"add", `{"a":"two"}`); !r.IsError {
		t.Errorf("add with a bad argument: %+v", r)
	}
	if r := runTool(t, tb, p+"fail", `{}`); !r.IsError || r.Text != "Error: it broke" {
		t.Errorf("fail: %+v", r)
	}
	r := runTool(t, tb, p+"image", `{}`)
	if r.IsError || len(r.Images) != 1 || string(r.Images[0].Data) != string(mcptest.PNG) || r.Images[0].MIME != "image/png" ||
		r.Text != "a picture\n[image image-2.png: image/png, 12 bytes]" {
		t.Errorf("image: %+v", r)
	}
	if r := runTool(t, tb, p+"slow", `{}`); !r.IsError || !strings.Contains(r.Text, "timed out after 500ms") {
		t.Errorf("slow: %+v", r)
	}
	if r := runTool(t, tb, p+"weird_name_x", `{}`); r.Text != "I am weird.name/x" {
		t.Errorf("weird name: %+v", r)
	}
	if r := runTool(t, tb, p+"a_b", `{}`); r.Text != "I am a.b" {
		t.Errorf("collision kept the wrong tool: %+v", r)
	}
	for _, tl := range m.Tools() {
		switch tl.Name() {
		case p + "look":
			if tl.Permission() != tools.PermRead || !tl.ParallelSafe() {
				t.Errorf("read-only tool: %s %v", tl.Permission(), tl.ParallelSafe())
			}
		case p + "echo":
			if tl.Permission() != tools.PermExec || tl.ParallelSafe() || !strings.HasPrefix(tl.Description(), "[MCP server "+server+"] Echo") {
				t.Errorf("echo tool: %s %v %q", tl.Permission(), tl.ParallelSafe(), tl.Description())
			}
		}
	}

	// A tool added at run time arrives through notifications/tools/list_changed.
	if r := runTool(t, tb, p+"grow", `{}`); r.Text != "grown" {
		t.Fatalf("grow: %+v", r)
	}
	waitFor(t, m, "the late tool", has(m, p+"late"))
	if r := runTool(t, tb, p+"late", `{}`); r.Text != "I am late" {
		t.Errorf("late: %+v", r)
	}
}

func TestStdioServer(t *testing.T) {
	t.Setenv("SWITCHBOARD_TEST_SECRET_TOKEN", "sk-should-not-leak")
	m, err := New(Config{Servers: map[string]ServerConfig{"local": stdioConfig(nil)}}, "test", nil)
	if err != nil {
		t.Fatal(err)
	}
	m.backoff = 10 * time.Millisecond
	start(t, m)
	waitFor(t, m, "the stdio server's tools", has(m, "mcp_local_echo"))
	checkCommonTools(t, m, "local")
	if r := runTool(t, toolbox(t, m), "mcp_local_env", `{}`); r.Text != "value=configured leaked=no" {
		t.Errorf("env: %+v", r)
	}

	// The server process dies: its tools leave, and it is started again.
	_ = runTool(t, toolbox(t, m), "mcp_local_exit", `{}`)
	waitFor(t, m, "the reconnection", func() bool {
		st := m.Status()[0]
		return st.Attempts >= 2 && st.Ready
	})
	if r := runTool(t, toolbox(t, m), "mcp_local_echo", `{"text":"again"}`); r.Text != "echo: again" {
		t.Errorf("echo after the restart: %+v", r)
	}
}

func TestHTTPServer(t *testing.T) {
	srv := mcptest.Server()
	h := sdk.NewStreamableHTTPHandler(func(*http.Request) *sdk.Server { return srv }, nil)
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer t0k" {
			http.Error(w, "unauthorized", http.StatusUnauthorized)
			return
		}
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(hs.Close) // after the manager stopped (cleanups run last-in first-out)
	cfg := Config{Servers: map[string]ServerConfig{
		"remote": {URL: hs.URL, Headers: map[string]string{"Authorization": "Bearer t0k"}, Timeout: 500 * time.Millisecond},
		"noauth": {URL: hs.URL},
	}}
	m, err := New(cfg, "test", nil)
	if err != nil {
		t.Fatal(err)
	}
	m.backoff = 10 * time.Millisecond
	start(t, m)
	waitFor(t, m, "the HTTP server's tools", has(m, "mcp_remote_echo"))
	checkCommonTools(t, m, "remote")
	waitFor(t, m, "retries of the server without credentials", func() bool {
		for _, st := range m.Status() {
			if st.Name == "noauth" {
				return st.Attempts >= 3 && !st.Ready && st.Error != ""
			}
		}
		return false
	})
	for _, n := range names(m.Tools()) {
		if strings.HasPrefix(n, "mcp_noauth_") {
			t.Errorf("tool %s of a server that never connected", n)
		}
	}
}

func TestFailingServerDoesNotBlockOthers(t *testing.T) {
	cfg := Config{Servers: map[string]ServerConfig{
		"broken": {Command: "/nonexistent/mcp-server"},
		"crashy": {Command: os.Args[0], Args: []string{"-test.run=^$"}, Env: map[string]string{helperEnv: "0"}}, // exits at once
		"good":   stdioConfig(nil),
		"off":    {Command: "/nonexistent/other", Disabled: true},
	}}
	m, err := New(cfg, "", nil)
	if err != nil {
		t.Fatal(err)
	}
	m.backoff = 10 * time.Millisecond
	start(t, m)
	waitFor(t, m, "the good server and retries of the broken ones", func() bool {
		st := map[string]ServerStatus{}
		for _, s := range m.Status() {
			st[s.Name] = s
		}
		return st["good"].Ready && st["broken"].Attempts >= 3 && st["crashy"].Attempts >= 2
	})
	for _, s := range m.Status() {
		switch s.Name {
		case "broken":
			if !strings.Contains(s.Error, "/nonexistent/mcp-server") {
				t.Errorf("broken status: %+v", s)
			}
		case "off":
			if !s.Disabled || s.Attempts != 0 {
				t.Errorf("disabled server was started: %+v", s)
			}
		}
	}
	for _, n := range names(m.Tools()) {
		if !strings.HasPrefix(n, "mcp_good_") {
			t.Errorf("unexpected tool %s", n)
		}
	}
}

func TestToolName(t *testing.T) {
	long := strings.Repeat("x", 80)
	tests := []struct{ server, tool, want string }{
		{"github", "create_issue", "mcp_github_create_issue"},
		{"fs", "read.file/v2", "mcp_fs_read_file_v2"},
		{"fs", "héllo wörld", "mcp_fs_h_llo_w_rld"},
	}
	for _, tt := range tests {
		if got := ToolName(tt.server, tt.tool); got != tt.want {
			t.Errorf("ToolName(%s, %s) = %s, want %s", tt.server, tt.tool, got, tt.want)
		}
	}
	a, b := ToolName("srv", long+"a"), ToolName("srv", long+"b")
	if len(a) != 64 || len(b) != 64 || a == b || !tools.ValidName(a) || a != ToolName("srv", long+"a") {
		t.Errorf("long names: %s %s", a, b)
	}
}

func TestObjectSchema(t *testing.T) {
	if s, err := objectSchema(map[string]any{"properties": map[string]any{}}); err != nil || !strings.Contains(string(s), `"type":"object"`) {
		t.Errorf("schema without type: %s, %v", s, err)
	}
	if s, err := objectSchema(nil); err != nil || string(s) != `{"type":"object","properties":{}}` {
		t.Errorf("nil schema: %s, %v", s, err)
	}
	for _, bad := range []any{map[string]any{"type": "string"}, []any{1}, "x"} {
		if _, err := objectSchema(bad); err == nil {
			t.Errorf("objectSchema(%v) accepted", bad)
		}
	}
}

func TestConfigValidate(t *testing.T) {
	if err := DefaultConfig().Validate(); err != nil {
		t.Fatal(err)
	}
	good := Config{Servers: map[string]ServerConfig{
		"fs":     {Command: "npx", Args: []string{"-y", "@modelcontextprotocol/server-filesystem"}, Env: map[string]string{"TOKEN": "x"}},
		"remote": {URL: "https://mcp.example.com/mcp", Headers: map[string]string{"Authorization": "Bearer x"}, Timeout: time.Minute},
	}}
	if err := good.Validate(); err != nil {
		t.Errorf("good config: %v", err)
	}
	bad := Config{Servers: map[string]ServerConfig{
		"has_underscore": {Command: "x"},
		"both":           {Command: "x", URL: "http://x"},
		"neither":        {},
		"badurl":         {URL: "ftp://x"},
		"argsonurl":      {URL: "http://x", Args: []string{"a"}},
		"hdronstdio":     {Command: "x", Headers: map[string]string{"A": "b"}},
		"badenv":         {Command: "x", Env: map[string]string{"1X": "y"}},
		"badhdr":         {URL: "http://x", Headers: map[string]string{"Bad Header": "v"}},
		"hosthdr":        {URL: "http://x", Headers: map[string]string{"host": "v"}},
		"negtimeout":     {Command: "x", Timeout: -time.Second},
		"spaces":         {Command: " x"},
	}}
	err := bad.Validate()
	if err == nil {
		t.Fatal("bad config accepted")
	}
	for _, want := range []string{
		"mcp.servers.has_underscore: server names", "mcp.servers.both: set command", "mcp.servers.neither: set command",
		"mcp.servers.badurl.url:", "mcp.servers.argsonurl: args and env", "mcp.servers.hdronstdio.headers:", "mcp.servers.badenv.env:",
		"mcp.servers.badhdr.headers:", "mcp.servers.hosthdr.headers: Host", "mcp.servers.negtimeout.timeout:", "mcp.servers.spaces.command:",
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q:\n%v", want, err)
		}
	}
	if _, err := New(bad, "", nil); err == nil {
		t.Error("New accepted a bad config")
	}
}

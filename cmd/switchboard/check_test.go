package main

import (
	"bytes"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"go.uber.org/goleak"

	"github.com/switchboard-chat/switchboard/internal/doctor"
	"github.com/switchboard-chat/switchboard/internal/health"
	"github.com/switchboard-chat/switchboard/llm/llmtest"
)

// TestMain checks every test of package main for leaked goroutines.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// checkEnv describes a configuration for runCheck tests; zero fields get
// harmless values (in-process bus, admin off, LLM not configured).
type checkEnv struct {
	dataDir, workspace string
	busURL, busListen  string
	adminListen        string
	llmBaseURL, llmKey string
	llmModel           string
}

func (e checkEnv) yaml(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	if e.dataDir == "" {
		e.dataDir = filepath.Join(dir, "data")
	}
	if e.workspace == "" {
		e.workspace = filepath.Join(dir, "workspace")
	}
	if e.llmModel == "" {
		e.llmModel = "gpt-4o-mini"
	}
	return fmt.Sprintf(`data_dir: %q
bus:
  url: %q
  listen: %q
llm:
  base_url: %q
  api_key: %q
  model: %q
agent:
  workspace: %q
admin:
  listen: %q
`, e.dataDir, e.busURL, e.busListen, e.llmBaseURL, e.llmKey, e.llmModel, e.workspace, e.adminListen)
}

// runCheckFile writes body to a config file and runs `check --config` on it.
func runCheckFile(t *testing.T, body string, extraArgs ...string) (int, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	code := runCheck(t.Context(), append([]string{"--config", path}, extraArgs...), &out)
	return code, out.String()
}

// line returns the output line of the named check.
func line(t *testing.T, out, name string) string {
	t.Helper()
	re := regexp.MustCompile(`(?m)^(✓|!|✗|-) ` + regexp.QuoteMeta(name) + `\s{2,}.*$`)
	l := re.FindString(out)
	if l == "" {
		t.Fatalf("no %q line in output:\n%s", name, out)
	}
	return l
}

func wantLine(t *testing.T, out, name, status, detail string) {
	t.Helper()
	l := line(t, out, name)
	if !strings.HasPrefix(l, doctor.Symbol(health.Status(status))+" ") || !strings.Contains(l, detail) {
		t.Fatalf("%s line = %q, want status %s and %q; output:\n%s", name, l, status, detail, out)
	}
}

// freeAddr returns a 127.0.0.1 address nothing listens on.
func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

// busyAddr returns an address held by a listener for the test's duration.
func busyAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	return ln.Addr().String()
}

// runNATS starts a NATS server on a random 127.0.0.1 port.
func runNATS(t *testing.T, jetStream bool) *server.Server {
	t.Helper()
	opts := &server.Options{
		ServerName: "check-test",
		Host:       "127.0.0.1",
		Port:       -1,
		NoLog:      true,
		NoSigs:     true,
		JetStream:  jetStream,
		StoreDir:   t.TempDir(),
	}
	s, err := server.NewServer(opts)
	if err != nil {
		t.Fatal(err)
	}
	go s.Start()
	t.Cleanup(func() {
		s.Shutdown()
		s.WaitForShutdown()
	})
	if !s.ReadyForConnections(10 * time.Second) {
		t.Fatal("nats-server did not start within 10s")
	}
	return s
}

// modelServer is a fake OpenAI-compatible /v1/models endpoint.
func modelServer(t *testing.T, status int, body string) (url string, gotAuth func() string) {
	t.Helper()
	auth := make(chan string, 1)
	chat := llmtest.NewHandler(llmtest.WithResponder(func(*llmtest.Request) llmtest.Reply { return llmtest.ToolCallReply("ping", `{}`) }))
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/v1/chat/completions" && r.Method == http.MethodPost {
			chat.ServeHTTP(w, r)
			return
		}
		if r.URL.Path != "/v1/models" || r.Method != http.MethodGet {
			http.Error(w, "unexpected "+r.Method+" "+r.URL.Path, http.StatusTeapot)
			return
		}
		select {
		case auth <- r.Header.Get("Authorization"):
		default:
		}
		w.WriteHeader(status)
		_, _ = w.Write([]byte(body))
	}))
	t.Cleanup(srv.Close)
	return srv.URL + "/v1", func() string {
		select {
		case a := <-auth:
			return a
		default:
			return "<no request>"
		}
	}
}

func TestCheckAllOK(t *testing.T) {
	base, gotAuth := modelServer(t, 200, `{"object":"list","data":[{"id":"gpt-4o"},{"id":"llama3.1:latest"}]}`)
	ns := runNATS(t, true)
	env := checkEnv{busURL: ns.ClientURL(), adminListen: freeAddr(t), llmBaseURL: base + "/", llmKey: "sk-good", llmModel: "llama3.1"}
	code, out := runCheckFile(t, env.yaml(t))
	if code != 0 {
		t.Fatalf("exit code %d, want 0; output:\n%s", code, out)
	}
	wantLine(t, out, "config", "OK", "is valid")
	wantLine(t, out, "NATS", "OK", "connected to nats://127.0.0.1:")
	wantLine(t, out, "NATS", "OK", "JetStream enabled")
	wantLine(t, out, "admin", "OK", "is free to bind")
	wantLine(t, out, "LLM", "OK", "GET "+base+"/models: HTTP 200, model llama3.1 is available")
	wantLine(t, out, "data dir", "OK", "does not exist yet; it will be created")
	wantLine(t, out, "workspace", "OK", "does not exist yet; it will be created")
	if !strings.HasSuffix(out, "\n0 warnings, 0 failures\n") {
		t.Fatalf("output does not end with the summary:\n%s", out)
	}
	if a := gotAuth(); a != "Bearer sk-good" {
		t.Fatalf("Authorization header = %q, want Bearer sk-good", a)
	}
	if strings.Contains(out, "sk-good") {
		t.Fatalf("output shows the API key:\n%s", out)
	}
}

func TestCheckLLM(t *testing.T) {
	unreachable := "http://" + freeAddr(t) + "/v1"
	tests := []struct {
		name       string
		status     int
		body       string
		base       string // overrides the fake server
		key, model string
		wantCode   int
		wantStatus string
		wantDetail string
	}{
		{name: "not configured", base: "-", wantCode: 0, wantStatus: "WARN",
			wantDetail: "not configured: set OPENAI_API_KEY, and optionally OPENAI_BASE_URL (e.g. http://localhost:11434/v1 for Ollama, no key needed) and OPENAI_MODEL; or edit llm.* in "},
		{name: "ok without model list", status: 200, body: `{}`, key: "k", wantCode: 0, wantStatus: "OK", wantDetail: "HTTP 200 (model gpt-4o-mini)"},
		{name: "ok local server without key", status: 200, body: `{"data":[{"id":"gpt-4o-mini"}]}`, wantCode: 0, wantStatus: "OK", wantDetail: "model gpt-4o-mini is available"},
		{name: "model not listed", status: 200, body: `{"data":[{"id":"a"},{"id":"b"},{"id":"c"},{"id":"d"},{"id":"e"},{"id":"f"}]}`, key: "k", model: "zzz",
			wantCode: 0, wantStatus: "WARN", wantDetail: `reachable, but model "zzz" is not among the 6 it lists (a, b, c, d, e, ...): check OPENAI_MODEL or llm.model`},
		{name: "401", status: 401, body: `{"error":{"message":"bad key"}}`, key: "sk-bad", wantCode: 1, wantStatus: "FAIL", wantDetail: "HTTP 401, key rejected: check OPENAI_API_KEY or llm.api_key"},
		{name: "403", status: 403, key: "sk-bad", wantCode: 1, wantStatus: "FAIL", wantDetail: "HTTP 403, key rejected"},
		{name: "401 without key", status: 401, wantCode: 1, wantStatus: "FAIL", wantDetail: "HTTP 401, the endpoint wants an API key: set OPENAI_API_KEY or llm.api_key"},
		{name: "404", status: 404, key: "k", wantCode: 1, wantStatus: "FAIL", wantDetail: "HTTP 404: check llm.base_url (OpenAI-compatible servers usually end in /v1)"},
		{name: "500", status: 500, body: "upstream\n  exploded", key: "k", wantCode: 1, wantStatus: "FAIL", wantDetail: "HTTP 500: upstream exploded"},
		{name: "unreachable", base: unreachable, key: "k", wantCode: 1, wantStatus: "FAIL", wantDetail: "cannot reach GET " + unreachable + "/models: dial tcp"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			env := checkEnv{llmKey: tt.key, llmModel: tt.model}
			switch tt.base {
			case "-":
			case "":
				env.llmBaseURL, _ = modelServer(t, tt.status, tt.body)
			default:
				env.llmBaseURL = tt.base
			}
			code, out := runCheckFile(t, env.yaml(t))
			if code != tt.wantCode {
				t.Fatalf("exit code %d, want %d; output:\n%s", code, tt.wantCode, out)
			}
			wantLine(t, out, "LLM", tt.wantStatus, tt.wantDetail)
		})
	}
}

func TestCheckNATS(t *testing.T) {
	withJS := runNATS(t, true)
	withoutJS := runNATS(t, false)
	down := "nats://" + freeAddr(t)
	tests := []struct {
		name       string
		env        checkEnv
		wantCode   int
		wantStatus string
		wantDetail string
	}{
		{name: "external with JetStream", env: checkEnv{busURL: withJS.ClientURL()}, wantStatus: "OK", wantDetail: "(server " + server.VERSION + ", JetStream enabled)"},
		{name: "external without JetStream", env: checkEnv{busURL: withoutJS.ClientURL()}, wantCode: 1, wantStatus: "FAIL", wantDetail: "but JetStream is not enabled: start nats-server with -js"},
		{name: "external down", env: checkEnv{busURL: down}, wantCode: 1, wantStatus: "FAIL", wantDetail: "cannot connect to " + down + ": "},
		{name: "credentials redacted", env: checkEnv{busURL: "nats://alice:s3cret@" + strings.TrimPrefix(down, "nats://")}, wantCode: 1, wantStatus: "FAIL", wantDetail: "cannot connect to nats://alice:xxxxx@"},
		{name: "embedded free", env: checkEnv{busListen: freeAddr(t)}, wantStatus: "OK", wantDetail: "is free to bind"},
		{name: "embedded busy", env: checkEnv{busListen: busyAddr(t)}, wantCode: 1, wantStatus: "FAIL", wantDetail: "embedded server cannot listen on 127.0.0.1:"},
		{name: "in-process only", env: checkEnv{}, wantStatus: "OK", wantDetail: "embedded server, in-process only"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, out := runCheckFile(t, tt.env.yaml(t))
			if code != tt.wantCode {
				t.Fatalf("exit code %d, want %d; output:\n%s", code, tt.wantCode, out)
			}
			wantLine(t, out, "NATS", tt.wantStatus, tt.wantDetail)
			if strings.Contains(out, "s3cret") {
				t.Fatalf("output shows the NATS password:\n%s", out)
			}
		})
	}
}

func TestCheckAdmin(t *testing.T) {
	busy := busyAddr(t)
	code, out := runCheckFile(t, checkEnv{adminListen: busy}.yaml(t))
	if code != 1 {
		t.Fatalf("exit code %d, want 1; output:\n%s", code, out)
	}
	wantLine(t, out, "admin", "FAIL", "cannot listen on "+busy+": ")
	if !strings.HasSuffix(out, "\n1 warning, 1 failure\n") {
		t.Fatalf("summary wrong:\n%s", out)
	}
	_, out = runCheckFile(t, checkEnv{}.yaml(t))
	wantLine(t, out, "admin", "OK", "disabled (admin.listen is empty)")
}

// TestCheckWorkspace: a workspace that is a file fails the check (the
// check itself is tested in package workspace).
func TestCheckWorkspace(t *testing.T) {
	file := filepath.Join(t.TempDir(), "ws")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	code, out := runCheckFile(t, checkEnv{workspace: file}.yaml(t))
	if code != 1 {
		t.Fatalf("exit code %d, want 1; output:\n%s", code, out)
	}
	wantLine(t, out, "workspace", "FAIL", file+" is not a directory")
}

func TestCheckInvalidConfig(t *testing.T) {
	body := "log:\n  level: loud\nagent:\n  max_stepz: 3\n"
	code, out := runCheckFile(t, body)
	if code != 2 {
		t.Fatalf("exit code %d, want 2; output:\n%s", code, out)
	}
	wantLine(t, out, "config", "FAIL", ": 2 problems")
	for _, p := range []string{
		"      - agent.max_stepz (line 4): unknown key (did you mean max_steps?)\n",
		"      - log.level: must be one of debug, info, warn, error, got \"loud\"\n",
	} {
		if !strings.Contains(out, p) {
			t.Fatalf("output lacks %q:\n%s", p, out)
		}
	}
	if strings.Contains(out, "NATS") {
		t.Fatalf("dependencies were checked despite an invalid config:\n%s", out)
	}
}

func TestCheckArguments(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "none.yaml")
	tests := []struct {
		name     string
		args     []string
		wantCode int
		wantOut  string
	}{
		{name: "missing file", args: []string{"--config", missing}, wantCode: 2, wantOut: "✗ config        config: file " + missing + " does not exist"},
		{name: "unknown flag", args: []string{"--nope"}, wantCode: 2, wantOut: "flag provided but not defined: -nope"},
		{name: "extra argument", args: []string{"--config", missing, "extra"}, wantCode: 2, wantOut: `switchboard doctor: unexpected argument "extra"`},
		{name: "help", args: []string{"-h"}, wantCode: 0, wantOut: "Usage: switchboard doctor [--config FILE] [--json]"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var out bytes.Buffer
			if code := runCheck(t.Context(), tt.args, &out); code != tt.wantCode {
				t.Fatalf("runCheck(%q) = %d, want %d; output:\n%s", tt.args, code, tt.wantCode, out.String())
			}
			if !strings.Contains(out.String(), tt.wantOut) {
				t.Fatalf("runCheck(%q) output lacks %q:\n%s", tt.args, tt.wantOut, out.String())
			}
		})
	}
}

func TestCheckDefaultConfigPath(t *testing.T) {
	// Without --config, check reads ./config.yaml; without one it checks
	// the built-in defaults (issue 21).
	dir := t.TempDir()
	t.Chdir(dir)
	var out bytes.Buffer
	runCheck(t.Context(), nil, &out)
	wantLine(t, out.String(), "config", "OK", "built-in defaults (no ./config.yaml) is valid")
	if err := os.WriteFile("config.yaml", []byte(checkEnv{}.yaml(t)), 0o600); err != nil {
		t.Fatal(err)
	}
	out.Reset()
	if code := runCheck(t.Context(), nil, &out); code != 0 {
		t.Fatalf("runCheck() with ./config.yaml = %d:\n%s", code, out.String())
	}
	wantLine(t, out.String(), "config", "OK", "./config.yaml is valid")
}

// TestCheckDataDirByStore: a data_dir whose history.db is not a bbolt file
// fails the check with memory.store: bolt, and is no problem with
// memory.store: jetstream, where history is on the bus (the folder must
// still be writable).
func TestCheckDataDirByStore(t *testing.T) {
	dataDir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dataDir, "history.db"), []byte("not a bbolt file"), 0o600); err != nil {
		t.Fatal(err)
	}
	ns := runNATS(t, true)
	env := checkEnv{dataDir: dataDir, busURL: ns.ClientURL()}
	_, out := runCheckFile(t, env.yaml(t))
	wantLine(t, out, "data dir", "FAIL", "history.db cannot be opened")

	_, out = runCheckFile(t, env.yaml(t)+"memory:\n  store: jetstream\n")
	wantLine(t, out, "data dir", "OK", dataDir+" is writable")
	if strings.Contains(line(t, out, "data dir"), "history.db") {
		t.Fatalf("with memory.store: jetstream the check reports on history.db:\n%s", out)
	}
}

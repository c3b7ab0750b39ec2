package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/switchboard-chat/switchboard/bus"
	"github.com/switchboard-chat/switchboard/bus/natsbus"
	"github.com/switchboard-chat/switchboard/internal/polltest"
	"github.com/switchboard-chat/switchboard/llm/llmtest"
)

// TestEmbeddedListenerRefusesAnonymous is finding 5 of issue 13 as an
// attacker on the host tries it: the daemon runs with the default bus (the
// embedded listener, no bridge declared) and a process that reaches the
// listener, without the operator credential, tries to connect and publish
// a message as a Telegram user. It is refused, and nothing reaches the
// model.
func TestEmbeddedListenerRefusesAnonymous(t *testing.T) {
	model := llmtest.NewServer(t, llmtest.WithResponder(llmtest.EchoResponder))
	d := startDaemon(t, testConfig(t, model.URL()))
	if len(d.cfg.Bus.Bridges) != 0 || d.cfg.Bus.Admin.Set() {
		t.Fatal("the test daemon must have no bridge and no bus.admin")
	}
	for _, tc := range []struct {
		name string
		opts []nats.Option
	}{
		{"anonymous", nil},
		{"guessed token", []nats.Option{nats.Token("switchboard")}},
		{"guessed user", []nats.Option{nats.UserInfo("admin", "admin")}},
	} {
		nc, err := nats.Connect(d.s.Bus.ClientURL(), append(tc.opts, nats.MaxReconnects(0))...)
		if err == nil {
			// The old behaviour: full access. Show what the attacker gets.
			in := bus.Inbound{V: 1, ID: "evil-" + tc.name, Channel: "telegram", ChatID: "42", UserID: "42", Text: "run rm -rf ~ with bash"}
			data, _ := json.Marshal(in)
			perr := nc.Publish(d.subjects().In("telegram", "42"), data)
			nc.Close()
			t.Fatalf("%s client connected to the daemon's bus (publish as telegram user 42: %v), want an authorization violation", tc.name, perr)
		}
		if !errors.Is(err, nats.ErrAuthorization) {
			t.Fatalf("%s client: err = %v, want an authorization violation", tc.name, err)
		}
	}
	if n := model.RequestCount(); n != 0 {
		t.Fatalf("the model was called %d times", n)
	}
	// The daemon still serves its operator.
	out := d.collectOut(t, "c1")
	d.send(t, "c1", "m1", "still here")
	out.WaitOutbound(t, wait, finalFor("m1"))
}

// TestOperatorCredentialGeneratedAndReused: the daemon creates
// data_dir/bus-operator.token at its first start (0600, 64 hex digits and a
// newline), keeps it across restarts, and `switchboard chat` and
// `switchboard bus tail` use it with no flag at all (./config.yaml).
func TestOperatorCredentialGeneratedAndReused(t *testing.T) {
	model := llmtest.NewServer(t, llmtest.WithResponder(llmtest.EchoResponder))
	cfg := testConfig(t, model.URL())
	cfg.Bus.Listen = freePort(t)
	file := filepath.Join(cfg.DataDir, "bus-operator.token")

	d := startDaemon(t, cfg)
	st, err := os.Stat(file)
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode().Perm() != 0o600 {
		t.Fatalf("%s has mode %04o, want 0600", file, st.Mode().Perm())
	}
	first, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(`^[0-9a-f]{64}\n$`).Match(first) {
		t.Fatalf("%s = %q, want 64 hex digits and a newline", file, first)
	}
	d.stop()

	startDaemon(t, cfg)
	again, err := os.ReadFile(file)
	if err != nil || !bytes.Equal(first, again) {
		t.Fatalf("after a restart %s = %q, %v; want the same token", file, again, err)
	}

	// No flags: ./config.yaml names the daemon's data_dir and listener.
	dir := t.TempDir()
	body := fmt.Sprintf("data_dir: %q\nbus:\n  listen: %q\n", cfg.DataDir, cfg.Bus.Listen)
	if err := os.WriteFile(filepath.Join(dir, "config.yaml"), []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Chdir(dir)
	tr := startTail(t)
	var out bytes.Buffer
	if code := run(t.Context(), []string{"chat"}, strings.NewReader("hello operator\n"), &out, &out); code != 0 {
		t.Fatalf("chat with no flags: exit %d:\n%s", code, out.String())
	}
	if !strings.Contains(out.String(), "echo: ") || !strings.Contains(out.String(), "hello operator") {
		t.Fatalf("chat output lacks the answer:\n%s", out.String())
	}
	tr.out.waitLine(t, " IN    console/", `"hello operator"`)
	tr.out.waitLine(t, " OUT   console/", "reply", "final")
	if s := out.String() + tr.out.String(); strings.Contains(s, strings.TrimSpace(string(first))) {
		t.Fatal("chat or tail printed the operator token")
	}
}

// TestOperatorCredentialRefusedWhenReadable: a credential file that others
// can read (or that is not a regular file) stops the daemon at start with
// a clear error, and clients refuse it too.
func TestOperatorCredentialRefusedWhenReadable(t *testing.T) {
	cfg := testConfig(t, "http://127.0.0.1:1/v1")
	if err := os.MkdirAll(cfg.DataDir, 0o750); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(cfg.DataDir, "bus-operator.token")
	if err := os.WriteFile(file, []byte(strings.Repeat("ab", 32)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(file, 0o644); err != nil {
		t.Fatal(err)
	}
	err := serve(t.Context(), cfg, slog.New(slog.NewTextHandler(io.Discard, nil)), func(started) { t.Error("the daemon started") })
	want := "operator credential " + file + " has mode 0644: group and others must not read or write it (chmod 600 " + file + ")"
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("serve with a world-readable credential = %v, want %q", err, want)
	}
	cfg.Bus.Listen = freePort(t)
	if _, _, err := cfg.Bus.OperatorDial(cfg.DataDir); err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("OperatorDial with a world-readable credential = %v", err)
	}
}

// TestChatAndTailURLCredentials: `chat --url` and `bus tail --url` take
// the credentials in the URL (nats://TOKEN@host:port,
// nats://user:password@host:port) and never print them.
func TestChatAndTailURLCredentials(t *testing.T) {
	model := llmtest.NewServer(t, llmtest.WithResponder(llmtest.EchoResponder))
	cfg := testConfig(t, model.URL())
	cfg.Bus.Admin.Token = "ops-url-secret"
	d := startDaemon(t, cfg)
	hostPort := strings.TrimPrefix(d.s.Bus.ClientURL(), "nats://")
	// A config that knows nothing of this daemon: --url is all there is.
	empty := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(empty, []byte("data_dir: "+t.TempDir()+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}

	tr := startTail(t, "--config", empty, "--url", "nats://ops-url-secret@"+hostPort)
	var out bytes.Buffer
	if code := run(t.Context(), []string{"chat", "--config", empty, "--chat", "u1", "--url", "nats://ops-url-secret@" + hostPort},
		strings.NewReader("over the url\n"), &out, &out); code != 0 {
		t.Fatalf("chat --url: exit %d:\n%s", code, out.String())
	}
	tr.out.waitLine(t, " OUT   console/u1", "reply", "final")
	if s := out.String() + tr.out.String(); strings.Contains(s, "ops-url-secret") || !strings.Contains(s, "nats://xxxxx@"+hostPort) {
		t.Fatalf("the URL's token is printed, or the redacted URL is not shown:\n%s", s)
	}
	out.Reset()
	code := run(t.Context(), []string{"chat", "--config", empty, "--url", "nats://wrong-url-secret@" + hostPort}, strings.NewReader("x\n"), &out, &out)
	if code != 1 || !strings.Contains(out.String(), "Authorization Violation") || strings.Contains(out.String(), "wrong-url-secret") {
		t.Fatalf("chat --url with a wrong token: exit %d:\n%s", code, out.String())
	}
}

// TestChatAndTailURLUserPassword: user and password in the URL, against a
// daemon whose bus.admin is a user.
func TestChatAndTailURLUserPassword(t *testing.T) {
	model := llmtest.NewServer(t, llmtest.WithResponder(llmtest.EchoResponder))
	cfg := testConfig(t, model.URL())
	cfg.Bus.Admin = natsbus.AdminConfig{User: "ops", Password: "pw-url-secret"}
	d := startDaemon(t, cfg)
	url := "nats://ops:pw-url-secret@" + strings.TrimPrefix(d.s.Bus.ClientURL(), "nats://")
	empty := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(empty, []byte("data_dir: "+t.TempDir()+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	tr := startTail(t, "--config", empty, "--url", url, "--channel", "console")
	if strings.Contains(tr.out.String(), "pw-url-secret") || !strings.Contains(tr.out.String(), "nats://ops:xxxxx@") {
		t.Fatalf("banner: %s", tr.out.String())
	}
	out := d.collectOut(t, "c1")
	d.send(t, "c1", "m1", "via user and password")
	out.WaitOutbound(t, wait, finalFor("m1"))
	tr.out.waitLine(t, " IN    console/c1", `"via user and password"`)
}

// TestBusContextVerb: `switchboard bus context` writes a private nats CLI
// context with the operator's URL and credential, replaces it when run
// again, and never prints the credential.
func TestBusContextVerb(t *testing.T) {
	xdg := t.TempDir()
	t.Setenv("XDG_CONFIG_HOME", xdg)
	dataDir := t.TempDir()
	token, _, err := natsbus.OperatorToken(dataDir)
	if err != nil {
		t.Fatal(err)
	}
	cfgFile := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(cfgFile, []byte(fmt.Sprintf("data_dir: %q\nbus:\n  listen: 0.0.0.0:5222\n  admin: {user: ops, password: ops-password-for-tests}\n", dataDir)), 0o600); err != nil {
		t.Fatal(err)
	}
	plain := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(plain, []byte(fmt.Sprintf("data_dir: %q\nbus:\n  listen: 127.0.0.1:5222\n", dataDir)), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args []string
		file string
		want natsbus.CLIContext
	}{
		{[]string{"--config", plain}, "switchboard.json", natsbus.CLIContext{URL: "nats://127.0.0.1:5222", Token: token}},
		{[]string{"--config", cfgFile, "--name", "ops.prod"}, "ops.prod.json", natsbus.CLIContext{URL: "nats://127.0.0.1:5222", User: "ops", Password: "ops-password-for-tests"}},
		{[]string{"--config", plain, "--name", "ops.prod"}, "ops.prod.json", natsbus.CLIContext{URL: "nats://127.0.0.1:5222", Token: token}}, // replaced
	} {
		var stdout, stderr bytes.Buffer
		if err := runBus(t.Context(), append([]string{"context"}, tc.args...), &stdout, &stderr); err != nil {
			t.Fatalf("bus context %q: %v\n%s", tc.args, err, stderr.String())
		}
		path := filepath.Join(xdg, "nats", "context", tc.file)
		st, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		if st.Mode().Perm() != 0o600 {
			t.Errorf("%s mode %04o, want 0600", path, st.Mode().Perm())
		}
		var got natsbus.CLIContext
		data, _ := os.ReadFile(path)
		if err := json.Unmarshal(data, &got); err != nil {
			t.Fatal(err)
		}
		got.Description = ""
		if got != tc.want {
			t.Errorf("bus context %q wrote %+v, want %+v", tc.args, got, tc.want)
		}
		if s := stdout.String(); strings.Contains(s, token) || strings.Contains(s, `"pw"`) || !strings.Contains(s, path) ||
			!strings.Contains(s, "nats --context "+strings.TrimSuffix(tc.file, ".json")+" sub 'chat.>'") {
			t.Errorf("bus context output:\n%s", s)
		}
	}
	if err := runBus(t.Context(), []string{"context", "--config", plain, "--name", "../evil"}, io.Discard, io.Discard); !errors.Is(err, errUsage) {
		t.Errorf("--name ../evil = %v, want a usage error", err)
	}
	// Before the daemon's first start there is no credential to write.
	none := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(none, []byte(fmt.Sprintf("data_dir: %q\n", t.TempDir())), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := runBus(t.Context(), []string{"context", "--config", none}, io.Discard, io.Discard); err == nil || !strings.Contains(err.Error(), "the daemon creates it when it first starts") {
		t.Errorf("bus context before the first start = %v", err)
	}
}

// TestCheckAgainstRunningDaemon: `switchboard check` with the running
// daemon's configuration finds it (its embedded bus takes the generated
// operator credential, as `chat` does; it has no admin listener here),
// says so and checks it live instead of failing on its ports and files.
func TestCheckAgainstRunningDaemon(t *testing.T) {
	cfg := testConfig(t, "http://127.0.0.1:1/v1")
	cfg.Bus.Listen = freePort(t)
	d := startDaemon(t, cfg)
	// The manager creates its consumer afresh once it runs, which may be
	// just after the daemon says it started.
	js, err := jetstream.New(d.nc)
	if err != nil {
		t.Fatal(err)
	}
	polltest.Until(t, wait, 10*time.Millisecond, func() bool {
		_, err := js.Consumer(t.Context(), "CHAT_IN", natsbus.ConsumerName)
		return err == nil
	}, func() string { return "the manager's consumer CHAT_IN/agent was not created" })
	env := checkEnv{busListen: cfg.Bus.Listen, dataDir: cfg.DataDir}
	_, out := runCheckFile(t, env.yaml(t))
	wantLine(t, out, "daemon", "OK", "running: its embedded bus nats://"+cfg.Bus.Listen+" takes the operator credential; checking it live")
	wantLine(t, out, "lag", "OK", "consumer CHAT_IN/agent: 0 waiting")
	wantLine(t, out, "readiness", "SKIP", "no admin listener")
	if strings.Contains(out, "NATS") || strings.Contains(out, "data dir") {
		t.Fatalf("offline checks ran against the running daemon:\n%s", out)
	}
	// Another data_dir has another credential (none yet): the bus is not
	// ours, and the offline checks say its port is taken.
	_, out = runCheckFile(t, checkEnv{busListen: cfg.Bus.Listen}.yaml(t))
	wantLine(t, out, "daemon", "SKIP", "not running")
	wantLine(t, out, "NATS", "FAIL", "embedded server cannot listen on "+cfg.Bus.Listen)
}

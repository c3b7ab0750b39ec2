package setup_test

import (
	"bytes"
	"context"
	"flag"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"go.uber.org/goleak"

	"github.com/switchboard-chat/switchboard/internal/setup"
	"github.com/switchboard-chat/switchboard/llm/llmtest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var update = flag.Bool("update", false, "rewrite the golden files")

// testdata is absolute: a test changes its working directory.
var testdata, _ = filepath.Abs("testdata")

const (
	goodKey   = "sk-good-key-123456"
	botToken  = "123456:AAE-good_token"
	slackBot  = "xoxb-good"
	slackApp  = "xapp-good"
	pingReply = "ping"
)

// fakes are the services `switchboard init` checks, over HTTP: an
// OpenAI-compatible endpoint (the scripted model behind a key check),
// Telegram's getMe and Slack's auth.test.
type fakes struct {
	model    *llmtest.Handler
	modelURL string
	telegram string // the api endpoint pattern
	slack    string // the Web API base URL
}

func newFakes(t *testing.T) *fakes {
	t.Helper()
	h := llmtest.NewHandler(llmtest.WithModels("small-model", "big-model"))
	t.Cleanup(h.Close)
	model := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer "+goodKey {
			w.WriteHeader(http.StatusUnauthorized)
			_, _ = w.Write([]byte(`{"error":{"message":"Incorrect API key provided","type":"invalid_request_error"}}`))
			return
		}
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(model.Close)
	tg := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/bot"+botToken+"/getMe" {
			w.WriteHeader(http.StatusUnauthorized)
			_, _ = w.Write([]byte(`{"ok":false,"error_code":401,"description":"Unauthorized"}`))
			return
		}
		_, _ = w.Write([]byte(`{"ok":true,"result":{"id":42,"is_bot":true,"first_name":"B","username":"my_bot"}}`))
	}))
	t.Cleanup(tg.Close)
	sl := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_ = r.ParseForm()
		if r.URL.Path != "/auth.test" || (r.Header.Get("Authorization") != "Bearer "+slackBot && r.Form.Get("token") != slackBot) {
			_, _ = w.Write([]byte(`{"ok":false,"error":"invalid_auth"}`))
			return
		}
		_, _ = w.Write([]byte(`{"ok":true,"url":"https://t.slack.com/","team":"Team","user":"switchbot","team_id":"T1","user_id":"U0BOT"}`))
	}))
	t.Cleanup(sl.Close)
	for _, v := range []string{"OPENAI_BASE_URL", "OPENAI_API_KEY", "OPENAI_MODEL", "TELEGRAM_BOT_TOKEN", "SLACK_BOT_TOKEN", "SLACK_APP_TOKEN"} {
		t.Setenv(v, "")
	}
	return &fakes{model: h, modelURL: model.URL + "/v1", telegram: tg.URL + "/bot%s/%s", slack: sl.URL + "/"}
}

// toolCall scripts the model to call the probe's tool once.
func (f *fakes) toolCall() {
	f.model.Enqueue(llmtest.Reply{ToolCalls: []llmtest.ToolCall{{Name: pingReply, Arguments: `{}`}}})
}

// redact puts placeholders for the fakes' addresses and the temp dir.
func (f *fakes) redact(s, dir string) string {
	return strings.NewReplacer(f.modelURL, "MODEL_URL", strings.TrimSuffix(f.telegram, "/bot%s/%s"), "TELEGRAM_URL",
		strings.TrimSuffix(f.slack, "/"), "SLACK_URL", dir, "DIR").Replace(s)
}

func golden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join(testdata, name)
	if *update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if got != string(want) {
		t.Errorf("differs from %s (go test -update to rewrite):\n got:\n%s\nwant:\n%s", path, got, want)
	}
}

func run(t *testing.T, stdin string, args ...string) (string, error) {
	t.Helper()
	var out, errOut bytes.Buffer
	err := setup.Run(t.Context(), args, strings.NewReader(stdin), &out, &errOut)
	return out.String() + errOut.String(), err
}

// TestYesWritesTheChosenKeys: with --yes and flags, every answer is
// checked against its service (a real streaming request with a tool
// call, getMe, auth.test) and the file holds only the keys chosen, with
// mode 0600; the workspace files are created.
func TestYesWritesTheChosenKeys(t *testing.T) {
	f := newFakes(t)
	f.toolCall()
	dir := t.TempDir()
	path := filepath.Join(dir, "config.yaml")
	out, err := run(t, "", "--yes", "--config", path, "--data-dir", filepath.Join(dir, "data"),
		"--base-url", f.modelURL, "--api-key", goodKey, "--model", "big-model",
		"--telegram-token", botToken, "--telegram-api-endpoint", f.telegram, "--telegram-allow", "@ann, 42",
		"--slack-bot-token", slackBot, "--slack-app-token", slackApp, "--slack-api-url", f.slack, "--slack-allow", "U1")
	if err != nil {
		t.Fatalf("init = %v\n%s", err, out)
	}
	for _, want := range []string{"model big-model is available", "streams and makes tool calls (ping)", "bot @my_bot", "switchbot in workspace Team"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	golden(t, "yes.golden", f.redact(string(data), dir))
	if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("config file mode: %v %v", fi.Mode(), err)
	}
	for _, name := range []string{"AGENT.md", "USER.md", "RULE.md"} {
		if _, err := os.Stat(filepath.Join(dir, "data", "workspace", name)); err != nil {
			t.Errorf("workspace file: %v", err)
		}
	}
	if n := len(f.model.Requests()); n != 1 {
		t.Errorf("%d chat requests, want the one probe", n)
	}
}

// TestYesKeyFromTheEnvironment: a key taken from $OPENAI_API_KEY is
// written as ${OPENAI_API_KEY}, not as itself; the default data dir and
// model (the first listed) add no keys.
func TestYesKeyFromTheEnvironment(t *testing.T) {
	f := newFakes(t)
	f.toolCall()
	t.Setenv("OPENAI_API_KEY", goodKey)
	dir := t.TempDir()
	t.Chdir(dir)
	out, err := run(t, "", "--yes", "--base-url", f.modelURL)
	if err != nil {
		t.Fatalf("init = %v\n%s", err, out)
	}
	data, err := os.ReadFile(filepath.Join(dir, "config.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	golden(t, "env.golden", f.redact(string(data), dir))
	if _, err := os.Stat(filepath.Join(dir, "data", "workspace", "AGENT.md")); err != nil {
		t.Errorf("workspace file: %v", err)
	}
}

// TestYesBadAnswersWriteNothing: a key the endpoint refuses, a Telegram
// token getMe refuses or a Slack token auth.test refuses is a clear error
// naming what to fix, and neither the file nor the workspace is written.
func TestYesBadAnswersWriteNothing(t *testing.T) {
	f := newFakes(t)
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"bad key", []string{"--api-key", "sk-wrong"}, "HTTP 401, key rejected"},
		{"bad telegram token", []string{"--api-key", goodKey, "--telegram-token", "123456:AAE-wrong", "--telegram-api-endpoint", f.telegram}, "the Telegram token failed its check"},
		{"bad slack token", []string{"--api-key", goodKey, "--slack-bot-token", "xoxb-wrong", "--slack-app-token", slackApp, "--slack-api-url", f.slack}, "channels.slack.bot_token rejected"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f.toolCall()
			dir := t.TempDir()
			path := filepath.Join(dir, "config.yaml")
			args := append([]string{"--yes", "--config", path, "--data-dir", filepath.Join(dir, "data"), "--base-url", f.modelURL}, tc.args...)
			out, err := run(t, "", args...)
			if err == nil || !strings.Contains(err.Error(), "nothing written") || !strings.Contains(out+err.Error(), tc.want) {
				t.Fatalf("init = %v, want an error with %q\n%s", err, tc.want, out)
			}
			if strings.Contains(out+err.Error(), "wrong") {
				t.Errorf("the refused secret is shown:\n%s\n%v", out, err)
			}
			if entries, _ := os.ReadDir(dir); len(entries) != 0 {
				t.Fatalf("written after a failed check: %v", entries)
			}
		})
	}
}

// TestRefusesToOverwrite: an existing file is kept unless --force.
func TestRefusesToOverwrite(t *testing.T) {
	f := newFakes(t)
	dir := t.TempDir()
	path := filepath.Join(dir, "config.yaml")
	if err := os.WriteFile(path, []byte("mine: true\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	args := []string{"--yes", "--config", path, "--data-dir", filepath.Join(dir, "data"), "--base-url", f.modelURL, "--api-key", goodKey}
	if _, err := run(t, "", args...); err == nil || !strings.Contains(err.Error(), "exists; pass --force") {
		t.Fatalf("init over an existing file = %v", err)
	}
	if data, _ := os.ReadFile(path); string(data) != "mine: true\n" {
		t.Fatalf("existing file changed: %q", data)
	}
	f.toolCall()
	if out, err := run(t, "", append(args, "--force")...); err != nil {
		t.Fatalf("init --force = %v\n%s", err, out)
	}
	if data, _ := os.ReadFile(path); !strings.Contains(string(data), "base_url: "+f.modelURL) {
		t.Fatalf("file not overwritten with --force: %q", data)
	}
}

// TestInteractive: the questions are asked on stdout and answered on
// stdin; the models the endpoint lists are shown; a refused key asks
// again; channels left off add nothing.
func TestInteractive(t *testing.T) {
	f := newFakes(t)
	f.toolCall()
	dir := t.TempDir()
	path := filepath.Join(dir, "config.yaml")
	answers := strings.Join([]string{
		f.modelURL, "sk-wrong", "", // endpoint, key, model: refused
		"", goodKey, "small-model", // again: endpoint kept, key, model
		"n", "no", // no Telegram, no Slack
	}, "\n") + "\n"
	out, err := run(t, answers, "--config", path, "--data-dir", filepath.Join(dir, "data"))
	if err != nil {
		t.Fatalf("init = %v\n%s", err, out)
	}
	for _, want := range []string{"Model endpoint (OpenAI-compatible base URL) [https://api.openai.com/v1]: ",
		"key rejected", "Let's try again.", "The endpoint lists 2 models: small-model, big-model", "Enable Telegram? [y/N]: ", "Wrote " + path} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if got := string(data); !strings.Contains(got, "model: small-model") || strings.Contains(got, "channels") {
		t.Fatalf("config:\n%s", got)
	}
	if _, err := run(t, "", "--config", filepath.Join(dir, "other.yaml")); err == nil || !strings.Contains(err.Error(), "input ended") {
		t.Fatalf("init with no answers = %v", err)
	}
}

// TestInteractiveStops: a cancelled context (Ctrl-C) ends the questions
// at once, with nothing written.
func TestInteractiveStops(t *testing.T) {
	newFakes(t)
	dir := t.TempDir()
	pr, pw := io.Pipe()
	t.Cleanup(func() { _ = pw.Close() })
	ctx, cancel := context.WithCancel(t.Context())
	var out bytes.Buffer
	done := make(chan error, 1)
	w := &notify{w: &out, wrote: make(chan struct{}, 1)}
	go func() { done <- setup.Run(ctx, []string{"--config", filepath.Join(dir, "config.yaml")}, pr, w, w) }()
	<-w.wrote // the first question is asked
	cancel()
	if err := <-done; err == nil || !strings.Contains(err.Error(), "nothing written") {
		t.Fatalf("init after cancel = %v", err)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Fatalf("written after a cancel: %v", entries)
	}
}

// notify is a writer that says when it was written to.
type notify struct {
	w     io.Writer
	wrote chan struct{}
}

func (n *notify) Write(p []byte) (int, error) {
	select {
	case n.wrote <- struct{}{}:
	default:
	}
	return n.w.Write(p)
}

// TestOwnerOffered: with a user id allowed on a channel, the first one is
// offered as the owner (access.owners), who may change the bot's shared
// files; an owner on a channel that is not built in is refused and asked
// again; --owner none (or no user id allowed) writes no owner.
func TestOwnerOffered(t *testing.T) {
	f := newFakes(t)
	f.toolCall()
	dir := t.TempDir()
	path := filepath.Join(dir, "config.yaml")
	answers := strings.Join([]string{
		f.modelURL, goodKey, "", // endpoint, key, model
		"y", botToken, "@ann, 42", // Telegram: token, allowed
		"n",                          // no Slack
		"wechat:boss", "telegram:42", // owner: refused, then the id
	}, "\n") + "\n"
	out, err := run(t, answers, "--config", path, "--data-dir", filepath.Join(dir, "data"), "--telegram-api-endpoint", f.telegram)
	if err != nil {
		t.Fatalf("init = %v\n%s", err, out)
	}
	for _, want := range []string{"may change the bot's shared files", "Owner (<channel>:<user_id>; none for nobody) [telegram:42]: ",
		"wechat:boss is not on a built-in channel", "Let's try again."} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if data, _ := os.ReadFile(path); !strings.Contains(string(data), "access:\n  owners:\n    - telegram:42\n") {
		t.Errorf("config:\n%s", data)
	}

	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"declined", []string{"--owner", "none", "--telegram-allow", "42"}, "Wrote"},
		{"no user id", []string{"--telegram-allow", "@ann"}, "No owner: the bot's shared files"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f.toolCall()
			d := t.TempDir()
			p := filepath.Join(d, "config.yaml")
			out, err := run(t, "", append([]string{"--yes", "--config", p, "--data-dir", filepath.Join(d, "data"), "--base-url", f.modelURL, "--api-key", goodKey,
				"--telegram-token", botToken, "--telegram-api-endpoint", f.telegram}, tc.args...)...)
			if err != nil || !strings.Contains(out, tc.want) {
				t.Fatalf("init = %v, want output with %q\n%s", err, tc.want, out)
			}
			if data, _ := os.ReadFile(p); strings.Contains(string(data), "owners") {
				t.Errorf("an owner was written:\n%s", data)
			}
		})
	}
	f.toolCall()
	d := t.TempDir()
	_, err = run(t, "", "--yes", "--config", filepath.Join(d, "config.yaml"), "--base-url", f.modelURL, "--api-key", goodKey, "--owner", "wechat:boss")
	if err == nil || !strings.Contains(err.Error(), "--owner") || !strings.Contains(err.Error(), "nothing written") {
		t.Fatalf("init --owner wechat:boss = %v", err)
	}
	if entries, _ := os.ReadDir(d); len(entries) != 0 {
		t.Fatalf("written after a bad owner: %v", entries)
	}
}

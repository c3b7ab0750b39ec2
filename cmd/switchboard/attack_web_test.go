package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"mime/multipart"
	"net"
	"net/http"
	"net/http/cookiejar"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	openai "github.com/sashabaranov/go-openai"

	"github.com/switchboard-chat/switchboard/bus"
	"github.com/switchboard-chat/switchboard/bus/bustest"
	webch "github.com/switchboard-chat/switchboard/channels/web"
	"github.com/switchboard-chat/switchboard/internal/polltest"
	"github.com/switchboard-chat/switchboard/internal/syncbuf"
	"github.com/switchboard-chat/switchboard/llm/llmtest"
)

// webRig is a daemon with the web console (users ann and bob, ann its
// only operator and an owner), started from a configuration file with
// its log captured.
type webRig struct {
	cfg   Config
	path  string // the configuration file
	web   string // the console's base URL
	admin string // the admin listener's base URL
	logs  *syncbuf.Buffer
	nc    *nats.Conn
	subj  bus.Subjects
}

// webRigModel echoes, and calls web_fetch for "fetch <url>", answering
// with the tool's result.
func webRigModel(req *llmtest.Request) llmtest.Reply {
	if last, ok := req.LastMessage(); ok && last.Role == openai.ChatMessageRoleTool {
		return llmtest.TextReply("the tool said: " + llmtest.MessageText(last))
	}
	text := req.LastUserText()
	if u, ok := strings.CutPrefix(text, "fetch "); ok && req.HasTool("web_fetch") {
		return llmtest.ToolCallReply("web_fetch", `{"url":`+strconv.Quote(u)+`}`)
	}
	return llmtest.TextReply("echo: " + text)
}

// startWebRig writes the configuration (extra is appended at the top
// level) and starts the daemon from it on fixed loopback ports, so that
// `switchboard doctor` finds it.
func startWebRig(t *testing.T, extra string) *webRig {
	t.Helper()
	model := llmtest.NewServer(t, llmtest.WithResponder(webRigModel))
	dir := t.TempDir()
	webAddr, busAddr, admAddr := freePort(t), freePort(t), freePort(t)
	yaml := fmt.Sprintf(`data_dir: %q
bus: {listen: %q}
admin: {listen: %q}
llm: {base_url: %q, api_key: sk-rig-model-key, model: test-model, max_retries: 0}
agent: {workspace: %q}
access: {owners: ["web:ann"]}
channels:
  web: {listen: %q, allow_users: [ann, bob], operators: [ann]}
`, filepath.Join(dir, "data"), busAddr, admAddr, model.URL(), filepath.Join(dir, "ws"), webAddr) + extra
	path := filepath.Join(dir, "config.yaml")
	if err := os.WriteFile(path, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, _, err := LoadConfig(path)
	if err != nil {
		t.Fatal(err)
	}
	r := &webRig{cfg: cfg, path: path, web: "http://" + webAddr, logs: &syncbuf.Buffer{}}
	d := startServe(t, cfg, slog.New(slog.NewTextHandler(r.logs, &slog.HandlerOptions{Level: slog.LevelDebug})))
	r.admin, r.subj = d.adminURL, d.s.Bus.Subjects()
	r.nc, err = nats.Connect(d.s.Bus.ClientURL(), operatorAuth(t, cfg))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.nc.Close)
	polltest.Until(t, wait, 10*time.Millisecond, func() bool {
		resp, err := http.Get(r.web + "/login")
		if err == nil {
			resp.Body.Close()
		}
		return err == nil
	}, func() string { return "the web console never listened on " + webAddr })
	return r
}

// code mints a pairing code for user (`switchboard web pair --user`).
func (r *webRig) code(t *testing.T, user string) string {
	t.Helper()
	var out bytes.Buffer
	if err := webch.Pair(&out, r.cfg.DataDir, r.cfg.Channels.Web, user, r.path); err != nil {
		t.Fatalf("web pair: %v: %s", err, out.String())
	}
	return strings.TrimPrefix(strings.SplitN(out.String(), "\n", 2)[0], "Pairing code: ")
}

// consoleAnswered sends a message on the console channel (another
// channel than the web's) and waits for its answer.
func (r *webRig) consoleAnswered(t *testing.T, id string) {
	t.Helper()
	out := bustest.Collect(t, r.nc, r.subj.Out("console", "legit"))
	bustest.PublishInbound(t, r.nc, r.subj, bus.Inbound{V: 1, ID: id, Channel: "console", ChatID: "legit", UserID: "op", Text: "still there? " + id})
	if got := out.WaitOutbound(t, wait, finalFor(id)); !strings.Contains(got.Text, "echo: still there? "+id) {
		t.Fatalf("the console's message %s: %+v", id, got)
	}
}

// webClient is one browser of the console, connecting from a loopback
// source address of its own (127.0.0.2, ...).
type webClient struct {
	t    *testing.T
	base string
	hc   *http.Client
	csrf string
}

func (r *webRig) client(t *testing.T, src string) *webClient {
	jar, _ := cookiejar.New(nil)
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}}
	tr := &http.Transport{DialContext: d.DialContext}
	t.Cleanup(tr.CloseIdleConnections)
	return &webClient{t: t, base: r.web, hc: &http.Client{Jar: jar, Transport: tr,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}}
}

func (c *webClient) do(method, path, ctype string, body io.Reader) (int, string) {
	c.t.Helper()
	req, err := http.NewRequestWithContext(c.t.Context(), method, c.base+path, body)
	if err != nil {
		c.t.Fatal(err)
	}
	if ctype != "" {
		req.Header.Set("Content-Type", ctype)
	}
	if c.csrf != "" {
		req.Header.Set("X-CSRF-Token", c.csrf)
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		c.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// login tries to log in; on success the client keeps the session.
func (c *webClient) login(user, code string) (int, string) {
	c.t.Helper()
	st, body := c.do("POST", "/api/login", "application/json", strings.NewReader(fmt.Sprintf(`{"user":%q,"code":%q}`, user, code)))
	if st == http.StatusOK {
		var j struct{ CSRF string }
		_ = json.Unmarshal([]byte(body), &j)
		c.csrf = j.CSRF
	}
	return st, body
}

func (c *webClient) mustLogin(user, code string) *webClient {
	c.t.Helper()
	if st, body := c.login(user, code); st != http.StatusOK {
		c.t.Fatalf("login %s: %d %s", user, st, body)
	}
	return c
}

// send posts text in conversation conv.
func (c *webClient) send(conv, id, text string) {
	c.t.Helper()
	var buf bytes.Buffer
	w := multipart.NewWriter(&buf)
	_ = w.WriteField("id", id)
	_ = w.WriteField("text", text)
	_ = w.Close()
	if st, body := c.do("POST", "/api/conversations/"+conv+"/messages", w.FormDataContentType(), &buf); st != http.StatusAccepted {
		c.t.Fatalf("send %q: %d %s", text, st, body)
	}
}

// dashboardPaths are the dashboard's page and every API it reads.
var dashboardPaths = []string{"/dashboard", "/api/dash/sessions", "/api/dash/traces", "/api/dash/health", "/api/dash/dlq",
	"/api/dash/metrics", "/api/dash/config", "/api/dash/requests?session=console%2Flegit"}

// TestAttackDashboardNeedsOperator: bob, a web user who is not in
// channels.web.operators, logs in and asks for the dashboard and each of
// its APIs: every answer is 403 naming channels.web.operators and carries
// nothing of the other channels' sessions, traces or model requests (a
// console chat's words); his chat page is told not to link it, and his
// chat still works. Ann, the operator, gets all of it. The console
// channel is answered throughout.
func TestAttackDashboardNeedsOperator(t *testing.T) {
	r := startWebRig(t, "")
	const private = "my private console words"
	out := bustest.Collect(t, r.nc, r.subj.Out("console", "legit"))
	bustest.PublishInbound(t, r.nc, r.subj, bus.Inbound{V: 1, ID: "p1", Channel: "console", ChatID: "legit", UserID: "op", Text: private})
	out.WaitOutbound(t, wait, finalFor("p1"))

	ann := r.client(t, "127.0.0.1").mustLogin("ann", r.code(t, "ann"))
	bob := r.client(t, "127.0.0.1").mustLogin("bob", r.code(t, "bob"))
	for _, p := range dashboardPaths {
		st, body := bob.do("GET", p, "", nil)
		if st != http.StatusForbidden || !strings.Contains(body, "channels.web.operators") {
			t.Errorf("bob: GET %s = %d %.200s, want 403 naming channels.web.operators", p, st, body)
		}
		for _, leak := range []string{private, "console/legit", "sk-rig-model-key", "test-model"} {
			if strings.Contains(body, leak) {
				t.Errorf("bob: GET %s shows %q", p, leak)
			}
		}
		if st, body := ann.do("GET", p, "", nil); st != http.StatusOK {
			t.Errorf("ann (operator): GET %s = %d %.200s, want 200", p, st, body)
		}
	}
	if _, body := ann.do("GET", "/api/dash/requests?session=console%2Flegit", "", nil); !strings.Contains(body, private) {
		t.Errorf("the operator's model requests lack the console chat: %.300s", body)
	}
	if _, body := bob.do("GET", "/api/me", "", nil); !strings.Contains(body, `"dashboard":false`) {
		t.Errorf("bob's /api/me = %s, want the dashboard not linked", body)
	}
	bobOut := bustest.Collect(t, r.nc, r.subj.Out("web", "bob:c1"))
	bob.send("c1", "b1", "hello from bob")
	bobOut.WaitOutbound(t, wait, func(o bus.Outbound) bool { return o.Final && strings.Contains(o.Text, "echo: hello from bob") })
	r.consoleAnswered(t, "after")
}

// TestAttackMCPSecretsNotShown configures MCP servers with the secrets
// such a setup carries (a GitHub token in env, Authorization and
// X-Api-Key headers, URL userinfo and an api_key query value; the HTTP
// server is down, so its errors name the URL) and reads everything that
// shows the configuration or the servers: the dashboard's configuration
// (as the operator), the admin listener's GET /mcp (no login: reachable
// from the sandbox), `switchboard doctor` and the daemon's log. None
// holds a secret; the names are kept.
func TestAttackMCPSecretsNotShown(t *testing.T) {
	const (
		pat    = "ghp_attackPAT0123456789abcdef"
		bearer = "bearerATTACK-5f1e"
		apiKey = "xapikeyATTACK-77"
		query  = "queryATTACK-9c2d"
		user   = "urluserATTACK"
		pass   = "urlpassATTACK"
	)
	down := freePort(t) // nothing listens there
	r := startWebRig(t, fmt.Sprintf(`mcp:
  servers:
    github:
      command: switchboard-no-such-mcp-server
      env: {GITHUB_PERSONAL_ACCESS_TOKEN: %s}
    remote:
      url: "http://%s:%s@%s/mcp?api_key=%s&team=core"
      headers: {Authorization: "Bearer %s", X-Api-Key: %s}
`, pat, user, pass, down, query, bearer, apiKey))
	var mcpBody string
	polltest.Until(t, wait, 20*time.Millisecond, func() bool {
		resp, err := http.Get(r.admin + "/mcp")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		mcpBody = string(b)
		var st []struct {
			Name  string
			Error string
		}
		_ = json.Unmarshal(b, &st)
		return len(st) == 2 && st[0].Error != "" && st[1].Error != "" &&
			strings.Contains(r.logs.String(), "mcp server unavailable; retrying") && strings.Contains(r.logs.String(), "server=remote")
	}, func() string { return "the MCP servers' failures were never reported: " + mcpBody })
	ann := r.client(t, "127.0.0.1").mustLogin("ann", r.code(t, "ann"))
	st, config := ann.do("GET", "/api/dash/config", "", nil)
	if st != http.StatusOK {
		t.Fatalf("the operator's configuration: %d %s", st, config)
	}
	_, doctor := runDoctor(t, r.path)
	r.consoleAnswered(t, "during")

	for what, text := range map[string]string{"the dashboard's configuration": config, "GET /mcp": mcpBody,
		"switchboard doctor": doctor, "the log": r.logs.String()} {
		for _, s := range []string{pat, bearer, apiKey, query, user, pass} {
			if strings.Contains(text, s) {
				t.Errorf("%s shows the secret %q:\n%s", what, s, text)
			}
		}
	}
	for _, want := range []string{`"GITHUB_PERSONAL_ACCESS_TOKEN":"(redacted)"`, `"Authorization":"(redacted)"`, `"X-Api-Key":"(redacted)"`,
		"api_key=(redacted)", `"api_key":"(redacted)"`} {
		if !strings.Contains(config, want) {
			t.Errorf("the dashboard's configuration lacks %s:\n%s", want, config)
		}
	}
	if !strings.Contains(doctor, "MCP remote") || !strings.Contains(mcpBody, "api_key=(redacted)") {
		t.Errorf("doctor or GET /mcp does not report the remote server's failure:\n%s\n%s", doctor, mcpBody)
	}
}

// TestAttackLoginFloodOtherAddress floods the console's login from
// 127.0.0.2 with made-up user names and wrong codes, over real TCP
// connections, until it is refused; ann's valid login from 127.0.0.3
// still works, and the console channel is answered during and after.
func TestAttackLoginFloodOtherAddress(t *testing.T) {
	r := startWebRig(t, "")
	flood := r.client(t, "127.0.0.2")
	limited := 0
	for i := range 40 {
		if i == 20 {
			r.consoleAnswered(t, "during")
		}
		if st, _ := flood.login(fmt.Sprintf("mallory%d", i), "AAAA-AAAA"); st == http.StatusTooManyRequests {
			limited++
		}
	}
	if limited == 0 {
		t.Fatal("40 logins with made-up names from one address were never rate limited")
	}
	if st, body := r.client(t, "127.0.0.3").login("ann", r.code(t, "ann")); st != http.StatusOK {
		t.Fatalf("ann's valid login from another address after the flood: %d %s", st, body)
	}
	r.consoleAnswered(t, "after")
}

// TestAttackStatusDaemonCountsOwnersOnly: /status from bob, a plain web
// user, shows his session's own facts and none of the daemon's (active
// sessions, turns answered since start, uptime); from ann, an owner
// (access.owners web:ann), and from the operator's console, it shows
// them.
func TestAttackStatusDaemonCountsOwnersOnly(t *testing.T) {
	r := startWebRig(t, "")
	daemonWide := []string{"Active sessions:", "Turns answered since start:", "Up for:"}
	status := func(c *webClient, user string) string {
		t.Helper()
		out := bustest.Collect(t, r.nc, r.subj.Out("web", user+":c1"))
		c.send("c1", "s1", "/status")
		return out.WaitOutbound(t, wait, func(o bus.Outbound) bool { return o.Final && strings.Contains(o.Text, "Session:") }).Text
	}
	bob := status(r.client(t, "127.0.0.1").mustLogin("bob", r.code(t, "bob")), "bob")
	for _, s := range daemonWide {
		if strings.Contains(bob, s) {
			t.Errorf("bob's /status shows %q:\n%s", s, bob)
		}
	}
	if !strings.Contains(bob, "Turns in context:") {
		t.Errorf("bob's /status lacks his session's facts:\n%s", bob)
	}
	ann := status(r.client(t, "127.0.0.1").mustLogin("ann", r.code(t, "ann")), "ann")
	out := bustest.Collect(t, r.nc, r.subj.Out("console", "op"))
	bustest.PublishInbound(t, r.nc, r.subj, bus.Inbound{V: 1, ID: "st", Channel: "console", ChatID: "op", UserID: "op", Text: "/status"})
	console := out.WaitOutbound(t, wait, finalFor("st")).Text
	for _, s := range daemonWide {
		if !strings.Contains(ann, s) || !strings.Contains(console, s) {
			t.Errorf("the owner's or the console's /status lacks %q:\n%s\n%s", s, ann, console)
		}
	}
	r.consoleAnswered(t, "after")
}

// TestAttackWebFetchMetadataAllowPrivate: with web_fetch.allow_private,
// the model asks web_fetch for Alibaba Cloud's metadata service
// (100.100.100.200, inside carrier-grade NAT) and its IPv4-mapped and
// NAT64 spellings: each is refused as a cloud metadata service, nothing is
// fetched.
func TestAttackWebFetchMetadataAllowPrivate(t *testing.T) {
	r := startWebRig(t, "tools: {web_fetch: {allow_private: true, timeout: 5s}}\n")
	for i, u := range []string{"http://100.100.100.200/latest/meta-data/ram/security-credentials/",
		"http://[::ffff:100.100.100.200]/latest/meta-data/", "http://[64:ff9b::6464:64c8]/latest/meta-data/"} {
		id := fmt.Sprintf("f%d", i)
		out := bustest.Collect(t, r.nc, r.subj.Out("console", "f"))
		bustest.PublishInbound(t, r.nc, r.subj, bus.Inbound{V: 1, ID: id, Channel: "console", ChatID: "f", UserID: "op", Text: "fetch " + u})
		got := out.WaitOutbound(t, wait, finalFor(id))
		if !strings.Contains(got.Text, "the tool said:") || !strings.Contains(got.Text, "refused") || !strings.Contains(got.Text, "cloud metadata service") {
			t.Errorf("web_fetch %s: %q, want a refusal naming the metadata service", u, got.Text)
		}
	}
	r.consoleAnswered(t, "after")
}

package web

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/switchboard-chat/switchboard/bus"
	"github.com/switchboard-chat/switchboard/internal/observe"
	"github.com/switchboard-chat/switchboard/internal/polltest"
	"github.com/switchboard-chat/switchboard/internal/reqlog"
)

// route is one endpoint of the console.
type route struct {
	method, path string
	api          bool // 401 without a session (else a redirect to /login)
}

var protected = []route{
	{"GET", "/", false},
	{"GET", "/dashboard", false},
	{"GET", "/anything/else", false},
	{"GET", "/assets/chat.js", true},
	{"GET", "/assets/md.js", true},
	{"GET", "/assets/dash.js", true},
	{"GET", "/api/me", true},
	{"POST", "/api/logout", true},
	{"GET", "/api/conversations", true},
	{"GET", "/api/conversations/c1/messages", true},
	{"POST", "/api/conversations/c1/messages", true},
	{"GET", "/api/conversations/c1/events", true},
	{"GET", "/api/dash/sessions", true},
	{"GET", "/api/dash/traces", true},
	{"GET", "/api/dash/health", true},
	{"GET", "/api/dash/dlq", true},
	{"GET", "/api/dash/metrics", true},
	{"GET", "/api/dash/config", true},
	{"GET", "/api/dash/requests?session=web%2Fann%3Ac1", true},
	{"GET", "/api/nothing", true},
}

// TestEndpointsNeedLogin: without a session cookie (or with a forged
// one) every page redirects to /login and every API call and script gets
// 401; only the login page, its script and the style sheet are served.
func TestEndpointsNeedLogin(t *testing.T) {
	e := newEnv(t)
	r := e.start(t, e.config())
	b := r.browser(t)
	forged := r.browser(t)
	u, _ := url.Parse(r.url)
	forged.hc.Jar.SetCookies(u, []*http.Cookie{{Name: cookieName, Value: strings.Repeat("ab", 32)}})
	for _, who := range []*browser{b, forged} {
		for _, rt := range protected {
			ct, body := form("m1", "hello", nil)
			resp, data := who.do(rt.method, rt.path, ct, body, map[string]string{headerCSRF: "x"})
			switch {
			case rt.api && resp.StatusCode != http.StatusUnauthorized:
				t.Errorf("%s %s without a session: %d, want 401", rt.method, rt.path, resp.StatusCode)
			case !rt.api && (resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/login"):
				t.Errorf("%s %s without a session: %d to %q, want 303 to /login", rt.method, rt.path, resp.StatusCode, resp.Header.Get("Location"))
			}
			if bytes.Contains(data, []byte("chat.js")) || bytes.Contains(data, []byte("renderMarkdown")) {
				t.Errorf("%s %s served content to a browser without a session", rt.method, rt.path)
			}
		}
	}
	for _, p := range []string{"/login", "/assets/login.js", "/assets/style.css"} {
		if resp, _ := b.do("GET", p, "", nil, nil); resp.StatusCode != http.StatusOK {
			t.Errorf("GET %s: %d, want 200 (the login page needs it)", p, resp.StatusCode)
		}
	}
	if n := e.agent.Count(); n != 0 {
		t.Fatalf("%d inbound envelopes published by requests without a session", n)
	}
}

// TestCSRF: a logged-in browser's state-changing requests without the
// session's CSRF token, with another's, or from another origin get 403 and
// change nothing.
func TestCSRF(t *testing.T) {
	e := newEnv(t)
	r := e.start(t, e.config())
	ann := r.browser(t)
	ann.login("ann", e.logCode(t))
	for _, tc := range []struct {
		name string
		hdr  map[string]string
	}{
		{"no token", nil},
		{"wrong token", map[string]string{headerCSRF: strings.Repeat("0", 32)}},
		{"right token, foreign origin", map[string]string{headerCSRF: ann.csrf, "Origin": "http://evil.example"}},
	} {
		ct, body := form("m1", "hello", nil)
		if resp, data := ann.do("POST", "/api/conversations/c1/messages", ct, body, tc.hdr); resp.StatusCode != http.StatusForbidden || !bytes.Contains(data, []byte("CSRF")) {
			t.Errorf("%s: post message = %d %s, want 403", tc.name, resp.StatusCode, data)
		}
		if resp, _ := ann.do("POST", "/api/logout", "", nil, tc.hdr); resp.StatusCode != http.StatusForbidden {
			t.Errorf("%s: logout = %d, want 403", tc.name, resp.StatusCode)
		}
	}
	if resp, _ := ann.do("GET", "/api/me", "", nil, nil); resp.StatusCode != http.StatusOK {
		t.Fatalf("the refused logout logged out: /api/me = %d", resp.StatusCode)
	}
	if n := e.agent.Count(); n != 0 {
		t.Fatalf("%d inbound envelopes published by refused requests", n)
	}
	// With the token it works, and logout ends the session.
	if resp, data := ann.send("c1", "m1", "hello", nil); resp.StatusCode != http.StatusAccepted {
		t.Fatalf("send with the token: %d %s", resp.StatusCode, data)
	}
	if resp, _ := ann.do("POST", "/api/logout", "", nil, map[string]string{headerCSRF: ann.csrf}); resp.StatusCode != http.StatusOK {
		t.Fatalf("logout: %d", resp.StatusCode)
	}
	if resp, _ := ann.do("GET", "/api/me", "", nil, nil); resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("after logout /api/me = %d, want 401", resp.StatusCode)
	}
}

// TestPairingCode: the code printed at start logs one browser in, once;
// a user not in allow_users and a wrong code are refused; codes minted by
// `switchboard web pair` work, and one minted for a user logs in only
// that user. The cookie is HttpOnly and SameSite=Strict.
func TestPairingCode(t *testing.T) {
	e := newEnv(t)
	r := e.start(t, e.config())
	code := e.logCode(t)
	try := func(user, code string) (int, string) {
		resp, body := r.browser(t).do("POST", "/api/login", "application/json", strings.NewReader(`{"user":"`+user+`","code":"`+code+`"}`), nil)
		return resp.StatusCode, string(body)
	}
	if st, body := try("eve", code); st != http.StatusForbidden || !strings.Contains(body, "allow_users") {
		t.Fatalf("login of a user not allowed: %d %s", st, body)
	}
	if st, _ := try("ann", "AAAA-AAAA"); st != http.StatusForbidden {
		t.Fatalf("login with a wrong code: %d, want 403", st)
	}
	b := r.browser(t)
	resp, body := b.do("POST", "/api/login", "application/json", strings.NewReader(`{"user":"ann","code":"`+strings.ToLower(code)+`"}`), nil)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("login with the logged code: %d %s", resp.StatusCode, body)
	}
	var ck *http.Cookie
	for _, c := range resp.Cookies() {
		if c.Name == cookieName {
			ck = c
		}
	}
	if ck == nil || !ck.HttpOnly || ck.SameSite != http.SameSiteStrictMode || ck.Secure {
		t.Fatalf("session cookie %+v, want HttpOnly, SameSite=Strict, not Secure over plain http", ck)
	}
	if st, _ := try("bob", code); st != http.StatusForbidden {
		t.Fatalf("second use of the code: %d, want 403", st)
	}
	// `switchboard web pair --user bob`.
	var out, errOut bytes.Buffer
	pair := func(user string) error {
		cfg := e.config()
		return Pair(&out, strings.TrimSuffix(e.pairDir, "/web-pair"), &cfg, user, "config.yaml")
	}
	if err := pair("bob"); err != nil {
		t.Fatalf("web pair: %v (%s)", err, errOut.String())
	}
	m := codeRE.FindStringSubmatch("pairing_code=" + strings.TrimPrefix(strings.SplitN(out.String(), "\n", 2)[0], "Pairing code: "))
	if m == nil {
		t.Fatalf("web pair printed %q", out.String())
	}
	if st, _ := try("ann", m[1]); st != http.StatusForbidden {
		t.Fatalf("a code for bob logged in ann: %d", st)
	}
	if err := pair("bob"); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(out.String(), "\n")
	second := strings.TrimPrefix(lines[2], "Pairing code: ")
	if st, body := try("bob", second); st != http.StatusOK {
		t.Fatalf("bob with his code: %d %s", st, body)
	}
	if err := pair("eve"); err == nil || !strings.Contains(err.Error(), "allow_users") {
		t.Fatalf("web pair for a user not allowed: %v", err)
	}
}

// TestSecureCookieOverTLS: over TLS, and behind an HTTPS reverse proxy,
// the session cookie is Secure.
func TestSecureCookieOverTLS(t *testing.T) {
	e := newEnv(t)
	r := e.start(t, e.config())
	srv := httptest.NewTLSServer(r.c.Handler())
	defer srv.Close()
	hc := srv.Client()
	resp, err := hc.Post(srv.URL+"/api/login", "application/json", strings.NewReader(`{"user":"ann","code":"`+e.logCode(t)+`"}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || len(resp.Cookies()) == 0 || !resp.Cookies()[0].Secure {
		t.Fatalf("login over TLS: %d, cookies %+v; want a Secure cookie", resp.StatusCode, resp.Cookies())
	}
	// Behind an HTTPS reverse proxy: plain HTTP to the console, the page's
	// origin https.
	var out bytes.Buffer
	cfg := e.config()
	if err := Pair(&out, strings.TrimSuffix(e.pairDir, "/web-pair"), &cfg, "", "config.yaml"); err != nil {
		t.Fatal(err)
	}
	code := strings.TrimPrefix(strings.SplitN(out.String(), "\n", 2)[0], "Pairing code: ")
	host := strings.TrimPrefix(r.url, "http://")
	resp2, _ := r.browser(t).do("POST", "/api/login", "application/json", strings.NewReader(`{"user":"ann","code":"`+code+`"}`), map[string]string{"Origin": "https://" + host})
	if resp2.StatusCode != http.StatusOK || len(resp2.Cookies()) == 0 || !resp2.Cookies()[0].Secure {
		t.Fatalf("login behind an HTTPS proxy: %d, cookies %+v; want a Secure cookie", resp2.StatusCode, resp2.Cookies())
	}
}

// TestOversizeUpload: files over the limit get 413 with a message saying
// the limit, and nothing reaches the bus; files under it arrive as
// attachments.
func TestOversizeUpload(t *testing.T) {
	e := newEnv(t)
	r := e.start(t, e.config())
	ann := r.browser(t)
	ann.login("ann", e.logCode(t))
	resp, body := ann.send("c1", "big", "see attached", map[string][]byte{"big.bin": bytes.Repeat([]byte("x"), maxUploadBytes+1)})
	if resp.StatusCode != http.StatusRequestEntityTooLarge || !strings.Contains(string(body), "512 KiB") {
		t.Fatalf("oversize upload: %d %s, want 413 naming the limit", resp.StatusCode, body)
	}
	if n := e.agent.Count(); n != 0 {
		t.Fatalf("%d inbound envelopes after a refused upload", n)
	}
	resp, body = ann.send("c1", "small", "see attached", map[string][]byte{"notes.txt": []byte("hello file")})
	if resp.StatusCode != http.StatusAccepted {
		t.Fatalf("small upload: %d %s", resp.StatusCode, body)
	}
	in := e.agent.WaitInbound(t, "with the file", func(in bus.Inbound) bool { return len(in.Attachments) == 1 })
	if a := in.Attachments[0]; a.Name != "notes.txt" || a.Kind != bus.AttachFile || a.Size != 10 || a.Data != "aGVsbG8gZmlsZQ==" {
		t.Fatalf("attachment %+v", a)
	}
}

// TestErrorsInPlainWords: no model configured and a message over
// bus.max_text_bytes are refused with words that say so.
func TestErrorsInPlainWords(t *testing.T) {
	e := newEnv(t)
	r := e.start(t, e.config(), func(d *Deps) { d.NoModel = true; d.MaxTextBytes = 2048 })
	ann := r.browser(t)
	ann.login("ann", e.logCode(t))
	resp, body := ann.send("c1", "m1", "hello", nil)
	if resp.StatusCode != http.StatusServiceUnavailable || !strings.Contains(string(body), "No language model is configured") {
		t.Fatalf("no model: %d %s", resp.StatusCode, body)
	}
	resp, body = ann.send("c1", "m2", "/new "+strings.Repeat("y", 4096), nil)
	if resp.StatusCode != http.StatusRequestEntityTooLarge || !strings.Contains(string(body), "bus.max_text_bytes") {
		t.Fatalf("too large: %d %s", resp.StatusCode, body)
	}
}

// TestTwoBrowsersOneConversation: two browsers of one user on one
// conversation both see the message, the streamed reply and the final;
// the history has both; a retry with the same message id is published
// once; another user's browser sees none of it.
func TestTwoBrowsersOneConversation(t *testing.T) {
	e := newEnv(t)
	r := e.start(t, e.config())
	one, two, bob := r.browser(t), r.browser(t), r.browser(t)
	one.login("ann", e.logCode(t))
	var out bytes.Buffer
	cfg := e.config()
	for _, b := range []*browser{two, bob} {
		out.Reset()
		if err := Pair(&out, strings.TrimSuffix(e.pairDir, "/web-pair"), &cfg, "", "config.yaml"); err != nil {
			t.Fatal(err)
		}
		user := "ann"
		if b == bob {
			user = "bob"
		}
		b.login(user, strings.TrimPrefix(strings.SplitN(out.String(), "\n", 2)[0], "Pairing code: "))
	}
	// The final comes once both browsers saw the delta (a delta the final
	// overtakes is coalesced away by the bridge kit, by design).
	e.agent.Set(func(in bus.Inbound) []bus.Outbound { return []bus.Outbound{reply(in, bus.KindDelta, "Hel")} })
	s1, s2, sb := one.events("shared"), two.events("shared"), bob.events("shared")
	if resp, body := one.send("shared", "m1", "hi from one", nil); resp.StatusCode != http.StatusAccepted {
		t.Fatalf("send: %d %s", resp.StatusCode, body)
	}
	for _, s := range []*sse{s1, s2} {
		s.next(t, "msg", func(d string) bool { return strings.Contains(d, "hi from one") })
		s.next(t, "out", func(d string) bool { return strings.Contains(d, `"kind":"delta"`) && strings.Contains(d, "Hel") })
	}
	in := e.agent.WaitInbound(t, "hi from one", func(in bus.Inbound) bool { return in.Text == "hi from one" })
	e.agent.Publish(t, reply(in, bus.KindReply, "Hello, both"))
	for _, s := range []*sse{s1, s2} {
		s.next(t, "out", func(d string) bool { return strings.Contains(d, `"final":true`) && strings.Contains(d, "Hello, both") })
	}
	// A retry of the same message (the page resending after a network
	// error) is one envelope.
	if resp, _ := one.send("shared", "m1", "hi from one", nil); resp.StatusCode != http.StatusAccepted {
		t.Fatal("retry refused")
	}
	ctx, cancel := context.WithTimeout(t.Context(), wait)
	defer cancel()
	st, _ := e.js.Stream(ctx, "CHAT_IN")
	info, _ := st.Info(ctx, jetstream.WithSubjectFilter("chat.in.web.>"))
	if info.State.Msgs != 1 {
		t.Fatalf("CHAT_IN holds %d web envelopes, want 1 (the retry de-duplicated)", info.State.Msgs)
	}
	_, hist := two.do("GET", "/api/conversations/shared/messages", "", nil, nil)
	var h struct{ Messages []message }
	_ = json.Unmarshal(hist, &h)
	if len(h.Messages) < 2 || h.Messages[0].Text != "hi from one" || h.Messages[len(h.Messages)-1].Text != "Hello, both" {
		t.Fatalf("history %+v", h.Messages)
	}
	select {
	case f := <-sb.frames:
		t.Fatalf("bob's browser saw ann's conversation: %+v", f)
	default:
	}
	_, bh := bob.do("GET", "/api/conversations/shared/messages", "", nil, nil)
	if bytes.Contains(bh, []byte("hi from one")) {
		t.Fatalf("bob read ann's history: %s", bh)
	}
}

// TestToolEventsStreamed: the agent's tool_call and tool_result events of
// the chat reach its browsers.
func TestToolEventsStreamed(t *testing.T) {
	e := newEnv(t)
	r := e.start(t, e.config())
	ann := r.browser(t)
	ann.login("ann", e.logCode(t))
	s := ann.events("c1")
	e.agent.Set(func(in bus.Inbound) []bus.Outbound {
		e.agent.Event(t, in, bus.EventToolCall, map[string]any{"id": "t1", "name": "read_file", "arguments": `{"path":"a.txt"}`})
		e.agent.Event(t, in, bus.EventToolResult, map[string]any{"id": "t1", "name": "read_file", "duration_ms": 7, "text": "contents"})
		return []bus.Outbound{reply(in, bus.KindReply, "done")}
	})
	ann.send("c1", "m1", "read it", nil)
	s.next(t, "ev", func(d string) bool { return strings.Contains(d, `"tool_call"`) && strings.Contains(d, "read_file") })
	s.next(t, "ev", func(d string) bool { return strings.Contains(d, `"tool_result"`) && strings.Contains(d, "contents") })
	s.next(t, "out", func(d string) bool { return strings.Contains(d, `"done"`) })
}

// TestDashboard: sessions, traces of every channel, health, dead letters,
// metrics and config; off with dashboard: false.
func TestDashboard(t *testing.T) {
	e := newEnv(t)
	reg := prometheus.NewRegistry()
	turns := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "switchboard_turns_total"}, []string{"stop_reason"})
	reg.MustRegister(turns)
	turns.WithLabelValues("completed").Add(3)
	cfg := e.config()
	cfg.Operators = UserList{"ann"}
	r := e.start(t, cfg, func(d *Deps) {
		d.Dash.Sessions = func() []observe.Session {
			return []observe.Session{{Key: "telegram/42", State: "running", Queued: 2, LastActivity: time.Now()}}
		}
		d.Dash.Health = func() map[string]string { return map[string]string{"slack": "token rejected"} }
		d.Dash.Gather = reg
		d.Dash.Config = map[string]any{"llm": map[string]string{"api_key": "(redacted)"}}
		d.Dash.Requests = func(session string) []reqlog.Record {
			if session != "telegram/42" {
				return nil
			}
			return []reqlog.Record{{DurationMS: 12, Request: json.RawMessage(`{"messages":[{"role":"user","content":"hi"}]}`)}}
		}
	})
	ann := r.browser(t)
	ann.login("ann", e.logCode(t))
	// A tool call in another channel's chat, and a dead letter.
	other := bus.Inbound{ID: "x1", Channel: "telegram", ChatID: "42"}
	e.agent.Event(t, other, bus.EventToolCall, map[string]any{"name": "web_fetch", "arguments": "{}"})
	if _, err := e.js.Publish(t.Context(), "chat.dlq.telegram", []byte(`{"v":1,"reason":"invalid envelope: text too long","subject":"chat.in.telegram.42","payload":"{}","size":2}`)); err != nil {
		t.Fatal(err)
	}
	get := func(path string) string {
		resp, body := ann.do("GET", path, "", nil, nil)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("GET %s: %d %s", path, resp.StatusCode, body)
		}
		return string(body)
	}
	for path, want := range map[string]string{
		"/api/dash/sessions":                       `"key":"telegram/42","state":"running","queued":2`,
		"/api/dash/health":                         `"slack":"token rejected"`,
		"/api/dash/dlq":                            "text too long",
		"/api/dash/metrics":                        `"turns_total":3`,
		"/api/dash/config":                         "(redacted)",
		"/api/dash/requests?session=telegram%2F42": `"content":"hi"`,
	} {
		if got := get(path); !strings.Contains(got, want) {
			t.Errorf("%s = %s, want it to contain %s", path, got, want)
		}
	}
	// The trace announces no event: look again until it shows the call.
	polltest.Until(t, wait, 20*time.Millisecond, func() bool { return strings.Contains(get("/api/dash/traces"), "web_fetch") },
		func() string { return "the trace never showed the tool call: " + get("/api/dash/traces") })
	if resp, _ := ann.do("GET", "/dashboard", "", nil, nil); resp.StatusCode != http.StatusOK {
		t.Fatalf("/dashboard: %d", resp.StatusCode)
	}

	cfg.Dashboard = false
	e2 := newEnv(t)
	r2 := e2.start(t, cfg)
	b := r2.browser(t)
	b.login("ann", e2.logCode(t))
	for _, p := range []string{"/dashboard", "/api/dash/sessions", "/api/dash/config"} {
		if resp, _ := b.do("GET", p, "", nil, nil); resp.StatusCode != http.StatusNotFound {
			t.Errorf("dashboard off: GET %s = %d, want 404", p, resp.StatusCode)
		}
	}
}

// TestConfigValidate names the keys.
func TestConfigValidate(t *testing.T) {
	c := DefaultConfig()
	if c.Enabled() || c.Validate() != nil || !c.Dashboard || c.Listen != "127.0.0.1:8089" {
		t.Fatalf("defaults %+v: %v", c, c.Validate())
	}
	c.Listen = "nope"
	c.AllowUsers = UserList{"ann", "bad user", "ann"}
	err := c.Validate()
	for _, want := range []string{"channels.web.listen", "channels.web.allow_users[1]", "channels.web.allow_users[2]"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Validate = %v, want it to name %s", err, want)
		}
	}
	if _, err := New(DefaultConfig(), Deps{}); err == nil || !strings.Contains(err.Error(), "allow_users") {
		t.Fatalf("New with nobody allowed: %v", err)
	}
}

// TestRedactConfig: every secret of the shipped configuration's shape is
// hidden, counts named like tokens are not.
func TestRedactConfig(t *testing.T) {
	type admin struct {
		Token    string `yaml:"token"`
		Password string `yaml:"password"`
	}
	type key struct {
		Key  string `yaml:"key"`
		User string `yaml:"user"`
	}
	type llm struct {
		APIKey    string        `yaml:"api_key"`
		MaxTokens int           `yaml:"max_tokens"`
		BaseURL   string        `yaml:"base_url"`
		Timeout   time.Duration `yaml:"timeout"`
	}
	type cfg struct {
		LLM    llm    `yaml:"llm"`
		Admin  *admin `yaml:"admin"`
		Keys   []key  `yaml:"keys"`
		URL    string `yaml:"url"`
		Secret string `yaml:"webhook_secret"`
		Empty  string `yaml:"bot_token"`
	}
	v := cfg{LLM: llm{APIKey: "sk-live-123", MaxTokens: 4096, BaseURL: "https://api.example.com/v1", Timeout: 30 * time.Second},
		Admin: &admin{Token: "t0ken", Password: "hunter2"}, Keys: []key{{Key: "sk-ann-0123456789", User: "ann"}},
		URL: "nats://user:pa55@host:4222", Secret: "whsec"}
	b, _ := json.Marshal(RedactConfig(v))
	got := string(b)
	for _, secret := range []string{"sk-live-123", "t0ken", "hunter2", "sk-ann-0123456789", "pa55", "whsec"} {
		if strings.Contains(got, secret) {
			t.Errorf("redacted config shows %q: %s", secret, got)
		}
	}
	for _, want := range []string{`"max_tokens":4096`, `"timeout":"30s"`, `"base_url":"https://api.example.com/v1"`, `"bot_token":""`, `"api_key":"(redacted)"`} {
		if !strings.Contains(got, want) {
			t.Errorf("redacted config %s lacks %s", got, want)
		}
	}
}

// TestUploadSavedInInbox: with a workspace, an uploaded file is saved in
// the chat's inbox folder and named in the message text; an image stays
// an attachment the model sees.
func TestUploadSavedInInbox(t *testing.T) {
	e := newEnv(t)
	root, err := os.OpenRoot(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	r := e.start(t, e.config(), func(d *Deps) { d.Files = root })
	ann := r.browser(t)
	ann.login("ann", e.logCode(t))
	if resp, body := ann.send("c1", "f1", "the data", map[string][]byte{"../../evil name.csv": []byte("a,b\n1,2\n")}); resp.StatusCode != http.StatusAccepted {
		t.Fatalf("upload: %d %s", resp.StatusCode, body)
	}
	in := e.agent.WaitInbound(t, "with the note", func(in bus.Inbound) bool { return strings.Contains(in.Text, "saved in the workspace as") })
	m := regexp.MustCompile(`saved in the workspace as (\S+) `).FindStringSubmatch(in.Text)
	if m == nil || !strings.HasPrefix(m[1], "inbox/web/") || strings.Contains(m[1], "..") || len(in.Attachments) != 0 {
		t.Fatalf("inbound %q with %d attachments", in.Text, len(in.Attachments))
	}
	if data, err := root.ReadFile(m[1]); err != nil || string(data) != "a,b\n1,2\n" {
		t.Fatalf("saved file %s: %q, %v", m[1], data, err)
	}
}

// TestProactiveMessageListed: a message the agent sends on its own (a
// scheduled task's report) is kept, opens its conversation in the list
// and reaches the open browser.
func TestProactiveMessageListed(t *testing.T) {
	e := newEnv(t)
	r := e.start(t, e.config())
	ann := r.browser(t)
	ann.login("ann", e.logCode(t))
	s := ann.events("sched1")
	e.agent.Publish(t, bus.Outbound{V: 1, ID: "p1", Channel: Name, ChatID: "ann:sched1", Kind: bus.KindReply, Text: "Your daily report", Final: true})
	s.next(t, "out", func(d string) bool { return strings.Contains(d, "Your daily report") })
	_, body := ann.do("GET", "/api/conversations", "", nil, nil)
	if !strings.Contains(string(body), `"id":"sched1"`) {
		t.Fatalf("conversations %s, want sched1 listed", body)
	}
	_, hist := ann.do("GET", "/api/conversations/sched1/messages", "", nil, nil)
	if !strings.Contains(string(hist), "Your daily report") {
		t.Fatalf("history %s", hist)
	}
}

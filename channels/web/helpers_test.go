package web

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"mime/multipart"
	"net"
	"net/http"
	"net/http/cookiejar"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/goleak"

	"github.com/switchboard-chat/switchboard/bus"
	"github.com/switchboard-chat/switchboard/bus/bustest"
	"github.com/switchboard-chat/switchboard/bus/natsbus"
	"github.com/switchboard-chat/switchboard/internal/polltest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// wait bounds every wait of the tests.
const wait = 15 * time.Second

// env is a bus with the daemon's streams, a fake agent on it, and the
// console's state paths.
type env struct {
	nc      *nats.Conn
	js      jetstream.JetStream
	subj    bus.Subjects
	state   string
	pairDir string
	agent   *fakeAgent
	logs    *syncBuffer
	onStore func(*store)
}

func newEnv(t *testing.T) *env {
	t.Helper()
	s := bustest.StartServer(t)
	nc := bustest.Connect(t, s)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	for _, cfg := range natsbus.StreamConfigs("chat") {
		if _, err := js.CreateStream(t.Context(), cfg); err != nil {
			t.Fatalf("create stream %s: %v", cfg.Name, err)
		}
	}
	dir := t.TempDir()
	e := &env{nc: nc, js: js, subj: bus.Subjects{Prefix: "chat"}, state: filepath.Join(dir, "web.db"),
		pairDir: PairDir(dir), logs: &syncBuffer{}}
	e.agent = newFakeAgent(t, e)
	return e
}

func (e *env) config() Config {
	cfg := DefaultConfig()
	cfg.Listen = "127.0.0.1:0"
	cfg.AllowUsers = UserList{"ann", "bob"}
	return cfg
}

// running is a console started by start.
type running struct {
	c      *Channel
	url    string
	cancel context.CancelFunc
	done   chan error
	once   sync.Once
	err    error
}

func (e *env) start(t *testing.T, cfg Config, mod ...func(*Deps)) *running {
	t.Helper()
	addr := make(chan net.Addr, 1)
	deps := Deps{Conn: e.nc, Subjects: e.subj, StatePath: e.state, PairDir: e.pairDir,
		Log:   slog.New(slog.NewTextHandler(e.logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
		Ready: func(a net.Addr) { addr <- a }}
	for _, m := range mod {
		m(&deps)
	}
	c, err := New(cfg, deps)
	if err != nil {
		t.Fatal(err)
	}
	c.onStore = e.onStore
	c.keepAlive = time.Second
	ctx, cancel := context.WithCancel(context.Background())
	r := &running{c: c, cancel: cancel, done: make(chan error, 1)}
	go func() { r.done <- c.Run(ctx) }()
	t.Cleanup(func() { _ = r.stop(t) })
	select {
	case a := <-addr:
		r.url = "http://" + a.String()
	case err := <-r.done:
		t.Fatalf("Run = %v before listening", err)
	case <-time.After(wait):
		t.Fatal("the console did not listen")
	}
	polltest.Until(t, wait, 5*time.Millisecond, func() bool {
		_, err := e.js.Consumer(t.Context(), "CHAT_OUT", "bridge_"+Name)
		return err == nil
	}, func() string { return "the outbound consumer was never created; log:\n" + e.logs.String() })
	return r
}

func (r *running) stop(t *testing.T) error {
	t.Helper()
	r.once.Do(func() {
		r.cancel()
		select {
		case r.err = <-r.done:
		case <-time.After(wait):
			t.Errorf("Run did not return within %s of cancel", wait)
		}
	})
	return r.err
}

var codeRE = regexp.MustCompile(`pairing_code=([A-Z2-7]{4}-[A-Z2-7]{4})`)

// logCode is the newest pairing code the console printed in its log.
func (e *env) logCode(t *testing.T) string {
	t.Helper()
	m := codeRE.FindAllStringSubmatch(e.logs.String(), -1)
	if len(m) == 0 {
		t.Fatalf("no pairing code in the log:\n%s", e.logs.String())
	}
	return m[len(m)-1][1]
}

// browser is one browser: a cookie jar and the CSRF token of its login.
type browser struct {
	t    *testing.T
	base string
	hc   *http.Client
	csrf string
}

func (r *running) browser(t *testing.T) *browser {
	jar, _ := cookiejar.New(nil)
	return &browser{t: t, base: r.url, hc: &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}}
}

// login logs in as user with code and fails the test unless it works.
func (b *browser) login(user, code string) {
	b.t.Helper()
	resp, body := b.do(http.MethodPost, "/api/login", "application/json", strings.NewReader(fmt.Sprintf(`{"user":%q,"code":%q}`, user, code)), nil)
	if resp.StatusCode != http.StatusOK {
		b.t.Fatalf("login %s: %d %s", user, resp.StatusCode, body)
	}
	var j struct{ CSRF string }
	_ = json.Unmarshal(body, &j)
	b.csrf = j.CSRF
}

// do sends a request with the jar's cookies; hdr adds headers.
func (b *browser) do(method, path, ctype string, body io.Reader, hdr map[string]string) (*http.Response, []byte) {
	b.t.Helper()
	req, err := http.NewRequestWithContext(b.t.Context(), method, b.base+path, body)
	if err != nil {
		b.t.Fatal(err)
	}
	if ctype != "" {
		req.Header.Set("Content-Type", ctype)
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := b.hc.Do(req)
	if err != nil {
		b.t.Fatal(err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	return resp, data
}

// form is a multipart message body: id, text and files (name → content).
func form(id, text string, files map[string][]byte) (string, *bytes.Buffer) {
	var buf bytes.Buffer
	w := multipart.NewWriter(&buf)
	_ = w.WriteField("id", id)
	_ = w.WriteField("text", text)
	for name, data := range files {
		fw, _ := w.CreateFormFile("files", name)
		_, _ = fw.Write(data)
	}
	_ = w.Close()
	return w.FormDataContentType(), &buf
}

// send posts a message in conv with the browser's CSRF token.
func (b *browser) send(conv, id, text string, files map[string][]byte) (*http.Response, []byte) {
	b.t.Helper()
	ct, body := form(id, text, files)
	return b.do(http.MethodPost, "/api/conversations/"+conv+"/messages", ct, body, map[string]string{headerCSRF: b.csrf})
}

// sse is an open event stream of one browser.
type sse struct {
	resp   *http.Response
	frames chan sseFrame
	done   chan struct{}
	seen   []sseFrame // received, not yet taken by next
}

type sseFrame struct {
	event string
	data  string
}

// events opens conv's event stream and returns once the server said
// ready.
func (b *browser) events(conv string) *sse {
	b.t.Helper()
	req, _ := http.NewRequestWithContext(b.t.Context(), http.MethodGet, b.base+"/api/conversations/"+conv+"/events", nil)
	resp, err := b.hc.Do(req)
	if err != nil {
		b.t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		resp.Body.Close()
		b.t.Fatalf("events: %d", resp.StatusCode)
	}
	s := &sse{resp: resp, frames: make(chan sseFrame, 1000), done: make(chan struct{})}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() && sc.Text() != ": ready" {
	}
	go func() {
		defer close(s.done)
		var f sseFrame
		for sc.Scan() {
			line := sc.Text()
			switch {
			case strings.HasPrefix(line, "event: "):
				f.event = line[7:]
			case strings.HasPrefix(line, "data: "):
				f.data = line[6:]
			case line == "" && f.event != "":
				s.frames <- f
				f = sseFrame{}
			}
		}
	}()
	b.t.Cleanup(func() { resp.Body.Close(); <-s.done })
	return s
}

// next waits for a frame of type event whose data satisfies pred and
// removes it; frames it passes over are kept for later calls (frames of
// one turn may arrive in either order with the page's own message).
func (s *sse) next(t *testing.T, event string, pred func(string) bool) string {
	t.Helper()
	deadline := time.After(wait)
	for {
		for i, f := range s.seen {
			if f.event == event && pred(f.data) {
				s.seen = append(s.seen[:i], s.seen[i+1:]...)
				return f.data
			}
		}
		select {
		case f := <-s.frames:
			s.seen = append(s.seen, f)
		case <-s.done:
			t.Fatalf("the event stream ended before a %s frame", event)
		case <-deadline:
			t.Fatalf("no %s frame within %s; got %+v", event, wait, s.seen)
		}
	}
}

// script answers one inbound envelope with what the agent publishes.
type script func(in bus.Inbound) []bus.Outbound

// fakeAgent stands for the agent runtime on the bus.
type fakeAgent struct {
	e *env

	mu      sync.Mutex
	script  script
	seen    []bus.Inbound
	changed chan struct{}
}

func newFakeAgent(t *testing.T, e *env) *fakeAgent {
	a := &fakeAgent{e: e, changed: make(chan struct{}), script: func(in bus.Inbound) []bus.Outbound {
		return []bus.Outbound{reply(in, bus.KindReply, "echo: "+in.Text)}
	}}
	sub, err := e.nc.Subscribe(e.subj.Prefix+".in."+Name+".>", func(m *nats.Msg) {
		var in bus.Inbound
		if err := json.Unmarshal(m.Data, &in); err != nil {
			t.Errorf("fake agent: %v", err)
			return
		}
		a.mu.Lock()
		a.seen = append(a.seen, in)
		s := a.script
		close(a.changed)
		a.changed = make(chan struct{})
		a.mu.Unlock()
		for _, o := range s(in) {
			a.publish(t, o)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	return a
}

func (a *fakeAgent) set(s script) {
	a.mu.Lock()
	a.script = s
	a.mu.Unlock()
}

func (a *fakeAgent) waitInbound(t *testing.T, what string, pred func(bus.Inbound) bool) bus.Inbound {
	t.Helper()
	deadline := time.After(wait)
	for {
		a.mu.Lock()
		ch := a.changed
		for _, in := range a.seen {
			if pred(in) {
				a.mu.Unlock()
				return in
			}
		}
		a.mu.Unlock()
		select {
		case <-ch:
		case <-deadline:
			t.Fatalf("no inbound %s within %s", what, wait)
		}
	}
}

func (a *fakeAgent) count() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.seen)
}

func (a *fakeAgent) publish(t *testing.T, o bus.Outbound) {
	data, err := json.Marshal(o)
	if err != nil {
		t.Error(err)
		return
	}
	subject := a.e.subj.Out(o.Channel, o.ChatID)
	if !o.Final {
		if err := a.e.nc.Publish(subject, data); err != nil && !errors.Is(err, nats.ErrConnectionClosed) {
			t.Error(err)
		}
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	if _, err := a.e.js.Publish(ctx, subject, data, jetstream.WithMsgID(o.ID)); err != nil && !errors.Is(err, nats.ErrConnectionClosed) {
		t.Errorf("publish final: %v", err) // (a reply racing the end of its test finds the connection closed)
	}
}

// event publishes an agent event for in.
func (a *fakeAgent) event(t *testing.T, in bus.Inbound, typ string, data any) {
	raw, _ := json.Marshal(data)
	ev := bus.Event{V: 1, Type: typ, Session: in.SessionKey(), Channel: in.Channel, ChatID: in.ChatID, InReplyTo: in.ID, Time: time.Now(), Data: raw}
	b, _ := json.Marshal(ev)
	if err := a.e.nc.Publish(a.e.subj.Event(in.Channel, in.ChatID), b); err != nil {
		t.Error(err)
	}
}

var (
	outSeq sync.Mutex
	outN   int
)

// reply is an outbound envelope answering in; a final unless kind is
// delta or typing.
func reply(in bus.Inbound, kind, text string) bus.Outbound {
	outSeq.Lock()
	outN++
	n := outN
	outSeq.Unlock()
	final := kind != bus.KindDelta && kind != bus.KindTyping
	return bus.Outbound{V: 1, ID: fmt.Sprintf("%s.%d", in.ID, n), Channel: in.Channel, ChatID: in.ChatID, InReplyTo: in.ID,
		Kind: kind, Text: text, Seq: n, Final: final}
}

// syncBuffer is a bytes.Buffer safe for concurrent writers.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

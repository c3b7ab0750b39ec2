package web

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
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
	"github.com/switchboard-chat/switchboard/channels/channeltest"
	"github.com/switchboard-chat/switchboard/internal/polltest"
	"github.com/switchboard-chat/switchboard/internal/syncbuf"
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
	agent   *channeltest.Agent
	logs    *syncbuf.Buffer
	onStore func(*store)
	now     func() time.Time // the console's clock (nil: time.Now)
}

func newEnv(t *testing.T) *env {
	t.Helper()
	s := bustest.StartServer(t)
	nc := bustest.Connect(t, s)
	js := bustest.Streams(t, nc)
	dir := t.TempDir()
	e := &env{nc: nc, js: js, subj: bus.Subjects{Prefix: "chat"}, state: filepath.Join(dir, "web.db"),
		pairDir: PairDir(dir), logs: &syncbuf.Buffer{}}
	e.agent = channeltest.NewAgent(t, e.nc, e.js, e.subj, Name, wait)
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
	if e.now != nil {
		c.now = e.now
	}
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

// browserFrom is a browser whose connections come from the loopback
// address src (127.0.0.2, ...): another client address to the console.
func (r *running) browserFrom(t *testing.T, src string) *browser {
	b := r.browser(t)
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}}
	tr := &http.Transport{DialContext: d.DialContext}
	t.Cleanup(tr.CloseIdleConnections)
	b.hc.Transport = tr
	return b
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

// reply is an outbound envelope answering in (channeltest.Reply).
func reply(in bus.Inbound, kind, text string) bus.Outbound { return channeltest.Reply(in, kind, text) }

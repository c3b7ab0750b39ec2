package admin

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestConfigValidate(t *testing.T) {
	tests := []struct {
		listen  string
		wantErr string
	}{
		{listen: ""},
		{listen: "127.0.0.1:9090"},
		{listen: "0.0.0.0:0"},
		{listen: ":9090"},
		{listen: "[::1]:9090"},
		{listen: "localhost:65535"},
		{listen: "9090", wantErr: `admin.listen: must be host:port such as 127.0.0.1:9090, or empty to disable, got "9090"`},
		{listen: "127.0.0.1", wantErr: `admin.listen: must be host:port`},
		{listen: "127.0.0.1:http", wantErr: `admin.listen: port must be a number between 0 and 65535, got "127.0.0.1:http"`},
		{listen: "127.0.0.1:70000", wantErr: `admin.listen: port must be a number between 0 and 65535`},
		{listen: "127.0.0.1:-1", wantErr: `admin.listen: port must be a number`},
	}
	for _, tt := range tests {
		t.Run(tt.listen, func(t *testing.T) {
			err := Config{Listen: tt.listen}.Validate()
			if tt.wantErr == "" {
				if err != nil {
					t.Fatalf("Validate(%q) = %v, want nil", tt.listen, err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("Validate(%q) = %v, want an error containing %q", tt.listen, err, tt.wantErr)
			}
		})
	}
	if err := DefaultConfig().Validate(); err != nil {
		t.Fatalf("DefaultConfig().Validate() = %v", err)
	}
	if got := DefaultConfig().Listen; got != "127.0.0.1:9090" {
		t.Fatalf("DefaultConfig().Listen = %q, want 127.0.0.1:9090", got)
	}
}

func get(t *testing.T, h http.Handler, path string) (int, string) {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
	return rec.Code, rec.Body.String()
}

func TestHealthz(t *testing.T) {
	s := New(Config{}, nil)
	s.Expect("bus") // readiness must not affect liveness
	code, body := get(t, s.Handler(), "/healthz")
	if code != http.StatusOK || body != "ok\n" {
		t.Fatalf("GET /healthz = %d %q, want 200 \"ok\\n\"", code, body)
	}
	rec := httptest.NewRecorder()
	s.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/healthz", nil))
	if rec.Code != http.StatusMethodNotAllowed {
		t.Fatalf("POST /healthz = %d, want 405", rec.Code)
	}
}

func TestReadyz(t *testing.T) {
	s := New(Config{}, nil)
	h := s.Handler()

	if code, body := get(t, h, "/readyz"); code != http.StatusOK || body != "ready\n" {
		t.Fatalf("no components: GET /readyz = %d %q, want 200 ready", code, body)
	}

	s.Expect("bus", "agent")
	code, body := get(t, h, "/readyz")
	want := "not ready\nagent: starting\nbus: starting\n"
	if code != http.StatusServiceUnavailable || body != want {
		t.Fatalf("after Expect: GET /readyz = %d %q, want 503 %q", code, body, want)
	}

	s.SetReady("bus", nil)
	s.SetReady("agent", errors.New("store: open history.db:\n  timeout"))
	code, body = get(t, h, "/readyz")
	want = "not ready\nagent: store: open history.db: timeout\n"
	if code != http.StatusServiceUnavailable || body != want {
		t.Fatalf("agent failing: GET /readyz = %d %q, want 503 %q", code, body, want)
	}

	s.SetReady("agent", nil)
	if code, body := get(t, h, "/readyz"); code != http.StatusOK || body != "ready\n" {
		t.Fatalf("all ready: GET /readyz = %d %q, want 200 ready", code, body)
	}

	// Expecting an already-known component does not reset it.
	s.Expect("bus")
	if code, _ := get(t, h, "/readyz"); code != http.StatusOK {
		t.Fatalf("re-Expect of a ready component: GET /readyz = %d, want 200", code)
	}

	// A component that was never expected registers by reporting.
	s.SetReady("telegram", errors.New(""))
	code, body = get(t, h, "/readyz")
	if code != http.StatusServiceUnavailable || body != "not ready\ntelegram: not ready\n" {
		t.Fatalf("unexpected component failing: GET /readyz = %d %q", code, body)
	}
	if got := s.NotReady(); len(got) != 1 || got["telegram"] != "not ready" {
		t.Fatalf("NotReady() = %v, want map[telegram:not ready]", got)
	}
}

func TestSetReadyConcurrent(t *testing.T) {
	s := New(Config{}, nil)
	s.Expect("a", "b", "c")
	var wg sync.WaitGroup
	for _, c := range []string{"a", "b", "c"} {
		wg.Go(func() {
			for i := range 200 {
				if i%2 == 0 {
					s.SetReady(c, errors.New("flapping"))
				} else {
					s.SetReady(c, nil)
				}
			}
		})
		wg.Go(func() {
			for range 200 {
				get(t, s.Handler(), "/readyz")
			}
		})
	}
	wg.Wait()
	if code, body := get(t, s.Handler(), "/readyz"); code != http.StatusOK {
		t.Fatalf("after final SetReady(nil) of all: GET /readyz = %d %q, want 200", code, body)
	}
}

func TestHandleMountsMore(t *testing.T) {
	s := New(Config{}, nil)
	s.Handle("GET /metrics", http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = io.WriteString(w, "switchboard_up 1\n")
	}))
	if code, body := get(t, s.Handler(), "/metrics"); code != http.StatusOK || body != "switchboard_up 1\n" {
		t.Fatalf("GET /metrics = %d %q", code, body)
	}
	if code, _ := get(t, s.Handler(), "/nope"); code != http.StatusNotFound {
		t.Fatalf("GET /nope = %d, want 404", code)
	}
}

// startServer runs s in the background and returns once it listens, with a
// function that cancels it and returns Run's result.
func startServer(t *testing.T, s *Server) (stop func() error) {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	select {
	case <-s.Listening():
	case err := <-done:
		cancel()
		t.Fatalf("Run returned before listening: %v", err)
	case <-time.After(10 * time.Second):
		cancel()
		t.Fatal("server did not start listening within 10s")
	}
	var once sync.Once
	var runErr error
	stop = func() error {
		once.Do(func() {
			cancel()
			select {
			case runErr = <-done:
			case <-time.After(10 * time.Second):
				runErr = errors.New("Run did not return within 10s of cancellation")
			}
		})
		return runErr
	}
	t.Cleanup(func() { _ = stop() })
	return stop
}

func httpGet(t *testing.T, client *http.Client, url string) (int, string) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("GET %s: read body: %v", url, err)
	}
	return resp.StatusCode, string(b)
}

func TestRunServesAndStops(t *testing.T) {
	s := New(Config{Listen: "127.0.0.1:0"}, nil)
	if s.Addr() != "" {
		t.Fatalf("Addr() before Run = %q, want empty", s.Addr())
	}
	s.Expect("bus")
	stop := startServer(t, s)

	addr := s.Addr()
	if _, port, err := net.SplitHostPort(addr); err != nil || port == "0" {
		t.Fatalf("Addr() = %q, want a bound 127.0.0.1 port", addr)
	}
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	base := "http://" + addr

	if code, body := httpGet(t, client, base+"/healthz"); code != http.StatusOK || body != "ok\n" {
		t.Fatalf("GET /healthz = %d %q", code, body)
	}
	if code, body := httpGet(t, client, base+"/readyz"); code != http.StatusServiceUnavailable || body != "not ready\nbus: starting\n" {
		t.Fatalf("GET /readyz = %d %q, want 503 bus: starting", code, body)
	}
	s.SetReady("bus", nil)
	if code, body := httpGet(t, client, base+"/readyz"); code != http.StatusOK || body != "ready\n" {
		t.Fatalf("GET /readyz = %d %q, want 200 ready", code, body)
	}

	if err := stop(); err != nil {
		t.Fatalf("Run after cancel = %v, want nil", err)
	}
	// The listener is closed once Run has returned.
	if conn, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
		conn.Close()
		t.Fatalf("dial %s after Run returned: connected, want refused", addr)
	}
	if err := s.Run(t.Context()); err == nil || !strings.Contains(err.Error(), "more than once") {
		t.Fatalf("second Run = %v, want an error", err)
	}
}

func TestRunShutdownWaitsForInflightRequest(t *testing.T) {
	s := New(Config{Listen: "127.0.0.1:0"}, nil)
	entered := make(chan struct{})
	release := make(chan struct{})
	s.Handle("GET /slow", http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		close(entered)
		<-release
		_, _ = io.WriteString(w, "done")
	}))
	stop := startServer(t, s)
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}

	type result struct {
		code int
		body string
		err  error
	}
	got := make(chan result, 1)
	go func() {
		resp, err := client.Get("http://" + s.Addr() + "/slow")
		if err != nil {
			got <- result{err: err}
			return
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		got <- result{resp.StatusCode, string(b), err}
	}()
	<-entered
	addr := s.Addr()
	stopped := make(chan error, 1)
	go func() { stopped <- stop() }()
	// Shutdown closes the listener first; release the handler only then, so
	// the request is provably in flight during the shutdown.
	deadline := time.Now().Add(10 * time.Second)
	for {
		conn, err := net.DialTimeout("tcp", addr, time.Second)
		if err != nil {
			break
		}
		conn.Close()
		if time.Now().After(deadline) {
			t.Fatal("listener still open 10s after cancellation")
		}
		runtime.Gosched()
	}
	close(release)
	if r := <-got; r.err != nil || r.code != http.StatusOK || r.body != "done" {
		t.Fatalf("in-flight request during shutdown = %d %q %v, want 200 done", r.code, r.body, r.err)
	}
	if err := <-stopped; err != nil {
		t.Fatalf("Run = %v, want nil", err)
	}
}

func TestRunListenError(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()

	s := New(Config{Listen: ln.Addr().String()}, nil)
	err = s.Run(t.Context()) // returns at once: the address is taken
	if err == nil || !strings.HasPrefix(err.Error(), "admin: listen on "+ln.Addr().String()+":") {
		t.Fatalf("Run on a busy address = %v, want an admin: listen error", err)
	}
	select {
	case <-s.Listening():
		t.Fatal("Listening() closed although the listen failed")
	default:
	}
}

func TestRunCancelledBeforeStart(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	s := New(Config{Listen: "127.0.0.1:0"}, nil)
	if err := s.Run(ctx); err != nil {
		t.Fatalf("Run with a cancelled ctx = %v, want nil", err)
	}
	if s.Addr() != "" {
		t.Fatalf("Addr() = %q after a cancelled Run, want empty", s.Addr())
	}
}

func TestRunDisabled(t *testing.T) {
	s := New(Config{Listen: ""}, nil)
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	<-s.Listening()
	if s.Addr() != "" {
		t.Fatalf("Addr() of a disabled server = %q, want empty", s.Addr())
	}
	select {
	case err := <-done:
		t.Fatalf("disabled Run returned before cancellation: %v", err)
	default:
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("disabled Run = %v, want nil", err)
	}
}

// TestReadyzJSON: ?format=json lists every component, ready or not, with
// its reason on one line; the status code is /readyz's.
func TestReadyzJSON(t *testing.T) {
	s := New(Config{}, nil)
	s.Expect("bus", "agent")
	s.SetReady("bus", nil)
	s.SetReady("telegram", errors.New("getMe:\n  401 Unauthorized"))
	code, body := get(t, s.Handler(), "/readyz?format=json")
	want := `{"ready":false,"components":[{"name":"agent","ready":false,"reason":"starting"},{"name":"bus","ready":true},{"name":"telegram","ready":false,"reason":"getMe: 401 Unauthorized"}]}` + "\n"
	if code != http.StatusServiceUnavailable || body != want {
		t.Fatalf("GET /readyz?format=json = %d %s, want 503 %s", code, body, want)
	}
	s.SetReady("agent", nil)
	s.SetReady("telegram", nil)
	if code, body := get(t, s.Handler(), "/readyz?format=json"); code != http.StatusOK || !strings.HasPrefix(body, `{"ready":true,`) {
		t.Fatalf("all ready: GET /readyz?format=json = %d %s", code, body)
	}
}

// TestReadyzDetails: a component's detail (the partitions an instance
// owns) is listed on /readyz after the status, ready or not, and goes
// away when set empty.
func TestReadyzDetails(t *testing.T) {
	s := New(Config{}, nil)
	s.Expect("agent", "bus")
	s.SetReady("agent", nil)
	s.SetDetail("agent", "partitions owned [0 3]\nof 16")
	code, body := get(t, s.Handler(), "/readyz")
	if code != http.StatusServiceUnavailable || body != "not ready\nbus: starting\nagent: partitions owned [0 3] of 16\n" {
		t.Errorf("not ready: %d %q", code, body)
	}
	s.SetReady("bus", nil)
	if code, body := get(t, s.Handler(), "/readyz"); code != http.StatusOK || body != "ready\nagent: partitions owned [0 3] of 16\n" {
		t.Errorf("ready: %d %q", code, body)
	}
	if _, body := get(t, s.Handler(), "/readyz?format=json"); !strings.Contains(body, `{"name":"agent","ready":true,"detail":"partitions owned [0 3] of 16"}`) {
		t.Errorf("json: %s", body)
	}
	s.SetDetail("agent", "")
	if code, body := get(t, s.Handler(), "/readyz"); code != http.StatusOK || body != "ready\n" {
		t.Errorf("detail removed: %d %q", code, body)
	}
}

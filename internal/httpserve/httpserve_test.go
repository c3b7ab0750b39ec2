package httpserve_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/switchboard-chat/switchboard/internal/httpserve"
	"github.com/switchboard-chat/switchboard/internal/httpserve/httpservetest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// serve runs hs.Serve for h on a listener named name until the test
// ends and returns its address.
func serve(t *testing.T, hs *httpserve.Servers, name string, h http.Handler, o httpserve.Options) string {
	t.Helper()
	ln, err := hs.Listen(t.Context(), name, "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- hs.Serve(ctx, ln, h, o) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve = %v", err)
		}
	})
	return ln.Addr().String()
}

// TestBounds: a plain handler served by Listen and Serve passes the
// checks every listener's test runs.
func TestBounds(t *testing.T) {
	h := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok") })
	httpservetest.CheckBounds(t, "plain", func(t *testing.T, hs *httpserve.Servers) string {
		return serve(t, hs, "plain", h, httpserve.Options{})
	})
}

// TestStreamOutlivesTimeouts: a server-sent event stream goes on well past
// read_header_timeout, read_timeout and idle_timeout (no write timeout),
// and it ends when the server's context does with CancelRequests.
func TestStreamOutlivesTimeouts(t *testing.T) {
	cfg := httpserve.DefaultConfig()
	cfg.ReadHeaderTimeout, cfg.ReadTimeout, cfg.IdleTimeout = 100*time.Millisecond, 100*time.Millisecond, 100*time.Millisecond
	const events, every = 10, 50 * time.Millisecond // 500 ms in all: five times each timeout
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body) // the request's body is read first, as the API's are
		w.Header().Set("Content-Type", "text/event-stream")
		rc := http.NewResponseController(w)
		tick := time.NewTicker(every)
		defer tick.Stop()
		for i := range events {
			select {
			case <-r.Context().Done():
				return
			case <-tick.C:
			}
			fmt.Fprintf(w, "data: %d %s\n\n", i, body)
			if rc.Flush() != nil {
				return
			}
		}
	})
	addr := serve(t, httpserve.New(cfg, nil), "sse", h, httpserve.Options{CancelRequests: true})
	resp, err := http.Post("http://"+addr+"/", "application/json", strings.NewReader("{}"))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	got := 0
	for sc.Scan() {
		if strings.HasPrefix(sc.Text(), "data: ") {
			got++
		}
	}
	if got != events {
		t.Fatalf("the stream delivered %d of %d events (err %v): a timeout cut it", got, events, sc.Err())
	}
}

// TestServe: requests see the server's context with CancelRequests; when
// it ends, BeforeShutdown runs, the server stops and Serve returns nil; a
// listener that fails ends it with the error.
func TestServe(t *testing.T) {
	hs := httpserve.New(httpserve.DefaultConfig(), nil)
	ln, err := hs.Listen(t.Context(), "api", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	type key struct{}
	ctx = context.WithValue(ctx, key{}, "base")
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		v, _ := r.Context().Value(key{}).(string)
		_, _ = io.WriteString(w, v)
	})
	stopped := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		done <- hs.Serve(ctx, ln, h, httpserve.Options{CancelRequests: true, BeforeShutdown: func() { close(stopped) }})
	}()
	hc := &http.Client{Transport: &http.Transport{}}
	defer hc.CloseIdleConnections()
	resp, err := hc.Get("http://" + ln.Addr().String() + "/")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(body) != "base" {
		t.Fatalf("body %q, want the server's base context value", body)
	}
	if st := hs.Stats(); len(st) != 1 || st[0].Listener != "api" || st[0].Open != 1 {
		t.Errorf("Stats with one kept-alive connection = %+v", st)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Serve after its context ended = %v, want nil", err)
	}
	select {
	case <-stopped:
	default:
		t.Fatal("BeforeShutdown did not run")
	}

	bad, err := hs.Listen(t.Context(), "bad", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	bad.Close()
	if err := hs.Serve(t.Context(), bad, h, httpserve.Options{}); err == nil {
		t.Fatal("Serve on a closed listener = nil, want its error")
	}
}

// TestNilServers: nil Servers listen and serve with the defaults.
func TestNilServers(t *testing.T) {
	var hs *httpserve.Servers
	if got := hs.Config(); got.ReadHeaderTimeout != httpserve.DefaultReadHeaderTimeout || got.MaxConns > httpserve.DefaultMaxConns {
		t.Errorf("nil Servers' config = %+v, want the defaults", got)
	}
	srv := hs.Server(nil, http.NotFoundHandler(), httpserve.Options{})
	if srv.ReadHeaderTimeout != httpserve.DefaultReadHeaderTimeout || srv.IdleTimeout != httpserve.DefaultIdleTimeout ||
		srv.ReadTimeout != httpserve.DefaultReadTimeout || srv.MaxHeaderBytes != httpserve.DefaultMaxHeaderBytes || srv.WriteTimeout != 0 {
		t.Errorf("nil Servers' http.Server = %+v", srv)
	}
	if hs.Stats() != nil {
		t.Error("nil Servers report stats")
	}
	addr := serve(t, hs, "x", http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok") }), httpserve.Options{})
	resp := httpservetest.Get(t, addr, "127.0.0.1", nil)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET through nil Servers = %d", resp.StatusCode)
	}
}

// TestIPv6ShareIsPerSlash64: two addresses of one IPv6 /64 share one
// max_conns_per_ip.
func TestIPv6ShareIsPerSlash64(t *testing.T) {
	ln, err := net.Listen("tcp", "[::1]:0")
	if err != nil {
		t.Skip("no IPv6 loopback:", err)
	}
	ln.Close()
	cfg := httpserve.DefaultConfig()
	cfg.MaxConnsPerIP = 1
	hs := httpserve.New(cfg, nil)
	bl, err := hs.Listen(t.Context(), "v6", "[::1]:0")
	if err != nil {
		t.Fatal(err)
	}
	defer bl.Close()
	addr := bl.Addr().String()
	accepted := make(chan net.Conn, 2)
	go func() {
		for {
			c, err := bl.Accept()
			if err != nil {
				return
			}
			accepted <- c
		}
	}()
	first, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer first.Close()
	c := <-accepted
	defer c.Close()
	second, err := net.Dial("tcp", addr) // ::1 again: the same /64
	if err != nil {
		t.Fatal(err)
	}
	defer second.Close()
	httpservetest.ExpectRefused(t, []net.Conn{second}, 1, "from your address")
}

func TestValidate(t *testing.T) {
	if err := httpserve.DefaultConfig().Validate(); err != nil {
		t.Fatalf("defaults: %v", err)
	}
	bad := httpserve.Config{MaxConns: 0, MaxConnsPerIP: 5, ReadHeaderTimeout: time.Millisecond, ReadTimeout: 0, IdleTimeout: 2 * time.Hour, MaxHeaderBytes: 10}
	err := bad.Validate()
	for _, want := range []string{"http.max_conns: must be between 1 and", "http.max_conns_per_ip: must be between 1 and http.max_conns",
		"http.read_header_timeout: must be between 100ms and 10m0s", "http.read_timeout: must be between http.read_header_timeout",
		"http.idle_timeout: must be between 100ms and 1h0m0s", "http.max_header_bytes: must be between 4096 and"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Validate(%+v) = %v, want %q", bad, err, want)
		}
	}
}

package channels_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/switchboard-chat/switchboard/channels"
	"github.com/switchboard-chat/switchboard/internal/httpserve"
	"github.com/switchboard-chat/switchboard/internal/httpserve/httpservetest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// runHTTP runs RunHTTP with h until the test ends and returns the
// address it listens on.
func runHTTP(t *testing.T, h channels.HTTPChannel) string {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	addr := make(chan net.Addr, 1)
	h.Started = func(_ context.Context, a net.Addr) { addr <- a }
	done := make(chan error, 1)
	go func() { done <- channels.RunHTTP(ctx, h) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("RunHTTP after its context ended = %v, want nil", err)
		}
	})
	select {
	case a := <-addr:
		return a.String()
	case err := <-done:
		t.Fatalf("RunHTTP = %v before listening", err)
	case <-time.After(20 * time.Second):
		t.Fatal("RunHTTP did not listen")
	}
	return ""
}

// TestRunHTTPBounded: the listener and server of RunHTTP are bounded by
// its HTTP, counted under its Name.
func TestRunHTTPBounded(t *testing.T) {
	h := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok") })
	httpservetest.CheckBounds(t, "test", func(t *testing.T, hs *httpserve.Servers) string {
		return runHTTP(t, channels.HTTPChannel{Name: "test", Addr: "127.0.0.1:0", Handler: h, Log: slog.New(slog.DiscardHandler), HTTP: hs})
	})
}

// TestRunHTTPStops: the requests see RunHTTP's context; when it ends,
// BeforeShutdown runs and RunHTTP returns nil; a worker's error ends it
// with that error, reported to Status.
func TestRunHTTPStops(t *testing.T) {
	type key struct{}
	ctx, cancel := context.WithCancel(context.WithValue(t.Context(), key{}, "base"))
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		v, _ := r.Context().Value(key{}).(string)
		_, _ = io.WriteString(w, v)
	})
	stopped := make(chan struct{})
	addr := make(chan net.Addr, 1)
	done := make(chan error, 1)
	go func() {
		done <- channels.RunHTTP(ctx, channels.HTTPChannel{Name: "test", Addr: "127.0.0.1:0", Handler: h, Log: slog.New(slog.DiscardHandler),
			BeforeShutdown: func() { close(stopped) }, Started: func(_ context.Context, a net.Addr) { addr <- a }})
	}()
	hc := &http.Client{Transport: &http.Transport{}}
	defer hc.CloseIdleConnections()
	resp, err := hc.Get("http://" + (<-addr).String() + "/")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(body) != "base" {
		t.Fatalf("body %q, want the value of RunHTTP's context", body)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("RunHTTP after its context ended = %v, want nil", err)
	}
	select {
	case <-stopped:
	default:
		t.Fatal("BeforeShutdown did not run")
	}

	var reported error
	failing := errors.New("worker failed")
	err = channels.RunHTTP(t.Context(), channels.HTTPChannel{Name: "test", Addr: "127.0.0.1:0", Handler: h, Log: slog.New(slog.DiscardHandler),
		Workers: []func(context.Context) error{func(context.Context) error { return failing }}, Status: func(err error) { reported = err }})
	if !errors.Is(err, failing) || !errors.Is(reported, failing) {
		t.Fatalf("RunHTTP with a failing worker = %v (status %v), want the worker's error", err, reported)
	}
}

package channels_test

import (
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"testing"

	"go.uber.org/goleak"

	"github.com/switchboard-chat/switchboard/channels"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestServeHTTP: requests are served with the server's context as their
// base; when it ends, beforeShutdown runs, the server stops and ServeHTTP
// returns nil; a listener that fails ends it with the error.
func TestServeHTTP(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
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
		done <- channels.ServeHTTP(ctx, ln, h, slog.New(slog.DiscardHandler), func() { close(stopped) })
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
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("ServeHTTP after its context ended = %v, want nil", err)
	}
	select {
	case <-stopped:
	default:
		t.Fatal("beforeShutdown did not run")
	}

	bad, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	bad.Close()
	if err := channels.ServeHTTP(t.Context(), bad, h, slog.New(slog.DiscardHandler), nil); err == nil {
		t.Fatal("ServeHTTP on a closed listener = nil, want its error")
	}
}

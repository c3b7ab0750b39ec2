package admin

import (
	"context"
	"testing"
	"time"

	"github.com/switchboard-chat/switchboard/internal/httpserve"
	"github.com/switchboard-chat/switchboard/internal/httpserve/httpservetest"
)

// TestListenerBounded: the admin server's listener and server are the
// daemon's bounded ones (SetHTTP), counted as "admin".
func TestListenerBounded(t *testing.T) {
	httpservetest.CheckBounds(t, "admin", func(t *testing.T, hs *httpserve.Servers) string {
		s := New(Config{Listen: "127.0.0.1:0"}, nil)
		s.SetHTTP(hs)
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- s.Run(ctx) }()
		t.Cleanup(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("Run = %v", err)
			}
		})
		select {
		case <-s.Listening():
		case err := <-done:
			t.Fatalf("Run = %v before listening", err)
		case <-time.After(20 * time.Second):
			t.Fatal("the admin server did not listen")
		}
		return s.Addr()
	})
}

package llmtest

import (
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
)

// Server is a Handler served by an httptest server. The Handler's methods
// (Enqueue, Requests, WaitRequests, ...) are promoted. It is closed by the
// test's cleanup.
type Server struct {
	*Handler
	srv  *httptest.Server
	once sync.Once
}

// NewServer starts a server for t with a handler built from opts, and
// registers its Close with t.Cleanup.
func NewServer(t testing.TB, opts ...Option) *Server {
	t.Helper()
	h := NewHandler(opts...)
	s := &Server{Handler: h, srv: httptest.NewServer(h)}
	t.Cleanup(s.Close)
	return s
}

// URL returns the base URL to configure a client with, ending in "/v1".
func (s *Server) URL() string { return s.srv.URL + "/v1" }

// HTTPClient returns an HTTP client for this server; Close closes its idle
// connections.
func (s *Server) HTTPClient() *http.Client { return s.srv.Client() }

// Close releases held requests (Handler.Close), then shuts the server down,
// waiting for outstanding requests. It is idempotent.
func (s *Server) Close() {
	s.once.Do(func() {
		s.Handler.Close()
		s.srv.Close()
	})
}

// Package admin is Switchboard's operator HTTP server: liveness (GET
// /healthz), readiness (GET /readyz; GET /readyz?format=json lists every
// component with its state, for `switchboard doctor`) backed by a registry
// that the daemon's components report into, and a mux that later features
// (metrics, the MCP servers' status at /mcp) mount handlers on.
//
// The server listens on admin.listen (default 127.0.0.1:9090), bounded as
// every HTTP listener of the daemon is (package httpserve, [Server.SetHTTP]);
// an empty address turns it off while keeping the readiness registry
// usable; [Check] tells `switchboard check` whether admin.listen is free.
package admin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/switchboard-chat/switchboard/internal/httpserve"
)

// DefaultListen is the default admin.listen address.
const DefaultListen = "127.0.0.1:9090"

// ShutdownTimeout bounds how long Run waits for in-flight requests after its
// context is cancelled.
const ShutdownTimeout = 5 * time.Second

// reasonStarting is the reason of an expected component that has not
// reported yet.
const reasonStarting = "starting"

// Config configures the admin server (YAML section "admin").
type Config struct {
	// Listen is the "host:port" the server binds; empty disables the
	// server. Port 0 picks a free port (see [Server.Addr]).
	Listen string `yaml:"listen"`
}

// DefaultConfig returns the documented defaults.
func DefaultConfig() Config {
	return Config{Listen: DefaultListen}
}

// Validate reports every problem, each naming its YAML key.
func (c Config) Validate() error {
	if c.Listen == "" {
		return nil
	}
	_, port, err := net.SplitHostPort(c.Listen)
	if err != nil {
		return fmt.Errorf("admin.listen: must be host:port such as 127.0.0.1:9090, or empty to disable, got %q", c.Listen)
	}
	if n, err := strconv.Atoi(port); err != nil || n < 0 || n > 65535 {
		return fmt.Errorf("admin.listen: port must be a number between 0 and 65535, got %q", c.Listen)
	}
	return nil
}

// Readiness is the body of GET /readyz?format=json.
type Readiness struct {
	Ready      bool        `json:"ready"`
	Components []Component `json:"components"`
}

// Component is one component's readiness: a part of the daemon (bus,
// store, workspace, agent) or a channel (telegram, slack, openai).
type Component struct {
	Name   string `json:"name"`
	Ready  bool   `json:"ready"`
	Reason string `json:"reason,omitempty"` // why it is not ready
	Detail string `json:"detail,omitempty"` // what it reports beyond readiness (SetDetail)
}

// Server is the admin HTTP server and readiness registry.
//
// All methods are safe for concurrent use. Run may be called once.
type Server struct {
	cfg Config
	log *slog.Logger
	mux *http.ServeMux

	mu      sync.Mutex
	pending map[string]string // component → reason it is not ready; absent = ready
	known   map[string]bool   // every component ever expected or reported
	details map[string]string // component → what it reports beyond readiness

	started   atomic.Bool
	addr      atomic.Pointer[string]
	listening chan struct{}
	http      atomic.Pointer[httpserve.Servers] // SetHTTP; nil: httpserve's defaults
}

// New returns a server for cfg. It does no I/O; Run binds the listener. A
// nil log discards. cfg is expected to have passed Validate; an invalid
// address makes Run fail.
func New(cfg Config, log *slog.Logger) *Server {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	s := &Server{
		cfg:       cfg,
		log:       log.With("component", "admin"),
		mux:       http.NewServeMux(),
		pending:   make(map[string]string),
		known:     make(map[string]bool),
		details:   make(map[string]string),
		listening: make(chan struct{}),
	}
	s.mux.HandleFunc("GET /healthz", s.healthz)
	s.mux.HandleFunc("GET /readyz", s.readyz)
	return s
}

// Expect registers components that must report ready before /readyz
// succeeds. Each starts not ready with the reason "starting", unless it has
// already reported through SetReady.
func (s *Server) Expect(components ...string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, c := range components {
		if s.known[c] {
			continue
		}
		s.known[c] = true
		s.pending[c] = reasonStarting
	}
}

// SetReady records a component's state: a nil err means ready, a non-nil
// err means not ready with err's text as the reason. A component that was
// not expected is registered by its first report.
func (s *Server) SetReady(component string, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.known[component] = true
	if err == nil {
		delete(s.pending, component)
		return
	}
	reason := err.Error()
	if reason == "" {
		reason = "not ready"
	}
	s.pending[component] = reason
}

// SetDetail records what a component reports on /readyz beyond its
// readiness (one line, e.g. the partitions this instance owns); an empty
// detail removes it. Details are listed after the status, sorted by
// component, as "component: detail".
func (s *Server) SetDetail(component, detail string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if detail == "" {
		delete(s.details, component)
		return
	}
	s.details[component] = oneLine(detail)
}

// detailLines returns the "component: detail" lines, sorted.
func (s *Server) detailLines() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	names := make([]string, 0, len(s.details))
	for c := range s.details {
		names = append(names, c)
	}
	sort.Strings(names)
	var b strings.Builder
	for _, c := range names {
		fmt.Fprintf(&b, "%s: %s\n", c, s.details[c])
	}
	return b.String()
}

// NotReady returns the components that are not ready, mapped to their
// reasons; an empty map means the process is ready.
func (s *Server) NotReady() map[string]string {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[string]string, len(s.pending))
	for c, r := range s.pending {
		out[c] = r
	}
	return out
}

// Handler returns the server's handler: /healthz, /readyz and everything
// mounted with Handle.
func (s *Server) Handler() http.Handler { return s.mux }

// Handle mounts h on the server's mux under pattern (http.ServeMux syntax,
// e.g. "GET /metrics"). It panics, as http.ServeMux does, on a conflicting
// pattern. It may be called before or while Run serves.
func (s *Server) Handle(pattern string, h http.Handler) { s.mux.Handle(pattern, h) }

// SetHTTP makes hs bound the server's listener and server (connections
// per client and in all, timeouts; counted as "admin"): the daemon's
// shared [httpserve.Servers]. Call it before Run; without it Run uses
// httpserve's defaults.
func (s *Server) SetHTTP(hs *httpserve.Servers) { s.http.Store(hs) }

// Listening returns a channel that is closed once Run has bound its
// listener, or at once when Run starts with the server disabled. Addr is
// valid after it is closed.
func (s *Server) Listening() <-chan struct{} { return s.listening }

// Addr returns the bound address ("127.0.0.1:39113") once Listening is
// closed; it is empty before that and when the server is disabled.
func (s *Server) Addr() string {
	if p := s.addr.Load(); p != nil {
		return *p
	}
	return ""
}

// Run binds cfg.Listen and serves until ctx is cancelled, then shuts down
// gracefully, waiting at most ShutdownTimeout for in-flight requests, and
// returns nil. A listen error is returned at once; a serve error ends Run
// with that error. With an empty cfg.Listen Run only waits for ctx. A ctx
// cancelled before the listener is bound makes Run return nil without
// listening (Listening is then never closed). Run blocks; every goroutine
// it starts has returned when it returns.
func (s *Server) Run(ctx context.Context) error {
	if !s.started.CompareAndSwap(false, true) {
		return errors.New("admin: Run called more than once")
	}
	if s.cfg.Listen == "" {
		s.log.DebugContext(ctx, "admin server disabled")
		close(s.listening)
		<-ctx.Done()
		return nil
	}
	if ctx.Err() != nil {
		return nil // cancelled before it started: nothing to serve
	}
	hs := s.http.Load()
	ln, err := hs.Listen(ctx, "admin", s.cfg.Listen)
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return fmt.Errorf("admin: listen on %s: %w", s.cfg.Listen, err)
	}
	addr := ln.Addr().String()
	s.addr.Store(&addr)
	close(s.listening)
	s.log.InfoContext(ctx, "admin server listening", "addr", addr)

	if err := hs.Serve(ctx, ln, s.mux, httpserve.Options{Log: s.log, ShutdownTimeout: ShutdownTimeout}); err != nil {
		return fmt.Errorf("admin: serve on %s: %w", addr, err)
	}
	s.log.InfoContext(ctx, "admin server stopped")
	return nil
}

func (s *Server) healthz(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	_, _ = w.Write([]byte("ok\n"))
}

// Components returns every component expected or reported so far with
// its state, by name: what GET /readyz?format=json shows.
func (s *Server) Components() []Component {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]Component, 0, len(s.known))
	for c := range s.known {
		reason, pending := s.pending[c]
		out = append(out, Component{Name: c, Ready: !pending, Reason: oneLine(reason), Detail: s.details[c]})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

func (s *Server) readyz(w http.ResponseWriter, r *http.Request) {
	if r.URL.Query().Get("format") == "json" {
		s.readyzJSON(w)
		return
	}
	pending := s.NotReady()
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	details := s.detailLines()
	if len(pending) == 0 {
		_, _ = w.Write([]byte("ready\n" + details))
		return
	}
	names := make([]string, 0, len(pending))
	for c := range pending {
		names = append(names, c)
	}
	sort.Strings(names)
	var b strings.Builder
	b.WriteString("not ready\n")
	for _, c := range names {
		fmt.Fprintf(&b, "%s: %s\n", c, oneLine(pending[c]))
	}
	b.WriteString(details)
	w.WriteHeader(http.StatusServiceUnavailable)
	_, _ = w.Write([]byte(b.String()))
}

// readyzJSON answers GET /readyz?format=json: a [Readiness], status 200
// when every component is ready, else 503.
func (s *Server) readyzJSON(w http.ResponseWriter) {
	rd := Readiness{Ready: true, Components: s.Components()}
	for _, c := range rd.Components {
		rd.Ready = rd.Ready && c.Ready
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	if !rd.Ready {
		w.WriteHeader(http.StatusServiceUnavailable)
	}
	_ = json.NewEncoder(w).Encode(rd)
}

// oneLine keeps a reason on one line of the /readyz body.
func oneLine(s string) string {
	return strings.Join(strings.Fields(s), " ")
}

// Package mcp connects Switchboard to MCP (Model Context Protocol)
// servers with the official Go SDK and offers their tools to the model.
//
// Servers are configured under mcp.servers: a command speaking MCP over
// stdio (its environment is the daemon's safe set plus the configured
// env; nothing else of the daemon's environment is passed), or a
// streamable HTTP URL with optional headers. [Manager.Run] connects every
// enabled server in the background; a server's tools join the tool set
// ([Manager.Tools], a [tools.Source]) once it is ready and leave it when it
// goes away. A server that fails to start or drops is logged and retried
// with exponential backoff (1 s up to 5 min); it never blocks the daemon or
// the other servers.
//
// Tools are named mcp_<server>_<tool> ([ToolName]); two tools of a server
// that end up with the same name are not both offered: the first (in the
// server's order) is kept and the other is logged. Server names cannot
// contain "_", so names of different servers never collide. A result the
// server marks isError is an error result, so the executor's circuit
// breakers count it; image content is passed through as images. The tool
// list is cached and fetched again when the server sends
// notifications/tools/list_changed.
//
// A server's secrets (its env and header values, its URL's userinfo and
// query values) appear in nothing the package reports or logs: displays of
// the configuration use [Config.Redacted], and the server's errors (its
// status, GET /mcp, `switchboard check`, a tool call's error) and log
// lines (the SDK's and a stdio server's stderr included) have them
// replaced by "(redacted)".
package mcp

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/switchboard-chat/switchboard/internal/retry"
	"github.com/switchboard-chat/switchboard/tools"
)

// Backoff between connection attempts of a server.
const (
	minBackoff     = time.Second
	maxBackoff     = 5 * time.Minute
	connectTimeout = 30 * time.Second
	// stdioTerminate is how long a stdio server gets to exit after its
	// input is closed, before it is signalled.
	stdioTerminate = 2 * time.Second
)

// ServerStatus describes one configured server.
// ServeHTTP (GET /mcp on the admin listener) shows it as JSON.
type ServerStatus struct {
	Name     string `json:"name"`
	Ready    bool   `json:"ready"`
	Tools    int    `json:"tools"`
	Attempts int    `json:"attempts"`        // connection attempts so far
	Error    string `json:"error,omitempty"` // the last connection error, "" when ready
	Disabled bool   `json:"disabled,omitempty"`
}

// Manager keeps the configured MCP servers connected and their tools
// listed. It is safe for concurrent use; Run is its lifecycle.
type Manager struct {
	cfg     Config
	log     *slog.Logger
	impl    *sdk.Implementation
	environ func() []string
	backoff time.Duration // first retry wait (tests shorten it)

	snapshot atomic.Pointer[[]tools.Tool]
	red      map[string]redactor // each server's secrets, hidden in its errors and log lines

	mu      sync.Mutex // guards the fields below
	status  map[string]*ServerStatus
	perSrv  map[string][]tools.Tool
	changed chan struct{} // closed and replaced on every change
}

// New validates cfg and returns a manager; nothing is started until Run.
// A nil log discards.
func New(cfg Config, version string, log *slog.Logger) (*Manager, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if version == "" {
		version = "dev"
	}
	m := &Manager{cfg: cfg, log: log, impl: &sdk.Implementation{Name: "switchboard", Version: version},
		environ: os.Environ, backoff: minBackoff, status: map[string]*ServerStatus{}, perSrv: map[string][]tools.Tool{},
		red: map[string]redactor{}, changed: make(chan struct{})}
	for name, s := range cfg.Servers {
		m.status[name] = &ServerStatus{Name: name, Disabled: s.Disabled}
		m.red[name] = newRedactor(s)
	}
	empty := []tools.Tool{}
	m.snapshot.Store(&empty)
	return m, nil
}

// Tools returns the tools of the servers that are ready, by server name
// then in each server's order. It implements [tools.Source].
func (m *Manager) Tools() []tools.Tool { return *m.snapshot.Load() }

// Changed returns a channel that is closed at the next change of the tool
// set or of a server's status.
func (m *Manager) Changed() <-chan struct{} {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.changed
}

// Status returns every configured server's status, by name.
func (m *Manager) Status() []ServerStatus {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []ServerStatus
	for _, name := range slices.Sorted(maps.Keys(m.status)) {
		out = append(out, *m.status[name])
	}
	return out
}

// ServeHTTP answers with [Manager.Status] as a JSON array: the daemon
// mounts it at GET /mcp on the admin listener, for `switchboard doctor`.
// Errors carry no secret of the server's configuration (env and header
// values, URL userinfo and query values are "(redacted)").
func (m *Manager) ServeHTTP(w http.ResponseWriter, _ *http.Request) {
	st := m.Status()
	if st == nil {
		st = []ServerStatus{}
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	_ = json.NewEncoder(w).Encode(st)
}

// update changes a server's status and tools under m.mu, rebuilds the
// snapshot and announces the change.
func (m *Manager) update(name string, f func(st *ServerStatus), ts []tools.Tool, setTools bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	f(m.status[name])
	if setTools {
		if ts == nil {
			delete(m.perSrv, name)
		} else {
			m.perSrv[name] = ts
		}
		all := []tools.Tool{}
		for _, n := range slices.Sorted(maps.Keys(m.perSrv)) {
			all = append(all, m.perSrv[n]...)
		}
		m.snapshot.Store(&all)
	}
	close(m.changed)
	m.changed = make(chan struct{})
}

// Run connects every enabled server and keeps it connected until ctx is
// cancelled; then it closes the sessions (stopping stdio servers), waits
// for its goroutines and returns nil.
func (m *Manager) Run(ctx context.Context) error {
	var wg sync.WaitGroup
	for _, name := range slices.Sorted(maps.Keys(m.cfg.Servers)) {
		sc := m.cfg.Servers[name]
		if sc.Disabled {
			m.log.Info("mcp server disabled", "server", name)
			continue
		}
		wg.Go(func() { m.serve(ctx, name, sc) })
	}
	wg.Wait()
	for name := range m.cfg.Servers {
		m.update(name, func(st *ServerStatus) { st.Ready, st.Tools = false, 0 }, nil, true)
	}
	return nil
}

// serverLog is the log of one server: its secrets are hidden in every
// line, the SDK's and its stderr included.
func (m *Manager) serverLog(name string) *slog.Logger {
	return m.red[name].logger(m.log).With("server", name)
}

// serve keeps one server connected.
func (m *Manager) serve(ctx context.Context, name string, sc ServerConfig) {
	log := m.serverLog(name)
	// The schedule is not reset when a session ends after a while: a
	// server that keeps dropping is tried less and less often.
	_ = retry.Do(ctx, retry.Policy{
		Schedule: retry.Exponential(m.backoff, maxBackoff),
		OnRetry: func(_ int, wait time.Duration, err error) {
			m.update(name, func(st *ServerStatus) { st.Ready, st.Tools, st.Error = false, 0, err.Error() }, nil, true)
			log.Warn("mcp server unavailable; retrying", "err", err, "retry_in", wait)
		},
	}, func(ctx context.Context, _ int) error {
		m.update(name, func(st *ServerStatus) { st.Attempts++ }, nil, false)
		err := m.session(ctx, log, name, sc)
		if ctx.Err() != nil {
			return nil
		}
		return err
	})
}

// session connects once and serves the session until it ends (the error
// says why, with the server's secrets hidden) or ctx is cancelled (nil).
func (m *Manager) session(ctx context.Context, log *slog.Logger, name string, sc ServerConfig) error {
	return m.red[name].err(m.connect(ctx, log, name, sc))
}

// connect is session's work.
func (m *Manager) connect(ctx context.Context, log *slog.Logger, name string, sc ServerConfig) error {
	refresh := make(chan struct{}, 1)
	client := sdk.NewClient(m.impl, &sdk.ClientOptions{
		Logger:       log,
		Capabilities: &sdk.ClientCapabilities{},
		ToolListChangedHandler: func(context.Context, *sdk.ToolListChangedRequest) {
			select {
			case refresh <- struct{}{}:
			default:
			}
		},
	})
	transport, err := m.transport(log, sc)
	if err != nil {
		return err
	}
	cctx, cancel := context.WithTimeout(ctx, connectTimeout)
	cs, err := client.Connect(cctx, transport, nil)
	cancel()
	if err != nil {
		return fmt.Errorf("connect: %w", err)
	}
	ended := make(chan error, 1)
	go func() { ended <- cs.Wait() }()
	defer func() {
		_ = cs.Close()
		<-ended
	}()
	timeout := sc.Timeout
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	if err := m.listTools(ctx, log, name, cs, timeout); err != nil {
		return err
	}
	log.Info("mcp server ready", "tools", len(m.toolsOf(name)))
	for {
		select {
		case <-ctx.Done():
			return nil
		case err := <-ended:
			ended <- err // for the deferred wait
			if err == nil {
				err = fmt.Errorf("connection closed")
			}
			return fmt.Errorf("session ended: %w", err)
		case <-refresh:
			if err := m.listTools(ctx, log, name, cs, timeout); err != nil {
				return err
			}
			log.Info("mcp server tools changed", "tools", len(m.toolsOf(name)))
		}
	}
}

func (m *Manager) toolsOf(name string) []tools.Tool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.perSrv[name]
}

// listTools fetches the server's tools and publishes them.
func (m *Manager) listTools(ctx context.Context, log *slog.Logger, name string, cs *sdk.ClientSession, timeout time.Duration) error {
	lctx, cancel := context.WithTimeout(ctx, connectTimeout)
	defer cancel()
	var list []tools.Tool
	seen := map[string]string{}
	for t, err := range cs.Tools(lctx, nil) {
		if err != nil {
			return fmt.Errorf("list tools: %w", err)
		}
		rt, err := newRemoteTool(name, t, cs, timeout, m.red[name])
		if err != nil {
			log.Warn("mcp tool skipped", "err", err)
			continue
		}
		if other, dup := seen[rt.name]; dup {
			log.Warn("mcp tool skipped: its name collides with another tool of the server", "tool", t.Name, "name", rt.name, "other", other)
			continue
		}
		if err := tools.ValidateTool(rt); err != nil {
			log.Warn("mcp tool skipped", "tool", t.Name, "err", err)
			continue
		}
		seen[rt.name] = t.Name
		list = append(list, rt)
	}
	m.update(name, func(st *ServerStatus) { st.Ready, st.Tools, st.Error = true, len(list), "" }, list, true)
	return nil
}

// transport builds the SDK transport of a server.
func (m *Manager) transport(log *slog.Logger, sc ServerConfig) (sdk.Transport, error) {
	if sc.URL != "" {
		hc := &http.Client{Transport: headerTransport{headers: sc.Headers, base: http.DefaultTransport}}
		return &sdk.StreamableClientTransport{Endpoint: sc.URL, HTTPClient: hc, MaxRetries: -1}, nil
	}
	path, err := exec.LookPath(sc.Command)
	if err != nil {
		return nil, fmt.Errorf("command %q: %w", sc.Command, err)
	}
	cmd := exec.Command(path, sc.Args...)
	env := tools.ScrubEnv(m.environ(), nil)
	for _, k := range slices.Sorted(maps.Keys(sc.Env)) {
		env = append(env, k+"="+sc.Env[k])
	}
	cmd.Env = env
	cmd.Stderr = &logWriter{log: log}
	return &sdk.CommandTransport{Command: cmd, TerminateDuration: stdioTerminate}, nil
}

// headerTransport adds configured headers to every request.
type headerTransport struct {
	headers map[string]string
	base    http.RoundTripper
}

func (h headerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	if len(h.headers) == 0 {
		return h.base.RoundTrip(r)
	}
	r = r.Clone(r.Context())
	for k, v := range h.headers {
		r.Header.Set(k, v)
	}
	return h.base.RoundTrip(r)
}

// logWriter logs a stdio server's stderr, line by line, at debug level.
type logWriter struct {
	log *slog.Logger
	mu  sync.Mutex
	buf []byte
}

func (w *logWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf = append(w.buf, p...)
	for {
		i := strings.IndexByte(string(w.buf), '\n')
		if i < 0 {
			break
		}
		if line := strings.TrimSpace(string(w.buf[:i])); line != "" {
			w.log.Debug("mcp server stderr", "line", truncate(line, 500))
		}
		w.buf = w.buf[i+1:]
	}
	if len(w.buf) > 4096 {
		w.log.Debug("mcp server stderr", "line", truncate(string(w.buf), 500))
		w.buf = w.buf[:0]
	}
	return len(p), nil
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return strings.ToValidUTF8(s[:n], "") + "…"
}

var _ io.Writer = (*logWriter)(nil)

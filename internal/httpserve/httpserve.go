// Package httpserve is how the daemon serves HTTP: every listener it opens
// (the OpenAI-compatible API, the web console, the admin server, Slack's
// Events API in http mode, the Telegram webhook) is opened by
// [Servers.Listen] and served by [Servers.Serve] under one [Config] (YAML
// section "http"), so that no client, authenticated or not, can hold more
// of the process's file descriptors than the configured share.
//
// The bounds, per listener:
//
//   - a connection cap (max_conns) with a share per client address
//     (max_conns_per_ip; an IPv6 client is counted by its /64): a
//     connection over either is answered "503 Service Unavailable" with
//     the reason and closed at once, never queued. (A blocking accept,
//     as golang.org/x/net/netutil.LimitListener does it, would leave the
//     surplus in the kernel's accept queue, where each one still holds a
//     socket and the queue's slots, and legitimate clients wait behind
//     it: refusing at once gives the descriptor back and tells the client
//     why.) The cap is lowered to a sixteenth of the process's open-file
//     limit when it is larger, with a warning;
//   - read_header_timeout for a request's headers (and for a connection
//     that sends nothing), read_timeout for its headers and body,
//     idle_timeout between requests on a kept-alive connection,
//     max_header_bytes;
//   - keep-alive under pressure: once a listener holds three quarters of
//     its cap, every response closes its connection after it.
//
// There is no write timeout by default: server-sent event streams (the
// web console, streamed chat completions) last as long as their client
// listens. Go's server lifts the read deadline once a request's body has
// been read, so read_timeout does not end them either.
//
// The package imports nothing of the project, so every server may use it.
package httpserve

import (
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"sync"
	"time"

	"github.com/switchboard-chat/switchboard/internal/logging"
)

// Defaults and bounds of [Config].
const (
	DefaultMaxConns          = 512
	DefaultMaxConnsPerIP     = 128
	DefaultReadHeaderTimeout = 10 * time.Second
	DefaultReadTimeout       = time.Minute
	DefaultIdleTimeout       = time.Minute
	DefaultMaxHeaderBytes    = 64 << 10

	maxMaxConns       = 1 << 20
	minTimeout        = 100 * time.Millisecond
	maxHeaderTimeout  = 10 * time.Minute
	maxTimeout        = time.Hour
	minMaxHeaderBytes = 4 << 10
	maxMaxHeaderBytes = 1 << 20

	// fdShare: one listener keeps at most 1/fdShare of the process's
	// open-file limit.
	fdShare = 16
	// minClampedConns is the lowest cap the open-file limit lowers
	// max_conns to.
	minClampedConns = 8
)

// Config bounds every HTTP listener of the daemon (YAML section "http").
// Each listener has its own cap of MaxConns; the other values apply to
// every request. Start from [DefaultConfig].
type Config struct {
	// MaxConns is the most connections one listener keeps open; one more
	// is answered 503 and closed.
	MaxConns int `yaml:"max_conns"`
	// MaxConnsPerIP is the most connections one client address (an IPv6
	// client's /64) keeps open on one listener; one more is answered 503
	// and closed. Behind a reverse proxy every client has the proxy's
	// address: raise it to MaxConns there.
	MaxConnsPerIP int `yaml:"max_conns_per_ip"`
	// ReadHeaderTimeout bounds the wait for a request's headers, from the
	// connection's start or from the first byte of a later request.
	ReadHeaderTimeout time.Duration `yaml:"read_header_timeout"`
	// ReadTimeout bounds reading a whole request, headers and body.
	ReadTimeout time.Duration `yaml:"read_timeout"`
	// IdleTimeout is how long a kept-alive connection may wait for its
	// next request.
	IdleTimeout time.Duration `yaml:"idle_timeout"`
	// MaxHeaderBytes bounds a request's headers (431 beyond).
	MaxHeaderBytes int `yaml:"max_header_bytes"`
}

// DefaultConfig returns the documented defaults: 512 connections per
// listener, 128 per client address, 10 s for the headers, 1 min for the
// request, 1 min idle, 64 KiB of headers.
func DefaultConfig() Config {
	return Config{
		MaxConns:          DefaultMaxConns,
		MaxConnsPerIP:     DefaultMaxConnsPerIP,
		ReadHeaderTimeout: DefaultReadHeaderTimeout,
		ReadTimeout:       DefaultReadTimeout,
		IdleTimeout:       DefaultIdleTimeout,
		MaxHeaderBytes:    DefaultMaxHeaderBytes,
	}
}

// Validate reports every problem (errors.Join), each naming its key under
// http.
func (c Config) Validate() error {
	var errs []error
	if c.MaxConns < 1 || c.MaxConns > maxMaxConns {
		errs = append(errs, fmt.Errorf("http.max_conns: must be between 1 and %d, got %d", maxMaxConns, c.MaxConns))
	}
	if c.MaxConnsPerIP < 1 || c.MaxConnsPerIP > max(c.MaxConns, 1) {
		errs = append(errs, fmt.Errorf("http.max_conns_per_ip: must be between 1 and http.max_conns (%d), got %d", c.MaxConns, c.MaxConnsPerIP))
	}
	if c.ReadHeaderTimeout < minTimeout || c.ReadHeaderTimeout > maxHeaderTimeout {
		errs = append(errs, fmt.Errorf("http.read_header_timeout: must be between %s and %s, got %s", minTimeout, maxHeaderTimeout, c.ReadHeaderTimeout))
	}
	if c.ReadTimeout < c.ReadHeaderTimeout || c.ReadTimeout > maxTimeout {
		errs = append(errs, fmt.Errorf("http.read_timeout: must be between http.read_header_timeout (%s) and %s, got %s", c.ReadHeaderTimeout, maxTimeout, c.ReadTimeout))
	}
	if c.IdleTimeout < minTimeout || c.IdleTimeout > maxTimeout {
		errs = append(errs, fmt.Errorf("http.idle_timeout: must be between %s and %s, got %s", minTimeout, maxTimeout, c.IdleTimeout))
	}
	if c.MaxHeaderBytes < minMaxHeaderBytes || c.MaxHeaderBytes > maxMaxHeaderBytes {
		errs = append(errs, fmt.Errorf("http.max_header_bytes: must be between %d and %d, got %d", minMaxHeaderBytes, maxMaxHeaderBytes, c.MaxHeaderBytes))
	}
	return errors.Join(errs...)
}

// Servers opens and serves the daemon's HTTP listeners under one Config
// and counts each listener's connections, by name. Build it with [New]; a
// nil *Servers serves with [DefaultConfig] and counts for nobody. Safe for
// concurrent use.
type Servers struct {
	cfg Config // in force: MaxConns lowered to the open-file limit's share
	log *slog.Logger

	mu     sync.Mutex
	byName map[string]*counts
}

// New returns Servers for cfg (expected to have passed Validate). When
// cfg.MaxConns is more than a sixteenth of the process's open-file limit
// it is lowered to that share (max_conns_per_ip with it), and log says so.
// A nil log discards.
func New(cfg Config, log *slog.Logger) *Servers {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Servers{cfg: withinLimit(cfg, openFileLimit(), log), log: log, byName: map[string]*counts{}}
}

// withinLimit lowers cfg.MaxConns (and MaxConnsPerIP with it) to a
// sixteenth of the open-file limit (at least minClampedConns) when it is
// more, and logs that; a limit of 0 (unknown) changes nothing.
func withinLimit(cfg Config, limit int, log *slog.Logger) Config {
	if limit <= 0 {
		return cfg
	}
	if share := max(limit/fdShare, minClampedConns); cfg.MaxConns > share {
		log.Warn("http.max_conns lowered to a sixteenth of the process's open-file limit, so that HTTP clients cannot take the descriptors the bus and the store need",
			"max_conns", cfg.MaxConns, "open_file_limit", limit, "now", share)
		cfg.MaxConns = share
		cfg.MaxConnsPerIP = min(cfg.MaxConnsPerIP, share)
	}
	return cfg
}

// Config returns the configuration in force (after New lowered the cap).
func (s *Servers) Config() Config { return s.orDefault().cfg }

// orDefault is s, or for a nil s Servers of the defaults.
func (s *Servers) orDefault() *Servers {
	if s != nil {
		return s
	}
	return New(DefaultConfig(), nil)
}

// counts returns the counters of the listener name, made at its first
// use: a listener opened again under the same name (a channel restarted)
// keeps counting in them.
func (s *Servers) counts(name string) *counts {
	s.mu.Lock()
	defer s.mu.Unlock()
	c := s.byName[name]
	if c == nil {
		c = &counts{name: name, perIP: map[string]int{}, refusals: logging.Throttle{Every: refuseLogEvery}}
		s.byName[name] = c
	}
	return c
}

// Stat is one listener's connections.
type Stat struct {
	Listener string
	// Open is the connections open now, of MaxConns at most.
	Open, MaxConns int
	// RefusedFull counts the connections refused because the listener had
	// MaxConns open, RefusedPerIP those refused because their address had
	// MaxConnsPerIP open.
	RefusedFull, RefusedPerIP uint64
}

// Stats returns every listener opened so far, by name.
func (s *Servers) Stats() []Stat {
	if s == nil {
		return nil
	}
	s.mu.Lock()
	all := make([]*counts, 0, len(s.byName))
	for _, c := range s.byName {
		all = append(all, c)
	}
	s.mu.Unlock()
	out := make([]Stat, 0, len(all))
	for _, c := range all {
		st := c.stat()
		st.MaxConns = s.cfg.MaxConns
		out = append(out, st)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Listener < out[j].Listener })
	return out
}

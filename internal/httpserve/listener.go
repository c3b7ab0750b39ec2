package httpserve

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/switchboard-chat/switchboard/internal/clientaddr"
	"github.com/switchboard-chat/switchboard/internal/logging"
)

// Refusals: the body a refused connection gets, and how long writing it
// may take (a fresh socket's send buffer takes it at once).
const (
	refusedFullBody  = "this server has too many open connections; try again later\n"
	refusedPerIPBody = "too many open connections from your address; close idle ones or try again later\n"
	refuseWrite      = 100 * time.Millisecond
	// refuseLogEvery is the least time between two log lines about
	// refused connections of one listener.
	refuseLogEvery = 30 * time.Second
)

// counts are one listener's connection counters.
type counts struct {
	name string

	mu    sync.Mutex
	open  int
	perIP map[string]int // client key → open connections; absent: none

	refusedFull, refusedPerIP atomic.Uint64
	// refusals bounds the log lines about refused connections.
	refusals logging.Throttle
}

func (c *counts) stat() Stat {
	c.mu.Lock()
	open := c.open
	c.mu.Unlock()
	return Stat{Listener: c.name, Open: open, RefusedFull: c.refusedFull.Load(), RefusedPerIP: c.refusedPerIP.Load()}
}

// admit counts a new connection from key, or returns the body of its
// refusal when the listener (max) or the address (perIP) is full.
func (c *counts) admit(key string, maxConns, perIP int) (refusal string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case c.open >= maxConns:
		c.refusedFull.Add(1)
		return refusedFullBody
	case c.perIP[key] >= perIP:
		c.refusedPerIP.Add(1)
		return refusedPerIPBody
	}
	c.open++
	c.perIP[key]++
	return ""
}

// release forgets a connection admitted for key.
func (c *counts) release(key string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.open--
	if c.perIP[key]--; c.perIP[key] <= 0 {
		delete(c.perIP, key)
	}
}

// busy reports whether the listener holds three quarters of maxConns.
func (c *counts) busy(maxConns int) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.open*4 >= maxConns*3
}

// Listen opens a TCP listener on addr, named name in the counters and
// logs ("openai", "web", "admin", "slack", "telegram"), that admits at
// most MaxConns connections and MaxConnsPerIP from one client address:
// Accept answers a connection over either bound with a 503 saying why,
// closes it and waits for the next. Serve the listener with [Servers.Serve].
func (s *Servers) Listen(ctx context.Context, name, addr string) (net.Listener, error) {
	s = s.orDefault()
	ln, err := (&net.ListenConfig{}).Listen(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	return &listener{Listener: ln, c: s.counts(name), maxConns: s.cfg.MaxConns, perIP: s.cfg.MaxConnsPerIP, log: s.log}, nil
}

// listener is a bounded listener (Listen).
type listener struct {
	net.Listener
	c        *counts
	maxConns int
	perIP    int
	log      *slog.Logger
}

// Accept returns the next connection within the bounds; the ones over
// them are refused here, never returned.
func (l *listener) Accept() (net.Conn, error) {
	for {
		nc, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		key := clientKey(nc.RemoteAddr())
		if body := l.c.admit(key, l.maxConns, l.perIP); body != "" {
			l.refuse(nc, body)
			continue
		}
		return &conn{Conn: nc, release: func() { l.c.release(key) }}, nil
	}
}

// refuse answers nc with a 503 carrying body and closes it.
func (l *listener) refuse(nc net.Conn, body string) {
	_ = nc.SetWriteDeadline(time.Now().Add(refuseWrite))
	_, _ = fmt.Fprintf(nc, "HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain; charset=utf-8\r\n"+
		"Retry-After: 1\r\nConnection: close\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
	_ = nc.Close()
	if _, ok := l.c.refusals.Note(time.Now(), 1); ok {
		st := l.c.stat()
		l.log.Warn("HTTP connections refused: the listener or one client address holds too many (http.max_conns, http.max_conns_per_ip)",
			"listener", l.c.name, "open", st.Open, "refused_full", st.RefusedFull, "refused_per_ip", st.RefusedPerIP, "last_from", nc.RemoteAddr().String())
	}
}

// clientKey is what MaxConnsPerIP counts by (clientaddr.Key); a
// connection without an IP address counts by its address as given.
func clientKey(a net.Addr) string {
	if key, ok := clientaddr.OfConn(a); ok {
		return key
	}
	return a.String()
}

// conn is an admitted connection; closing it gives its place back.
type conn struct {
	net.Conn
	once    sync.Once
	release func()
}

func (c *conn) Close() error {
	c.once.Do(c.release)
	return c.Conn.Close()
}

// CloseWrite lets the HTTP server half-close the connection as it does a
// plain TCP one.
func (c *conn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}

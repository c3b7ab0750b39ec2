// Package httpservetest checks, from raw TCP sockets on loopback, that a
// server of the daemon is bounded the way package httpserve bounds it:
// each listener's test calls [CheckBounds] with a function that starts
// that server on Servers it is given.
package httpservetest

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/switchboard-chat/switchboard/internal/httpserve"
	"github.com/switchboard-chat/switchboard/internal/polltest"
)

// wait bounds every wait of the checks.
const wait = 20 * time.Second

// Start starts the server under test until the test ends, its listener
// opened with hs.Listen on 127.0.0.1, and returns its address.
type Start func(t *testing.T, hs *httpserve.Servers) (addr string)

// CheckBounds starts the server twice and proves, with raw connections,
// that its listener is the one named name and is bounded:
//
//   - "caps": a third connection from one address (max_conns_per_ip 2) and
//     a fifth in all (max_conns 4) are answered 503 and closed; a
//     response closes its connection while 3 of the 4 places are taken
//     and keeps it otherwise; headers over max_header_bytes get 431;
//   - "timeouts": a connection that sends nothing is closed after
//     read_header_timeout, a kept-alive one after idle_timeout, and one
//     whose body never comes after read_timeout.
func CheckBounds(t *testing.T, name string, start Start) {
	t.Run("caps", func(t *testing.T) {
		cfg := httpserve.DefaultConfig()
		cfg.MaxConns, cfg.MaxConnsPerIP, cfg.MaxHeaderBytes = 4, 2, 4<<10
		cfg.ReadHeaderTimeout, cfg.ReadTimeout = 5*time.Minute, 5*time.Minute // the held connections stay
		hs := httpserve.New(cfg, nil)
		addr := start(t, hs)
		checkCaps(t, hs, name, addr)
	})
	t.Run("timeouts", func(t *testing.T) {
		cfg := httpserve.DefaultConfig()
		cfg.ReadHeaderTimeout, cfg.ReadTimeout, cfg.IdleTimeout = 200*time.Millisecond, 300*time.Millisecond, 200*time.Millisecond
		addr := start(t, httpserve.New(cfg, nil))
		checkTimeouts(t, addr)
	})
}

func checkCaps(t *testing.T, hs *httpserve.Servers, name, addr string) {
	t.Helper()
	// One address over its share (connections are accepted in the order
	// they were made: the last is the one refused).
	conns := Dial(t, addr, "127.0.0.1", 3)
	ExpectRefused(t, conns, 1, "too many open connections from your address")
	waitStats(t, hs, name, func(s httpserve.Stat) bool { return s.Open == 2 && s.RefusedPerIP == 1 })
	closeAll(conns)
	waitStats(t, hs, name, func(s httpserve.Stat) bool { return s.Open == 0 })

	// The listener full, from addresses each within its share.
	conns = slices.Concat(Dial(t, addr, "127.0.0.2", 2), Dial(t, addr, "127.0.0.3", 2), Dial(t, addr, "127.0.0.4", 1))
	ExpectRefused(t, conns, 1, "this server has too many open connections")
	waitStats(t, hs, name, func(s httpserve.Stat) bool { return s.Open == 4 && s.RefusedFull == 1 })

	// Three places of four taken (with the one asking): no keep-alive.
	closeAll(conns[2:])
	conns = conns[:2]
	waitStats(t, hs, name, func(s httpserve.Stat) bool { return s.Open == 2 })
	if resp := Get(t, addr, "127.0.0.5", nil); !resp.Close {
		t.Errorf("a response with 3 of 4 connections open keeps its connection (status %d), want Connection: close", resp.StatusCode)
	}
	closeAll(conns)
	waitStats(t, hs, name, func(s httpserve.Stat) bool { return s.Open == 0 })
	if resp := Get(t, addr, "127.0.0.5", nil); resp.Close {
		t.Errorf("a response with 1 of 4 connections open closes its connection (status %d), want keep-alive", resp.StatusCode)
	}

	// Headers over max_header_bytes (Go allows 4 KiB over it).
	big := map[string]string{"X-Pad": strings.Repeat("a", 12<<10)}
	if resp := Get(t, addr, "127.0.0.6", big); resp.StatusCode != http.StatusRequestHeaderFieldsTooLarge {
		t.Errorf("12 KiB of headers (max_header_bytes 4 KiB) = %d, want 431", resp.StatusCode)
	}
}

func checkTimeouts(t *testing.T, addr string) {
	t.Helper()
	silent := Dial(t, addr, "127.0.0.1", 1)[0]
	if b := readToEOF(t, silent); len(b) != 0 {
		t.Errorf("a connection that sent nothing got %q before it was closed", b)
	}

	kept := Dial(t, addr, "127.0.0.1", 1)[0]
	fmt.Fprintf(kept, "GET / HTTP/1.1\r\nHost: test\r\n\r\n")
	br := bufio.NewReader(kept)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("a request on a kept-alive connection: %v", err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if b := readToEOF(t, readerConn{br, kept}); len(b) != 0 {
		t.Errorf("an idle kept-alive connection got %q before it was closed", b)
	}

	stalled := Dial(t, addr, "127.0.0.1", 1)[0]
	fmt.Fprintf(stalled, "POST / HTTP/1.1\r\nHost: test\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{")
	readToEOF(t, stalled) // what it answers, if anything, before it closes
}

// Dial opens n idle TCP connections from the loopback address from (any
// of 127.0.0.0/8) to addr; they are closed when the test ends.
func Dial(t *testing.T, addr, from string, n int) []net.Conn {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}, Timeout: wait}
	out := make([]net.Conn, 0, n)
	for range n {
		c, err := d.Dial("tcp", addr)
		if err != nil {
			t.Fatalf("dial %s from %s: %v", addr, from, err)
		}
		t.Cleanup(func() { _ = c.Close() })
		out = append(out, c)
	}
	return out
}

// ExpectRefused reads conns until want of them were answered 503 with a
// body containing reason and closed by the server; the others, held open
// by the server, are not read further.
func ExpectRefused(t *testing.T, conns []net.Conn, want int, reason string) {
	t.Helper()
	got := make(chan string, len(conns))
	for _, c := range conns {
		go func() {
			_ = c.SetReadDeadline(time.Now().Add(wait))
			b, err := io.ReadAll(c)
			if err != nil && len(b) == 0 {
				got <- "read error: " + err.Error()
				return
			}
			got <- string(b)
		}()
	}
	for i := range want {
		select {
		case b := <-got:
			if !strings.HasPrefix(b, "HTTP/1.1 503 ") || !strings.Contains(b, reason) {
				t.Fatalf("refused connection %d of %d got %q, want a 503 saying %q", i+1, want, b, reason)
			}
		case <-time.After(wait):
			t.Fatalf("%d of %d connections over the bound were refused within %s", i, want, wait)
		}
	}
	for _, c := range conns {
		_ = c.SetReadDeadline(time.Now()) // ends the readers of the connections held open
	}
}

// Get sends one GET / from a new connection from the loopback address
// from, with hdr, and returns the response (its body read).
func Get(t *testing.T, addr, from string, hdr map[string]string) *http.Response {
	t.Helper()
	c := Dial(t, addr, from, 1)[0]
	_ = c.SetDeadline(time.Now().Add(wait))
	var b strings.Builder
	b.WriteString("GET / HTTP/1.1\r\nHost: test\r\n")
	for k, v := range hdr {
		fmt.Fprintf(&b, "%s: %s\r\n", k, v)
	}
	b.WriteString("\r\n")
	if _, err := io.WriteString(c, b.String()); err != nil {
		t.Fatalf("GET / from %s: %v", from, err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("GET / from %s: %v", from, err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp
}

// waitStats waits until the listener name's counters satisfy ok.
func waitStats(t *testing.T, hs *httpserve.Servers, name string, ok func(httpserve.Stat) bool) {
	t.Helper()
	var last []httpserve.Stat
	polltest.Until(t, wait, 5*time.Millisecond, func() bool {
		last = hs.Stats()
		return len(last) == 1 && last[0].Listener == name && ok(last[0])
	}, func() string { return fmt.Sprintf("listener %q: counters %+v", name, last) })
}

// readToEOF reads c until the server closes it (failing the test when it
// does not within wait) and returns what came.
func readToEOF(t *testing.T, c net.Conn) []byte {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(wait))
	b, err := io.ReadAll(c)
	if err != nil {
		if ne, ok := err.(net.Error); ok && ne.Timeout() {
			t.Fatalf("the server kept the connection open for %s (got %q)", wait, b)
		}
	}
	return b
}

// readerConn reads through a bufio.Reader that has already read from the
// connection.
type readerConn struct {
	r *bufio.Reader
	net.Conn
}

func (c readerConn) Read(p []byte) (int, error) { return c.r.Read(p) }

func closeAll(conns []net.Conn) {
	for _, c := range conns {
		_ = c.Close()
	}
}

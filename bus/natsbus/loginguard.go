package natsbus

import (
	"log/slog"
	"net"
	"sync"
	"time"

	"golang.org/x/time/rate"

	"github.com/switchboard-chat/switchboard/internal/clientaddr"
	"github.com/switchboard-chat/switchboard/internal/logging"
)

// Failed logins to the embedded listener, per remote address (an IPv4
// address, or the /64 of an IPv6 one): nats-server has no throttle of its
// own, so a guesser could try thousands of credentials a second.
const (
	// LoginFailureBurst is how many failed logins a remote address may
	// have in a row before it is throttled.
	LoginFailureBurst = 10
	// LoginFailureRate is how many further failed logins per second a
	// remote address earns back. While it has none left, every login from
	// it is refused without its credentials being looked at, so a guess
	// that happens to be right is refused too.
	LoginFailureRate = 1
	// maxLoginPeers bounds the remote addresses remembered; beyond it the
	// ones that have earned back their whole burst are forgotten first.
	maxLoginPeers = 10_000
)

// loginGuard throttles the failed logins of each remote address and logs
// them, without what the client sent (a token typed as a user name would
// land in the log), at Warn, at most every [logging.DefaultThrottleEvery]. A
// successful login does not reset the count, so a bridge's valid
// credential cannot be used to keep guessing others. Connections without
// a remote address (the daemon's in-process ones) are never throttled.
// Safe for concurrent use.
type loginGuard struct {
	log *slog.Logger

	mu      sync.Mutex
	peers   map[string]*rate.Limiter
	refused logging.Throttle
}

func newLoginGuard(log *slog.Logger) *loginGuard {
	return &loginGuard{log: log, peers: map[string]*rate.Limiter{}}
}

// peerKey returns the throttled unit of a remote address
// (clientaddr.Key); ok is false for an in-process connection.
func peerKey(addr net.Addr) (string, bool) { return clientaddr.OfConn(addr) }

// allow reports whether a login from addr may be checked at all.
func (g *loginGuard) allow(addr net.Addr, now time.Time) bool {
	key, ok := peerKey(addr)
	if !ok {
		return true
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	lim := g.peers[key]
	return lim == nil || lim.TokensAt(now) >= 1
}

// failed counts a refused login from addr (throttled says it was refused
// unchecked) and logs it within the throttle; kind is the credential kind
// the client offered ("token", "user", "nkey" or "none"), never its value.
func (g *loginGuard) failed(addr net.Addr, kind string, throttled bool, now time.Time) {
	if key, ok := peerKey(addr); ok {
		g.mu.Lock()
		lim := g.peers[key]
		if lim == nil {
			g.forgetIdle(now)
			lim = rate.NewLimiter(LoginFailureRate, LoginFailureBurst)
			g.peers[key] = lim
		}
		lim.AllowN(now, 1)
		g.mu.Unlock()
	}
	if n, ok := g.refused.Note(now, 1); ok {
		g.log.Warn("nats login refused", "remote", remoteAddr(addr), "credential", kind, "throttled", throttled,
			"refused_since_last_line", n)
	}
}

// forgetIdle makes room in peers once it is full: the addresses that have
// earned back their whole burst go first, then (under a flood from very
// many addresses) any. Called with mu held.
func (g *loginGuard) forgetIdle(now time.Time) {
	if len(g.peers) < maxLoginPeers {
		return
	}
	for k, lim := range g.peers {
		if lim.TokensAt(now) >= LoginFailureBurst {
			delete(g.peers, k)
		}
	}
	for k := range g.peers {
		if len(g.peers) < maxLoginPeers {
			break
		}
		delete(g.peers, k)
	}
}

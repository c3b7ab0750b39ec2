package web

import (
	"container/list"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"time"

	"golang.org/x/time/rate"

	"github.com/switchboard-chat/switchboard/internal/clientaddr"
)

// Login rate limits. An address gets a burst of 10 attempts, then one
// every 6 seconds; a user name of allow_users a burst of 20, then one
// every 3 seconds, so one address alone never empties a user's bucket
// while many together still cannot guess a user's codes.
const (
	addrEvery, addrBurst = 6 * time.Second, 10
	userEvery, userBurst = 3 * time.Second, 20
	// maxLimited bounds the buckets kept of each kind; the least recently
	// used goes first.
	maxLimited = 4096
)

// loginLimits rate-limits logins per client address and per user name:
// a flood from one address (with made-up names or not) does not lock out
// a valid login from another. Safe for concurrent use; memory is bounded
// (maxLimited buckets of each kind).
type loginLimits struct {
	mu    sync.Mutex
	addrs *buckets
	users *buckets
}

func newLoginLimits() *loginLimits {
	return &loginLimits{addrs: newBuckets(addrEvery, addrBurst), users: newBuckets(userEvery, userBurst)}
}

// allowAddr spends one attempt of the client address addr.
func (l *loginLimits) allowAddr(addr string, now time.Time) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.addrs.get(addr).AllowN(now, 1)
}

// allowUser spends one attempt of the user name user (one of
// allow_users: names nobody may log in as get no bucket).
func (l *loginLimits) allowUser(user string, now time.Time) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.users.get(user).AllowN(now, 1)
}

// buckets are token buckets by key, the least recently used dropped past
// maxLimited (its key starts afresh: a full bucket).
type buckets struct {
	every time.Duration
	burst int
	byKey map[string]*list.Element
	lru   *list.List // of *bucket, most recently used first
}

type bucket struct {
	key string
	lim *rate.Limiter
}

func newBuckets(every time.Duration, burst int) *buckets {
	return &buckets{every: every, burst: burst, byKey: map[string]*list.Element{}, lru: list.New()}
}

func (b *buckets) get(key string) *rate.Limiter {
	if e, ok := b.byKey[key]; ok {
		b.lru.MoveToFront(e)
		return e.Value.(*bucket).lim
	}
	if b.lru.Len() >= maxLimited {
		old := b.lru.Back()
		b.lru.Remove(old)
		delete(b.byKey, old.Value.(*bucket).key)
	}
	bk := &bucket{key: key, lim: rate.NewLimiter(rate.Every(b.every), b.burst)}
	b.byKey[key] = b.lru.PushFront(bk)
	return bk.lim
}

// clientAddr is the address a login is counted against: the peer's IP
// (an IPv6 address by its /64, what one host usually holds), or, when the
// peer is a reverse proxy on the same host (a loopback address) that sent
// X-Forwarded-For, the last address of that header (the one the proxy
// saw).
func clientAddr(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		host = r.RemoteAddr
	}
	ip, err := netip.ParseAddr(host)
	if err != nil {
		return host
	}
	ip = ip.WithZone("").Unmap()
	if ip.IsLoopback() {
		if xff := r.Header.Values("X-Forwarded-For"); len(xff) > 0 {
			hops := strings.Split(xff[len(xff)-1], ",")
			if fwd, err := netip.ParseAddr(strings.TrimSpace(hops[len(hops)-1])); err == nil {
				ip = fwd.WithZone("").Unmap()
			}
		}
	}
	return clientaddr.Key(ip)
}

package natsbus

import (
	"sync"
	"time"
)

// logThrottle counts repeated events (rate-limited messages, a bridge's
// dropped flood, refused logins) so that they are logged at most once per
// interval, each line carrying the count since the previous one. The zero
// value logs at most once per [rateLimitLogEvery]. Safe for concurrent use.
type logThrottle struct {
	mu     sync.Mutex
	n      int
	logged time.Time
}

// note counts n events at now and reports whether to log now, with the
// count since the last line.
func (t *logThrottle) note(now time.Time, n int) (count int, log bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.n += n
	if now.Sub(t.logged) < rateLimitLogEvery {
		return 0, false
	}
	count, t.n, t.logged = t.n, 0, now
	return count, true
}

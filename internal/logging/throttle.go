package logging

import (
	"sync"
	"time"
)

// DefaultThrottleEvery is the interval of a [Throttle] whose Every is not
// set.
const DefaultThrottleEvery = 10 * time.Second

// Throttle counts repeated events (rate-limited messages, a flood's
// dropped messages, refused logins or connections) so that they are
// logged at most once per Every (default [DefaultThrottleEvery]): the
// first at once, then one line per interval carrying the count since the
// previous line. The zero value is ready; safe for concurrent use.
type Throttle struct {
	Every time.Duration

	mu     sync.Mutex
	n      int
	logged time.Time
}

// Note counts n events at now and reports whether to log now, with the
// count since the last line.
func (t *Throttle) Note(now time.Time, n int) (count int, log bool) {
	every := t.Every
	if every <= 0 {
		every = DefaultThrottleEvery
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.n += n
	if !t.logged.IsZero() && now.Sub(t.logged) < every {
		return 0, false
	}
	count, t.n, t.logged = t.n, 0, now
	return count, true
}

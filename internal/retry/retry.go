// Package retry is the one retry/backoff mechanism of Switchboard. Every
// loop that tries again after a failure (the model client, the bridge kit's
// outbound handlers, the Telegram and Slack adapters, the MCP server
// manager) waits by a [Policy]: either through [Do], the loop itself, or
// through a [Backoff], the counter for loops that go on after a success
// (a long poll, a supervised server).
//
// The contract:
//
//   - A [Schedule] maps the retry number n (1 for the first retry, that is
//     the second attempt) to a wait. [Exponential] is the capped doubling
//     schedule; [Schedule.Jitter] adds up to a fraction of random extra so
//     that many clients do not retry in lockstep.
//   - A Policy adds what differs between loops: how many attempts, which
//     errors are worth another one, a wait the other side asked for (a
//     429's Retry-After) and how to sleep. Its zero value retries every
//     error at once, without bound.
//   - Waits are context-aware ([clock.Sleep] unless the policy says
//     otherwise): a cancelled ctx ends a wait at once and nothing sleeps
//     after it.
//   - Nothing here logs or keeps state across loops; a Backoff belongs to
//     one loop (one goroutine).
package retry

import (
	"context"
	"math/rand/v2"
	"time"

	"github.com/switchboard-chat/switchboard/internal/clock"
)

// Schedule returns the wait before retry number n (1-based). It must be
// safe for concurrent use.
type Schedule func(n int) time.Duration

// Exponential returns the schedule that waits initial before the first
// retry and doubles the wait on every further retry, up to limit. A limit
// below initial is raised to initial; an initial of zero or less never
// waits.
func Exponential(initial, limit time.Duration) Schedule {
	limit = max(limit, initial)
	return func(n int) time.Duration {
		if initial <= 0 {
			return 0
		}
		d := initial
		for i := 1; i < n && d < limit; i++ {
			if d > limit/2 {
				return limit
			}
			d *= 2
		}
		return min(d, limit)
	}
}

// Jitter returns s with up to frac × the wait of random extra added to each
// wait (frac 0.1: up to 10 % longer). A frac of zero or less returns s.
func (s Schedule) Jitter(frac float64) Schedule {
	if frac <= 0 {
		return s
	}
	return func(n int) time.Duration {
		d := s(n)
		if d <= 0 {
			return 0
		}
		return d + rand.N(time.Duration(float64(d)*frac)+1)
	}
}

// Policy says how a loop retries.
type Policy struct {
	// Schedule is the wait before retry n; nil waits nothing.
	Schedule Schedule
	// Attempts bounds the attempts, the first one included (1: no retry);
	// zero or less: no bound.
	Attempts int
	// Retryable reports whether err is worth another attempt; nil: every
	// error is.
	Retryable func(err error) bool
	// Delay, when set, decides the wait before retry n after err, given
	// the scheduled one: the hook for waits the other side asked for
	// (Retry-After, a 429's retry_after) and for schedules that depend on
	// the error. Nil keeps the schedule.
	Delay func(n int, err error, scheduled time.Duration) time.Duration
	// OnRetry, when set, is called by [Do] before each wait (logging,
	// health status).
	OnRetry func(n int, wait time.Duration, err error)
	// Sleep waits d or until ctx ends, returning ctx's error (wrapped or
	// not) then; nil: [clock.Sleep]. Tests record the waits instead.
	Sleep func(ctx context.Context, d time.Duration) error
}

// Backoff counts the retries of one loop under a policy. It is not safe for
// concurrent use.
type Backoff struct {
	p Policy
	n int // retries so far
}

// New returns a Backoff for p with no retry counted.
func New(p Policy) *Backoff { return &Backoff{p: p} }

// Next decides about another attempt after the failure err. When err is
// not retryable or the attempts are used up it returns false and counts
// nothing; otherwise it counts the retry and returns its number (1 for the
// first) and the wait before it.
func (b *Backoff) Next(err error) (n int, wait time.Duration, ok bool) {
	if b.p.Retryable != nil && !b.p.Retryable(err) {
		return b.n, 0, false
	}
	if b.p.Attempts > 0 && b.n+1 >= b.p.Attempts {
		return b.n, 0, false
	}
	b.n++
	if b.p.Schedule != nil {
		wait = b.p.Schedule(b.n)
	}
	if b.p.Delay != nil {
		wait = b.p.Delay(b.n, err, wait)
	}
	return b.n, max(wait, 0), true
}

// Retries returns the retries counted since New or the last Reset.
func (b *Backoff) Retries() int { return b.n }

// Reset starts the schedule over (after a success of a loop that goes on).
func (b *Backoff) Reset() { b.n = 0 }

// Sleep waits d with the policy's sleep; it returns the sleep's error when
// ctx ends first.
func (b *Backoff) Sleep(ctx context.Context, d time.Duration) error {
	if b.p.Sleep != nil {
		return b.p.Sleep(ctx, d)
	}
	return clock.Sleep(ctx, d)
}

// Do calls f (with the attempt number, 1 for the first) until it returns
// nil, an error that is not retryable, or the attempts are used up, or
// fails after ctx ended; before each retry it calls p.OnRetry and waits. It
// returns nil, f's last error, or the sleep's error (ctx's) when ctx ends
// during a wait. ctx is not checked before an attempt: f gets it and ends
// early itself.
func Do(ctx context.Context, p Policy, f func(ctx context.Context, attempt int) error) error {
	b := New(p)
	for {
		err := f(ctx, b.n+1)
		if err == nil {
			return nil
		}
		if ctx.Err() != nil {
			return err
		}
		n, wait, ok := b.Next(err)
		if !ok {
			return err
		}
		if p.OnRetry != nil {
			p.OnRetry(n, wait, err)
		}
		if err := b.Sleep(ctx, wait); err != nil {
			return err
		}
	}
}

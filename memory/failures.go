package memory

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"
)

// DefaultFailureLogEvery is how often a [FailureLog] writes a line while a
// store keeps failing.
const DefaultFailureLogEvery = 30 * time.Second

// IsFailure reports whether err from a Store is a failure of the store
// itself (a write or read that did not happen: a full disk, an I/O error,
// a closed file, a timeout) rather than an answer about the data: nil,
// [ErrDuplicate], [ErrInvalid], [ErrNotFound] and a cancelled context are
// not failures.
func IsFailure(err error) bool {
	switch {
	case err == nil, errors.Is(err, ErrDuplicate), errors.Is(err, ErrInvalid),
		errors.Is(err, ErrNotFound), errors.Is(err, context.Canceled):
		return false
	}
	return true
}

// FailureLog logs a store's failures at most once per Every (default
// [DefaultFailureLogEvery]), however many messages they hit: the first
// failure at once, then one line per interval with the number of failures
// since the last line and the latest error. Messages a failure hits are not
// lost (the agent leaves them for redelivery), so a failing disk must not
// also flood the log. The zero value (with Log set) is ready; safe for
// concurrent use.
type FailureLog struct {
	Log   *slog.Logger
	Every time.Duration
	// Now is the clock (default time.Now).
	Now func() time.Time

	mu     sync.Mutex
	last   time.Time // when the last line was written
	unseen int       // failures since then
}

// Failed records a failure of operation op ("commit", "mark_published").
func (f *FailureLog) Failed(op string, err error) {
	every := f.Every
	if every <= 0 {
		every = DefaultFailureLogEvery
	}
	now := time.Now()
	if f.Now != nil {
		now = f.Now()
	}
	f.mu.Lock()
	f.unseen++
	if !f.last.IsZero() && now.Sub(f.last) < every {
		f.mu.Unlock()
		return
	}
	n := f.unseen
	f.last, f.unseen = now, 0
	f.mu.Unlock()
	if f.Log != nil {
		f.Log.Error("history store failing; the messages it hits are left for redelivery and answered once it works again",
			"op", op, "failures", n, "err", err, "next_report_in", every)
	}
}

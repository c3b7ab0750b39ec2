package retry_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"testing/synctest"
	"time"

	"go.uber.org/goleak"

	"github.com/switchboard-chat/switchboard/internal/retry"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestExponential(t *testing.T) {
	s := retry.Exponential(time.Second, time.Minute)
	var got []time.Duration
	for n := 1; n <= 9; n++ {
		got = append(got, s(n))
	}
	want := []time.Duration{1, 2, 4, 8, 16, 32, 60, 60, 60}
	for i := range want {
		want[i] *= time.Second
	}
	if !slices.Equal(got, want) {
		t.Errorf("Exponential(1s, 1m) = %v, want %v", got, want)
	}
	if got := s(0); got != time.Second {
		t.Errorf("s(0) = %s, want the first wait", got)
	}
	if got := retry.Exponential(5*time.Second, time.Second)(3); got != 5*time.Second {
		t.Errorf("a limit below initial: %s, want 5s", got)
	}
	if got := retry.Exponential(0, time.Minute)(10); got != 0 {
		t.Errorf("initial 0: %s, want 0", got)
	}
	huge := retry.Exponential(time.Second, time.Duration(1<<62))
	if got := huge(1000); got != time.Duration(1<<62) {
		t.Errorf("a huge limit overflowed: %s", got)
	}
}

func TestJitter(t *testing.T) {
	base := retry.Exponential(10*time.Second, time.Minute)
	if got := base.Jitter(0)(1); got != 10*time.Second {
		t.Errorf("Jitter(0) = %s, want 10s", got)
	}
	j := base.Jitter(0.1)
	seen := map[time.Duration]bool{}
	for range 200 {
		d := j(1)
		if d < 10*time.Second || d > 11*time.Second {
			t.Fatalf("Jitter(0.1)(1) = %s, want within [10s, 11s]", d)
		}
		seen[d] = true
	}
	if len(seen) < 2 {
		t.Errorf("Jitter(0.1) gave the same wait 200 times: %v", seen)
	}
	if got := retry.Exponential(0, 0).Jitter(0.5)(3); got != 0 {
		t.Errorf("jitter of a zero wait = %s, want 0", got)
	}
}

// recorder is a Sleep that records the waits and never blocks.
type recorder struct{ waits []time.Duration }

func (r *recorder) sleep(ctx context.Context, d time.Duration) error {
	r.waits = append(r.waits, d)
	return ctx.Err()
}

var errBoom = errors.New("boom")

func TestDoUntilSuccess(t *testing.T) {
	rec := &recorder{}
	var attempts, retries []int
	p := retry.Policy{
		Schedule: retry.Exponential(time.Second, 3*time.Second),
		OnRetry:  func(n int, _ time.Duration, _ error) { retries = append(retries, n) },
		Sleep:    rec.sleep,
	}
	err := retry.Do(t.Context(), p, func(_ context.Context, attempt int) error {
		attempts = append(attempts, attempt)
		if attempt < 5 {
			return errBoom
		}
		return nil
	})
	if err != nil {
		t.Fatalf("Do = %v, want nil", err)
	}
	if want := []int{1, 2, 3, 4, 5}; !slices.Equal(attempts, want) {
		t.Errorf("attempts %v, want %v", attempts, want)
	}
	if want := []int{1, 2, 3, 4}; !slices.Equal(retries, want) {
		t.Errorf("OnRetry numbers %v, want %v", retries, want)
	}
	if want := []time.Duration{time.Second, 2 * time.Second, 3 * time.Second, 3 * time.Second}; !slices.Equal(rec.waits, want) {
		t.Errorf("waits %v, want %v", rec.waits, want)
	}
}

func TestDoAttempts(t *testing.T) {
	for _, tc := range []struct{ attempts, calls int }{{1, 1}, {3, 3}} {
		rec := &recorder{}
		calls := 0
		err := retry.Do(t.Context(), retry.Policy{Attempts: tc.attempts, Sleep: rec.sleep}, func(context.Context, int) error {
			calls++
			return errBoom
		})
		if !errors.Is(err, errBoom) || calls != tc.calls || len(rec.waits) != tc.calls-1 {
			t.Errorf("Attempts %d: err %v, %d calls, %d waits; want errBoom, %d calls, %d waits",
				tc.attempts, err, calls, len(rec.waits), tc.calls, tc.calls-1)
		}
	}
}

func TestDoNotRetryable(t *testing.T) {
	permanent := errors.New("permanent")
	calls := 0
	rec := &recorder{}
	p := retry.Policy{Retryable: func(err error) bool { return !errors.Is(err, permanent) }, Sleep: rec.sleep}
	err := retry.Do(t.Context(), p, func(context.Context, int) error {
		calls++
		if calls == 3 {
			return permanent
		}
		return errBoom
	})
	if !errors.Is(err, permanent) || calls != 3 || len(rec.waits) != 2 {
		t.Errorf("err %v after %d calls and %d waits; want the permanent error after 3 calls, 2 waits", err, calls, len(rec.waits))
	}
}

// TestDoDelay: the Delay hook sees the retry number, the error and the
// scheduled wait, and its answer is the wait (a server-told Retry-After).
func TestDoDelay(t *testing.T) {
	type told struct{ error }
	rec := &recorder{}
	p := retry.Policy{
		Schedule: retry.Exponential(time.Second, time.Minute),
		Delay: func(n int, err error, scheduled time.Duration) time.Duration {
			if _, ok := errors.AsType[told](err); ok {
				return 42 * time.Second
			}
			if n == 3 && scheduled != 4*time.Second {
				t.Errorf("Delay(3) got scheduled %s, want 4s", scheduled)
			}
			return scheduled
		},
		Sleep: rec.sleep,
	}
	_ = retry.Do(t.Context(), p, func(_ context.Context, attempt int) error {
		switch attempt {
		case 2:
			return told{errBoom}
		case 4:
			return nil
		}
		return errBoom
	})
	if want := []time.Duration{time.Second, 42 * time.Second, 4 * time.Second}; !slices.Equal(rec.waits, want) {
		t.Errorf("waits %v, want %v", rec.waits, want)
	}
}

// TestDoCancelledWait: the default sleep (clock.Sleep) ends a wait when ctx
// ends; Do returns ctx's error and calls f no more. Time is synctest's.
func TestDoCancelledWait(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithCancel(t.Context())
		start := time.Now()
		time.AfterFunc(90*time.Second, cancel)
		calls := 0
		err := retry.Do(ctx, retry.Policy{Schedule: retry.Exponential(time.Minute, time.Hour)}, func(context.Context, int) error {
			calls++
			return errBoom
		})
		if !errors.Is(err, context.Canceled) {
			t.Errorf("Do = %v, want context.Canceled", err)
		}
		// Waits of 1m then 2m: the second is cut at 90s.
		if calls != 2 || time.Since(start) != 90*time.Second {
			t.Errorf("%d calls, returned after %s; want 2 calls, 90s", calls, time.Since(start))
		}
	})
}

// TestDoFailureAfterCancel: a failure once ctx has ended is returned, not
// retried.
func TestDoFailureAfterCancel(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	rec := &recorder{}
	calls := 0
	err := retry.Do(ctx, retry.Policy{Sleep: rec.sleep}, func(context.Context, int) error {
		calls++
		cancel()
		return errBoom
	})
	if !errors.Is(err, errBoom) || calls != 1 || len(rec.waits) != 0 {
		t.Errorf("err %v, %d calls, %d waits; want errBoom, 1 call, no wait", err, calls, len(rec.waits))
	}
}

func TestBackoffReset(t *testing.T) {
	b := retry.New(retry.Policy{Schedule: retry.Exponential(time.Second, time.Minute), Attempts: 3})
	var waits []time.Duration
	for range 3 {
		_, w, ok := b.Next(errBoom)
		if ok {
			waits = append(waits, w)
		}
	}
	if want := []time.Duration{time.Second, 2 * time.Second}; !slices.Equal(waits, want) || b.Retries() != 2 {
		t.Errorf("waits %v, retries %d; want %v, 2 (Attempts 3 allows two retries)", waits, b.Retries(), want)
	}
	b.Reset()
	if n, w, ok := b.Next(errBoom); !ok || n != 1 || w != time.Second {
		t.Errorf("after Reset: Next = %d, %s, %v; want 1, 1s, true", n, w, ok)
	}
}

func TestBackoffSleep(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := retry.New(retry.Policy{})
		start := time.Now()
		if err := b.Sleep(t.Context(), 5*time.Second); err != nil || time.Since(start) != 5*time.Second {
			t.Errorf("Sleep(5s) = %v after %s; want nil after 5s", err, time.Since(start))
		}
	})
}

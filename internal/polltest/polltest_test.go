package polltest

import (
	"sync/atomic"
	"testing"
	"time"
)

func TestUntilReturnsOnceTrue(t *testing.T) {
	var n atomic.Int32
	Until(t, 10*time.Second, time.Millisecond, func() bool { return n.Add(1) >= 3 }, func() string { return "never" })
	if n.Load() != 3 {
		t.Errorf("cond called %d times, want 3", n.Load())
	}
}

type recorder struct {
	testing.TB
	failed string
}

func (r *recorder) Helper()           {}
func (r *recorder) Fatal(args ...any) { r.failed = args[0].(string); panic(r) }

func TestUntilFailsAtTheDeadline(t *testing.T) {
	r := &recorder{TB: t}
	func() {
		defer func() {
			if p := recover(); p != r {
				t.Fatalf("Until did not fail the test: %v", p)
			}
		}()
		Until(r, 20*time.Millisecond, time.Millisecond, func() bool { return false }, func() string { return "still false" })
	}()
	if r.failed != "still false" {
		t.Errorf("failure = %q", r.failed)
	}
}

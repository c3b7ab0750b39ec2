// Package polltest waits, in tests, on state that announces no event (a
// consumer the server created, a listener that came up, what a stream
// holds, goroutines that ended): it looks again every so often until the
// condition holds or a deadline passes. Wait on an event where there is
// one; this is the one polling loop for where there is none.
package polltest

import (
	"testing"
	"time"
)

// Until calls cond every interval until it returns true. When timeout
// passes first it fails t with what() (called only then, so it may
// describe the state it finds).
func Until(t testing.TB, timeout, every time.Duration, cond func() bool, what func() string) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	tick := time.NewTicker(every)
	defer tick.Stop()
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal(what())
		}
		<-tick.C
	}
}

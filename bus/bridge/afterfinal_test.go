package bridge

import (
	"context"
	"testing"

	"github.com/switchboard-chat/switchboard/bus"
)

// staleAfterFinal publishes, after the final of turn m1 was handled, what a
// durable consumer hands over again when the server lost its
// acknowledgements in a crash: m1's typing and delta, published before its
// final; then the final of m2, which marks the end.
func staleAfterFinal(t *testing.T, e *env, rec *recorder) {
	t.Helper()
	e.publishOut(t, out("f1", "c1", "", "m1", bus.KindReply, 3, true))
	rec.waitN(t, 1)
	e.publishOut(t, out("t1", "c1", "", "m1", bus.KindTyping, 1, false))
	e.publishOut(t, out("d1", "c1", "", "m1", bus.KindDelta, 2, false))
	e.publishOut(t, out("t2", "c1", "", "m2", bus.KindTyping, 1, false))
	e.publishOut(t, out("f2", "c1", "", "m2", bus.KindReply, 2, true))
}

// TestConsumeDropsTypingAndDeltaAfterFinal: nothing follows a final at the
// handler: a typing or delta message of a turn whose final the handler
// was given is acknowledged without calling it; another turn's are handed
// over.
func TestConsumeDropsTypingAndDeltaAfterFinal(t *testing.T) {
	e := newEnv(t)
	c := e.newClient(t, Options{})
	ready(t, c)
	rec := newRecorder()
	startConsume(t, c, func(_ context.Context, o bus.Outbound) error { rec.add(o); return nil })
	staleAfterFinal(t, e, rec)
	e.waitSettled(t, "bridge_tg")
	// m2's typing may be coalesced into its final (queued behind it).
	all := ids(rec.all())
	if want := []string{"f1", "t2", "f2"}; len(all) == 2 {
		want = []string{"f1", "f2"}
		if all[0] != want[0] || all[1] != want[1] {
			t.Fatalf("handled %v, want %v: m1's typing and delta came after its final", all, want)
		}
	} else if len(all) != 3 || all[0] != want[0] || all[1] != want[1] || all[2] != want[2] {
		t.Fatalf("handled %v, want %v: m1's typing and delta came after its final", all, want)
	}
}

// TestSubscribeDropsTypingAndDeltaAfterFinal is the same over a core
// subscription.
func TestSubscribeDropsTypingAndDeltaAfterFinal(t *testing.T) {
	e := newEnv(t)
	c := e.newClient(t, Options{})
	rec := newRecorder()
	ready := make(chan struct{})
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() {
		done <- c.Subscribe(ctx, Subscription{Outbound: func(_ context.Context, o bus.Outbound) error { rec.add(o); return nil },
			Ready: func() { close(ready) }})
	}()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Subscribe: %v", err)
		}
	}()
	waitClosed(t, ready, "the subscription")
	staleAfterFinal(t, e, rec)
	got := rec.waitN(t, 3)
	if all := ids(got); len(all) != 3 || all[0] != "f1" || all[1] != "t2" || all[2] != "f2" {
		t.Fatalf("handled %v, want f1, t2, f2: m1's typing and delta came after its final", all)
	}
}

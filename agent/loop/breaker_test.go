package loop

import (
	"strings"
	"testing"
)

func TestBreakerRules(t *testing.T) {
	var b breaker
	h := argsHash([]byte(`{"q": 1}`))
	if h != argsHash([]byte(`{ "q":1 }`)) {
		t.Fatal("argument hash is not canonical")
	}
	hints := 0
	for i := range 5 {
		if v, why := b.check("look", h); v != allow {
			t.Fatalf("call %d blocked: %s", i+1, why)
		}
		if b.record("look", h, true) {
			hints++
			if i != 2 {
				t.Fatalf("hint after call %d, want after the 3rd", i+1)
			}
		}
	}
	if hints != 1 {
		t.Fatalf("%d hints, want exactly 1", hints)
	}
	if v, why := b.check("look", h); v != block || !strings.Contains(why, "5 times") {
		t.Fatalf("6th identical call: %v %q", v, why)
	}
	// A blocked call is recorded as a failure; one more identical call
	// stops the run. Rolled-back duplicates (note) count like run ones.
	b.record("look", h, false)
	if v, why := b.check("look", h); v != halt || !strings.Contains(why, "told to stop") {
		t.Fatalf("identical call after the block: %v %q", v, why)
	}
	var n breaker
	n.record("look", h, true)
	for range 4 {
		n.note("look", h, true)
	}
	if v, why := n.check("look", h); v != block || !strings.Contains(why, "Stop calling it") {
		t.Fatalf("after 1 run and 4 rolled-back duplicates: %v %q", v, why)
	}
	// Another call in between breaks the chain.
	b.record("other", h, true)
	if v, _ := b.check("look", h); v != allow {
		t.Fatal("chain not broken by another call")
	}

	var f breaker
	for range 3 {
		f.record("w", h, false)
	}
	if v, why := f.check("w", h); v != block || !strings.Contains(why, "3 times") {
		t.Fatalf("same args after 3 failures: %v %q", v, why)
	}
	var g breaker
	for i := range 6 {
		g.record("w", argsHash([]byte{byte('a' + i)}), false)
	}
	if v, _ := g.check("w", argsHash([]byte("new"))); v != block {
		t.Fatal("6 failures of a tool must block it")
	}
	g.record("w", h, false)
	g.record("w", h, false)
	if v, _ := g.check("w", argsHash([]byte("other"))); v != abort {
		t.Fatal("8 failures of a tool must end the run")
	}
	// The window holds 50 calls.
	for range 60 {
		g.record("x", h, true)
	}
	if len(g.hist) != breakerWindow {
		t.Fatalf("history holds %d calls", len(g.hist))
	}
}

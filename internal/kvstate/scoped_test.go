package kvstate_test

import (
	"context"
	"maps"
	"slices"
	"testing"

	"github.com/switchboard-chat/switchboard/bus/bustest"
	"github.com/switchboard-chat/switchboard/internal/kvstate"
)

// TestScopedKeepsAgentsApart: main (scope "") and two agents write the
// same keys in one bucket; each reads, lists and watches its own only,
// and main's keys are the bucket's keys as they always were.
func TestScopedKeepsAgentsApart(t *testing.T) {
	s := bustest.StartServer(t)
	set, err := kvstate.Open(t.Context(), bustest.Connect(t, s), kvstate.Config{Prefix: "chat", Replicas: 1}, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	scopes := map[string]kvstate.Store{"": kvstate.Scoped(set.Memory, ""), "work": kvstate.Scoped(set.Memory, "work"), "pets": kvstate.Scoped(set.Memory, "pets")}
	for name, st := range scopes {
		if _, err := st.Put(ctx, "k1", []byte("v-"+name)); err != nil {
			t.Fatal(err)
		}
	}
	if _, _, err := scopes["work"].Modify(ctx, "k2", func([]byte, bool) ([]byte, error) { return []byte("w2"), nil }); err != nil {
		t.Fatal(err)
	}
	if v, _, ok, _ := set.Memory.Get(ctx, "k1"); !ok || string(v) != "v-" {
		t.Errorf("main's key in the bucket: %q %v, want its value unprefixed", v, ok)
	}
	for name, st := range scopes {
		v, _, ok, err := st.Get(ctx, "k1")
		if err != nil || !ok || string(v) != "v-"+name {
			t.Errorf("%q Get k1 = %q %v %v", name, v, ok, err)
		}
		all, err := st.All(ctx)
		if err != nil {
			t.Fatal(err)
		}
		want := []string{"k1"}
		if name == "work" {
			want = []string{"k1", "k2"}
		}
		if got := slices.Sorted(maps.Keys(all)); !slices.Equal(got, want) {
			t.Errorf("%q All keys %v, want %v", name, got, want)
		}
	}
	if _, _, ok, _ := scopes["pets"].Get(ctx, "k2"); ok {
		t.Error("pets reads work's k2")
	}

	wctx, cancel := context.WithCancel(ctx)
	var seen []string
	err = scopes[""].Watch(wctx, func(c kvstate.Change) {
		if c.Synced {
			cancel()
			return
		}
		seen = append(seen, c.Key+"="+string(c.Value))
	})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(seen, []string{"k1=v-"}) {
		t.Errorf("main's watch replayed %v, want its own k1 only", seen)
	}
}

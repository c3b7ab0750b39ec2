package telegram

import (
	"path/filepath"
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/switchboard-chat/switchboard/internal/kvstate"
)

// sharedState opens the daemon's channels bucket over a connection of its
// own, as one instance of the daemon would.
func sharedState(t *testing.T, e *env) kvstate.Store {
	t.Helper()
	nc, err := nats.Connect(e.nc.ConnectedUrl())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	set, err := kvstate.Open(t.Context(), nc, kvstate.Config{Prefix: "chat"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	return set.Channels
}

// Two instances share the offset (memory.store jetstream): instance A
// publishes updates 10 and 11 and stops (the lease moves) while stuck in
// update 12, before it could confirm 10 and 11 to Telegram; instance B,
// with a data_dir of its own, asks getUpdates for offset 12 at once, so
// nothing is processed twice and nothing skipped.
func TestSharedOffsetTakenOverByAnotherInstance(t *testing.T) {
	e := newEnv(t)
	release := e.addBatchWithStuckPhoto()
	a := run(t, e.newAdapter(t, e.config(), Deps{StatePath: filepath.Join(t.TempDir(), "telegram.db"), State: sharedState(t, e)}))
	e.waitPublished(t, 2)
	e.bot.waitN(t, "download", 1) // stuck in update 12
	if err := a.stop(t); err != nil {
		t.Fatalf("instance A: Run = %v", err)
	}
	before := len(e.bot.all("getUpdates"))
	release()

	b := run(t, e.newAdapter(t, e.config(), Deps{StatePath: filepath.Join(t.TempDir(), "telegram.db"), State: sharedState(t, e)}))
	reqs := e.bot.waitN(t, "getUpdates", before+1)
	if got := reqs[before].params.Get("offset"); got != "12" {
		t.Fatalf("instance B's first getUpdates asks offset %q, want 12 (one past A's last update)", got)
	}
	e.waitPublished(t, 5)
	getUpdatesWithOffset(t, e, 15)
	if err := b.stop(t); err != nil {
		t.Fatalf("instance B: Run = %v", err)
	}
	var ids []string
	for _, in := range e.in.All() {
		ids = append(ids, in.Subject+" "+in.Header.Get(nats.MsgIdHdr))
	}
	if len(ids) != 5 {
		t.Errorf("published %d times, want each of the 5 updates once: %q", len(ids), ids)
	}
}

package jsstore_test

import (
	"encoding/base64"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/nats-io/nats.go"

	"github.com/switchboard-chat/switchboard/memory"
	"github.com/switchboard-chat/switchboard/memory/jsstore"
	"github.com/switchboard-chat/switchboard/memory/memtest"
)

// TestConformance runs the Store conformance suite, each subtest on a
// fresh prefix of one server.
func TestConformance(t *testing.T) {
	srv := startServer(t, t.TempDir())
	nc := connect(t, srv.ClientURL())
	memtest.Run(t, func(t *testing.T) memory.Store {
		return openStore(t, nc, jsstore.Options{Prefix: freshPrefix()})
	})
}

func texts(msgs []memory.Message) []string {
	out := make([]string, len(msgs))
	for i, m := range msgs {
		out[i] = m.Text()
	}
	return out
}

// TestTwoInstancesRaceOneKey: two stores on their own connections commit
// the same inbound key for one session at the same moment, many times.
// Exactly one commit wins each round; the other gets ErrDuplicate and
// writes nothing.
func TestTwoInstancesRaceOneKey(t *testing.T) {
	srv := startServer(t, t.TempDir())
	prefix := freshPrefix()
	a := openStore(t, connect(t, srv.ClientURL()), jsstore.Options{Prefix: prefix})
	b := openStore(t, connect(t, srv.ClientURL()), jsstore.Options{Prefix: prefix})
	const sess, rounds = "telegram/race", 40
	for i := range rounds {
		recA := memtest.Turn(sess, fmt.Sprint(i), fmt.Sprint("u", i), "from a")
		recB := memtest.Turn(sess, fmt.Sprint(i), fmt.Sprint("u", i), "from b")
		var (
			wg   sync.WaitGroup
			errs [2]error
			go1  = make(chan struct{})
		)
		for j, c := range []struct {
			st  *jsstore.Store
			rec memory.TurnRecord
		}{{a, recA}, {b, recB}} {
			wg.Go(func() {
				<-go1
				errs[j] = c.st.CommitTurn(t.Context(), c.rec)
			})
		}
		close(go1)
		wg.Wait()
		wins := 0
		for _, err := range errs {
			switch {
			case err == nil:
				wins++
			case !errors.Is(err, memory.ErrDuplicate):
				t.Fatalf("round %d: CommitTurn = %v, want nil or ErrDuplicate", i, err)
			}
		}
		if wins != 1 {
			t.Fatalf("round %d: %d commits won (errors %v), want exactly 1", i, wins, errs)
		}
	}
	snap, err := b.Load(t.Context(), sess, 1000)
	if err != nil {
		t.Fatal(err)
	}
	if snap.Turns != rounds || len(snap.Messages) != 2*rounds {
		t.Fatalf("history holds %d turns, %d messages; want %d, %d", snap.Turns, len(snap.Messages), rounds, 2*rounds)
	}
	for i := 0; i < len(snap.Messages); i += 2 {
		if got := snap.Messages[i].Text(); got != fmt.Sprint("u", i/2) {
			t.Fatalf("message %d = %q, want u%d (turns out of order or doubled)", i, got, i/2)
		}
	}
}

// TestTwoInstancesInterleave: two stores write the same session in turn
// with different keys; each one's cached head goes stale after the other
// writes, and no turn is lost or overwritten.
func TestTwoInstancesInterleave(t *testing.T) {
	srv := startServer(t, t.TempDir())
	prefix := freshPrefix()
	stores := []*jsstore.Store{
		openStore(t, connect(t, srv.ClientURL()), jsstore.Options{Prefix: prefix}),
		openStore(t, connect(t, srv.ClientURL()), jsstore.Options{Prefix: prefix}),
	}
	const sess = "slack/C1"
	var want []string
	for i := range 10 {
		st := stores[i%2]
		if err := st.CommitTurn(t.Context(), memtest.Turn(sess, fmt.Sprint(i), fmt.Sprint("u", i), fmt.Sprint("r", i))); err != nil {
			t.Fatalf("commit %d on store %d: %v", i, i%2, err)
		}
		want = append(want, fmt.Sprint("u", i), fmt.Sprint("r", i))
	}
	// Both commit concurrently with distinct keys: both land, whole.
	var wg sync.WaitGroup
	for j, st := range stores {
		wg.Go(func() {
			if err := st.CommitTurn(t.Context(), memtest.Turn(sess, fmt.Sprint("c", j), "c", "c")); err != nil {
				t.Errorf("concurrent commit on store %d: %v", j, err)
			}
		})
	}
	wg.Wait()
	snap, err := stores[0].Load(t.Context(), sess, 100)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, texts(snap.Messages)[:20]); diff != "" {
		t.Errorf("history (-want +got):\n%s", diff)
	}
	if snap.Turns != 12 || len(snap.Messages) != 24 {
		t.Errorf("history holds %d turns, %d messages; want 12, 24", snap.Turns, len(snap.Messages))
	}
}

// TestRestart: close the store and stop the server, start both again on
// the same store folder: history, summary, receipts and their published
// mark are intact, and a duplicate is still refused.
func TestRestart(t *testing.T) {
	dir := t.TempDir()
	srv := startServer(t, dir)
	nc := connect(t, srv.ClientURL())
	st := openStore(t, nc, jsstore.Options{})
	const sess = "console/me"
	for i := range 5 {
		if err := st.CommitTurn(t.Context(), memtest.Turn(sess, fmt.Sprint(i), fmt.Sprint("u", i), fmt.Sprint("r", i))); err != nil {
			t.Fatal(err)
		}
	}
	if err := st.SetSummary(t.Context(), sess, "earlier"); err != nil {
		t.Fatal(err)
	}
	if err := st.MarkPublished(t.Context(), sess+":3"); err != nil {
		t.Fatal(err)
	}
	before, err := st.Load(t.Context(), sess, 3)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	nc.Close()
	stopServer(srv)

	srv = startServer(t, dir)
	st = openStore(t, connect(t, srv.ClientURL()), jsstore.Options{})
	after, err := st.Load(t.Context(), sess, 3)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(before, after); diff != "" {
		t.Errorf("snapshot changed across the restart (-before +after):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"u2", "r2", "u3", "r3", "u4", "r4"}, texts(after.Messages)); diff != "" || after.Summary != "earlier" || after.Turns != 5 {
		t.Errorf("after restart: summary %q, turns %d, texts diff:\n%s", after.Summary, after.Turns, diff)
	}
	r, ok, err := st.Receipt(t.Context(), sess+":3")
	if err != nil || !ok || !r.Published || r.Session != sess {
		t.Errorf("receipt after restart = %+v, %v, %v; want published, session %s", r, ok, err, sess)
	}
	if err := st.CommitTurn(t.Context(), memtest.Turn(sess, "1", "again", "x")); !errors.Is(err, memory.ErrDuplicate) {
		t.Errorf("commit of a key stored before the restart = %v, want ErrDuplicate", err)
	}
	if err := st.CommitTurn(t.Context(), memtest.Turn(sess, "5", "u5", "r5")); err != nil {
		t.Errorf("commit after restart = %v", err)
	}
}

// TestLoadReadsOnlyRecent: loading the last 3 turns of a 120-turn session
// asks the server for the head and 3 chunks, counted on the wire.
func TestLoadReadsOnlyRecent(t *testing.T) {
	srv := startServer(t, t.TempDir())
	nc := connect(t, srv.ClientURL())
	st := openStore(t, nc, jsstore.Options{Prefix: "recent"})
	const sess = "telegram/long"
	for i := range 120 {
		if err := st.CommitTurn(t.Context(), memtest.Turn(sess, fmt.Sprint(i), fmt.Sprint("u", i), fmt.Sprint("r", i))); err != nil {
			t.Fatal(err)
		}
	}
	spy := connect(t, srv.ClientURL())
	// A channel subscription: the connection's reader queues each message
	// in order, so after a flush every request sent before it is queued.
	seen := make(chan *nats.Msg, 1024)
	sub, err := spy.ChanSubscribe("$JS.API.>", seen)
	if err != nil {
		t.Fatal(err)
	}
	if err := spy.Flush(); err != nil {
		t.Fatal(err)
	}
	snap, err := st.Load(t.Context(), sess, 3)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"u117", "r117", "u118", "r118", "u119", "r119"}, texts(snap.Messages)); diff != "" || snap.Turns != 120 {
		t.Fatalf("Load(3): turns %d, texts (-want +got):\n%s", snap.Turns, diff)
	}
	// The server hands one connection's messages to the spy in the order
	// it read them: a marker published after Load returned on the store's
	// connection reaches the spy after every request Load made.
	if err := nc.Publish("$JS.API.zz-test-marker", nil); err != nil {
		t.Fatal(err)
	}
	n := 0
	timeout := time.After(10 * time.Second)
	for marker := false; !marker; {
		select {
		case m := <-seen:
			switch {
			case m.Subject == "$JS.API.zz-test-marker":
				marker = true
			case strings.Contains(m.Subject, "MSG.GET") || strings.Contains(m.Subject, "DIRECT.GET"):
				n++
			}
		case <-timeout:
			t.Fatalf("the marker never reached the spy (%d reads seen)", n)
		}
	}
	_ = sub.Unsubscribe()
	if n != 4 {
		t.Errorf("Load of 3 turns made %d message reads, want 4 (head + 3 chunks)", n)
	}
}

// TestLargeTurn: a turn larger than the server's max payload (an inline
// image of 3 MiB against 1 MiB) is stored in parts and reads back whole.
func TestLargeTurn(t *testing.T) {
	srv := startServer(t, t.TempDir())
	nc := connect(t, srv.ClientURL())
	st := openStore(t, nc, jsstore.Options{})
	img := base64.StdEncoding.EncodeToString([]byte(strings.Repeat("\x89PNG-pixels", 3<<20/11)))
	if int64(len(img)) <= nc.MaxPayload() {
		t.Fatalf("test image of %d bytes fits the max payload %d", len(img), nc.MaxPayload())
	}
	rec := memtest.Turn("telegram/img", "1", "look", "nice")
	rec.Messages[0].Blocks = append(rec.Messages[0].Blocks, memory.Block{Type: memory.BlockImage, MIME: "image/png", Data: img})
	if err := st.CommitTurn(t.Context(), rec); err != nil {
		t.Fatalf("CommitTurn of a large turn: %v", err)
	}
	if err := st.CommitTurn(t.Context(), memtest.Turn("telegram/img", "2", "u2", "r2")); err != nil {
		t.Fatal(err)
	}
	snap, err := st.Load(t.Context(), "telegram/img", 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(snap.Messages) != 4 || len(snap.Messages[0].Blocks) != 2 || snap.Messages[0].Blocks[1].Data != img {
		t.Fatalf("large turn did not read back whole: %d messages", len(snap.Messages))
	}
}

// TestUncommittedBatchInvisible: a writer that dies after sending part of
// its batch (no commit message) leaves nothing: the session reads empty
// and the key commits normally afterwards.
func TestUncommittedBatchInvisible(t *testing.T) {
	srv := startServer(t, t.TempDir())
	nc := connect(t, srv.ClientURL())
	st := openStore(t, nc, jsstore.Options{Prefix: "dead"})
	const sess = "telegram/dead"
	key := sess + ":1"
	tok := func(s string) string { return base64.RawURLEncoding.EncodeToString([]byte(s)) }
	// What CommitTurn sends before its commit message, by hand.
	for i, subj := range []string{"dead.history.m." + tok(sess) + ".1", "dead.history.r." + tok(key)} {
		m := nats.NewMsg(subj)
		m.Data = []byte(`[{"role":"user","blocks":[{"type":"text","text":"half"}],"turn_start":true}]`)
		m.Header.Set("Nats-Batch-Id", "dead-writer")
		m.Header.Set("Nats-Batch-Sequence", fmt.Sprint(i+1))
		if err := nc.PublishMsg(m); err != nil {
			t.Fatal(err)
		}
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	if snap, err := st.Load(t.Context(), sess, 10); err != nil || len(snap.Messages) != 0 || snap.Turns != 0 {
		t.Fatalf("Load after an uncommitted batch = %+v, %v; want empty", snap, err)
	}
	if _, ok, err := st.Receipt(t.Context(), key); ok || err != nil {
		t.Fatalf("Receipt after an uncommitted batch = %v, %v; want none", ok, err)
	}
	if err := st.CommitTurn(t.Context(), memtest.Turn(sess, "1", "whole", "ok")); err != nil {
		t.Fatalf("CommitTurn after an uncommitted batch = %v", err)
	}
	snap, err := st.Load(t.Context(), sess, 10)
	if err != nil || !cmp.Equal([]string{"whole", "ok"}, texts(snap.Messages)) {
		t.Fatalf("Load = %q, %v; want whole, ok", texts(snap.Messages), err)
	}
}

// TestPrefixesIsolated: two deployments on one server, same session and
// key, do not see each other.
func TestPrefixesIsolated(t *testing.T) {
	srv := startServer(t, t.TempDir())
	nc := connect(t, srv.ClientURL())
	a := openStore(t, nc, jsstore.Options{Prefix: "blue"})
	b := openStore(t, nc, jsstore.Options{Prefix: "green"})
	if err := a.CommitTurn(t.Context(), memtest.Turn("s", "1", "a", "a")); err != nil {
		t.Fatal(err)
	}
	if err := b.CommitTurn(t.Context(), memtest.Turn("s", "1", "b", "b")); err != nil {
		t.Fatalf("same key in another deployment = %v, want stored", err)
	}
	snap, err := b.Load(t.Context(), "s", 10)
	if err != nil || !cmp.Equal([]string{"b", "b"}, texts(snap.Messages)) {
		t.Fatalf("green history = %q, %v", texts(snap.Messages), err)
	}
	if _, err := jsstore.Open(t.Context(), nc, jsstore.Options{Prefix: "bad.prefix"}); err == nil {
		t.Error("Open accepted a prefix with a dot")
	}
}

// TestPruneSessions: idle sessions go with their chunks; receipts stay; a
// session pruned and written again starts empty.
func TestPruneSessions(t *testing.T) {
	srv := startServer(t, t.TempDir())
	nc := connect(t, srv.ClientURL())
	st := openStore(t, nc, jsstore.Options{Prefix: "prune"})
	for _, sess := range []string{"a", "b"} {
		for i := range 3 {
			if err := st.CommitTurn(t.Context(), memtest.Turn(sess, fmt.Sprint(i), "u", "r")); err != nil {
				t.Fatal(err)
			}
		}
	}
	snapB, _ := st.Load(t.Context(), "b", 1)
	// Everything before b's last activity is idle: a goes, b stays.
	snapA, _ := st.Load(t.Context(), "a", 1)
	if !snapA.LastActive.Before(snapB.LastActive) {
		t.Fatalf("a last active %v is not before b last active %v", snapA.LastActive, snapB.LastActive)
	}
	n, err := st.PruneSessions(t.Context(), snapB.LastActive)
	if err != nil || n != 1 {
		t.Fatalf("PruneSessions = %d, %v; want 1", n, err)
	}
	if snap, err := st.Load(t.Context(), "a", 10); err != nil || len(snap.Messages) != 0 || snap.Turns != 0 {
		t.Errorf("a after prune = %+v, %v", snap, err)
	}
	if snap, err := st.Load(t.Context(), "b", 10); err != nil || snap.Turns != 3 {
		t.Errorf("b after prune = %d turns, %v; want 3", snap.Turns, err)
	}
	if _, ok, _ := st.Receipt(t.Context(), "a:1"); !ok {
		t.Error("PruneSessions removed a receipt")
	}
	if err := st.CommitTurn(t.Context(), memtest.Turn("a", "new", "fresh", "start")); err != nil {
		t.Fatal(err)
	}
	if snap, err := st.Load(t.Context(), "a", 10); err != nil || !cmp.Equal([]string{"fresh", "start"}, texts(snap.Messages)) || snap.Turns != 1 {
		t.Errorf("a written again = %q (%d turns), %v", texts(snap.Messages), snap.Turns, err)
	}
	info, err := st.StreamInfo(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	// a: head + 1 chunk + 4 receipts; b: head + 3 chunks + 3 receipts.
	if info.State.Msgs != 6+7 {
		t.Errorf("stream holds %d messages after prune, want 13 (old chunks left behind?)", info.State.Msgs)
	}
}

package boltstore_test

import (
	"bufio"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/switchboard-chat/switchboard/memory/boltstore"
)

// lastTxID is the id of the last write transaction committed to the bbolt
// file at path (bbolt numbers them one by one in the file's meta page), read
// with bbolt itself on the closed file.
func lastTxID(t testing.TB, path string) int {
	t.Helper()
	db, err := bolt.Open(path, 0o600, &bolt.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	tx, err := db.Begin(false)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback() }()
	return tx.ID()
}

// TestTurnCostsOneWrite drives turns the way the agent's courier does —
// commit the turn with its receipt, publish, then mark the receipt
// published — one after the other (one chat). Each turn must cost one
// durable write transaction (one pair of fdatasyncs), not two: the mark
// rides along with the next write. After Close every mark is on disk.
func TestTurnCostsOneWrite(t *testing.T) {
	ctx := t.Context()
	path := filepath.Join(t.TempDir(), "history.db")
	s, err := boltstore.Open(path, boltstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	before := lastTxID(t, path)
	s, err = boltstore.Open(path, boltstore.Options{MarkDelay: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	const turns = 20
	for i := range turns {
		rec := benchTurn("tg/1", int64(i))
		if err := s.CommitTurn(ctx, rec); err != nil {
			t.Fatal(err)
		}
		if err := s.MarkPublished(ctx, rec.Receipt.Key); err != nil {
			t.Fatal(err)
		}
		// Read your writes: the mark shows at once.
		if r, ok, err := s.Receipt(ctx, rec.Receipt.Key); err != nil || !ok || !r.Published {
			t.Fatalf("Receipt(%s) after MarkPublished = %+v, %v, %v; want published", rec.Receipt.Key, r, ok, err)
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	// One transaction per turn, plus Open's (it makes sure the buckets
	// exist) and Close's, which writes the last mark.
	if got := lastTxID(t, path) - before; got > turns+2 {
		t.Errorf("%d turns (commit + mark published each) took %d write transactions; want at most %d", turns, got, turns+2)
	}
	s, err = boltstore.Open(path, boltstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for i := range turns {
		key := benchTurn("tg/1", int64(i)).Receipt.Key
		if r, ok, err := s.Receipt(ctx, key); err != nil || !ok || !r.Published {
			t.Errorf("after reopen, Receipt(%s) = %+v, %v, %v; want published", key, r, ok, err)
		}
	}
}

// TestMarkPublishedFlushedWithoutCommits: a mark made when no further
// commit follows (the chat went quiet) still reaches the disk on its own,
// after Options.MarkDelay, while the store stays open.
func TestMarkPublishedFlushedWithoutCommits(t *testing.T) {
	ctx := t.Context()
	path := filepath.Join(t.TempDir(), "history.db")
	s, err := boltstore.Open(path, boltstore.Options{MarkDelay: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	rec := benchTurn("tg/1", 1)
	if err := s.CommitTurn(ctx, rec); err != nil {
		t.Fatal(err)
	}
	committed := copyTxID(t, path)
	if err := s.MarkPublished(ctx, rec.Receipt.Key); err != nil {
		t.Fatal(err)
	}
	// The file (read through a copy: the store holds its lock) gets one
	// more transaction, the one that writes the mark.
	deadline := time.Now().Add(10 * time.Second)
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for copyTxID(t, path) == committed {
		if time.Now().After(deadline) {
			t.Fatal("the published mark was not written within 10s")
		}
		<-tick.C
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if got := lastTxID(t, path); got != committed+1 {
		t.Errorf("transactions after the commit: %d, want 1 (the mark)", got-committed)
	}
}

// copyTxID is lastTxID of a copy of the file at path (bbolt's lock is
// advisory: the bytes can be read while a store holds it).
func copyTxID(t testing.TB, path string) int {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	cp := filepath.Join(t.TempDir(), "copy.db")
	if err := os.WriteFile(cp, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return lastTxID(t, cp)
}

// procWChar is the bytes this process passed to write(2) and pwrite(2)
// so far (/proc/self/io), or -1 where that is not available.
func procWChar(t testing.TB) int64 {
	t.Helper()
	f, err := os.Open("/proc/self/io")
	if err != nil {
		return -1
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "wchar: "); ok {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
	}
	return -1
}

// TestCommitWritesOnlyTheNewMessages: what a commit writes to the file
// does not grow with the session's running summary (a summary of up to
// 6 KB is rewritten only when it changes, not with every turn).
func TestCommitWritesOnlyTheNewMessages(t *testing.T) {
	if procWChar(t) < 0 {
		t.Skip("no /proc/self/io on this system")
	}
	ctx := t.Context()
	written := func(summary string) int64 {
		s := openStore(t, filepath.Join(t.TempDir(), "history.db"))
		if err := s.CommitTurn(ctx, benchTurn("tg/1", 0)); err != nil {
			t.Fatal(err)
		}
		if summary != "" {
			if err := s.SetSummary(ctx, "tg/1", summary); err != nil {
				t.Fatal(err)
			}
		}
		before := procWChar(t)
		for i := range 20 {
			if err := s.CommitTurn(ctx, benchTurn("tg/1", int64(i+1))); err != nil {
				t.Fatal(err)
			}
		}
		return procWChar(t) - before
	}
	plain := written("")
	withSummary := written(strings.Repeat("- the user asked about the weather → assistant: sunny\n", 110))
	t.Logf("20 commits wrote %d bytes without a summary, %d with a 6 KB one", plain, withSummary)
	if withSummary > plain+plain/4 {
		t.Errorf("20 commits wrote %d bytes with a 6 KB summary, %d without; the summary must not be rewritten by every commit", withSummary, plain)
	}
}

// TestOpenMovesSummariesOutOfMeta: a file written before summaries had a
// bucket of their own (the summary inside the session's meta) keeps its
// summaries: Open moves them, and they survive the next commits.
func TestOpenMovesSummariesOutOfMeta(t *testing.T) {
	ctx := t.Context()
	path := filepath.Join(t.TempDir(), "history.db")
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	err = db.Update(func(tx *bolt.Tx) error {
		for _, name := range []string{"msgs", "sessions", "receipts", "pruning"} {
			if _, err := tx.CreateBucket([]byte(name)); err != nil {
				return err
			}
		}
		s := tx.Bucket([]byte("sessions"))
		if err := s.Put([]byte("tg/1"), []byte(`{"last":0,"start":0,"turns":0,"summary":"- the user likes tea","last_active":"2026-01-02T03:04:05Z"}`)); err != nil {
			return err
		}
		return s.Put([]byte("tg/2"), []byte(`{"last":0,"start":0,"turns":0,"last_active":"2026-01-02T03:04:05Z"}`))
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	s := openStore(t, path)
	if err := s.CommitTurn(ctx, benchTurn("tg/1", 1)); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = openStore(t, path)
	for sess, want := range map[string]string{"tg/1": "- the user likes tea", "tg/2": ""} {
		snap, err := s.Load(ctx, sess, 30)
		if err != nil || snap.Summary != want {
			t.Errorf("Load(%s) = summary %q, %v; want %q", sess, snap.Summary, err, want)
		}
	}
	infos, err := s.Sessions(ctx)
	if err != nil || len(infos) != 2 || infos[0].SummaryBytes != len("- the user likes tea") || infos[0].Messages != 2 {
		t.Errorf("Sessions = %+v, %v; want tg/1 with its summary and 2 messages, and tg/2", infos, err)
	}
}

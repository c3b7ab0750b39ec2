package boltstore_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"
	bolterrors "go.etcd.io/bbolt/errors"

	"github.com/switchboard-chat/switchboard/memory"
	"github.com/switchboard-chat/switchboard/memory/boltstore"
	"github.com/switchboard-chat/switchboard/memory/memtest"
)

// bigTurn is one record of n turns (2n messages) for session.
func bigTurn(session, id string, n int) memory.TurnRecord {
	rec := memtest.Turn(session, id, "u", "r")
	rec.Messages = nil
	for i := range n {
		t := memtest.Turn(session, fmt.Sprint(id, "-", i), fmt.Sprintf("question %s-%d", id, i), fmt.Sprintf("answer %s-%d", id, i))
		rec.Messages = append(rec.Messages, t.Messages...)
	}
	return rec
}

func countMsgs(t *testing.T, path, session string) int {
	t.Helper()
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: time.Second, ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	n := 0
	prefix := append([]byte(session), 0)
	if err := db.View(func(tx *bolt.Tx) error {
		c := tx.Bucket([]byte("msgs")).Cursor()
		for k, _ := c.Seek(prefix); k != nil && bytes.HasPrefix(k, prefix); k, _ = c.Next() {
			n++
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return n
}

func TestSetSummary(t *testing.T) {
	path := filepath.Join(t.TempDir(), "history.db")
	s := openStore(t, path)
	ctx := t.Context()
	for i := range 4 {
		if err := s.CommitTurn(ctx, memtest.Turn("s/1", fmt.Sprint(i), "u", "r")); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Compact(ctx, "s/1", "old summary", 2); err != nil {
		t.Fatal(err)
	}
	if err := s.SetSummary(ctx, "s/1", "- better summary"); err != nil {
		t.Fatal(err)
	}
	snap, err := s.Load(ctx, "s/1", 10)
	if err != nil || snap.Summary != "- better summary" || len(snap.Messages) != 4 || snap.Turns != 2 {
		t.Fatalf("Load after SetSummary = %+v, %v; want the new summary and the same 2 turns", snap, err)
	}
	if err := s.SetSummary(ctx, "s/none", "x"); !errors.Is(err, memory.ErrNotFound) {
		t.Errorf("SetSummary(unknown) = %v, want ErrNotFound", err)
	}
	if err := s.SetSummary(ctx, "", "x"); !errors.Is(err, memory.ErrInvalid) {
		t.Errorf("SetSummary(empty key) = %v, want ErrInvalid", err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.SetSummary(ctx, "s/1", "x"); !errors.Is(err, memory.ErrClosed) {
		t.Errorf("SetSummary after Close = %v", err)
	}
	s2 := openStore(t, path)
	if snap, _ := s2.Load(ctx, "s/1", 1); snap.Summary != "- better summary" {
		t.Errorf("summary after reopen = %q", snap.Summary)
	}
}

func TestExportAndSessions(t *testing.T) {
	s := openStore(t, filepath.Join(t.TempDir(), "history.db"))
	ctx := t.Context()
	// 1,300 turns = 2,600 messages: several export transactions.
	for r := range 13 {
		if err := s.CommitTurn(ctx, bigTurn("tg/1", fmt.Sprint(r), 100)); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Compact(ctx, "tg/1", "sum", 2); err != nil {
		t.Fatal(err)
	}
	if err := s.CommitTurn(ctx, memtest.Turn("tg/2", "a", "hi", "hello")); err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := s.Export(ctx, "tg/1", &buf); err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(&buf)
	n := 0
	for sc.Scan() {
		var m memory.Message
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			t.Fatalf("line %d is not a message: %v", n+1, err)
		}
		want := fmt.Sprintf("question %d-%d", n/200, n/2%100)
		if n%2 == 1 {
			want = fmt.Sprintf("answer %d-%d", n/200, n/2%100)
		}
		if m.Text() != want {
			t.Fatalf("line %d = %q, want %q (oldest first, whole history)", n+1, m.Text(), want)
		}
		n++
	}
	if n != 2600 {
		t.Errorf("exported %d messages, want 2600 (not just the context)", n)
	}
	if err := s.Export(ctx, "tg/none", &buf); !errors.Is(err, memory.ErrNotFound) {
		t.Errorf("Export(unknown) = %v, want ErrNotFound", err)
	}
	if err := s.Export(ctx, "tg/2", failingWriter{}); err == nil || !strings.Contains(err.Error(), "disk full") {
		t.Errorf("Export to a failing writer = %v", err)
	}
	infos, err := s.Sessions(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(infos) != 2 || infos[0].Key != "tg/1" || infos[0].Messages != 2600 || infos[0].Context != 4 || infos[0].Turns != 2 ||
		infos[0].SummaryBytes != 3 || infos[1].Key != "tg/2" || infos[1].Messages != 2 || infos[1].LastActive.IsZero() {
		t.Errorf("Sessions = %+v", infos)
	}
}

// chanHandler is a slog handler that sends every record to a channel.
type chanHandler chan slog.Record

func (h chanHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h chanHandler) Handle(_ context.Context, r slog.Record) error {
	h <- r
	return nil
}
func (h chanHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h chanHandler) WithGroup(string) slog.Handler      { return h }

type failingWriter struct{}

func (failingWriter) Write([]byte) (int, error) { return 0, errors.New("disk full") }

func TestReset(t *testing.T) {
	path := filepath.Join(t.TempDir(), "history.db")
	s := openStore(t, path)
	ctx := t.Context()
	// More messages than one delete transaction takes.
	for r := range 3 {
		if err := s.CommitTurn(ctx, bigTurn("tg/1", fmt.Sprint(r), 1000)); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.CommitTurn(ctx, memtest.Turn("tg/2", "keep", "u", "r")); err != nil {
		t.Fatal(err)
	}
	if err := s.SetSummary(ctx, "tg/1", "sum"); err != nil {
		t.Fatal(err)
	}
	if err := s.Reset(ctx, "tg/1"); err != nil {
		t.Fatal(err)
	}
	if snap, err := s.Load(ctx, "tg/1", 30); err != nil || snap.Summary != "" || len(snap.Messages) != 0 || snap.Turns != 0 {
		t.Errorf("Load after Reset = %+v, %v", snap, err)
	}
	if err := s.Export(ctx, "tg/1", &bytes.Buffer{}); !errors.Is(err, memory.ErrNotFound) {
		t.Errorf("Export after Reset = %v, want ErrNotFound", err)
	}
	// The stored answers went with the history.
	if _, ok, err := s.Receipt(ctx, "tg/1:0"); ok || err != nil {
		t.Errorf("receipt after Reset = %v, %v; want gone", ok, err)
	}
	if _, ok, _ := s.Receipt(ctx, "tg/2:keep"); !ok {
		t.Error("Reset removed another session's receipt")
	}
	if err := s.CommitTurn(ctx, memtest.Turn("tg/1", "new", "fresh", "start")); err != nil {
		t.Fatal(err)
	}
	snap, _ := s.Load(ctx, "tg/1", 30)
	if len(snap.Messages) != 2 || snap.Messages[0].Text() != "fresh" || snap.Turns != 1 {
		t.Errorf("new session after Reset = %+v", snap)
	}
	if err := s.Reset(ctx, "tg/none"); !errors.Is(err, memory.ErrNotFound) {
		t.Errorf("Reset(unknown) = %v, want ErrNotFound", err)
	}
	if snap, _ := s.Load(ctx, "tg/2", 30); len(snap.Messages) != 2 {
		t.Error("Reset touched another session")
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if n := countMsgs(t, path, "tg/1"); n != 2 {
		t.Errorf("%d messages of tg/1 on disk after Reset and one new turn, want 2", n)
	}
}

func TestPruneSessions(t *testing.T) {
	path := filepath.Join(t.TempDir(), "history.db")
	s := openStore(t, path)
	ctx := t.Context()
	if err := s.CommitTurn(ctx, bigTurn("old/1", "a", 6000)); err != nil { // 12,000 messages
		t.Fatal(err)
	}
	if err := s.CommitTurn(ctx, memtest.Turn("old/2", "a", "u", "r")); err != nil {
		t.Fatal(err)
	}
	snap, _ := s.Load(ctx, "old/2", 0)
	cutoff := snap.LastActive.Add(time.Nanosecond)
	for !time.Now().After(cutoff) { // the clock moves on before the next commit
	}
	if err := s.CommitTurn(ctx, memtest.Turn("new/1", "a", "u", "r")); err != nil {
		t.Fatal(err)
	}
	n, err := s.PruneSessions(ctx, cutoff)
	if err != nil || n != 2 {
		t.Fatalf("PruneSessions = %d, %v; want 2", n, err)
	}
	infos, _ := s.Sessions(ctx)
	if len(infos) != 1 || infos[0].Key != "new/1" {
		t.Errorf("sessions left = %+v", infos)
	}
	if _, ok, _ := s.Receipt(ctx, "old/1:a"); !ok {
		t.Error("PruneSessions deleted a receipt")
	}
	if n, err := s.PruneSessions(ctx, cutoff); err != nil || n != 0 {
		t.Errorf("second prune = %d, %v", n, err)
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := s.PruneSessions(cctx, time.Now()); !errors.Is(err, context.Canceled) {
		t.Errorf("PruneSessions with a cancelled ctx = %v", err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if n := countMsgs(t, path, "old/1"); n != 0 {
		t.Errorf("%d messages of a pruned session left on disk", n)
	}
}

func TestPruneResumesAfterCrash(t *testing.T) {
	path := filepath.Join(t.TempDir(), "history.db")
	s := openStore(t, path)
	ctx := t.Context()
	if err := s.CommitTurn(ctx, bigTurn("tg/1", "a", 10)); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	// As if a prune crashed after deleting the session's meta: the
	// messages 1..20 are still there, recorded for deletion.
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Update(func(tx *bolt.Tx) error {
		if err := tx.Bucket([]byte("sessions")).Delete([]byte("tg/1")); err != nil {
			return err
		}
		var b [8]byte
		binary.BigEndian.PutUint64(b[:], 20)
		return tx.Bucket([]byte("pruning")).Put([]byte("tg/1"), b[:])
	}); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	s = openStore(t, path)
	// The chat goes on: new messages start after the old ones.
	if err := s.CommitTurn(ctx, memtest.Turn("tg/1", "b", "after", "crash")); err != nil {
		t.Fatal(err)
	}
	snap, _ := s.Load(ctx, "tg/1", 30)
	if len(snap.Messages) != 2 || snap.Messages[0].Text() != "after" {
		t.Fatalf("Load mixes the old incarnation in: %+v", snap.Messages)
	}
	if _, err := s.PruneSessions(ctx, time.Time{}); err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := s.Export(ctx, "tg/1", &buf); err != nil || strings.Count(buf.String(), "\n") != 2 {
		t.Errorf("Export after resumed prune = %q, %v", buf.String(), err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if n := countMsgs(t, path, "tg/1"); n != 2 {
		t.Errorf("%d messages on disk, want the 2 new ones", n)
	}
}

func TestCompactFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "history.db")
	s := openStore(t, path)
	ctx := t.Context()
	for i := range 20 {
		if err := s.CommitTurn(ctx, bigTurn(fmt.Sprintf("tg/%d", i), "a", 200)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := boltstore.CompactFile(path, 50*time.Millisecond); !errors.Is(err, boltstore.ErrLocked) || !strings.Contains(err.Error(), "locked") {
		t.Errorf("CompactFile while the store is open = %v, want a lock error", err)
	}
	for i := range 19 {
		if err := s.Reset(ctx, fmt.Sprintf("tg/%d", i)); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	res, err := boltstore.CompactFile(path, 0)
	if err != nil {
		t.Fatal(err)
	}
	if res.After >= res.Before || res.After == 0 {
		t.Errorf("CompactFile %d -> %d bytes, want smaller", res.Before, res.After)
	}
	if _, err := os.Stat(path + ".compact"); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("temporary copy left behind: %v", err)
	}
	s = openStore(t, path)
	snap, err := s.Load(ctx, "tg/19", 1000)
	if err != nil || len(snap.Messages) != 400 {
		t.Errorf("after compaction: %d messages, %v", len(snap.Messages), err)
	}
	if err := s.CommitTurn(ctx, memtest.Turn("tg/19", "a", "u", "r")); !errors.Is(err, memory.ErrDuplicate) {
		t.Errorf("receipts lost in compaction: %v", err)
	}
	if _, err := boltstore.CompactFile(filepath.Join(t.TempDir(), "missing.db"), 0); err == nil {
		t.Error("CompactFile of a missing file succeeded")
	}
	if _, err := boltstore.CompactFile("", 0); err == nil {
		t.Error(`CompactFile("") succeeded`)
	}
}

// TestRetentionPrunesReceipts: memory.retention removes the stored
// answers older than it, not only the history, and keeps newer ones.
func TestRetentionPrunesReceipts(t *testing.T) {
	s := openStore(t, filepath.Join(t.TempDir(), "history.db"))
	ctx := t.Context()
	now := time.Now()
	for i, age := range []time.Duration{72 * time.Hour, 49 * time.Hour, 47 * time.Hour, time.Hour} {
		rec := memtest.Turn("tg/active", fmt.Sprint(i), "u", "r")
		rec.Receipt.Time = now.Add(-age)
		if err := s.CommitTurn(ctx, rec); err != nil {
			t.Fatal(err)
		}
	}
	sessions, receipts, err := memory.Pruner{Store: s, Retention: 48 * time.Hour, Now: func() time.Time { return now }}.PruneOnce(ctx)
	if err != nil || sessions != 0 || receipts != 2 {
		t.Fatalf("PruneOnce = %d sessions, %d receipts, %v; want 0, 2, nil", sessions, receipts, err)
	}
	for i, want := range []bool{false, false, true, true} {
		if _, ok, err := s.Receipt(ctx, fmt.Sprintf("tg/active:%d", i)); ok != want || err != nil {
			t.Errorf("receipt %d after retention: present %v, %v; want %v", i, ok, err, want)
		}
	}
	if snap, _ := s.Load(ctx, "tg/active", 100); snap.Turns != 4 {
		t.Errorf("the active session lost turns: %d, want 4", snap.Turns)
	}
}

func TestPruner(t *testing.T) {
	s := openStore(t, filepath.Join(t.TempDir(), "history.db"))
	ctx := t.Context()
	if err := s.CommitTurn(ctx, memtest.Turn("tg/1", "a", "u", "r")); err != nil {
		t.Fatal(err)
	}
	later := time.Now().Add(48 * time.Hour)
	sessions, receipts, err := memory.Pruner{Store: s, Retention: 24 * time.Hour, Now: func() time.Time { return later }}.PruneOnce(ctx)
	if err != nil || sessions != 1 || receipts != 1 {
		t.Errorf("PruneOnce = %d, %d, %v; want 1 session and 1 receipt", sessions, receipts, err)
	}

	if err := (memory.Pruner{Store: s}).Run(ctx); err != nil {
		t.Errorf("Run with nothing to prune = %v, want nil at once", err)
	}
	if err := (memory.Pruner{}).Run(ctx); err == nil {
		t.Error("Run without a store succeeded")
	}
	if err := (memory.Pruner{Store: s, Retention: -1}).Run(ctx); err == nil {
		t.Error("Run with a negative retention succeeded")
	}

	if err := s.CommitTurn(ctx, memtest.Turn("tg/2", "a", "u", "r")); err != nil {
		t.Fatal(err)
	}
	rctx, cancel := context.WithCancel(ctx)
	logged := make(chan slog.Record, 4)
	done := make(chan error, 1)
	go func() {
		done <- memory.Pruner{Store: s, Retention: time.Hour, Interval: time.Hour, Now: func() time.Time { return later },
			Log: slog.New(chanHandler(logged))}.Run(rctx)
	}()
	select {
	case r := <-logged:
		if r.Message != "pruned history" {
			t.Errorf("Run logged %q", r.Message)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not prune at once")
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Run = %v", err)
	}
	if infos, _ := s.Sessions(ctx); len(infos) != 0 {
		t.Errorf("sessions left after Run: %+v", infos)
	}
}

func TestOpenLockedIsErrLocked(t *testing.T) {
	path := filepath.Join(t.TempDir(), "history.db")
	openStore(t, path)
	_, err := boltstore.Open(path, boltstore.Options{LockTimeout: 20 * time.Millisecond})
	if !errors.Is(err, boltstore.ErrLocked) || !errors.Is(err, bolterrors.ErrTimeout) {
		t.Errorf("Open of a locked file = %v, want ErrLocked wrapping bbolt's timeout", err)
	}
}

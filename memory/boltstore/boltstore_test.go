package boltstore_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"
	"go.uber.org/goleak"

	"github.com/switchboard-chat/switchboard/memory"
	"github.com/switchboard-chat/switchboard/memory/boltstore"
	"github.com/switchboard-chat/switchboard/memory/memtest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func openStore(t *testing.T, path string) *boltstore.Store {
	t.Helper()
	s, err := boltstore.Open(path, boltstore.Options{})
	if err != nil {
		t.Fatalf("Open(%s) = %v", path, err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func TestConformance(t *testing.T) {
	memtest.Run(t, func(t *testing.T) memory.Store {
		return openStore(t, filepath.Join(t.TempDir(), "history.db"))
	})
}

func TestOpenCreatesParentFolders(t *testing.T) {
	path := filepath.Join(t.TempDir(), "a", "b", "history.db")
	openStore(t, path)
	if _, err := os.Stat(path); err != nil {
		t.Fatalf("data file not created: %v", err)
	}
}

func TestOpenRejectsBadOptions(t *testing.T) {
	dir := t.TempDir()
	for _, tt := range []struct {
		name string
		path string
		opts boltstore.Options
		want string
	}{
		{"empty path", "", boltstore.Options{}, "path is empty"},
		{"negative delay", filepath.Join(dir, "x.db"), boltstore.Options{MaxBatchDelay: -1}, "max_batch_delay"},
		{"negative timeout", filepath.Join(dir, "x.db"), boltstore.Options{LockTimeout: -1}, "lock_timeout"},
	} {
		if _, err := boltstore.Open(tt.path, tt.opts); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: Open = %v, want error mentioning %q", tt.name, err, tt.want)
		}
	}
	notADB := filepath.Join(dir, "junk.db")
	if err := os.WriteFile(notADB, []byte(strings.Repeat("junk", 2048)), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := boltstore.Open(notADB, boltstore.Options{}); err == nil {
		t.Error("Open of a file that is not a bbolt database succeeded")
	}
}

func TestDurableAcrossReopen(t *testing.T) {
	path := filepath.Join(t.TempDir(), "history.db")
	s := openStore(t, path)
	ctx := t.Context()
	for i := range 3 {
		if err := s.CommitTurn(ctx, memtest.Turn("telegram/1", fmt.Sprint(i), fmt.Sprint("u", i), fmt.Sprint("r", i))); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Compact(ctx, "telegram/1", "summary so far", 2); err != nil {
		t.Fatal(err)
	}
	if err := s.MarkPublished(ctx, "telegram/1:2"); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	s2 := openStore(t, path)
	snap, err := s2.Load(ctx, "telegram/1", 10)
	if err != nil {
		t.Fatal(err)
	}
	if snap.Summary != "summary so far" || snap.Turns != 2 || len(snap.Messages) != 4 || snap.Messages[0].Text() != "u1" {
		t.Errorf("after reopen: %+v", snap)
	}
	r, ok, err := s2.Receipt(ctx, "telegram/1:2")
	if err != nil || !ok || !r.Published {
		t.Errorf("receipt after reopen = %+v, %v, %v; want published", r, ok, err)
	}
	// Sequence numbers continue after reopen.
	if err := s2.CommitTurn(ctx, memtest.Turn("telegram/1", "3", "u3", "r3")); err != nil {
		t.Fatal(err)
	}
	if err := s2.CommitTurn(ctx, memtest.Turn("telegram/1", "0", "again", "again")); !errors.Is(err, memory.ErrDuplicate) {
		t.Errorf("duplicate of a receipt stored before reopen = %v, want ErrDuplicate", err)
	}
	snap, _ = s2.Load(ctx, "telegram/1", 10)
	var got []string
	for _, m := range snap.Messages {
		got = append(got, m.Text())
	}
	if strings.Join(got, ",") != "u1,r1,u2,r2,u3,r3" {
		t.Errorf("messages after reopen and commit = %v", got)
	}
}

func TestLockTimeout(t *testing.T) {
	path := filepath.Join(t.TempDir(), "history.db")
	openStore(t, path)
	_, err := boltstore.Open(path, boltstore.Options{LockTimeout: 50 * time.Millisecond})
	if err == nil {
		t.Fatal("second Open of a locked file succeeded")
	}
	if !strings.Contains(err.Error(), "data file "+path+" is locked by another process") {
		t.Errorf("second Open error = %q; want it to say the file is locked", err)
	}
}

// rawPut writes directly into a closed store's file, simulating corruption.
func rawPut(t *testing.T, path, bucket string, key, value []byte) {
	t.Helper()
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if err := db.Update(func(tx *bolt.Tx) error {
		return tx.Bucket([]byte(bucket)).Put(key, value)
	}); err != nil {
		t.Fatal(err)
	}
}

func msgKey(session string, seq uint64) []byte {
	k := append([]byte(session), 0, 0, 0, 0, 0, 0, 0, 0, 0)
	for i := 0; i < 8; i++ {
		k[len(session)+1+i] = byte(seq >> (56 - 8*i))
	}
	return k
}

func TestCorruptRecords(t *testing.T) {
	path := filepath.Join(t.TempDir(), "history.db")
	s := openStore(t, path)
	ctx := t.Context()
	for i := range 4 {
		if err := s.CommitTurn(ctx, memtest.Turn("s/1", fmt.Sprint(i), fmt.Sprint("u", i), fmt.Sprint("r", i))); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.CommitTurn(ctx, memtest.Turn("s/2", "x", "u", "r")); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	// Corrupt the first message of s/1 (turn 0), the receipt of s/1:3 and
	// the meta of s/2.
	rawPut(t, path, "msgs", msgKey("s/1", 1), []byte("{not json"))
	rawPut(t, path, "receipts", []byte("s/1:3"), []byte("garbage"))
	rawPut(t, path, "sessions", []byte("s/2"), []byte(`{"last":1,"start":5}`))

	s = openStore(t, path)
	// Loading the last 3 turns never touches the corrupted first message:
	// Load reads only what it returns.
	snap, err := s.Load(ctx, "s/1", 3)
	if err != nil || len(snap.Messages) != 6 {
		t.Fatalf("Load(3 turns) = %d messages, %v; want 6, nil", len(snap.Messages), err)
	}
	if _, err := s.Load(ctx, "s/1", 4); !errors.Is(err, memory.ErrInvalid) {
		t.Errorf("Load reaching a corrupted message = %v, want ErrInvalid", err)
	}
	if _, _, err := s.Receipt(ctx, "s/1:3"); !errors.Is(err, memory.ErrInvalid) {
		t.Errorf("Receipt of a corrupted record = %v, want ErrInvalid", err)
	}
	if err := s.MarkPublished(ctx, "s/1:3"); !errors.Is(err, memory.ErrInvalid) {
		t.Errorf("MarkPublished of a corrupted record = %v, want ErrInvalid", err)
	}
	if _, err := s.Load(ctx, "s/2", 1); !errors.Is(err, memory.ErrInvalid) {
		t.Errorf("Load with corrupted meta = %v, want ErrInvalid", err)
	}
	if err := s.CommitTurn(ctx, memtest.Turn("s/2", "y", "u", "r")); !errors.Is(err, memory.ErrInvalid) {
		t.Errorf("CommitTurn with corrupted meta = %v, want ErrInvalid", err)
	}
	// A failing commit in a batch does not break other sessions.
	if err := s.CommitTurn(ctx, memtest.Turn("s/3", "z", "u", "r")); err != nil {
		t.Errorf("CommitTurn of a healthy session = %v", err)
	}
	if _, ok, _ := s.Receipt(ctx, "s/2:y"); ok {
		t.Error("failed commit stored its receipt")
	}
	// Prune keeps undecodable receipts and still works.
	if n, err := s.PruneReceipts(ctx, time.Now().Add(time.Hour)); err != nil || n != 5 {
		t.Errorf("PruneReceipts = %d, %v; want 5 (all decodable receipts), nil", n, err)
	}
}

func TestLoadStopsAtContextStart(t *testing.T) {
	path := filepath.Join(t.TempDir(), "history.db")
	s := openStore(t, path)
	ctx := t.Context()
	for i := range 3 {
		if err := s.CommitTurn(ctx, memtest.Turn("s/1", fmt.Sprint(i), "old", "old")); err != nil {
			t.Fatal(err)
		}
	}
	rec := memtest.Turn("s/1", "new", "new", "new")
	rec.Fresh = true
	if err := s.CommitTurn(ctx, rec); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	// Corrupt every message before the context start: Load must not read them.
	for seq := uint64(1); seq <= 6; seq++ {
		rawPut(t, path, "msgs", msgKey("s/1", seq), []byte("corrupt"))
	}
	s = openStore(t, path)
	snap, err := s.Load(ctx, "s/1", 100)
	if err != nil || len(snap.Messages) != 2 || snap.Messages[0].Text() != "new" {
		t.Fatalf("Load = %+v, %v; want the 2 messages after the context start", snap, err)
	}
}

func TestPruneReceiptsManyChunks(t *testing.T) {
	s, err := boltstore.Open(filepath.Join(t.TempDir(), "history.db"), boltstore.Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := t.Context()
	old := time.Now().Add(-time.Hour)
	const n = 2500 // more than two prune chunks
	for i := range n {
		rec := memory.TurnRecord{
			Session: "p/1",
			Receipt: memory.Receipt{Key: fmt.Sprintf("p:%05d", i), Final: json.RawMessage(`{}`), Time: old},
		}
		if i%2 == 0 {
			rec.Receipt.Time = time.Now().Add(time.Hour)
		}
		if err := s.CommitTurn(ctx, rec); err != nil {
			t.Fatal(err)
		}
	}
	got, err := s.PruneReceipts(ctx, time.Now())
	if err != nil || got != n/2 {
		t.Fatalf("PruneReceipts = %d, %v; want %d", got, err, n/2)
	}
	for _, k := range []string{"p:00000", "p:01000", "p:02498"} {
		if _, ok, _ := s.Receipt(ctx, k); !ok {
			t.Errorf("receipt %s (newer) was pruned", k)
		}
	}
	for _, k := range []string{"p:00001", "p:01001", "p:02499"} {
		if _, ok, _ := s.Receipt(ctx, k); ok {
			t.Errorf("receipt %s (older) survived", k)
		}
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := s.PruneReceipts(cctx, time.Now()); !errors.Is(err, context.Canceled) {
		t.Errorf("PruneReceipts(canceled) = %v, want context.Canceled", err)
	}
}

func TestCloseWhileCommitting(t *testing.T) {
	s, err := boltstore.Open(filepath.Join(t.TempDir(), "history.db"), boltstore.Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	started := make(chan struct{}, 4)
	errs := make(chan error, 4)
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Go(func() {
			for i := 0; ; i++ {
				err := s.CommitTurn(context.Background(), memtest.Turn(fmt.Sprintf("c/%d", w), fmt.Sprint(i), "u", "r"))
				if i == 0 {
					started <- struct{}{}
				}
				if errors.Is(err, memory.ErrClosed) {
					return
				}
				if err != nil {
					errs <- err
					return
				}
			}
		})
	}
	for range 4 {
		<-started
	}
	if err := s.Close(); err != nil {
		t.Fatalf("Close() = %v", err)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Errorf("CommitTurn during Close = %v, want nil or ErrClosed", err)
	}
}

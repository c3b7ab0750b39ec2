package groupcommit_test

import (
	"errors"
	"fmt"
	"path/filepath"
	"runtime"
	"sync"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/switchboard-chat/switchboard/internal/groupcommit"
)

func open(t *testing.T) *bolt.DB {
	t.Helper()
	db, err := bolt.Open(filepath.Join(t.TempDir(), "g.db"), 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	if err := db.Update(func(tx *bolt.Tx) error { _, err := tx.CreateBucket([]byte("b")); return err }); err != nil {
		t.Fatal(err)
	}
	return db
}

func put(k string, txs chan<- int) func(*bolt.Tx) error {
	return func(tx *bolt.Tx) error {
		txs <- tx.ID()
		return tx.Bucket([]byte("b")).Put([]byte(k), []byte("v"))
	}
}

// A write alone commits at once, without waiting for company.
func TestAloneCommitsAtOnce(t *testing.T) {
	db := open(t)
	db.MaxBatchDelay = time.Hour // a lone write that waited for company would not return
	w := groupcommit.New(db)
	if err := w.Update(put("alone", make(chan int, 1))); err != nil {
		t.Fatal(err)
	}
}

// Writes that find others in progress share one transaction, every one
// of them durable when it returns; a failing write fails alone.
func TestConcurrentWritesShareATransaction(t *testing.T) {
	db := open(t)
	db.MaxBatchDelay = time.Hour
	const n = 16
	db.MaxBatchSize = n // the batch commits when all n joined
	w := groupcommit.New(db)
	txs := make(chan int, 4*n)

	// The first write holds the file until the n others are waiting.
	first := make(chan error, 1)
	go func() {
		first <- w.Update(func(tx *bolt.Tx) error {
			for w.InFlight() < n+1 {
				runtime.Gosched()
			}
			return tx.Bucket([]byte("b")).Put([]byte("first"), []byte("v"))
		})
	}()
	for w.InFlight() < 1 {
		runtime.Gosched()
	}
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range errs {
		wg.Go(func() {
			if i == 7 {
				errs[i] = w.Update(func(*bolt.Tx) error { return errors.New("refused") })
				return
			}
			errs[i] = w.Update(put(fmt.Sprint(i), txs))
		})
	}
	wg.Wait()
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	for i, err := range errs {
		if (i == 7) != (err != nil) {
			t.Errorf("write %d: %v", i, err)
		}
	}
	close(txs)
	ids := map[int]bool{}
	for id := range txs {
		ids[id] = true
	}
	// The batch ran once with all of them, then again without the failed
	// one (bbolt retries the others together): at most two transactions.
	if len(ids) > 2 {
		t.Errorf("%d writers used %d transactions", n-1, len(ids))
	}
	if err := db.View(func(tx *bolt.Tx) error {
		for i := range errs {
			if got := tx.Bucket([]byte("b")).Get([]byte(fmt.Sprint(i))); (i == 7) != (got == nil) {
				t.Errorf("key %d: %q", i, got)
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
}

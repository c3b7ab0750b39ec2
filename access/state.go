package access

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"

	bolt "go.etcd.io/bbolt"

	"github.com/switchboard-chat/switchboard/internal/kvstate"
)

// state is the pairing state but the issued hashes: small (at most
// MaxPending live codes, the approved users, the users told "too many
// pending"), so every decision reads and writes it whole.
type state struct {
	Pending  map[string]pendingRec  `json:"pending"`  // sha256(code) hex → request
	Approved map[string]approvedRec `json:"approved"` // "<channel>:<user>" → approval
	Told     map[string]int64       `json:"told"`     // "<channel>:<user>" → unix seconds told "too many pending"
}

func newState() state {
	return state{Pending: map[string]pendingRec{}, Approved: map[string]approvedRec{}, Told: map[string]int64{}}
}

// backend keeps the state: data_dir/access.db (fileState) or a JetStream
// key-value bucket shared by a cluster (kvState).
type backend interface {
	// load reads the state (a missing one is empty).
	load(ctx context.Context) (state, error)
	// modify runs fn on the state and stores what fn left, atomically:
	// a write by another process in between makes it read again and
	// call fn again. claim records a code's hash as issued and reports
	// false when it already was (whether or not fn's change is stored:
	// a claimed code is never issued again). fn returning errUnchanged
	// stores nothing and modify returns nil; any other error stores
	// nothing and is returned.
	modify(ctx context.Context, fn func(st *state, claim func(hash string) (bool, error)) error) error
	// issued reports whether hash was ever claimed.
	issued(ctx context.Context, hash string) (bool, error)
}

// errUnchanged is what a modify function returns to store nothing.
var errUnchanged = errors.New("access: unchanged")

var (
	bucketPending  = []byte("pending")  // sha256(code) hex → pendingRec
	bucketIssued   = []byte("issued")   // sha256(code) hex → unix seconds; never removed
	bucketApproved = []byte("approved") // "<channel>:<user>" → approvedRec
	bucketTold     = []byte("told")     // "<channel>:<user>" → unix seconds
)

// fileState is data_dir/access.db, opened for each operation and closed
// right after, so that `switchboard pairing` in another process and the
// daemon take turns (bbolt's file lock).
type fileState struct{ path string }

func (f fileState) load(context.Context) (state, error) {
	st := newState()
	if _, err := os.Stat(f.path); errors.Is(err, fs.ErrNotExist) {
		return st, nil
	}
	db, err := bolt.Open(f.path, 0o600, &bolt.Options{ReadOnly: true, Timeout: lockTimeout})
	if err != nil {
		return st, fmt.Errorf("access: %w", err)
	}
	defer db.Close()
	return st, db.View(func(tx *bolt.Tx) error { return readTx(tx, &st) })
}

// readTx decodes the buckets of tx into st (unreadable records are
// skipped).
func readTx(tx *bolt.Tx, st *state) error {
	each := func(name []byte, fn func(k string, v []byte)) {
		if b := tx.Bucket(name); b != nil {
			_ = b.ForEach(func(k, v []byte) error { fn(string(k), v); return nil })
		}
	}
	each(bucketPending, func(k string, v []byte) {
		var p pendingRec
		if json.Unmarshal(v, &p) == nil {
			st.Pending[k] = p
		}
	})
	each(bucketApproved, func(k string, v []byte) {
		var a approvedRec
		_ = json.Unmarshal(v, &a)
		st.Approved[k] = a
	})
	each(bucketTold, func(k string, v []byte) {
		if n, err := strconv.ParseInt(string(v), 10, 64); err == nil {
			st.Told[k] = n
		}
	})
	return nil
}

func (f fileState) modify(_ context.Context, fn func(*state, func(string) (bool, error)) error) error {
	if err := os.MkdirAll(filepath.Dir(f.path), 0o700); err != nil {
		return fmt.Errorf("access: %w", err)
	}
	db, err := bolt.Open(f.path, 0o600, &bolt.Options{Timeout: lockTimeout})
	if err != nil {
		return fmt.Errorf("access: %w", err)
	}
	err = db.Update(func(tx *bolt.Tx) error {
		for _, b := range [][]byte{bucketPending, bucketIssued, bucketApproved, bucketTold} {
			if _, err := tx.CreateBucketIfNotExists(b); err != nil {
				return err
			}
		}
		st := newState()
		if err := readTx(tx, &st); err != nil {
			return err
		}
		issued := tx.Bucket(bucketIssued)
		claim := func(h string) (bool, error) {
			if issued.Get([]byte(h)) != nil {
				return false, nil
			}
			return true, issued.Put([]byte(h), []byte("1"))
		}
		if err := fn(&st, claim); err != nil {
			return err
		}
		return writeTx(tx, st)
	})
	if errors.Is(err, errUnchanged) {
		err = nil // rolled back: nothing written, claims included (none were made)
	}
	if cerr := db.Close(); err == nil && cerr != nil {
		err = fmt.Errorf("access: %w", cerr)
	}
	return err
}

// writeTx replaces the pending, approved and told buckets with st's.
func writeTx(tx *bolt.Tx, st state) error {
	put := func(name []byte, k string, v []byte) error { return tx.Bucket(name).Put([]byte(k), v) }
	for _, name := range [][]byte{bucketPending, bucketApproved, bucketTold} {
		if err := tx.DeleteBucket(name); err != nil {
			return err
		}
		if _, err := tx.CreateBucket(name); err != nil {
			return err
		}
	}
	for k, p := range st.Pending {
		b, _ := json.Marshal(p)
		if err := put(bucketPending, k, b); err != nil {
			return err
		}
	}
	for k, a := range st.Approved {
		b, _ := json.Marshal(a)
		if err := put(bucketApproved, k, b); err != nil {
			return err
		}
	}
	for k, t := range st.Told {
		if err := put(bucketTold, k, strconv.AppendInt(nil, t, 10)); err != nil {
			return err
		}
	}
	return nil
}

func (f fileState) issued(_ context.Context, h string) (bool, error) {
	if _, err := os.Stat(f.path); errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	db, err := bolt.Open(f.path, 0o600, &bolt.Options{ReadOnly: true, Timeout: lockTimeout})
	if err != nil {
		return false, fmt.Errorf("access: %w", err)
	}
	defer db.Close()
	found := false
	err = db.View(func(tx *bolt.Tx) error {
		if b := tx.Bucket(bucketIssued); b != nil {
			found = b.Get([]byte(h)) != nil
		}
		return nil
	})
	return found, err
}

// kvState is the state in a key-value bucket that several instances
// share: the state under one key, changed by revision-checked Modify, and
// each issued hash under a key of its own, created only when absent (so
// two instances drawing the same code cannot both issue it).
type kvState struct{ kv kvstate.Store }

const (
	kvStateKey   = "pairing"
	kvIssuedPref = "issued."
)

var errTaken = errors.New("access: code already issued")

func (k kvState) load(ctx context.Context) (state, error) {
	st := newState()
	v, _, ok, err := k.kv.Get(ctx, kvStateKey)
	if err != nil || !ok {
		return st, err
	}
	return decodeState(v)
}

func decodeState(v []byte) (state, error) {
	var st state
	if err := json.Unmarshal(v, &st); err != nil {
		return newState(), fmt.Errorf("access: pairing state: %w", err)
	}
	n := newState()
	if st.Pending == nil {
		st.Pending = n.Pending
	}
	if st.Approved == nil {
		st.Approved = n.Approved
	}
	if st.Told == nil {
		st.Told = n.Told
	}
	return st, nil
}

func (k kvState) modify(ctx context.Context, fn func(*state, func(string) (bool, error)) error) error {
	claim := func(h string) (bool, error) {
		_, _, err := k.kv.Modify(ctx, kvIssuedPref+h, func(_ []byte, ok bool) ([]byte, error) {
			if ok {
				return nil, errTaken
			}
			return []byte("1"), nil
		})
		if errors.Is(err, errTaken) {
			return false, nil
		}
		return err == nil, err
	}
	_, _, err := k.kv.Modify(ctx, kvStateKey, func(old []byte, ok bool) ([]byte, error) {
		st := newState()
		if ok {
			var err error
			if st, err = decodeState(old); err != nil {
				return nil, err
			}
		}
		if err := fn(&st, claim); err != nil {
			return nil, err
		}
		return json.Marshal(st)
	})
	if errors.Is(err, errUnchanged) {
		return nil
	}
	return err
}

func (k kvState) issued(ctx context.Context, h string) (bool, error) {
	_, _, ok, err := k.kv.Get(ctx, kvIssuedPref+h)
	return ok, err
}

// Package boltseen is a [bridge.SeenStore] in a bucket of a bbolt file:
// the outbound ids a bridge has shown, kept across restarts so that a final
// the daemon publishes again with the same id (docs/bus-protocol.md §5) is
// not shown twice. The in-tree Telegram and Slack adapters keep it in their
// state files; an external Go bridge can use it the same way.
//
// Each id is stored with the time it was shown (unix seconds, 8 bytes big
// endian) and forgotten once older than the store's retention: ids past it
// are ignored by Seen at once and deleted by a prune that runs when the
// store opens and then at most every [PruneEvery] as ids are recorded.
// Records are group-committed (bbolt's Batch), one fsync for concurrent
// callers.
package boltseen

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/switchboard-chat/switchboard/bus/bridge"
)

// PruneEvery is the least time between two prunes of expired ids.
const PruneEvery = 10 * time.Minute

// Store remembers shown outbound ids in one bucket of a bbolt database the
// caller owns (and closes after the bridge stopped). Safe for concurrent
// use.
type Store struct {
	db     *bolt.DB
	bucket []byte
	ttl    time.Duration
	now    func() time.Time

	mu        sync.Mutex
	lastPrune time.Time
}

var _ bridge.SeenStore = (*Store)(nil)

// Open creates the bucket if needed, deletes the ids older than ttl and
// returns the store. ttl must be positive: use at least the daemon's
// bus.out_retention (the adapters use twice it). now is the clock (nil:
// time.Now).
func Open(db *bolt.DB, bucket string, ttl time.Duration, now func() time.Time) (*Store, error) {
	if db == nil || bucket == "" || ttl <= 0 {
		return nil, errors.New("boltseen: open: a database, a bucket name and a positive retention are required")
	}
	if now == nil {
		now = time.Now
	}
	s := &Store{db: db, bucket: []byte(bucket), ttl: ttl, now: now}
	if err := db.Update(func(tx *bolt.Tx) error {
		_, err := tx.CreateBucketIfNotExists(s.bucket)
		return err
	}); err != nil {
		return nil, fmt.Errorf("boltseen: open bucket %s: %w", bucket, err)
	}
	if _, err := s.Prune(); err != nil {
		return nil, err
	}
	return s, nil
}

// Seen reports whether id was recorded within the retention.
func (s *Store) Seen(_ context.Context, id string) (bool, error) {
	var at int64
	var found bool
	err := s.db.View(func(tx *bolt.Tx) error {
		b := tx.Bucket(s.bucket)
		if b == nil {
			return fmt.Errorf("bucket %s missing", s.bucket)
		}
		if v := b.Get([]byte(id)); len(v) == 8 {
			at, found = int64(binary.BigEndian.Uint64(v)), true
		}
		return nil
	})
	if err != nil {
		return false, fmt.Errorf("boltseen: seen %q: %w", id, err)
	}
	return found && s.now().Sub(time.Unix(at, 0)) <= s.ttl, nil
}

// Record stores id as shown at at, durably when it returns nil, and prunes
// expired ids when the last prune is older than [PruneEvery].
func (s *Store) Record(_ context.Context, id string, at time.Time) error {
	var v [8]byte
	binary.BigEndian.PutUint64(v[:], uint64(at.Unix()))
	err := s.db.Batch(func(tx *bolt.Tx) error {
		b := tx.Bucket(s.bucket)
		if b == nil {
			return fmt.Errorf("bucket %s missing", s.bucket)
		}
		return b.Put([]byte(id), v[:])
	})
	if err != nil {
		return fmt.Errorf("boltseen: record %q: %w", id, err)
	}
	s.mu.Lock()
	due := s.now().Sub(s.lastPrune) >= PruneEvery
	s.mu.Unlock()
	if due {
		if _, err := s.Prune(); err != nil {
			return err
		}
	}
	return nil
}

// Prune deletes the ids older than the retention and returns how many.
func (s *Store) Prune() (int, error) {
	now := s.now()
	s.mu.Lock()
	s.lastPrune = now
	s.mu.Unlock()
	cutoff := now.Add(-s.ttl).Unix()
	n := 0
	err := s.db.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket(s.bucket)
		if b == nil {
			return fmt.Errorf("bucket %s missing", s.bucket)
		}
		var stale [][]byte
		if err := b.ForEach(func(k, v []byte) error {
			if len(v) != 8 || int64(binary.BigEndian.Uint64(v)) < cutoff {
				stale = append(stale, append([]byte(nil), k...))
			}
			return nil
		}); err != nil {
			return err
		}
		for _, k := range stale {
			if err := b.Delete(k); err != nil {
				return err
			}
		}
		n = len(stale)
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("boltseen: prune %s: %w", s.bucket, err)
	}
	return n, nil
}

// Len returns the number of ids stored (expired ones not yet pruned
// included).
func (s *Store) Len() (int, error) {
	n := 0
	err := s.db.View(func(tx *bolt.Tx) error {
		if b := tx.Bucket(s.bucket); b != nil {
			n = b.Stats().KeyN
		}
		return nil
	})
	return n, err
}

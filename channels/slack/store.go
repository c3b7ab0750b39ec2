package slack

import (
	"cmp"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/switchboard-chat/switchboard/internal/kvstate"
)

// State is where the answered threads and the denied users are kept when
// several instances may run the adapter (memory.store jetstream: the
// daemon's channels bucket, a *kvstate.Bucket): the instance that takes
// the channel over answers replies in the threads the last one answered.
// Keys are "slack.<set>.<kvstate.Key of the entry>".
type State interface {
	All(ctx context.Context) (map[string][]byte, error)
	Put(ctx context.Context, key string, value []byte) (uint64, error)
	Delete(ctx context.Context, key string) error
}

// sharedTimeout bounds one write to a shared [State].
const sharedTimeout = 5 * time.Second

// Bounds of the adapter's remembered state.
const (
	// maxThreads bounds the threads remembered as answered by the bot.
	maxThreads = 20000
	// maxDenied bounds the users remembered as told they are not allowed.
	maxDenied = 10000
)

// Bucket names in slack.db.
var (
	bucketThreads = []byte("threads")
	bucketDenied  = []byte("denied")
)

// sentBucket is the bucket of slack.db holding the outbound ids already
// shown (the bridge kit's SeenStore, package boltseen).
const sentBucket = "sent"

// store remembers, across restarts when it has a file, the threads the bot
// answered in (for the mention_or_thread trigger) and the users already
// told that they are not allowed. (The outbound ids already shown live in
// the same file, in the bridge kit's store; see [sentBucket].) Every set
// is bounded: the oldest entries are forgotten first. It is safe for concurrent use; reads
// are served from memory.
type store struct {
	db     *bolt.DB // nil: in memory only (or shared)
	shared State    // nil: the sets live in db
	now    func() time.Time

	mu   sync.Mutex
	sets map[string]*boundedSet // by bucket name
}

// boundedSet is one remembered set: key → unix seconds last touched.
type boundedSet struct {
	bucket []byte
	max    int
	m      map[string]int64
}

// openStore opens (creating) the bbolt file at path and loads it; an empty
// path keeps everything in memory. With shared, the sets are loaded from
// and written to shared instead (the file still holds the outbound ids
// shown).
func openStore(ctx context.Context, path string, shared State, now func() time.Time) (*store, error) {
	s := &store{now: now, shared: shared, sets: map[string]*boundedSet{
		string(bucketThreads): {bucket: bucketThreads, max: maxThreads, m: map[string]int64{}},
		string(bucketDenied):  {bucket: bucketDenied, max: maxDenied, m: map[string]int64{}},
	}}
	if shared != nil {
		if err := s.loadShared(ctx); err != nil {
			return nil, err
		}
	}
	if path == "" {
		return s, nil
	}
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: 5 * time.Second})
	if err != nil {
		return nil, fmt.Errorf("slack: open %s: %w", path, err)
	}
	err = db.Update(func(tx *bolt.Tx) error {
		for _, set := range s.sets {
			b, err := tx.CreateBucketIfNotExists(set.bucket)
			if err != nil || shared != nil {
				return err
			}
			var stale [][]byte
			err = b.ForEach(func(k, v []byte) error {
				if len(v) != 8 {
					stale = append(stale, k)
					return nil
				}
				set.m[string(k)] = int64(binary.BigEndian.Uint64(v))
				return nil
			})
			if err != nil {
				return err
			}
			for _, k := range stale {
				if err := b.Delete(k); err != nil {
					return err
				}
			}
			for _, k := range set.evict() {
				if err := b.Delete([]byte(k)); err != nil {
					return err
				}
			}
		}
		return nil
	})
	if err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("slack: load %s: %w", path, err)
	}
	s.db = db
	return s, nil
}

// evict removes the oldest entries beyond max (a tenth of max at once, so
// eviction is rare) and returns their keys.
func (b *boundedSet) evict() []string {
	if len(b.m) <= b.max {
		return nil
	}
	keys := slices.Collect(maps.Keys(b.m))
	slices.SortFunc(keys, func(x, y string) int { return cmp.Or(cmp.Compare(b.m[x], b.m[y]), cmp.Compare(x, y)) })
	n := len(b.m) - b.max + b.max/10
	keys = keys[:min(n, len(keys))]
	for _, k := range keys {
		delete(b.m, k)
	}
	return keys
}

// has reports whether key is in the set of bucket.
func (s *store) has(bucket []byte, key string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, ok := s.sets[string(bucket)].m[key]
	return ok
}

// add puts key in the set of bucket (refreshing its time) and reports
// whether it was new. With a file, the change is durable when add returns
// nil; on a write error the key stays remembered in memory.
func (s *store) add(bucket []byte, key string) (bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	set := s.sets[string(bucket)]
	_, had := set.m[key]
	now := s.now().Unix()
	set.m[key] = now
	evicted := set.evict()
	var v [8]byte
	binary.BigEndian.PutUint64(v[:], uint64(now))
	if s.shared != nil {
		return !had, s.putShared(set.bucket, key, v[:], evicted)
	}
	if s.db == nil {
		return !had, nil
	}
	err := s.db.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket(set.bucket)
		if b == nil {
			return errors.New("bucket missing")
		}
		for _, k := range evicted {
			if err := b.Delete([]byte(k)); err != nil {
				return err
			}
		}
		return b.Put([]byte(key), v[:])
	})
	if err != nil {
		return !had, fmt.Errorf("slack: store %s: %w", set.bucket, err)
	}
	return !had, nil
}

// sharedKey is the key of entry key of set bucket in a shared State.
func sharedKey(bucket []byte, key string) string {
	return "slack." + string(bucket) + "." + kvstate.Key(key)
}

// loadShared loads the sets from s.shared and forgets what they hold
// beyond their bounds.
func (s *store) loadShared(ctx context.Context) error {
	all, err := s.shared.All(ctx)
	if err != nil {
		return fmt.Errorf("slack: load state: %w", err)
	}
	for _, set := range s.sets {
		prefix := "slack." + string(set.bucket) + "."
		for k, v := range all {
			rest, ok := strings.CutPrefix(k, prefix)
			if !ok || len(v) != 8 {
				continue
			}
			if key, ok := kvstate.KeyText(rest); ok {
				set.m[key] = int64(binary.BigEndian.Uint64(v))
			}
		}
		for _, k := range set.evict() {
			if err := s.shared.Delete(ctx, sharedKey(set.bucket, k)); err != nil {
				return fmt.Errorf("slack: load state: %w", err)
			}
		}
	}
	return nil
}

// putShared stores one entry and forgets the evicted ones in s.shared.
// s.mu is held.
func (s *store) putShared(bucket []byte, key string, v []byte, evicted []string) error {
	ctx, cancel := context.WithTimeout(context.Background(), sharedTimeout)
	defer cancel()
	for _, k := range evicted {
		if err := s.shared.Delete(ctx, sharedKey(bucket, k)); err != nil {
			return fmt.Errorf("slack: store %s: %w", bucket, err)
		}
	}
	if _, err := s.shared.Put(ctx, sharedKey(bucket, key), v); err != nil {
		return fmt.Errorf("slack: store %s: %w", bucket, err)
	}
	return nil
}

// threadKey is the key of a thread in bucketThreads.
func threadKey(channel, threadTS string) string { return channel + "/" + threadTS }

// close closes the file, if any. It is idempotent.
func (s *store) close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.db == nil {
		return nil
	}
	err := s.db.Close()
	s.db = nil
	if err != nil {
		return fmt.Errorf("slack: close store: %w", err)
	}
	return nil
}

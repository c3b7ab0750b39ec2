package consolidate

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	bolt "go.etcd.io/bbolt"
	bolterrors "go.etcd.io/bbolt/errors"
)

var bucketState = []byte("consolidate")

// Record is what the consolidator remembers about a night's run or a
// folder.
type Record struct {
	// Day is the day (YYYY-MM-DD) of the run that wrote the record.
	Day string `json:"day"`
	// Core is the SHA-256 of the folder's MEMORY.md as written by its last
	// rewrite, and Notes identify the daily notes that rewrite read
	// ("<path>:<SHA-256>"); both empty for a run record.
	Core  string    `json:"core,omitempty"`
	Notes []string  `json:"notes,omitempty"`
	At    time.Time `json:"at"`
}

// State stores records durably. Implementations are safe for concurrent
// use.
type State interface {
	// Load returns the record under key, or ok=false.
	Load(key string) (r Record, ok bool, err error)
	// Save stores r under key, durably.
	Save(key string, r Record) error
}

// BoltState is a [State] in its own bbolt file. It is safe for concurrent
// use; the caller must Close it.
type BoltState struct {
	db   *bolt.DB
	mu   sync.RWMutex
	done bool
}

var _ State = (*BoltState)(nil)

// OpenState opens (creating if needed) the state file at path, waiting at
// most a second for another process's lock.
func OpenState(path string) (*BoltState, error) {
	if path == "" {
		return nil, errors.New("consolidate: open state: path is empty")
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("consolidate: open state %s: %w", path, err)
	}
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: time.Second})
	if errors.Is(err, bolterrors.ErrTimeout) {
		return nil, fmt.Errorf("consolidate: state file %s is locked by another process: %w", path, err)
	}
	if err != nil {
		return nil, fmt.Errorf("consolidate: open state %s: %w", path, err)
	}
	if err := db.Update(func(tx *bolt.Tx) error {
		_, err := tx.CreateBucketIfNotExists(bucketState)
		return err
	}); err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("consolidate: open state %s: %w", path, err)
	}
	return &BoltState{db: db}, nil
}

// Load implements [State].
func (s *BoltState) Load(key string) (Record, bool, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.done {
		return Record{}, false, errors.New("consolidate: state closed")
	}
	var (
		r  Record
		ok bool
	)
	err := s.db.View(func(tx *bolt.Tx) error {
		v := tx.Bucket(bucketState).Get([]byte(key))
		if v == nil {
			return nil
		}
		ok = true
		return json.Unmarshal(v, &r)
	})
	if err != nil {
		return Record{}, false, fmt.Errorf("consolidate: state %q: %w", key, err)
	}
	return r, ok, nil
}

// Save implements [State].
func (s *BoltState) Save(key string, r Record) error {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.done {
		return errors.New("consolidate: state closed")
	}
	v, err := json.Marshal(r)
	if err != nil {
		return fmt.Errorf("consolidate: state %q: %w", key, err)
	}
	if err := s.db.Update(func(tx *bolt.Tx) error { return tx.Bucket(bucketState).Put([]byte(key), v) }); err != nil {
		return fmt.Errorf("consolidate: state %q: %w", key, err)
	}
	return nil
}

// Close closes the file; it is idempotent.
func (s *BoltState) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.done {
		return nil
	}
	s.done = true
	if err := s.db.Close(); err != nil {
		return fmt.Errorf("consolidate: close state: %w", err)
	}
	return nil
}

package boltstore

import (
	"sync"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/switchboard-chat/switchboard/memory"
)

// marks are the published marks (MarkPublished) not yet on disk. Any
// write transaction carries them (Store.write calls apply); a timer
// writes the ones no transaction took within delay; Close writes the
// rest. It is safe for concurrent use.
type marks struct {
	delay time.Duration

	mu sync.Mutex
	// keys maps each receipt key waiting to be marked to the write
	// transaction that is writing it, nil while none is. bbolt runs one
	// write transaction at a time, so a key claimed by another than the
	// running one was claimed by a transaction that rolled back (or
	// committed and is about to delete it): it is written again, which is
	// harmless.
	keys    map[string]*bolt.Tx
	timer   *time.Timer
	stopped bool
}

// add records key and makes sure it is written within delay, by flush
// when no write transaction takes it first.
func (m *marks) add(key string, flush func()) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.stopped {
		return
	}
	if m.keys == nil {
		m.keys = make(map[string]*bolt.Tx)
	}
	m.keys[key] = nil
	if m.timer == nil {
		m.timer = time.AfterFunc(m.delay, flush)
	}
}

// pending reports whether key waits to be written.
func (m *marks) pending(key string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	_, ok := m.keys[key]
	return ok
}

// due is called by the timer: it reports whether marks still wait and
// lets the next add start a new timer.
func (m *marks) due() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.timer = nil
	return len(m.keys) > 0 && !m.stopped
}

// stop stops the timer for Close and reports whether marks wait to be
// written.
func (m *marks) stop() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.stopped = true
	if m.timer != nil {
		m.timer.Stop()
		m.timer = nil
	}
	return len(m.keys) > 0
}

// apply writes the waiting marks not yet claimed by tx into tx and
// forgets them once tx commits. A receipt that is gone (reset, pruned) or
// cannot be read is left as it is: a mark never fails a transaction it
// rides on for another reason than a failing write.
func (m *marks) apply(tx *bolt.Tx) error {
	m.mu.Lock()
	var keys []string
	for k, by := range m.keys {
		if by != tx {
			m.keys[k] = tx
			keys = append(keys, k)
		}
	}
	m.mu.Unlock()
	if len(keys) == 0 {
		return nil
	}
	tx.OnCommit(func() {
		m.mu.Lock()
		defer m.mu.Unlock()
		for _, k := range keys {
			if m.keys[k] == tx {
				delete(m.keys, k)
			}
		}
	})
	b := tx.Bucket(bucketReceipts)
	for _, k := range keys {
		v := b.Get([]byte(k))
		if v == nil {
			continue
		}
		r, err := memory.DecodeReceipt(v)
		if err != nil || r.Published {
			continue
		}
		r.Published = true
		nv, err := memory.EncodeReceipt(r)
		if err != nil {
			continue
		}
		if err := b.Put([]byte(k), nv); err != nil {
			return err
		}
	}
	return nil
}

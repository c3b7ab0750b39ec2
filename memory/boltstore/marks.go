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
	// keys holds each receipt key waiting to be marked.
	keys    map[string]mark
	timer   *time.Timer
	stopped bool
}

// mark is one waiting mark: when it was made, and the write transaction
// writing it (nil while none is). bbolt runs one write transaction at a
// time, so a mark claimed by another than the running one was claimed by
// a transaction that rolled back (or committed and is about to forget
// it): it is written again, which is harmless.
type mark struct {
	at time.Time
	by *bolt.Tx
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
		m.keys = make(map[string]mark)
	}
	m.keys[key] = mark{at: time.Now()}
	if m.timer == nil {
		m.timer = time.AfterFunc(m.delay, func() {
			if m.due(flush) {
				flush()
			}
		})
	}
}

// pending reports whether key waits to be written.
func (m *marks) pending(key string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	_, ok := m.keys[key]
	return ok
}

// due is called by the timer: it reports whether a mark has waited for
// delay. When only younger ones wait (the writes of other turns took the
// older ones, as under load) it starts the timer again for the oldest, so
// a busy store writes no transaction for marks alone.
func (m *marks) due(flush func()) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.timer = nil
	if m.stopped || len(m.keys) == 0 {
		return false
	}
	oldest := time.Now()
	for _, mk := range m.keys {
		if mk.at.Before(oldest) {
			oldest = mk.at
		}
	}
	wait := m.delay - time.Since(oldest)
	if wait <= 0 {
		return true
	}
	m.timer = time.AfterFunc(wait, func() {
		if m.due(flush) {
			flush()
		}
	})
	return false
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
	for k, mk := range m.keys {
		if mk.by != tx {
			m.keys[k] = mark{at: mk.at, by: tx}
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
			if m.keys[k].by == tx {
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

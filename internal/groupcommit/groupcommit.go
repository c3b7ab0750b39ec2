// Package groupcommit is the one group commit of the module's bbolt
// files: a write that finds other writes in progress joins them in one
// DB.Batch transaction (one fsync for all of them); a write alone commits
// at once with DB.Update instead of waiting DB.MaxBatchDelay for company.
// Either way it returns once its transaction is durable.
package groupcommit

import (
	"sync/atomic"

	bolt "go.etcd.io/bbolt"
)

// Writer writes to one bbolt file. The zero value is not usable: make it
// with New. Safe for concurrent use.
type Writer struct {
	db       *bolt.DB
	inflight atomic.Int64 // writes in progress
}

// New returns a Writer on db.
func New(db *bolt.DB) *Writer { return &Writer{db: db} }

// InFlight is the number of writes in progress (waiting or committing).
func (w *Writer) InFlight() int64 { return w.inflight.Load() }

// Update commits fn durably. Joined to a batch, fn may run more than once
// (bbolt runs it again alone when another write of the batch failed), so
// it must compute everything it writes from the transaction's state.
func (w *Writer) Update(fn func(*bolt.Tx) error) error {
	defer w.inflight.Add(-1)
	if w.inflight.Add(1) == 1 {
		return w.db.Update(fn)
	}
	return w.db.Batch(fn)
}

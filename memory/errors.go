package memory

import (
	"context"
	"errors"
	"time"
)

// ErrNotFound is returned (wrapped) when a record that must exist, such as
// the receipt named in MarkPublished, does not.
var ErrNotFound = errors.New("memory: not found")

// ErrInvalid is returned (wrapped) when a record handed to a Store breaks
// the rules of [TurnRecord.Validate] or a stored record cannot be decoded.
// The wrapping error names the offending field.
var ErrInvalid = errors.New("memory: invalid record")

// Compactor is an optional capability of a Store: replace the older part of
// a session's context with a summary.
//
// Compact sets the session's summary and moves its context start so that
// only the last keepTurns whole turns remain in the context; the messages
// before the new start stay on disk but are no longer loaded. keepTurns
// must be >= 0. Compacting a session with no history is an error wrapping
// [ErrNotFound]. It is safe for concurrent use and blocks until durable.
type Compactor interface {
	Compact(ctx context.Context, session, summary string, keepTurns int) error
}

// ReceiptPruner is an optional capability of a Store: bound the growth of
// the receipt set.
//
// PruneReceipts deletes receipts whose Time is before the given time and
// reports how many it deleted. Choose a horizon well beyond the inbound
// stream's redelivery window: a message redelivered after its receipt is
// gone is handled as new. It honours ctx between bounded units of work and
// is safe for concurrent use.
type ReceiptPruner interface {
	PruneReceipts(ctx context.Context, before time.Time) (int, error)
}

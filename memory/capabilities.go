package memory

import (
	"context"
	"time"
)

// SummaryWriter is an optional capability of a Store: replace a session's
// running summary without moving its context start (a summary computed in
// the background after the context was already trimmed).
//
// SetSummary fails with an error wrapping [ErrNotFound] for a session with
// no history. It is safe for concurrent use and blocks until durable.
type SummaryWriter interface {
	SetSummary(ctx context.Context, session, summary string) error
}

// SessionPruner is an optional capability of a Store: bound the growth of
// history by deleting idle sessions.
//
// PruneSessions deletes every session whose last activity is before
// idleBefore — its messages and summary — and reports how many it
// deleted. Receipts are not touched: they go by their own age (see
// [ReceiptPruner]), pruned on the same retention. It honours ctx between
// bounded units of work and is safe for concurrent use.
type SessionPruner interface {
	PruneSessions(ctx context.Context, idleBefore time.Time) (int, error)
}

// SessionResetter is an optional capability of a Store: forget one
// conversation.
//
// Reset deletes the session's messages, summary and receipts, so that
// nothing it answered stays stored: a message of the session redelivered
// afterwards is answered as new, unless the bus drops it as a duplicate
// within its own window (see docs/architecture.md, "Why every message gets
// exactly one final answer"). An unknown session (no history and no
// receipt) is an error wrapping [ErrNotFound]. It honours ctx between
// bounded units of work and is safe for concurrent use.
type SessionResetter interface {
	Reset(ctx context.Context, session string) error
}

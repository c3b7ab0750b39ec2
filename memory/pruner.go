package memory

import (
	"context"
	"errors"
	"log/slog"
	"time"
)

// PruningStore is a store that [Pruner] can prune: it deletes idle
// sessions and old receipts.
type PruningStore interface {
	SessionPruner
	ReceiptPruner
}

// Pruner deletes sessions idle for longer than Retention and receipts
// older than Retention, in the background: at once, then every Interval.
// History and the stored answers go together, so retention really removes
// what was answered; a message redelivered after its receipt is gone is
// answered as new unless the bus drops it as a duplicate (see
// docs/architecture.md, "Why every message gets exactly one final
// answer"). It works on any store with both pruning capabilities (the
// bbolt store and the JetStream store; memory.retention). Configure it and
// call Run; a Pruner is not meant to be copied while running.
type Pruner struct {
	// Store is the history store (required).
	Store PruningStore
	// Retention: sessions whose last activity is older are deleted with
	// their messages and summary, and receipts stored longer ago are
	// deleted (memory.retention, a day or more). 0 keeps everything.
	Retention time.Duration
	// Interval between prunes (default 1h).
	Interval time.Duration
	// Now is the clock (default time.Now).
	Now func() time.Time
	// Log receives one line per prune that deleted something, and
	// failures; nil discards.
	Log *slog.Logger
}

// PruneOnce prunes now and reports what it deleted.
func (p Pruner) PruneOnce(ctx context.Context) (sessions, receipts int, err error) {
	if p.Store == nil {
		return 0, 0, errors.New("memory: pruner: store is nil")
	}
	now := time.Now
	if p.Now != nil {
		now = p.Now
	}
	if p.Retention <= 0 {
		return 0, 0, nil
	}
	before := now().Add(-p.Retention)
	if sessions, err = p.Store.PruneSessions(ctx, before); err != nil {
		return sessions, 0, err
	}
	receipts, err = p.Store.PruneReceipts(ctx, before)
	return sessions, receipts, err
}

// Run prunes at once and then every Interval until ctx ends, when it
// returns nil. Without Retention it returns nil at once. A failed prune is logged and retried at the next interval. A nil
// Store or a negative setting is an error.
func (p Pruner) Run(ctx context.Context) error {
	switch {
	case p.Store == nil:
		return errors.New("memory: pruner: store is nil")
	case p.Retention < 0 || p.Interval < 0:
		return errors.New("memory: pruner: retention and interval must not be negative")
	case p.Retention == 0:
		return nil
	}
	interval := p.Interval
	if interval == 0 {
		interval = time.Hour
	}
	log := p.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		sessions, receipts, err := p.PruneOnce(ctx)
		switch {
		case ctx.Err() != nil:
			return nil
		case err != nil:
			log.WarnContext(ctx, "history prune failed; retrying later", "err", err, "retry_in", interval)
		case sessions+receipts > 0:
			log.InfoContext(ctx, "pruned history", "sessions", sessions, "receipts", receipts)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

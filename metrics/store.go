package metrics

import (
	"context"
	"time"

	"github.com/switchboard-chat/switchboard/memory"
)

// History is a history store with the optional capabilities the agent and
// the daemon look for. Both the bbolt store (memory/boltstore) and the
// JetStream store (memory/jsstore) are one.
type History interface {
	memory.Store
	memory.Compactor
	memory.SummaryWriter
	memory.ReceiptPruner
	memory.SessionPruner
	memory.SessionResetter
}

// Store wraps the history store so that every commit is timed
// (switchboard_store_commit_duration_seconds, switchboard_store_commits_in_flight)
// and every failure of the store itself ([memory.IsFailure]) is counted
// (switchboard_store_failures_total{op}) and logged through Fails, once
// per interval however many messages it hits. Answers about the data
// (a duplicate, an invalid record) are neither counted nor logged.
//
// Embedding the [History] keeps the store's other capabilities
// (compaction, summaries, pruning, reset) visible to the agent, which asks
// for them by interface. Store is safe for concurrent use if its parts are.
type Store struct {
	History
	// M receives the measurements (required).
	M *Metrics
	// Fails logs the failures (required; see [memory.FailureLog]).
	Fails *memory.FailureLog
	// Fault, when set, is called before each write with its operation
	// ("commit", "mark_published"); a non-nil error fails the write
	// without it happening, as a failing disk would. It is a failpoint for
	// tests; the daemon leaves it nil.
	Fault func(op string) error
}

// CommitTurn implements [memory.Store].
func (s Store) CommitTurn(ctx context.Context, rec memory.TurnRecord) error {
	s.M.CommitStarted()
	defer s.M.CommitDone()
	start := time.Now()
	err := s.injected("commit")
	if err == nil {
		err = s.History.CommitTurn(ctx, rec)
	}
	s.M.Commit(start)
	return s.failed("commit", err)
}

// MarkPublished implements [memory.Store].
func (s Store) MarkPublished(ctx context.Context, key string) error {
	err := s.injected("mark_published")
	if err == nil {
		err = s.History.MarkPublished(ctx, key)
	}
	return s.failed("mark_published", err)
}

func (s Store) injected(op string) error {
	if s.Fault == nil {
		return nil
	}
	return s.Fault(op)
}

// failed counts and logs err when it is a failure of the store.
func (s Store) failed(op string, err error) error {
	if memory.IsFailure(err) {
		s.M.StoreFailure(op)
		s.Fails.Failed(op, err)
	}
	return err
}

// Package memtest provides test helpers for [memory.Store]: MemStore, an
// in-memory fake with the same semantics as the bbolt store, and Run, a
// conformance suite every implementation must pass.
package memtest

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/switchboard-chat/switchboard/memory"
)

// MemStore is an in-memory [memory.Store] (also a [memory.Compactor], a
// [memory.ReceiptPruner] and a [memory.SessionResetter]) for tests. It is safe for concurrent use. Values
// are stored encoded, so callers never share memory with the store. Nothing
// survives the process; Close only makes later calls fail with
// [memory.ErrClosed].
type MemStore struct {
	mu       sync.Mutex
	closed   bool
	sessions map[string]*memSession
	receipts map[string][]byte // JSON memory.Receipt
	commits  int
}

type memSession struct {
	msgs       [][]byte // JSON memory.Message; seq = index+1
	start      int      // messages[start:] are in the context
	turns      int
	summary    string
	lastActive time.Time
}

var (
	_ memory.Store           = (*MemStore)(nil)
	_ memory.Compactor       = (*MemStore)(nil)
	_ memory.ReceiptPruner   = (*MemStore)(nil)
	_ memory.SessionResetter = (*MemStore)(nil)
)

// NewMemStore returns an empty store.
func NewMemStore() *MemStore {
	return &MemStore{
		sessions: make(map[string]*memSession),
		receipts: make(map[string][]byte),
	}
}

// Commits returns how many CommitTurn calls wrote something (duplicates and
// failures excluded).
func (s *MemStore) Commits() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.commits
}

func (s *MemStore) lock(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return memory.ErrClosed
	}
	return nil
}

// Close implements [memory.Store]; it is idempotent.
func (s *MemStore) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	return nil
}

// CommitTurn implements [memory.Store] with the same validation and
// duplicate semantics as the bbolt store.
func (s *MemStore) CommitTurn(ctx context.Context, rec memory.TurnRecord) error {
	if err := rec.Validate(); err != nil {
		return fmt.Errorf("memtest: commit turn: %w", err)
	}
	now := time.Now()
	enc, err := memory.EncodeTurn(rec, now)
	if err != nil {
		return fmt.Errorf("memtest: commit turn %q: %w", rec.Receipt.Key, err)
	}
	r := rec.Receipt
	if err := s.lock(ctx); err != nil {
		return fmt.Errorf("memtest: commit turn %q: %w", r.Key, err)
	}
	defer s.mu.Unlock()
	for _, kv := range enc.Receipts {
		if _, ok := s.receipts[kv.Key]; ok {
			return fmt.Errorf("memtest: commit turn %q: %w", r.Key, memory.ErrDuplicate)
		}
	}
	sess := s.sessions[rec.Session]
	if sess == nil {
		sess = &memSession{}
		s.sessions[rec.Session] = sess
	}
	if rec.Fresh {
		sess.start = len(sess.msgs)
		sess.turns = 0
		sess.summary = ""
	}
	sess.msgs = append(sess.msgs, enc.Messages...)
	sess.turns += enc.Turns
	sess.lastActive = now
	for _, kv := range enc.Receipts {
		s.receipts[kv.Key] = kv.Value
	}
	s.commits++
	return nil
}

// Load implements [memory.Store].
func (s *MemStore) Load(ctx context.Context, session string, maxTurns int) (memory.Snapshot, error) {
	if err := memory.ValidateSession(session); err != nil {
		return memory.Snapshot{}, fmt.Errorf("memtest: load: %w", err)
	}
	if maxTurns < 0 {
		return memory.Snapshot{}, fmt.Errorf("memtest: load %q: maxTurns must be >= 0, got %d", session, maxTurns)
	}
	if err := s.lock(ctx); err != nil {
		return memory.Snapshot{}, fmt.Errorf("memtest: load %q: %w", session, err)
	}
	defer s.mu.Unlock()
	sess := s.sessions[session]
	if sess == nil {
		return memory.Snapshot{}, nil
	}
	snap := memory.Snapshot{Summary: sess.summary, Turns: sess.turns, LastActive: sess.lastActive}
	if maxTurns == 0 {
		return snap, nil
	}
	turns := 0
	for i := len(sess.msgs) - 1; i >= sess.start && turns < maxTurns; i-- {
		m, err := memory.DecodeMessage(sess.msgs[i])
		if err != nil {
			return memory.Snapshot{}, fmt.Errorf("memtest: load %q: message %d: %w", session, i+1, err)
		}
		snap.Messages = append(snap.Messages, m)
		if m.TurnStart {
			turns++
		}
	}
	for i, j := 0, len(snap.Messages)-1; i < j; i, j = i+1, j-1 {
		snap.Messages[i], snap.Messages[j] = snap.Messages[j], snap.Messages[i]
	}
	return snap, nil
}

// Receipt implements [memory.Store].
func (s *MemStore) Receipt(ctx context.Context, key string) (memory.Receipt, bool, error) {
	if err := memory.ValidateReceiptKey(key); err != nil {
		return memory.Receipt{}, false, fmt.Errorf("memtest: receipt: %w", err)
	}
	if err := s.lock(ctx); err != nil {
		return memory.Receipt{}, false, fmt.Errorf("memtest: receipt %q: %w", key, err)
	}
	defer s.mu.Unlock()
	v, ok := s.receipts[key]
	if !ok {
		return memory.Receipt{}, false, nil
	}
	r, err := memory.DecodeReceipt(v)
	if err != nil {
		return memory.Receipt{}, false, fmt.Errorf("memtest: receipt %q: %w", key, err)
	}
	return r, true, nil
}

// MarkPublished implements [memory.Store].
func (s *MemStore) MarkPublished(ctx context.Context, key string) error {
	if err := memory.ValidateReceiptKey(key); err != nil {
		return fmt.Errorf("memtest: mark published: %w", err)
	}
	if err := s.lock(ctx); err != nil {
		return fmt.Errorf("memtest: mark published %q: %w", key, err)
	}
	defer s.mu.Unlock()
	v, ok := s.receipts[key]
	if !ok {
		return fmt.Errorf("memtest: mark published %q: %w", key, memory.ErrNotFound)
	}
	r, err := memory.DecodeReceipt(v)
	if err != nil {
		return fmt.Errorf("memtest: mark published %q: %w", key, err)
	}
	r.Published = true
	nv, err := memory.EncodeReceipt(r)
	if err != nil {
		return fmt.Errorf("memtest: mark published %q: %w", key, err)
	}
	s.receipts[key] = nv
	return nil
}

// Compact implements [memory.Compactor].
func (s *MemStore) Compact(ctx context.Context, session, summary string, keepTurns int) error {
	if err := memory.ValidateSession(session); err != nil {
		return fmt.Errorf("memtest: compact: %w", err)
	}
	if keepTurns < 0 {
		return fmt.Errorf("memtest: compact %q: keepTurns must be >= 0, got %d", session, keepTurns)
	}
	if err := s.lock(ctx); err != nil {
		return fmt.Errorf("memtest: compact %q: %w", session, err)
	}
	defer s.mu.Unlock()
	sess := s.sessions[session]
	if sess == nil {
		return fmt.Errorf("memtest: compact %q: %w", session, memory.ErrNotFound)
	}
	sess.summary = summary
	if keepTurns == 0 {
		sess.start, sess.turns = len(sess.msgs), 0
		return nil
	}
	turns := 0
	for i := len(sess.msgs) - 1; i >= sess.start; i-- {
		m, err := memory.DecodeMessage(sess.msgs[i])
		if err != nil {
			return fmt.Errorf("memtest: compact %q: message %d: %w", session, i+1, err)
		}
		if m.TurnStart {
			turns++
			if turns == keepTurns {
				sess.start, sess.turns = i, keepTurns
				return nil
			}
		}
	}
	return nil
}

// PruneReceipts implements [memory.ReceiptPruner].
func (s *MemStore) PruneReceipts(ctx context.Context, before time.Time) (int, error) {
	if err := s.lock(ctx); err != nil {
		return 0, fmt.Errorf("memtest: prune receipts: %w", err)
	}
	defer s.mu.Unlock()
	n := 0
	for k, v := range s.receipts {
		if r, err := memory.DecodeReceipt(v); err == nil && r.Time.Before(before) {
			delete(s.receipts, k)
			n++
		}
	}
	return n, nil
}

// Reset implements [memory.SessionResetter]: the session's messages,
// summary and receipts are deleted.
func (s *MemStore) Reset(ctx context.Context, session string) error {
	if err := memory.ValidateSession(session); err != nil {
		return fmt.Errorf("memtest: reset: %w", err)
	}
	if err := s.lock(ctx); err != nil {
		return fmt.Errorf("memtest: reset %q: %w", session, err)
	}
	defer s.mu.Unlock()
	_, found := s.sessions[session]
	delete(s.sessions, session)
	for k, v := range s.receipts {
		if r, err := memory.DecodeReceipt(v); err == nil && r.Session == session {
			delete(s.receipts, k)
			found = true
		}
	}
	if !found {
		return fmt.Errorf("memtest: reset %q: %w", session, memory.ErrNotFound)
	}
	return nil
}

// SetSummary replaces a session's summary (the background summariser's
// write); the context start is unchanged. An unknown session is an error
// wrapping memory.ErrNotFound.
func (s *MemStore) SetSummary(ctx context.Context, session, summary string) error {
	if err := memory.ValidateSession(session); err != nil {
		return fmt.Errorf("memtest: set summary: %w", err)
	}
	if err := s.lock(ctx); err != nil {
		return fmt.Errorf("memtest: set summary %q: %w", session, err)
	}
	defer s.mu.Unlock()
	sess := s.sessions[session]
	if sess == nil {
		return fmt.Errorf("memtest: set summary %q: %w", session, memory.ErrNotFound)
	}
	sess.summary = summary
	return nil
}

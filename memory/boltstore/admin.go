package boltstore

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/switchboard-chat/switchboard/memory"
)

// deleteChunk bounds the messages deleted by one transaction of
// PruneSessions and Reset, so a huge session never holds the writer long.
const deleteChunk = 5000

// exportChunk bounds the messages read by one transaction of Export.
const exportChunk = 1000

var (
	_ memory.SummaryWriter = (*Store)(nil)
	_ memory.SessionPruner = (*Store)(nil)
)

// newMeta is the meta of a session that has none: empty, or, while the
// messages of a pruned or reset incarnation are still being deleted,
// starting after them so the new messages never mix with the old.
func newMeta(tx *bolt.Tx, skey []byte) sessionMeta {
	var m sessionMeta
	if v := tx.Bucket(bucketPruning).Get(skey); len(v) == 8 {
		seq := binary.BigEndian.Uint64(v)
		m.Base, m.Start, m.Last = seq, seq, seq
	}
	return m
}

// SetSummary implements [memory.SummaryWriter]: it replaces the session's
// running summary and changes nothing else (the context start stays). An
// unknown session is an error wrapping [memory.ErrNotFound]. It blocks
// until durable.
func (s *Store) SetSummary(ctx context.Context, session, summary string) error {
	if err := memory.ValidateSession(session); err != nil {
		return fmt.Errorf("boltstore: set summary: %w", err)
	}
	return s.updateSession(ctx, "set summary", session, func(tx *bolt.Tx, _ *sessionMeta) error {
		return putSummary(tx, []byte(session), summary)
	})
}

// SessionInfo describes one stored session.
type SessionInfo struct {
	Key string
	// Messages is how many messages are stored; Context how many of them
	// are after the context start (what Load may return).
	Messages uint64
	Context  uint64
	// Turns is the number of turns in the context.
	Turns int
	// SummaryBytes is the length of the running summary (0: none).
	SummaryBytes int
	LastActive   time.Time
}

// Sessions lists the stored sessions in key order. Sessions being deleted
// are not listed.
func (s *Store) Sessions(ctx context.Context) ([]SessionInfo, error) {
	if err := s.begin(ctx); err != nil {
		return nil, fmt.Errorf("boltstore: sessions: %w", err)
	}
	defer s.mu.RUnlock()
	var out []SessionInfo
	err := s.db.View(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketSessions).ForEach(func(k, v []byte) error {
			meta, _, err := getMeta(tx.Bucket(bucketSessions), k)
			if err != nil {
				return fmt.Errorf("session %q: %w", k, err)
			}
			out = append(out, SessionInfo{
				Key: string(k), Messages: meta.Last - meta.Base, Context: meta.Last - meta.Start,
				Turns: meta.Turns, SummaryBytes: len(tx.Bucket(bucketSummaries).Get(k)), LastActive: meta.LastActive,
			})
			return nil
		})
	})
	if err != nil {
		return nil, fmt.Errorf("boltstore: sessions: %w", err)
	}
	return out, nil
}

// Export writes the session's whole stored history to w as JSON Lines:
// one [memory.Message] per line, oldest first, including messages before
// the context start (the summary is not exported). It reads in bounded
// transactions, so a concurrent commit may add messages at the end while
// it runs; what it writes is always a prefix of the history. An unknown
// session is an error wrapping [memory.ErrNotFound]; a stored message that
// is not valid JSON one wrapping [memory.ErrInvalid]. ctx is checked
// between transactions.
func (s *Store) Export(ctx context.Context, session string, w io.Writer) error {
	if err := memory.ValidateSession(session); err != nil {
		return fmt.Errorf("boltstore: export: %w", err)
	}
	skey := []byte(session)
	var from uint64
	found := false
	var line bytes.Buffer
	for {
		batch, next, ok, err := s.exportChunk(ctx, skey, from, found)
		if err != nil {
			return fmt.Errorf("boltstore: export %q: %w", session, err)
		}
		if !ok {
			return fmt.Errorf("boltstore: export %q: %w", session, memory.ErrNotFound)
		}
		found = true
		for _, b := range batch {
			line.Reset()
			if err := json.Compact(&line, b.v); err != nil {
				return fmt.Errorf("boltstore: export %q: message %d: %w: %v", session, b.seq, memory.ErrInvalid, err)
			}
			line.WriteByte('\n')
			if _, err := w.Write(line.Bytes()); err != nil {
				return fmt.Errorf("boltstore: export %q: write: %w", session, err)
			}
		}
		if next == 0 {
			return nil
		}
		from = next
	}
}

type seqValue struct {
	seq uint64
	v   []byte
}

// exportChunk reads up to exportChunk messages of a session from seq from
// (0: from its first message). It returns the seq to continue at (0 when
// done) and ok=false when the session does not exist (checked on the first
// chunk only).
func (s *Store) exportChunk(ctx context.Context, skey []byte, from uint64, found bool) ([]seqValue, uint64, bool, error) {
	if err := s.begin(ctx); err != nil {
		return nil, 0, false, err
	}
	defer s.mu.RUnlock()
	var (
		out  []seqValue
		next uint64
		ok   = found
	)
	err := s.db.View(func(tx *bolt.Tx) error {
		meta, exists, err := getMeta(tx.Bucket(bucketSessions), skey)
		if err != nil {
			return err
		}
		if !found {
			if !exists {
				return nil
			}
			ok = true
			from = meta.Base + 1
		}
		c := tx.Bucket(bucketMsgs).Cursor()
		for k, v := c.Seek(msgKey(skey, from)); k != nil; k, v = c.Next() {
			seq, mine := parseMsgKey(k, skey)
			if !mine || seq > meta.Last {
				return nil
			}
			if len(out) == exportChunk {
				next = seq
				return nil
			}
			out = append(out, seqValue{seq: seq, v: append([]byte(nil), v...)})
		}
		return nil
	})
	return out, next, ok, err
}

// Reset implements [memory.SessionResetter]: it deletes a session's
// history, summary and receipts, so the next message starts a new, empty
// session under the same key and a redelivered message of the session is
// answered as new (unless the bus drops it as a duplicate within its own
// window). Messages and receipts are deleted in bounded transactions. A
// session with neither history nor receipts is an error wrapping
// [memory.ErrNotFound]. A daemon that has the session loaded keeps its
// in-memory context until the session is rebuilt; reset sessions while it
// is stopped.
func (s *Store) Reset(ctx context.Context, session string) error {
	if err := memory.ValidateSession(session); err != nil {
		return fmt.Errorf("boltstore: reset: %w", err)
	}
	dropped, err := s.dropSession(ctx, []byte(session), nil)
	if err != nil {
		return fmt.Errorf("boltstore: reset %q: %w", session, err)
	}
	receipts, err := s.deleteReceipts(ctx, func(r receiptHead) bool { return r.Session == session })
	if err != nil {
		return fmt.Errorf("boltstore: reset %q: receipts: %w", session, err)
	}
	if !dropped && receipts == 0 {
		return fmt.Errorf("boltstore: reset %q: %w", session, memory.ErrNotFound)
	}
	return nil
}

// PruneSessions implements [memory.SessionPruner]: it deletes every
// session whose last activity is before idleBefore, with its messages and
// summary, and reports how many. Receipts go by their own age
// ([Store.PruneReceipts]; the [memory.Pruner] uses the same retention). A
// session that becomes active while the prune runs is kept. Work is done
// in bounded transactions (ctx is checked between them); deletions
// interrupted by a crash are finished by the next call.
func (s *Store) PruneSessions(ctx context.Context, idleBefore time.Time) (int, error) {
	if err := s.finishPruning(ctx); err != nil {
		return 0, fmt.Errorf("boltstore: prune sessions: %w", err)
	}
	var idle [][]byte
	if err := s.begin(ctx); err != nil {
		return 0, fmt.Errorf("boltstore: prune sessions: %w", err)
	}
	err := s.db.View(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketSessions).ForEach(func(k, v []byte) error {
			var m struct {
				LastActive time.Time `json:"last_active"`
			}
			if json.Unmarshal(v, &m) == nil && m.LastActive.Before(idleBefore) {
				idle = append(idle, append([]byte(nil), k...))
			}
			return nil
		})
	})
	s.mu.RUnlock()
	if err != nil {
		return 0, fmt.Errorf("boltstore: prune sessions: %w", err)
	}
	n := 0
	for _, k := range idle {
		dropped, err := s.dropSession(ctx, k, func(m sessionMeta) bool { return m.LastActive.Before(idleBefore) })
		if err != nil {
			return n, fmt.Errorf("boltstore: prune sessions: session %q: %w", k, err)
		}
		if dropped {
			n++
		}
	}
	return n, nil
}

// finishPruning completes deletions recorded in the pruning bucket.
func (s *Store) finishPruning(ctx context.Context) error {
	if err := s.begin(ctx); err != nil {
		return err
	}
	var pending [][]byte
	err := s.db.View(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketPruning).ForEach(func(k, _ []byte) error {
			pending = append(pending, append([]byte(nil), k...))
			return nil
		})
	})
	s.mu.RUnlock()
	if err != nil {
		return err
	}
	for _, k := range pending {
		if err := s.deleteMessages(ctx, k); err != nil {
			return fmt.Errorf("session %q: %w", k, err)
		}
	}
	return nil
}

// dropSession deletes the session's meta (when keep is nil or keep(meta)
// is true), records its messages for deletion and deletes them. It
// reports whether the session existed and was dropped.
func (s *Store) dropSession(ctx context.Context, skey []byte, keep func(sessionMeta) bool) (bool, error) {
	if err := s.begin(ctx); err != nil {
		return false, err
	}
	var dropped bool
	err := s.write(func(tx *bolt.Tx) error {
		dropped = false
		sessions := tx.Bucket(bucketSessions)
		meta, ok, err := getMeta(sessions, skey)
		if err != nil || !ok || (keep != nil && !keep(meta)) {
			return err
		}
		pruning := tx.Bucket(bucketPruning)
		upto := meta.Last
		if v := pruning.Get(skey); len(v) == 8 {
			upto = max(upto, binary.BigEndian.Uint64(v))
		}
		var b [8]byte
		binary.BigEndian.PutUint64(b[:], upto)
		if err := pruning.Put(skey, b[:]); err != nil {
			return fmt.Errorf("record deletion: %w", err)
		}
		if err := sessions.Delete(skey); err != nil {
			return fmt.Errorf("delete session meta: %w", err)
		}
		if err := putSummary(tx, skey, ""); err != nil {
			return err
		}
		dropped = true
		return nil
	})
	s.mu.RUnlock()
	if err != nil || !dropped {
		return false, err
	}
	return true, s.deleteMessages(ctx, skey)
}

// deleteMessages deletes, in transactions of at most deleteChunk
// messages, the session's messages up to the seq recorded in the pruning
// bucket, then the record.
func (s *Store) deleteMessages(ctx context.Context, skey []byte) error {
	for {
		if err := s.begin(ctx); err != nil {
			return err
		}
		var done bool
		err := s.write(func(tx *bolt.Tx) error {
			done = false
			pruning := tx.Bucket(bucketPruning)
			v := pruning.Get(skey)
			if len(v) != 8 {
				done = true
				return nil
			}
			upto := binary.BigEndian.Uint64(v)
			msgs := tx.Bucket(bucketMsgs)
			c := msgs.Cursor()
			var keys [][]byte
			for k, _ := c.Seek(msgKey(skey, 0)); k != nil && len(keys) < deleteChunk; k, _ = c.Next() {
				seq, mine := parseMsgKey(k, skey)
				if !mine || seq > upto {
					break
				}
				keys = append(keys, append([]byte(nil), k...))
			}
			for _, k := range keys {
				if err := msgs.Delete(k); err != nil {
					return fmt.Errorf("delete message: %w", err)
				}
			}
			if len(keys) < deleteChunk {
				done = true
				return pruning.Delete(skey)
			}
			return nil
		})
		s.mu.RUnlock()
		if err != nil || done {
			return err
		}
	}
}

// Package boltstore implements [memory.Store] on a bbolt file.
//
// Layout (one bucket per concern, not one bucket per session):
//
//	msgs      session + 0x00 + big-endian uint64 seq -> JSON memory.Message
//	sessions  session -> JSON meta {last seq, context start, turns since
//	          start, last active}
//	summaries session -> the running summary (UTF-8 text; absent: none)
//	receipts  receipt key -> JSON memory.Receipt
//	pruning   session -> big-endian uint64: messages up to that seq are
//	          being deleted (a session pruned or reset)
//
// A commit writes only what the turn adds: its messages, its receipts and
// the session's small meta; the summary (up to several KB) has a bucket of
// its own and is written only when it changes (Compact, SetSummary, a
// fresh context). Writes go through bbolt's DB.Batch so concurrent
// sessions share one transaction and one fsync (group commit); a lone
// writer skips the batch delay and commits at once. A receipt's published
// mark (MarkPublished) is not a write of its own: it is written by the next
// write transaction, whatever it is for, or after [Options.MarkDelay] by a
// transaction of its own, and on Close — so a chat's turn costs one
// transaction. Reads walk a reverse cursor from a session's last message
// and stop at the context start or after the requested number of whole
// turns, so loading never scans the whole history.
//
// The file is [FileName] in data_dir. For the operator, on a stopped
// daemon, [History] runs the `switchboard history` verbs (list, export,
// reset, compact) and [CheckDataDir] tells `switchboard check` whether
// data_dir is usable and the file not held by a running daemon.
package boltstore

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	bolt "go.etcd.io/bbolt"
	bolterrors "go.etcd.io/bbolt/errors"

	"github.com/switchboard-chat/switchboard/internal/groupcommit"
	"github.com/switchboard-chat/switchboard/memory"
)

// Bucket names.
var (
	bucketMsgs     = []byte("msgs")
	bucketSessions = []byte("sessions")
	// bucketSummaries holds the running summaries, apart from the meta
	// that every commit rewrites. A file written before it existed kept
	// the summary in the meta; Open moves it here.
	bucketSummaries = []byte("summaries")
	bucketReceipts  = []byte("receipts")
	// bucketPruning records sessions whose messages are being deleted
	// (PruneSessions, Reset): session -> big-endian uint64 seq; messages
	// of the session with seq <= it are deleted in bounded transactions.
	bucketPruning = []byte("pruning")
)

// Defaults for [Options].
const (
	DefaultMaxBatchDelay = 2 * time.Millisecond
	DefaultMaxBatchSize  = 1000
	DefaultLockTimeout   = time.Second
	DefaultMarkDelay     = 100 * time.Millisecond
)

// ErrLocked is returned (wrapped, together with bbolt's timeout error) by
// Open and CompactFile when another process — usually the running daemon
// — holds the file's lock.
var ErrLocked = errors.New("boltstore: data file is locked by another process")

// lockedError is the error of a file held by another process: its text
// names the file; it matches ErrLocked and unwraps to bbolt's timeout.
type lockedError struct {
	path string
	wait time.Duration
	err  error
}

func (e *lockedError) Error() string {
	return fmt.Sprintf("boltstore: data file %s is locked by another process (waited %s): %v", e.path, e.wait, e.err)
}

func (e *lockedError) Is(target error) bool { return target == ErrLocked }
func (e *lockedError) Unwrap() error        { return e.err }

// pruneChunk bounds the receipts scanned by one PruneReceipts transaction.
const pruneChunk = 1000

// Options tune [Open]. The zero value is ready to use.
type Options struct {
	// MaxBatchDelay is how long a commit waits for others to join its
	// transaction when several are in flight (default 2ms).
	MaxBatchDelay time.Duration
	// MaxBatchSize is the most commits one transaction takes; a full batch
	// does not wait for MaxBatchDelay (default 1000).
	MaxBatchSize int
	// LockTimeout is how long Open waits for the file lock held by another
	// process or another Open of the same file (default 1s).
	LockTimeout time.Duration
	// MarkDelay is how long a published mark (MarkPublished) may wait
	// for the next write transaction to carry it before it is written by
	// one of its own (default 100ms). A mark lost in a crash only means
	// that a redelivery publishes the stored final once more, with the same
	// message id (see [memory.Store]).
	MarkDelay time.Duration
	// NoSync skips fsync on commit. Unsafe: a crash may lose or corrupt
	// data. For benchmarks and bulk loads only.
	NoSync bool
}

// Store is a [memory.Store] backed by one bbolt file. It is safe for
// concurrent use. The caller owns it and must Close it.
type Store struct {
	db   *bolt.DB
	path string

	// mu is held for reading by every operation and for writing by Close,
	// so Close waits for operations in flight and later calls see closed.
	mu     sync.RWMutex
	closed bool

	// group commits the writes: concurrent ones share a transaction, one
	// alone commits directly instead of waiting MaxBatchDelay for company.
	group *groupcommit.Writer

	marks marks
}

var (
	_ memory.Store           = (*Store)(nil)
	_ memory.Compactor       = (*Store)(nil)
	_ memory.ReceiptPruner   = (*Store)(nil)
	_ memory.SessionPruner   = (*Store)(nil)
	_ memory.SessionResetter = (*Store)(nil)
)

// sessionMeta is the value stored in the sessions bucket.
type sessionMeta struct {
	// Base is the seq before the session's first message: 0, or for a
	// session created again after a prune or reset, where the old one's
	// messages ended.
	Base       uint64    `json:"base,omitempty"`
	Last       uint64    `json:"last"`  // seq of the last message (0: none)
	Start      uint64    `json:"start"` // messages with seq > Start are in the context
	Turns      int       `json:"turns"` // turns since Start
	LastActive time.Time `json:"last_active"`
}

// Open opens (creating if needed) the bbolt file at path and its parent
// folders. If another process holds the file, Open fails after
// opts.LockTimeout with an error saying the file is locked.
func Open(path string, opts Options) (*Store, error) {
	if path == "" {
		return nil, errors.New("boltstore: open: path is empty")
	}
	if opts.MaxBatchSize < 0 {
		return nil, fmt.Errorf("boltstore: open %s: max_batch_size must be >= 0, got %d", path, opts.MaxBatchSize)
	}
	if opts.MaxBatchSize == 0 {
		opts.MaxBatchSize = DefaultMaxBatchSize
	}
	if opts.MaxBatchDelay < 0 {
		return nil, fmt.Errorf("boltstore: open %s: max_batch_delay must be >= 0, got %s", path, opts.MaxBatchDelay)
	}
	if opts.LockTimeout < 0 {
		return nil, fmt.Errorf("boltstore: open %s: lock_timeout must be >= 0, got %s", path, opts.LockTimeout)
	}
	if opts.MarkDelay < 0 {
		return nil, fmt.Errorf("boltstore: open %s: mark_delay must be >= 0, got %s", path, opts.MarkDelay)
	}
	if opts.MarkDelay == 0 {
		opts.MarkDelay = DefaultMarkDelay
	}
	if opts.MaxBatchDelay == 0 {
		opts.MaxBatchDelay = DefaultMaxBatchDelay
	}
	if opts.LockTimeout == 0 {
		opts.LockTimeout = DefaultLockTimeout
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("boltstore: open %s: create folder: %w", path, err)
	}
	db, err := openLocked(path, opts)
	if err != nil {
		return nil, err
	}
	db.MaxBatchDelay = opts.MaxBatchDelay
	db.MaxBatchSize = opts.MaxBatchSize
	err = db.Update(func(tx *bolt.Tx) error {
		legacy := tx.Bucket(bucketSummaries) == nil
		for _, name := range [][]byte{bucketMsgs, bucketSessions, bucketSummaries, bucketReceipts, bucketPruning} {
			if _, err := tx.CreateBucketIfNotExists(name); err != nil {
				return fmt.Errorf("bucket %s: %w", name, err)
			}
		}
		if legacy {
			return moveSummaries(tx)
		}
		return nil
	})
	if err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("boltstore: open %s: %w", path, err)
	}
	s := &Store{db: db, path: path, group: groupcommit.New(db)}
	s.marks.delay = opts.MarkDelay
	return s, nil
}

// moveSummaries moves the summaries of a file written before the
// summaries bucket existed out of the session metas into that bucket.
func moveSummaries(tx *bolt.Tx) error {
	sessions, summaries := tx.Bucket(bucketSessions), tx.Bucket(bucketSummaries)
	type move struct {
		key     []byte
		meta    sessionMeta
		summary string
	}
	var moves []move
	err := sessions.ForEach(func(k, v []byte) error {
		var old struct {
			Summary string `json:"summary"`
		}
		if json.Unmarshal(v, &old) != nil || old.Summary == "" {
			return nil // an unreadable meta is reported where it is used
		}
		meta, ok, err := getMeta(sessions, k)
		if err != nil || !ok {
			return nil
		}
		moves = append(moves, move{key: append([]byte(nil), k...), meta: meta, summary: old.Summary})
		return nil
	})
	if err != nil {
		return err
	}
	for _, m := range moves {
		if err := summaries.Put(m.key, []byte(m.summary)); err != nil {
			return fmt.Errorf("move summary of %q: %w", m.key, err)
		}
		if err := putMeta(sessions, m.key, m.meta); err != nil {
			return err
		}
	}
	return nil
}

// openLocked opens the bbolt file and takes its lock. If the file was
// replaced while Open waited for the lock (CompactFile renames a new file
// over the old one while holding the old one's lock), the old file is
// closed and the new one opened, so the store never writes to a file that
// is no longer at path.
func openLocked(path string, opts Options) (*bolt.DB, error) {
	for attempt := 0; ; attempt++ {
		before, statErr := os.Stat(path)
		db, err := bolt.Open(path, 0o600, &bolt.Options{
			Timeout:      opts.LockTimeout,
			NoSync:       opts.NoSync,
			FreelistType: bolt.FreelistMapType,
		})
		if errors.Is(err, bolterrors.ErrTimeout) {
			return nil, &lockedError{path: path, wait: opts.LockTimeout, err: err}
		}
		if err != nil {
			return nil, fmt.Errorf("boltstore: open %s: %w", path, err)
		}
		after, err := os.Stat(path)
		if err == nil && (statErr != nil || os.SameFile(before, after)) {
			return db, nil
		}
		_ = db.Close()
		if attempt == 2 {
			if err == nil {
				err = errors.New("the file keeps being replaced")
			}
			return nil, fmt.Errorf("boltstore: open %s: %w", path, err)
		}
	}
}

// Path returns the file the store was opened on.
func (s *Store) Path() string { return s.path }

// Close closes the file. It waits for operations in flight, is idempotent,
// and every other method returns [memory.ErrClosed] afterwards.
//
// Published marks not yet written are written first.
func (s *Store) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	s.closed = true
	var errs []error
	if s.marks.stop() {
		if err := s.db.Update(s.marks.apply); err != nil {
			errs = append(errs, fmt.Errorf("write published marks: %w", err))
		}
	}
	if err := s.db.Close(); err != nil {
		errs = append(errs, err)
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("boltstore: close %s: %w", s.path, err)
	}
	return nil
}

// begin takes the read side of mu and fails if the store is closed. The
// caller must call s.mu.RUnlock when it returns nil.
func (s *Store) begin(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.RLock()
	if s.closed {
		s.mu.RUnlock()
		return memory.ErrClosed
	}
	return nil
}

// write commits fn durably, with the published marks waiting to be
// written. Concurrent writers share a DB.Batch transaction; a writer
// alone commits directly. fn may run more than once and must compute
// everything from bucket state.
func (s *Store) write(fn func(*bolt.Tx) error) error {
	withMarks := func(tx *bolt.Tx) error {
		if err := fn(tx); err != nil {
			return err
		}
		return s.marks.apply(tx)
	}
	return s.group.Update(withMarks)
}

// CommitTurn implements [memory.Store]. It validates rec (errors wrap
// [memory.ErrInvalid]), fills zero message and receipt times with the
// commit time, and returns a wrapped [memory.ErrDuplicate] without writing
// anything when a receipt key (rec.Receipt's or one of rec.Also) exists.
func (s *Store) CommitTurn(ctx context.Context, rec memory.TurnRecord) error {
	if err := rec.Validate(); err != nil {
		return fmt.Errorf("boltstore: commit turn: %w", err)
	}
	now := time.Now()
	enc, err := memory.EncodeTurn(rec, now)
	if err != nil {
		return fmt.Errorf("boltstore: commit turn %q: %w", rec.Receipt.Key, err)
	}
	r := rec.Receipt
	skey := []byte(rec.Session)

	if err := s.begin(ctx); err != nil {
		return fmt.Errorf("boltstore: commit turn %q: %w", r.Key, err)
	}
	defer s.mu.RUnlock()

	var dup bool
	err = s.write(func(tx *bolt.Tx) error {
		dup = false
		bucketR := tx.Bucket(bucketReceipts)
		for _, kv := range enc.Receipts {
			if bucketR.Get([]byte(kv.Key)) != nil {
				dup = true
				return nil
			}
		}
		sessions := tx.Bucket(bucketSessions)
		meta, ok, err := getMeta(sessions, skey)
		if err != nil {
			return err
		}
		if !ok {
			meta = newMeta(tx, skey)
		}
		if rec.Fresh {
			meta.Start = meta.Last
			meta.Turns = 0
			if err := putSummary(tx, skey, ""); err != nil {
				return err
			}
		}
		bucket := tx.Bucket(bucketMsgs)
		for _, m := range enc.Messages {
			meta.Last++
			if err := bucket.Put(msgKey(skey, meta.Last), m); err != nil {
				return fmt.Errorf("put message %d: %w", meta.Last, err)
			}
		}
		meta.Turns += enc.Turns
		meta.LastActive = now
		if err := putMeta(sessions, skey, meta); err != nil {
			return err
		}
		for _, kv := range enc.Receipts {
			if err := bucketR.Put([]byte(kv.Key), kv.Value); err != nil {
				return fmt.Errorf("put receipt %q: %w", kv.Key, err)
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("boltstore: commit turn %q of session %q: %w", r.Key, rec.Session, err)
	}
	if dup {
		return fmt.Errorf("boltstore: commit turn %q: %w", r.Key, memory.ErrDuplicate)
	}
	return nil
}

// Load implements [memory.Store]. maxTurns must be >= 0; 0 returns the
// summary and counters without messages. An unknown session yields an empty
// snapshot. A stored record that cannot be decoded is an error wrapping
// [memory.ErrInvalid].
func (s *Store) Load(ctx context.Context, session string, maxTurns int) (memory.Snapshot, error) {
	if err := memory.ValidateSession(session); err != nil {
		return memory.Snapshot{}, fmt.Errorf("boltstore: load: %w", err)
	}
	if maxTurns < 0 {
		return memory.Snapshot{}, fmt.Errorf("boltstore: load %q: maxTurns must be >= 0, got %d", session, maxTurns)
	}
	if err := s.begin(ctx); err != nil {
		return memory.Snapshot{}, fmt.Errorf("boltstore: load %q: %w", session, err)
	}
	defer s.mu.RUnlock()

	skey := []byte(session)
	var snap memory.Snapshot
	err := s.db.View(func(tx *bolt.Tx) error {
		meta, ok, err := getMeta(tx.Bucket(bucketSessions), skey)
		if err != nil || !ok {
			return err
		}
		snap.Summary = string(tx.Bucket(bucketSummaries).Get(skey))
		snap.Turns = meta.Turns
		snap.LastActive = meta.LastActive
		if maxTurns == 0 || meta.Last <= meta.Start {
			return nil
		}
		turns := 0
		err = walkBack(tx.Bucket(bucketMsgs), skey, meta, func(seq uint64, v []byte) (bool, error) {
			m, err := memory.DecodeMessage(v)
			if err != nil {
				return false, fmt.Errorf("message %d: %w", seq, err)
			}
			snap.Messages = append(snap.Messages, m)
			if m.TurnStart {
				turns++
			}
			return turns < maxTurns, nil
		})
		return err
	})
	if err != nil {
		return memory.Snapshot{}, fmt.Errorf("boltstore: load %q: %w", session, err)
	}
	// Collected newest first; return oldest first.
	for i, j := 0, len(snap.Messages)-1; i < j; i, j = i+1, j-1 {
		snap.Messages[i], snap.Messages[j] = snap.Messages[j], snap.Messages[i]
	}
	return snap, nil
}

// walkBack calls fn for the session's messages after the context start,
// newest first, until fn returns false or an error. Values are valid only
// during the call.
func walkBack(b *bolt.Bucket, skey []byte, meta sessionMeta, fn func(seq uint64, v []byte) (bool, error)) error {
	c := b.Cursor()
	// Position on the last key <= msgKey(last).
	var v []byte
	k, _ := c.Seek(msgKey(skey, meta.Last+1))
	if k == nil {
		k, v = c.Last()
	} else {
		k, v = c.Prev()
	}
	for ; k != nil; k, v = c.Prev() {
		seq, ok := parseMsgKey(k, skey)
		if !ok || seq <= meta.Start {
			return nil
		}
		more, err := fn(seq, v)
		if err != nil || !more {
			return err
		}
	}
	return nil
}

// Receipt implements [memory.Store].
func (s *Store) Receipt(ctx context.Context, key string) (memory.Receipt, bool, error) {
	if err := memory.ValidateReceiptKey(key); err != nil {
		return memory.Receipt{}, false, fmt.Errorf("boltstore: receipt: %w", err)
	}
	if err := s.begin(ctx); err != nil {
		return memory.Receipt{}, false, fmt.Errorf("boltstore: receipt %q: %w", key, err)
	}
	defer s.mu.RUnlock()
	var (
		r  memory.Receipt
		ok bool
	)
	err := s.db.View(func(tx *bolt.Tx) error {
		v := tx.Bucket(bucketReceipts).Get([]byte(key))
		if v == nil {
			return nil
		}
		ok = true
		var err error
		r, err = memory.DecodeReceipt(v)
		return err
	})
	if err != nil {
		return memory.Receipt{}, false, fmt.Errorf("boltstore: receipt %q: %w", key, err)
	}
	if ok && !r.Published && s.marks.pending(key) {
		r.Published = true
	}
	return r, ok, nil
}

// MarkPublished implements [memory.Store]. An unknown key is an error
// wrapping [memory.ErrNotFound]; marking twice is not an error. It reads
// (the key must exist) but does not write: the mark is written by the
// next write transaction, after [Options.MarkDelay] at the latest, or on
// Close; [Store.Receipt] shows it at once.
func (s *Store) MarkPublished(ctx context.Context, key string) error {
	if err := memory.ValidateReceiptKey(key); err != nil {
		return fmt.Errorf("boltstore: mark published: %w", err)
	}
	if err := s.begin(ctx); err != nil {
		return fmt.Errorf("boltstore: mark published %q: %w", key, err)
	}
	defer s.mu.RUnlock()
	var found, published bool
	err := s.db.View(func(tx *bolt.Tx) error {
		v := tx.Bucket(bucketReceipts).Get([]byte(key))
		if v == nil {
			return nil
		}
		found = true
		var r struct {
			Published bool `json:"published"`
		}
		if err := json.Unmarshal(v, &r); err != nil {
			return fmt.Errorf("%w: %v", memory.ErrInvalid, err)
		}
		published = r.Published
		return nil
	})
	switch {
	case err != nil:
		return fmt.Errorf("boltstore: mark published %q: %w", key, err)
	case !found:
		return fmt.Errorf("boltstore: mark published %q: %w", key, memory.ErrNotFound)
	case !published:
		s.marks.add(key, s.flushMarks)
	}
	return nil
}

// flushMarks writes the published marks that no other write carried
// within MarkDelay.
func (s *Store) flushMarks() {
	if s.begin(context.Background()) != nil {
		return
	}
	defer s.mu.RUnlock()
	// A failed write leaves the marks waiting for the next one.
	_ = s.write(func(*bolt.Tx) error { return nil })
}

// Compact implements [memory.Compactor].
func (s *Store) Compact(ctx context.Context, session, summary string, keepTurns int) error {
	if err := memory.ValidateSession(session); err != nil {
		return fmt.Errorf("boltstore: compact: %w", err)
	}
	if keepTurns < 0 {
		return fmt.Errorf("boltstore: compact %q: keepTurns must be >= 0, got %d", session, keepTurns)
	}
	return s.updateSession(ctx, "compact", session, func(tx *bolt.Tx, meta *sessionMeta) error {
		if err := putSummary(tx, []byte(session), summary); err != nil {
			return err
		}
		if keepTurns == 0 {
			meta.Start, meta.Turns = meta.Last, 0
			return nil
		}
		turns := 0
		newStart := meta.Start
		err := walkBack(tx.Bucket(bucketMsgs), []byte(session), *meta, func(seq uint64, v []byte) (bool, error) {
			var m struct {
				TurnStart bool `json:"turn_start"`
			}
			if err := json.Unmarshal(v, &m); err != nil {
				return false, fmt.Errorf("message %d: %w: %v", seq, memory.ErrInvalid, err)
			}
			if m.TurnStart {
				turns++
				if turns == keepTurns {
					newStart = seq - 1
					return false, nil
				}
			}
			return true, nil
		})
		if err != nil {
			return err
		}
		if turns == keepTurns {
			meta.Start, meta.Turns = newStart, keepTurns
		}
		return nil
	})
}

// updateSession changes a session's metadata in one durable write: fn
// gets the stored meta to modify (it may read other buckets of tx); the
// result is stored when fn returns nil. An unknown session is an error
// wrapping memory.ErrNotFound. op names the operation in errors.
func (s *Store) updateSession(ctx context.Context, op, session string, fn func(tx *bolt.Tx, meta *sessionMeta) error) error {
	if err := s.begin(ctx); err != nil {
		return fmt.Errorf("boltstore: %s %q: %w", op, session, err)
	}
	defer s.mu.RUnlock()
	skey := []byte(session)
	var notFound bool
	err := s.write(func(tx *bolt.Tx) error {
		notFound = false
		sessions := tx.Bucket(bucketSessions)
		meta, ok, err := getMeta(sessions, skey)
		if err != nil {
			return err
		}
		if !ok {
			notFound = true
			return nil
		}
		if err := fn(tx, &meta); err != nil {
			return err
		}
		return putMeta(sessions, skey, meta)
	})
	if err != nil {
		return fmt.Errorf("boltstore: %s %q: %w", op, session, err)
	}
	if notFound {
		return fmt.Errorf("boltstore: %s %q: %w", op, session, memory.ErrNotFound)
	}
	return nil
}

// PruneReceipts implements [memory.ReceiptPruner]. Each transaction scans
// at most 1000 receipts, so a large prune never holds the writer for long;
// ctx is checked between transactions. Receipts that cannot be decoded are
// kept.
func (s *Store) PruneReceipts(ctx context.Context, before time.Time) (int, error) {
	n, err := s.deleteReceipts(ctx, func(r receiptHead) bool { return r.Time.Before(before) })
	if err != nil {
		return n, fmt.Errorf("boltstore: prune receipts: %w", err)
	}
	return n, nil
}

// receiptHead is the part of a stored receipt that decides its deletion.
type receiptHead struct {
	Session string    `json:"session"`
	Time    time.Time `json:"time"`
}

// deleteReceipts deletes the receipts for which del is true, scanning at
// most pruneChunk receipts per transaction, and reports how many.
func (s *Store) deleteReceipts(ctx context.Context, del func(receiptHead) bool) (int, error) {
	var (
		total int
		from  []byte
	)
	for {
		n, next, err := s.pruneChunk(ctx, from, del)
		total += n
		if err != nil || next == nil {
			return total, err
		}
		from = next
	}
}

// pruneChunk deletes the receipts del selects among at most pruneChunk
// keys starting at from. It returns the key to resume at, or nil when the
// scan is done.
func (s *Store) pruneChunk(ctx context.Context, from []byte, del func(receiptHead) bool) (int, []byte, error) {
	if err := s.begin(ctx); err != nil {
		return 0, nil, err
	}
	defer s.mu.RUnlock()
	var (
		deleted int
		next    []byte
	)
	err := s.db.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketReceipts)
		c := b.Cursor()
		var old [][]byte
		k, v := c.First()
		if from != nil {
			k, v = c.Seek(from)
		}
		for i := 0; k != nil; k, v = c.Next() {
			if i == pruneChunk {
				next = append([]byte(nil), k...)
				break
			}
			i++
			var r receiptHead
			if json.Unmarshal(v, &r) == nil && del(r) {
				old = append(old, append([]byte(nil), k...))
			}
		}
		for _, k := range old {
			if err := b.Delete(k); err != nil {
				return fmt.Errorf("delete receipt %q: %w", k, err)
			}
		}
		deleted = len(old)
		return nil
	})
	if err != nil {
		return 0, nil, err
	}
	return deleted, next, nil
}

func msgKey(skey []byte, seq uint64) []byte {
	k := make([]byte, len(skey)+1+8)
	copy(k, skey)
	binary.BigEndian.PutUint64(k[len(skey)+1:], seq)
	return k
}

// parseMsgKey returns the seq of k if k belongs to the session skey.
func parseMsgKey(k, skey []byte) (uint64, bool) {
	if len(k) != len(skey)+9 || k[len(skey)] != 0 || string(k[:len(skey)]) != string(skey) {
		return 0, false
	}
	return binary.BigEndian.Uint64(k[len(skey)+1:]), true
}

func getMeta(b *bolt.Bucket, skey []byte) (sessionMeta, bool, error) {
	var meta sessionMeta
	v := b.Get(skey)
	if v == nil {
		return meta, false, nil
	}
	if err := json.Unmarshal(v, &meta); err != nil {
		return meta, false, fmt.Errorf("session meta: %w: %v", memory.ErrInvalid, err)
	}
	if meta.Start > meta.Last || meta.Base > meta.Start || meta.Turns < 0 {
		return meta, false, fmt.Errorf("session meta: %w: base %d, start %d, last %d, turns %d", memory.ErrInvalid, meta.Base, meta.Start, meta.Last, meta.Turns)
	}
	return meta, true, nil
}

// putSummary stores the session's running summary; "" deletes it.
func putSummary(tx *bolt.Tx, skey []byte, summary string) error {
	b := tx.Bucket(bucketSummaries)
	if summary == "" {
		if b.Get(skey) == nil {
			return nil
		}
		if err := b.Delete(skey); err != nil {
			return fmt.Errorf("delete summary: %w", err)
		}
		return nil
	}
	if err := b.Put(skey, []byte(summary)); err != nil {
		return fmt.Errorf("put summary: %w", err)
	}
	return nil
}

func putMeta(b *bolt.Bucket, skey []byte, meta sessionMeta) error {
	v, err := json.Marshal(meta)
	if err != nil {
		return fmt.Errorf("encode session meta: %w", err)
	}
	if err := b.Put(skey, v); err != nil {
		return fmt.Errorf("put session meta: %w", err)
	}
	return nil
}

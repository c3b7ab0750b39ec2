// Package jsstore implements [memory.Store] on JetStream, for several
// Switchboard instances sharing one NATS cluster (issue 17): every
// instance sees the history and the receipts the others wrote, and the
// cluster replicates them (Options.Replicas, the daemon's bus.replicas).
//
// # Layout
//
// One stream, "<PREFIX>_HISTORY", captures "<prefix>.history.>" and keeps
// one message per subject (MaxMsgsPerSubject 1), so every subject is a
// record that a newer message replaces. Session and receipt keys are
// arbitrary strings; they appear in subjects as one base64url token (S, K
// below), so no key can reach another key's subjects.
//
//	<prefix>.history.h.S       the session head: JSON {last chunk, context
//	                           start, turns since the start, summary,
//	                           last active}; headers carry last active
//	<prefix>.history.m.S.N     chunk N of the session: a JSON array of
//	                           stored messages ([memory.EncodeTurn])
//	<prefix>.history.m.S.N.I   part I (1, 2, ...) of a chunk larger than
//	                           the connection's max payload (header
//	                           Sb-Parts on part 0 says how many)
//	<prefix>.history.r.K       the receipt of inbound key K (JSON
//	                           [memory.Receipt]); headers carry session
//	                           and time, so scans read headers only
//
// A commit splits its messages into chunks at every message that starts a
// turn, so a turn's first message is always the first message of a chunk
// and the context start ("chunks after Start") is a chunk number.
//
// # Atomicity: one atomic batch per commit
//
// CommitTurn publishes its chunks, one receipt per key (rec.Receipt and
// rec.Also) and the new session head as one JetStream atomic batch
// (nats-server 2.12+, stream option allow_atomic; nats.go 1.55 has the
// stream option but no batch publisher, so the store sets the three
// Nats-Batch-* headers itself and sends the commit message with
// [jetstream.JetStream.PublishMsg]). The server checks every message's
// Nats-Expected-Last-Subject-Sequence when the batch commits and stores
// all of it or none of it:
//
//   - each receipt expects sequence 0 on its subject: the key was never
//     committed (or was pruned or reset), in any session;
//   - the head expects the sequence of the head the commit was computed
//     from (0 for a new session): optimistic concurrency on the session.
//
// One message per turn alone cannot do this: receipts must be found by key
// (Receipt, MarkPublished, the duplicate check across sessions) and a turn
// can answer several keys; a KV receipt written beside the turn would be a
// second, non-atomic step. Nats-Msg-Id is not used: its window is short,
// and a key whose receipt was pruned or reset must commit again.
//
// Two instances racing on one session cannot both commit: the first batch
// to commit moves the head, and the second fails its head (or receipt)
// check as a whole. The loser then looks its keys up: when one exists the
// commit is a duplicate ([memory.ErrDuplicate]), otherwise it re-reads the
// head and tries again on top of the winner's turn. Within one process
// commits of a session queue on a per-session lock and reuse the head they
// wrote last, so only another instance causes a retry.
//
// A crash between steps cannot leave half a turn: before the commit
// message the server holds the batch apart and drops it when it is not
// committed in time; after it, the batch is stored whole. A commit whose
// acknowledgement was lost is retried by the agent after redelivery, finds
// its own receipt and reports a duplicate, which the agent answers by
// re-publishing the stored final envelope.
//
// # Loading only what the next request needs
//
// Load reads the head (one message), then the chunks from the last one
// backwards, fetching as many in parallel as turns are still missing,
// until it holds maxTurns whole turns or reaches the context start. The
// cost depends on maxTurns, never on the length of the history.
//
// Reads use the stream leader's message API, not direct get: a direct get
// may be answered by a replica that has not applied the latest commit, and
// an instance taking a session over must see the turns the previous owner
// wrote.
//
// # Durability
//
// Every write returns after the stream acknowledged it: on a replicated
// stream, after a quorum of nodes stored it; on one node, after the server
// wrote it to its file store (on one node the server stages every atomic
// batch in a file of its own and syncs it, so a commit costs a few
// syncs). Commits are grouped: those that arrive while a batch is in
// flight go together in the next one (at most 500 messages), so
// concurrent sessions share one round trip and one staging file; when a
// group batch fails (one of its commits conflicts or is a duplicate),
// each commit of it is sent again alone for its own outcome.
//
// # Deleting
//
// PruneSessions and Reset first replace the head with a tombstone (with
// the same optimistic check), then purge the session's chunks older than
// the tombstone, then the tombstone itself. A commit that meets a
// tombstone starts a new context numbered after the old chunks, so a crash
// between the steps never mixes old and new messages; a tombstone left by
// a crash is finished by the next PruneSessions or Reset. Reset and
// PruneReceipts scan the receipts' headers with an ordered consumer (as
// boltstore scans its receipts bucket).
//
// Besides [memory.Store] the store is a [memory.Compactor],
// [memory.SummaryWriter], [memory.ReceiptPruner], [memory.SessionPruner]
// and [memory.SessionResetter]. The operator's history verbs (list,
// export, compact the file) and the data_dir check are boltstore's and
// have no counterpart here yet.
package jsstore

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/switchboard-chat/switchboard/internal/provision"
	"github.com/switchboard-chat/switchboard/memory"
)

// Defaults for [Options].
const (
	DefaultPrefix  = "switchboard"
	DefaultTimeout = 10 * time.Second
)

// Message headers the store writes.
const (
	hdrSession    = "Sb-Session"
	hdrTime       = "Sb-Time"
	hdrLastActive = "Sb-Last-Active"
	hdrDeleted    = "Sb-Deleted"
	hdrParts      = "Sb-Parts"
)

// Options configure [Open]. The zero value is ready to use.
type Options struct {
	// Prefix names the stream ("<PREFIX>_HISTORY", upper-cased) and its
	// subjects ("<prefix>.history.>"), so two deployments on one cluster
	// do not collide. Letters, digits, '-' and '_' (default
	// "switchboard").
	Prefix string
	// Replicas of the stream (default 1; 3 on a 3-node cluster). An
	// existing stream is updated to it when NATS allows, else Open says
	// why not.
	Replicas int
	// Timeout bounds each request to the server (default 10s).
	Timeout time.Duration
}

var prefixRE = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)

// Store is a [memory.Store] on one JetStream stream. It is safe for
// concurrent use; it does not own the connection. The caller must Close it.
type Store struct {
	nc     *nats.Conn
	js     jetstream.JetStream
	stream jetstream.Stream
	opts   Options
	name   string // stream name
	base   string // "<prefix>.history."

	group grouper
	locks sessionLocks

	// mu is held for reading by every operation and for writing by Close,
	// so Close waits for operations in flight and later calls see closed.
	mu     sync.RWMutex
	closed bool
}

var (
	_ memory.Store           = (*Store)(nil)
	_ memory.Compactor       = (*Store)(nil)
	_ memory.SummaryWriter   = (*Store)(nil)
	_ memory.ReceiptPruner   = (*Store)(nil)
	_ memory.SessionPruner   = (*Store)(nil)
	_ memory.SessionResetter = (*Store)(nil)
)

// StreamName returns the name of the stream a store with this prefix uses
// ("" selects [DefaultPrefix]).
func StreamName(prefix string) string {
	if prefix == "" {
		prefix = DefaultPrefix
	}
	return upper(prefix) + "_HISTORY"
}

func upper(s string) string {
	b := []byte(s)
	for i, c := range b {
		if 'a' <= c && c <= 'z' {
			b[i] = c - 'a' + 'A'
		}
	}
	return string(b)
}

// Open creates or updates the store's stream over nc and returns the
// store. The server must run JetStream 2.12 or later (atomic batches).
func Open(ctx context.Context, nc *nats.Conn, opts Options) (*Store, error) {
	if nc == nil {
		return nil, errors.New("jsstore: open: no NATS connection")
	}
	if opts.Prefix == "" {
		opts.Prefix = DefaultPrefix
	}
	if !prefixRE.MatchString(opts.Prefix) {
		return nil, fmt.Errorf("jsstore: open: prefix %q: use 1 to 64 letters, digits, '-' or '_'", opts.Prefix)
	}
	if opts.Replicas == 0 {
		opts.Replicas = 1
	}
	if opts.Replicas < 1 || opts.Replicas > 5 {
		return nil, fmt.Errorf("jsstore: open: replicas must be between 1 and 5, got %d", opts.Replicas)
	}
	if opts.Timeout == 0 {
		opts.Timeout = DefaultTimeout
	}
	if opts.Timeout < 0 {
		return nil, fmt.Errorf("jsstore: open: timeout must be >= 0, got %s", opts.Timeout)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, fmt.Errorf("jsstore: open: %w", err)
	}
	s := &Store{
		nc:   nc,
		js:   js,
		opts: opts,
		name: StreamName(opts.Prefix),
		base: opts.Prefix + ".history.",
	}
	s.locks.init()
	cfg := jetstream.StreamConfig{
		Name:               s.name,
		Description:        "Switchboard conversation history and de-duplication receipts (memory/jsstore)",
		Subjects:           []string{s.base + ">"},
		Storage:            jetstream.FileStorage,
		Retention:          jetstream.LimitsPolicy,
		MaxMsgsPerSubject:  1,
		Discard:            jetstream.DiscardOld,
		Replicas:           opts.Replicas,
		AllowAtomicPublish: true,
		AllowDirect:        false,
	}
	// Instances starting together send this at once: see internal/provision.
	var st jetstream.Stream
	err = provision.Do(ctx, nil, "stream "+s.name, opts.Timeout, func(ctx context.Context) error {
		st, err = js.CreateOrUpdateStream(ctx, cfg)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("jsstore: open: create or update stream %s (replicas %d): %w", s.name, opts.Replicas, err)
	}
	if got := st.CachedInfo().Config; !got.AllowAtomicPublish {
		return nil, fmt.Errorf("jsstore: open: stream %s does not allow atomic batches: the server is older than 2.12", s.name)
	}
	s.stream = st
	return s, nil
}

// Close releases the store (not the connection). It waits for operations
// in flight, is idempotent, and every other method returns
// [memory.ErrClosed] afterwards.
func (s *Store) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	return nil
}

// begin takes the read side of mu and fails if ctx is done or the store is
// closed. The caller must call s.mu.RUnlock when it returns nil.
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

// io returns the context for the requests of an operation that started:
// it outlives the caller's ctx (a started write completes) and ends after
// Options.Timeout.
func (s *Store) io(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), s.opts.Timeout)
}

var enc = base64.RawURLEncoding

func (s *Store) headSubject(session string) string {
	return s.base + "h." + enc.EncodeToString([]byte(session))
}

func (s *Store) chunkSubject(session string, n uint64) string {
	return s.base + "m." + enc.EncodeToString([]byte(session)) + "." + strconv.FormatUint(n, 10)
}

func (s *Store) chunksFilter(session string) string {
	return s.base + "m." + enc.EncodeToString([]byte(session)) + ".>"
}

func (s *Store) receiptSubject(key string) string {
	return s.base + "r." + enc.EncodeToString([]byte(key))
}

// head is the stored session head.
type head struct {
	// Base is the last chunk of a deleted earlier context of the same
	// key; this context's chunks are numbered after it.
	Base       uint64    `json:"base,omitempty"`
	Last       uint64    `json:"last"`  // last chunk (Base: none)
	Start      uint64    `json:"start"` // chunks after Start are in the context
	Turns      int       `json:"turns"` // turns since Start
	Summary    string    `json:"summary,omitempty"`
	LastActive time.Time `json:"last_active"`
	// Deleted marks a tombstone: the session is being deleted; it reads
	// as absent.
	Deleted bool `json:"deleted,omitempty"`
}

// headState is a head with the stream sequence of its message (0: none
// stored).
type headState struct {
	seq uint64
	h   head
}

// live reports whether the head describes a stored session.
func (hs headState) live() bool { return hs.seq != 0 && !hs.h.Deleted }

// getLast returns the message stored on subject, or nil when there is
// none.
func (s *Store) getLast(ctx context.Context, subject string) (*jetstream.RawStreamMsg, error) {
	m, err := s.stream.GetLastMsgForSubject(ctx, subject)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return m, nil
}

// readHead reads the session's head from the stream leader.
func (s *Store) readHead(ctx context.Context, session string) (headState, error) {
	m, err := s.getLast(ctx, s.headSubject(session))
	if err != nil || m == nil {
		return headState{}, err
	}
	var h head
	if err := json.Unmarshal(m.Data, &h); err != nil {
		return headState{}, fmt.Errorf("session head: %w: %v", memory.ErrInvalid, err)
	}
	if h.Start > h.Last || h.Base > h.Start || h.Turns < 0 {
		return headState{}, fmt.Errorf("session head: %w: base %d, start %d, last %d, turns %d", memory.ErrInvalid, h.Base, h.Start, h.Last, h.Turns)
	}
	return headState{seq: m.Sequence, h: h}, nil
}

// headMsg is the message that stores h as the session's head.
func (s *Store) headMsg(session string, h head) (*nats.Msg, error) {
	b, err := json.Marshal(h)
	if err != nil {
		return nil, fmt.Errorf("encode session head: %w", err)
	}
	m := nats.NewMsg(s.headSubject(session))
	m.Data = b
	m.Header.Set(hdrLastActive, h.LastActive.UTC().Format(time.RFC3339Nano))
	if h.Deleted {
		m.Header.Set(hdrDeleted, "1")
	}
	return m, nil
}

// sessionLocks serialises the writes of one session within the process
// and remembers the head each session's last write stored, so a commit
// does not read it again.
type sessionLocks struct {
	mu    sync.Mutex
	m     map[string]*sessionLock
	heads map[string]headState // cache of idle sessions' heads
}

// maxCachedHeads bounds the heads remembered for idle sessions.
const maxCachedHeads = 4096

type sessionLock struct {
	ch    chan struct{} // holds a token while locked
	refs  int
	head  headState
	known bool
}

func (l *sessionLocks) init() {
	l.m = make(map[string]*sessionLock)
	l.heads = make(map[string]headState)
}

// lock waits for the session's lock or for ctx to end.
func (l *sessionLocks) lock(ctx context.Context, session string) (*sessionLock, error) {
	l.mu.Lock()
	e := l.m[session]
	if e == nil {
		e = &sessionLock{ch: make(chan struct{}, 1)}
		if hs, ok := l.heads[session]; ok {
			e.head, e.known = hs, true
			delete(l.heads, session)
		}
		l.m[session] = e
	}
	e.refs++
	l.mu.Unlock()
	select {
	case e.ch <- struct{}{}:
		return e, nil
	case <-ctx.Done():
		l.release(session, e)
		return nil, ctx.Err()
	}
}

// unlock releases a lock taken by lock.
func (l *sessionLocks) unlock(session string, e *sessionLock) {
	<-e.ch
	l.release(session, e)
}

func (l *sessionLocks) release(session string, e *sessionLock) {
	l.mu.Lock()
	defer l.mu.Unlock()
	e.refs--
	if e.refs > 0 {
		return
	}
	delete(l.m, session)
	if !e.known {
		return
	}
	for k := range l.heads {
		if len(l.heads) < maxCachedHeads {
			break
		}
		delete(l.heads, k)
	}
	l.heads[session] = e.head
}

// current returns the session's head: the one this process wrote last
// when it knows it, else the stored one.
func (s *Store) current(ctx context.Context, session string, e *sessionLock) (headState, error) {
	if e.known {
		return e.head, nil
	}
	hs, err := s.readHead(ctx, session)
	if err != nil {
		return headState{}, err
	}
	e.head, e.known = hs, true
	return hs, nil
}

// forget drops what the lock knows of the head (after a conflict or an
// unknown outcome).
func (e *sessionLock) forget() { e.head, e.known = headState{}, false }

// StreamInfo returns the state of the store's stream (messages, bytes,
// replicas and their lag), for health checks and tests.
func (s *Store) StreamInfo(ctx context.Context) (*jetstream.StreamInfo, error) {
	if err := s.begin(ctx); err != nil {
		return nil, fmt.Errorf("jsstore: stream info: %w", err)
	}
	defer s.mu.RUnlock()
	info, err := s.stream.Info(ctx)
	if err != nil {
		return nil, fmt.Errorf("jsstore: stream info %s: %w", s.name, err)
	}
	return info, nil
}

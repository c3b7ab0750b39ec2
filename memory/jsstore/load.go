package jsstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"

	"github.com/nats-io/nats.go/jetstream"
	"golang.org/x/sync/errgroup"

	"github.com/switchboard-chat/switchboard/internal/retry"
	"github.com/switchboard-chat/switchboard/memory"
)

// maxParallelGets bounds the chunks one Load or Compact fetches at once.
const maxParallelGets = 16

// errMoved says a chunk the head named is gone: the session was deleted
// or reset while it was read.
var errMoved = errors.New("jsstore: session changed while reading")

// Load implements [memory.Store]. maxTurns must be >= 0; 0 returns the
// summary and counters without messages. An unknown session yields an
// empty snapshot. A stored record that cannot be decoded is an error
// wrapping [memory.ErrInvalid].
func (s *Store) Load(ctx context.Context, session string, maxTurns int) (memory.Snapshot, error) {
	if err := memory.ValidateSession(session); err != nil {
		return memory.Snapshot{}, fmt.Errorf("jsstore: load: %w", err)
	}
	if maxTurns < 0 {
		return memory.Snapshot{}, fmt.Errorf("jsstore: load %q: maxTurns must be >= 0, got %d", session, maxTurns)
	}
	if err := s.begin(ctx); err != nil {
		return memory.Snapshot{}, fmt.Errorf("jsstore: load %q: %w", session, err)
	}
	defer s.mu.RUnlock()
	ioCtx, cancel := context.WithTimeout(ctx, s.opts.Timeout)
	defer cancel()
	var snap memory.Snapshot
	// A session deleted or reset between reading its head and its chunks
	// is read again from its new head.
	err := retry.Do(ioCtx, retry.Policy{Attempts: 3, Retryable: func(err error) bool { return errors.Is(err, errMoved) }},
		func(ctx context.Context, _ int) error {
			var err error
			snap, err = s.load(ctx, session, maxTurns)
			return err
		})
	if err != nil {
		return memory.Snapshot{}, fmt.Errorf("jsstore: load %q: %w", session, err)
	}
	return snap, nil
}

func (s *Store) load(ctx context.Context, session string, maxTurns int) (memory.Snapshot, error) {
	hs, err := s.readHead(ctx, session)
	if err != nil || !hs.live() {
		return memory.Snapshot{}, err
	}
	snap := memory.Snapshot{Summary: hs.h.Summary, Turns: hs.h.Turns, LastActive: hs.h.LastActive}
	if maxTurns == 0 {
		return snap, nil
	}
	var newestFirst [][]memory.Message
	_, err = s.walkBack(ctx, session, hs.h, maxTurns, func(msgs []memory.Message) {
		newestFirst = append(newestFirst, msgs)
	})
	if err != nil {
		return memory.Snapshot{}, err
	}
	for i := len(newestFirst) - 1; i >= 0; i-- {
		snap.Messages = append(snap.Messages, newestFirst[i]...)
	}
	return snap, nil
}

// walkBack calls fn with the session's chunks after the context start,
// newest first, until it has passed maxTurns chunks that start a turn, and
// returns the number of the chunk where it stopped (the one that started
// the last turn counted; h.Start+1 or more when fewer turns exist). It
// fetches as many chunks at once as turns are still missing.
func (s *Store) walkBack(ctx context.Context, session string, h head, maxTurns int, fn func([]memory.Message)) (uint64, error) {
	turns := 0
	next := h.Last
	for next > h.Start && turns < maxTurns {
		n := min(uint64(min(maxTurns-turns, maxParallelGets)), next-h.Start)
		got := make([][]memory.Message, n)
		var g errgroup.Group
		for i := range n {
			g.Go(func() error {
				var err error
				got[i], err = s.readChunk(ctx, session, next-i)
				return err
			})
		}
		if err := g.Wait(); err != nil {
			return 0, err
		}
		for i, msgs := range got {
			fn(msgs)
			if len(msgs) > 0 && msgs[0].TurnStart {
				turns++
				if turns == maxTurns {
					return next - uint64(i), nil
				}
			}
		}
		next -= n
	}
	return next + 1, nil
}

// readChunk reads and decodes chunk n of the session, all its parts.
func (s *Store) readChunk(ctx context.Context, session string, n uint64) ([]memory.Message, error) {
	subj := s.chunkSubject(session, n)
	m, err := s.getLast(ctx, subj)
	if err != nil {
		return nil, fmt.Errorf("chunk %d: %w", n, err)
	}
	if m == nil {
		return nil, fmt.Errorf("chunk %d: %w", n, errMoved)
	}
	data := m.Data
	if p := m.Header.Get(hdrParts); p != "" {
		parts, err := strconv.Atoi(p)
		if err != nil || parts < 2 {
			return nil, fmt.Errorf("chunk %d: %w: parts header %q", n, memory.ErrInvalid, p)
		}
		data = append([]byte(nil), data...)
		for i := 1; i < parts; i++ {
			pm, err := s.getLast(ctx, subj+"."+strconv.Itoa(i))
			if err != nil {
				return nil, fmt.Errorf("chunk %d part %d: %w", n, i, err)
			}
			if pm == nil {
				return nil, fmt.Errorf("chunk %d part %d: %w", n, i, errMoved)
			}
			data = append(data, pm.Data...)
		}
	}
	var raw []json.RawMessage
	if err := json.Unmarshal(data, &raw); err != nil {
		return nil, fmt.Errorf("chunk %d: %w: %v", n, memory.ErrInvalid, err)
	}
	msgs := make([]memory.Message, len(raw))
	for i, r := range raw {
		if msgs[i], err = memory.DecodeMessage(r); err != nil {
			return nil, fmt.Errorf("chunk %d message %d: %w", n, i, err)
		}
	}
	return msgs, nil
}

// Compact implements [memory.Compactor]: it sets the summary and moves the
// context start so that the last keepTurns whole turns remain; with fewer
// turns stored, only the summary changes.
func (s *Store) Compact(ctx context.Context, session, summary string, keepTurns int) error {
	if err := memory.ValidateSession(session); err != nil {
		return fmt.Errorf("jsstore: compact: %w", err)
	}
	if keepTurns < 0 {
		return fmt.Errorf("jsstore: compact %q: keepTurns must be >= 0, got %d", session, keepTurns)
	}
	return s.updateHead(ctx, "compact", session, func(ctx context.Context, h *head) error {
		h.Summary = summary
		if keepTurns == 0 {
			h.Start, h.Turns = h.Last, 0
			return nil
		}
		turns := 0
		at, err := s.walkBack(ctx, session, *h, keepTurns, func(msgs []memory.Message) {
			if len(msgs) > 0 && msgs[0].TurnStart {
				turns++
			}
		})
		if err != nil {
			return err
		}
		if turns == keepTurns {
			h.Start, h.Turns = at-1, keepTurns
		}
		return nil
	})
}

// SetSummary implements [memory.SummaryWriter]: it replaces the session's
// running summary and changes nothing else. An unknown session is an
// error wrapping [memory.ErrNotFound].
func (s *Store) SetSummary(ctx context.Context, session, summary string) error {
	if err := memory.ValidateSession(session); err != nil {
		return fmt.Errorf("jsstore: set summary: %w", err)
	}
	return s.updateHead(ctx, "set summary", session, func(_ context.Context, h *head) error {
		h.Summary = summary
		return nil
	})
}

// updateHead changes a session's head with the optimistic check, reading
// it again after a conflict. An unknown session is an error wrapping
// memory.ErrNotFound. op names the operation in errors.
func (s *Store) updateHead(ctx context.Context, op, session string, fn func(ctx context.Context, h *head) error) error {
	if err := s.begin(ctx); err != nil {
		return fmt.Errorf("jsstore: %s %q: %w", op, session, err)
	}
	defer s.mu.RUnlock()
	e, err := s.locks.lock(ctx, session)
	if err != nil {
		return fmt.Errorf("jsstore: %s %q: %w", op, session, err)
	}
	defer s.locks.unlock(session, e)
	ioCtx, cancel := s.io(ctx)
	defer cancel()
	var notFound bool
	err = retry.Do(ioCtx, commitPolicy, func(ctx context.Context, attempt int) error {
		ctx, cancel := s.attemptCtx(ctx)
		defer cancel()
		if attempt > 1 {
			e.forget()
		}
		hs, err := s.current(ctx, session, e)
		if err != nil {
			return err
		}
		if !hs.live() {
			notFound = true
			return nil
		}
		h := hs.h
		if err := fn(ctx, &h); err != nil {
			return err
		}
		m, err := s.headMsg(session, h)
		if err != nil {
			return err
		}
		ack, err := s.js.PublishMsg(ctx, m, jetstream.WithExpectLastSequencePerSubject(hs.seq))
		if err != nil {
			e.forget()
			return classify(err)
		}
		e.head, e.known = headState{seq: ack.Sequence, h: h}, true
		return nil
	})
	if err != nil {
		return fmt.Errorf("jsstore: %s %q: %w", op, session, err)
	}
	if notFound {
		return fmt.Errorf("jsstore: %s %q: %w", op, session, memory.ErrNotFound)
	}
	return nil
}

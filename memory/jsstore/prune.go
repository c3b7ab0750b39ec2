package jsstore

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/switchboard-chat/switchboard/memory"
)

// scanBatch is how many headers one fetch of a scan asks for.
const scanBatch = 512

// scan calls fn with the subject, stream sequence and headers of every
// message on filter, in stream order, through an ephemeral headers-only
// consumer that it deletes afterwards. It honours ctx between fetches.
func (s *Store) scan(ctx context.Context, filter string, fn func(subject string, seq uint64, hdr nats.Header) error) error {
	cons, err := s.stream.CreateConsumer(ctx, jetstream.ConsumerConfig{
		FilterSubject:     filter,
		AckPolicy:         jetstream.AckNonePolicy,
		DeliverPolicy:     jetstream.DeliverAllPolicy,
		HeadersOnly:       true,
		MemoryStorage:     true,
		Replicas:          1,
		InactiveThreshold: time.Minute,
	})
	if err != nil {
		return fmt.Errorf("scan %s: create consumer: %w", filter, err)
	}
	defer func() {
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.opts.Timeout)
		defer cancel()
		_ = s.stream.DeleteConsumer(dctx, cons.CachedInfo().Name)
	}()
	if cons.CachedInfo().NumPending == 0 {
		return nil
	}
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		batch, err := cons.FetchNoWait(scanBatch)
		if err != nil {
			return fmt.Errorf("scan %s: %w", filter, err)
		}
		n, done := 0, false
		for m := range batch.Messages() {
			n++
			meta, err := m.Metadata()
			if err != nil {
				return fmt.Errorf("scan %s: %w", filter, err)
			}
			if err := fn(m.Subject(), meta.Sequence.Stream, m.Headers()); err != nil {
				return err
			}
			done = meta.NumPending == 0
		}
		if err := batch.Error(); err != nil && !errors.Is(err, jetstream.ErrNoMessages) {
			return fmt.Errorf("scan %s: %w", filter, err)
		}
		if n == 0 || done {
			return nil
		}
	}
}

// decodeToken returns the key a subject's last token encodes.
func decodeToken(subject string) (string, bool) {
	tok := subject[strings.LastIndexByte(subject, '.')+1:]
	b, err := enc.DecodeString(tok)
	return string(b), err == nil
}

// PruneReceipts implements [memory.ReceiptPruner]: it deletes the receipts
// whose time is before before (read from their headers, not their bodies)
// and reports how many. A receipt without a readable time is kept.
func (s *Store) PruneReceipts(ctx context.Context, before time.Time) (int, error) {
	if err := s.begin(ctx); err != nil {
		return 0, fmt.Errorf("jsstore: prune receipts: %w", err)
	}
	defer s.mu.RUnlock()
	type old struct {
		subj string
		seq  uint64
	}
	var olds []old
	err := s.scan(ctx, s.base+"r.>", func(subj string, seq uint64, hdr nats.Header) error {
		t, err := time.Parse(time.RFC3339Nano, hdr.Get(hdrTime))
		if err == nil && t.Before(before) {
			olds = append(olds, old{subj, seq})
		}
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("jsstore: prune receipts: %w", err)
	}
	n := 0
	for _, o := range olds {
		if err := ctx.Err(); err != nil {
			return n, fmt.Errorf("jsstore: prune receipts: %w", err)
		}
		// Only the version scanned: a receipt written again since (a new
		// commit of the key after a reset) stays.
		if err := s.purge(ctx, o.subj, o.seq+1); err != nil {
			return n, fmt.Errorf("jsstore: prune receipts: %w", err)
		}
		n++
	}
	return n, nil
}

// purge deletes the messages on subject (wildcards allowed) with a stream
// sequence below upTo (0: all).
func (s *Store) purge(ctx context.Context, subject string, upTo uint64) error {
	ioCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.opts.Timeout)
	defer cancel()
	opts := []jetstream.StreamPurgeOpt{jetstream.WithPurgeSubject(subject)}
	if upTo > 0 {
		opts = append(opts, jetstream.WithPurgeSequence(upTo))
	}
	if err := s.stream.Purge(ioCtx, opts...); err != nil {
		return fmt.Errorf("purge %s: %w", subject, err)
	}
	return nil
}

// PruneSessions implements [memory.SessionPruner]: it deletes every
// session whose last activity is before idleBefore (its chunks, summary
// and head; receipts stay) and finishes deletions a crash interrupted.
func (s *Store) PruneSessions(ctx context.Context, idleBefore time.Time) (int, error) {
	if err := s.begin(ctx); err != nil {
		return 0, fmt.Errorf("jsstore: prune sessions: %w", err)
	}
	defer s.mu.RUnlock()
	var idle []string
	err := s.scan(ctx, s.base+"h.>", func(subj string, _ uint64, hdr nats.Header) error {
		t, err := time.Parse(time.RFC3339Nano, hdr.Get(hdrLastActive))
		if hdr.Get(hdrDeleted) != "" || err == nil && t.Before(idleBefore) {
			if sess, ok := decodeToken(subj); ok {
				idle = append(idle, sess)
			}
		}
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("jsstore: prune sessions: %w", err)
	}
	n := 0
	for _, sess := range idle {
		deleted, err := s.dropIf(ctx, sess, func(hs headState) bool {
			return hs.h.Deleted || hs.h.LastActive.Before(idleBefore)
		})
		if err != nil {
			return n, fmt.Errorf("jsstore: prune sessions: %w", err)
		}
		if deleted {
			n++
		}
	}
	return n, nil
}

// Reset implements [memory.SessionResetter]: it deletes the session's
// chunks, summary and head and every receipt of the session, so a
// redelivered message of it is answered as new. An unknown session (no
// head and no receipt) is an error wrapping [memory.ErrNotFound].
func (s *Store) Reset(ctx context.Context, session string) error {
	if err := memory.ValidateSession(session); err != nil {
		return fmt.Errorf("jsstore: reset: %w", err)
	}
	if err := s.begin(ctx); err != nil {
		return fmt.Errorf("jsstore: reset %q: %w", session, err)
	}
	defer s.mu.RUnlock()
	var receipts []string
	err := s.scan(ctx, s.base+"r.>", func(subj string, _ uint64, hdr nats.Header) error {
		if hdr.Get(hdrSession) == session {
			receipts = append(receipts, subj)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("jsstore: reset %q: %w", session, err)
	}
	had, err := s.dropIf(ctx, session, func(headState) bool { return true })
	if err != nil {
		return fmt.Errorf("jsstore: reset %q: %w", session, err)
	}
	if !had && len(receipts) == 0 {
		return fmt.Errorf("jsstore: reset %q: %w", session, memory.ErrNotFound)
	}
	for _, subj := range receipts {
		if err := s.purge(ctx, subj, 0); err != nil {
			return fmt.Errorf("jsstore: reset %q: %w", session, err)
		}
	}
	return nil
}

// dropIf deletes the session when it has a head (live or a tombstone)
// for which cond holds: tombstone, purge of the chunks older than the
// tombstone, then the tombstone. It reports whether there was a head to
// delete.
func (s *Store) dropIf(ctx context.Context, session string, cond func(headState) bool) (bool, error) {
	e, err := s.locks.lock(ctx, session)
	if err != nil {
		return false, err
	}
	defer s.locks.unlock(session, e)
	ioCtx, cancel := s.io(ctx)
	defer cancel()
	for attempt := 1; ; attempt++ {
		e.forget()
		hs, err := s.current(ioCtx, session, e)
		if err != nil || hs.seq == 0 || !cond(hs) {
			return false, err
		}
		tomb := hs.seq
		if !hs.h.Deleted {
			m, err := s.headMsg(session, head{Base: hs.h.Last, Start: hs.h.Last, Last: hs.h.Last, LastActive: time.Now(), Deleted: true})
			if err != nil {
				return false, err
			}
			ack, err := s.js.PublishMsg(ioCtx, m, jetstream.WithExpectLastSequencePerSubject(hs.seq))
			e.forget()
			if err != nil {
				// Another instance wrote the session first: look again.
				if err := classify(err); errors.Is(err, errConflict) && attempt < 5 {
					continue
				}
				return false, fmt.Errorf("tombstone %q: %w", session, err)
			}
			tomb = ack.Sequence
		}
		if err := s.purge(ioCtx, s.chunksFilter(session), tomb); err != nil {
			return false, err
		}
		if err := s.purge(ioCtx, s.headSubject(session), tomb+1); err != nil {
			return false, err
		}
		return true, nil
	}
}

package jsstore

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"

	"github.com/switchboard-chat/switchboard/internal/retry"
	"github.com/switchboard-chat/switchboard/memory"
)

// Server error codes the store reacts to (nats-server's
// jetstream_errors_generated.go; nats.go names only the first two).
const (
	codeWrongLastSeq         = jetstream.JSErrCodeStreamWrongLastSequence         // 10071
	codeWrongLastSeqConstant = jetstream.JSErrCodeStreamWrongLastSequenceConstant // 10164: subject in flight
	codeIncompleteBatch      = 10176
	codeAtomicTooManyInfl    = 10210
)

// errConflict marks a write whose optimistic check failed: another write
// to the same session (or key) came first.
var errConflict = errors.New("jsstore: concurrent write")

// commitPolicy retries a commit after a conflict or a transient failure.
var commitPolicy = retry.Policy{
	Schedule:  retry.Exponential(2*time.Millisecond, 250*time.Millisecond).Jitter(0.5),
	Attempts:  12,
	Retryable: retryable,
}

// classify maps a publish error to errConflict (wrapped) when it is an
// optimistic check that failed.
func classify(err error) error {
	var apiErr *jetstream.APIError
	if errors.As(err, &apiErr) {
		switch apiErr.ErrorCode {
		case codeWrongLastSeq, codeWrongLastSeqConstant:
			return fmt.Errorf("%w: %w", errConflict, err)
		}
	}
	return err
}

// retryable reports whether a failed write may succeed when tried again:
// a conflict, a batch the server dropped (leader change), too many
// batches in flight, no stream leader for a moment, or a timeout (the
// next attempt first looks whether the write landed).
func retryable(err error) bool {
	if errors.Is(err, errConflict) || errors.Is(err, jetstream.ErrNoStreamResponse) ||
		errors.Is(err, nats.ErrTimeout) || errors.Is(err, context.DeadlineExceeded) {
		return true
	}
	var apiErr *jetstream.APIError
	if errors.As(err, &apiErr) {
		switch apiErr.ErrorCode {
		case codeIncompleteBatch, codeAtomicTooManyInfl:
			return true
		}
	}
	return false
}

// errDup ends the retries of a commit whose key exists.
var errDup = fmt.Errorf("%w", memory.ErrDuplicate)

// CommitTurn implements [memory.Store]: rec's chunks, receipts and the new
// session head in one atomic batch (see the package doc). It validates rec
// (errors wrap [memory.ErrInvalid]), fills zero message and receipt times
// with the commit time, and returns a wrapped [memory.ErrDuplicate]
// without writing anything when a receipt key exists, in any session.
func (s *Store) CommitTurn(ctx context.Context, rec memory.TurnRecord) error {
	if err := rec.Validate(); err != nil {
		return fmt.Errorf("jsstore: commit turn: %w", err)
	}
	now := time.Now()
	enc, err := memory.EncodeTurn(rec, now)
	if err != nil {
		return fmt.Errorf("jsstore: commit turn %q: %w", rec.Receipt.Key, err)
	}
	key := rec.Receipt.Key
	if err := s.begin(ctx); err != nil {
		return fmt.Errorf("jsstore: commit turn %q: %w", key, err)
	}
	defer s.mu.RUnlock()
	e, err := s.locks.lock(ctx, rec.Session)
	if err != nil {
		return fmt.Errorf("jsstore: commit turn %q: %w", key, err)
	}
	defer s.locks.unlock(rec.Session, e)
	ioCtx, cancel := s.io(ctx)
	defer cancel()
	chunks := splitChunks(enc.Messages, s.partMax())
	err = retry.Do(ioCtx, commitPolicy, func(ctx context.Context, attempt int) error {
		ctx, cancel := s.attemptCtx(ctx)
		defer cancel()
		if attempt > 1 {
			e.forget()
			dup, err := s.anyReceipt(ctx, enc.Receipts)
			if err != nil {
				return err
			}
			if dup {
				return errDup
			}
		}
		hs, err := s.current(ctx, rec.Session, e)
		if err != nil {
			return err
		}
		next, msgs, err := s.turnBatch(rec, enc, chunks, hs, now)
		if err != nil {
			return err
		}
		seq, err := s.commit(ctx, msgs)
		if err != nil {
			e.forget()
			return classify(err)
		}
		e.head, e.known = headState{seq: seq, h: next}, true
		return nil
	})
	if errors.Is(err, errDup) || errors.Is(err, errConflict) && s.confirmDup(ioCtx, enc.Receipts) {
		return fmt.Errorf("jsstore: commit turn %q: %w", key, memory.ErrDuplicate)
	}
	if err != nil {
		return fmt.Errorf("jsstore: commit turn %q of session %q: %w", key, rec.Session, err)
	}
	return nil
}

// attemptCtx bounds one attempt of a write to a quarter of
// Options.Timeout, so a request lost with a dying server (a stream leader
// that stopped) is tried again on the new leader within the operation's
// time.
func (s *Store) attemptCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, s.opts.Timeout/4)
}

// confirmDup reports whether one of the receipts exists, after the
// retries ended on a conflict.
func (s *Store) confirmDup(ctx context.Context, receipts []memory.EncodedReceipt) bool {
	dup, err := s.anyReceipt(ctx, receipts)
	return err == nil && dup
}

// anyReceipt reports whether one of the receipts is stored.
func (s *Store) anyReceipt(ctx context.Context, receipts []memory.EncodedReceipt) (bool, error) {
	for _, r := range receipts {
		m, err := s.getLast(ctx, s.receiptSubject(r.Key))
		if err != nil {
			return false, err
		}
		if m != nil {
			return true, nil
		}
	}
	return false, nil
}

// turnBatch returns the head after the commit and the batch that stores
// it: the chunks, the receipts (each expecting no message on its subject)
// and last the head (expecting hs).
func (s *Store) turnBatch(rec memory.TurnRecord, enc memory.EncodedTurn, chunks [][][]byte, hs headState, now time.Time) (head, []*nats.Msg, error) {
	h := hs.h
	if !hs.live() {
		// New, or over a tombstone: number after the deleted chunks.
		h = head{Base: h.Last, Start: h.Last, Last: h.Last}
	}
	if rec.Fresh {
		h.Start, h.Turns, h.Summary = h.Last, 0, ""
	}
	msgs := make([]*nats.Msg, 0, len(chunks)+len(enc.Receipts)+1)
	for _, parts := range chunks {
		h.Last++
		for i, p := range parts {
			subj := s.chunkSubject(rec.Session, h.Last)
			if i > 0 {
				subj += "." + strconv.Itoa(i)
			}
			m := nats.NewMsg(subj)
			m.Data = p
			if i == 0 && len(parts) > 1 {
				m.Header.Set(hdrParts, strconv.Itoa(len(parts)))
			}
			msgs = append(msgs, m)
		}
	}
	h.Turns += enc.Turns
	h.LastActive = now
	for i, r := range enc.Receipts {
		m := nats.NewMsg(s.receiptSubject(r.Key))
		m.Data = r.Value
		m.Header.Set(jetstream.ExpectedLastSubjSeqHeader, "0")
		m.Header.Set(hdrSession, rec.Session)
		t := now
		if i == 0 && !rec.Receipt.Time.IsZero() {
			t = rec.Receipt.Time
		} else if i > 0 && !rec.Also[i-1].Time.IsZero() {
			t = rec.Also[i-1].Time
		}
		m.Header.Set(hdrTime, t.UTC().Format(time.RFC3339Nano))
		msgs = append(msgs, m)
	}
	hm, err := s.headMsg(rec.Session, h)
	if err != nil {
		return head{}, nil, err
	}
	hm.Header.Set(jetstream.ExpectedLastSubjSeqHeader, strconv.FormatUint(hs.seq, 10))
	return h, append(msgs, hm), nil
}

// partMax is the largest chunk part sent in one message: the
// connection's max payload less room for headers.
func (s *Store) partMax() int {
	const headroom, floor = 8 << 10, 16 << 10
	return max(int(s.nc.MaxPayload())-headroom, floor)
}

// splitChunks groups stored messages into chunks, a new one at every
// message that starts a turn, and each chunk (a JSON array) into parts of
// at most partMax bytes.
func splitChunks(msgs [][]byte, partMax int) [][][]byte {
	var (
		out [][][]byte
		cur []byte
	)
	flush := func() {
		if cur == nil {
			return
		}
		cur = append(cur, ']')
		var parts [][]byte
		for len(cur) > partMax {
			parts = append(parts, cur[:partMax:partMax])
			cur = cur[partMax:]
		}
		out = append(out, append(parts, cur))
		cur = nil
	}
	for _, m := range msgs {
		if cur != nil && startsTurn(m) {
			flush()
		}
		if cur == nil {
			cur = append(make([]byte, 0, len(m)+2), '[')
		} else {
			cur = append(cur, ',')
		}
		cur = append(cur, m...)
	}
	flush()
	return out
}

// turnStartField is how [memory.Message] encodes TurnStart true.
var turnStartField = []byte(`"turn_start":true`)

// startsTurn reports whether the stored message m starts a turn. The
// encoding is memory.EncodeTurn's: a text block holding the same bytes
// is escaped ("\"turn_start\":true") and never matches unescaped at the
// top level, but decode to be sure when the bytes appear.
func startsTurn(m []byte) bool {
	if !bytes.Contains(m, turnStartField) {
		return false
	}
	msg, err := memory.DecodeMessage(m)
	return err == nil && msg.TurnStart
}

// publishBatch sends msgs as one atomic batch and returns the
// acknowledgement of its last message, the commit. Messages before the
// commit are sent without a reply subject; the server answers the commit
// with the outcome of the whole batch.
func (s *Store) publishBatch(ctx context.Context, msgs []*nats.Msg) (*jetstream.PubAck, error) {
	id := nuid.Next()
	for i, m := range msgs {
		m.Header.Set("Nats-Batch-Id", id)
		m.Header.Set("Nats-Batch-Sequence", strconv.Itoa(i+1))
		m.Header.Del("Nats-Batch-Commit")
		if i == len(msgs)-1 {
			m.Header.Set("Nats-Batch-Commit", "1")
			return s.js.PublishMsg(ctx, m)
		}
		if err := s.nc.PublishMsg(m); err != nil {
			return nil, fmt.Errorf("publish batch message %d of %d: %w", i+1, len(msgs), err)
		}
	}
	return nil, errors.New("publish batch: no messages")
}

// MarkPublished implements [memory.Store]. An unknown key is an error
// wrapping [memory.ErrNotFound]; marking twice is not an error. The
// rewrite expects the receipt's current sequence, so it never resurrects
// a receipt pruned or reset meanwhile.
func (s *Store) MarkPublished(ctx context.Context, key string) error {
	if err := memory.ValidateReceiptKey(key); err != nil {
		return fmt.Errorf("jsstore: mark published: %w", err)
	}
	if err := s.begin(ctx); err != nil {
		return fmt.Errorf("jsstore: mark published %q: %w", key, err)
	}
	defer s.mu.RUnlock()
	ioCtx, cancel := s.io(ctx)
	defer cancel()
	subj := s.receiptSubject(key)
	var notFound bool
	err := retry.Do(ioCtx, commitPolicy, func(ctx context.Context, _ int) error {
		ctx, cancel := s.attemptCtx(ctx)
		defer cancel()
		m, err := s.getLast(ctx, subj)
		if err != nil {
			return err
		}
		if m == nil {
			notFound = true
			return nil
		}
		r, err := memory.DecodeReceipt(m.Data)
		if err != nil || r.Published {
			return err
		}
		r.Published = true
		b, err := memory.EncodeReceipt(r)
		if err != nil {
			return err
		}
		nm := nats.NewMsg(subj)
		nm.Data = b
		for _, h := range []string{hdrSession, hdrTime} {
			nm.Header.Set(h, m.Header.Get(h))
		}
		_, err = s.js.PublishMsg(ctx, nm, jetstream.WithExpectLastSequencePerSubject(m.Sequence))
		return classify(err)
	})
	if err != nil {
		return fmt.Errorf("jsstore: mark published %q: %w", key, err)
	}
	if notFound {
		return fmt.Errorf("jsstore: mark published %q: %w", key, memory.ErrNotFound)
	}
	return nil
}

// Receipt implements [memory.Store].
func (s *Store) Receipt(ctx context.Context, key string) (memory.Receipt, bool, error) {
	if err := memory.ValidateReceiptKey(key); err != nil {
		return memory.Receipt{}, false, fmt.Errorf("jsstore: receipt: %w", err)
	}
	if err := s.begin(ctx); err != nil {
		return memory.Receipt{}, false, fmt.Errorf("jsstore: receipt %q: %w", key, err)
	}
	defer s.mu.RUnlock()
	ioCtx, cancel := context.WithTimeout(ctx, s.opts.Timeout)
	defer cancel()
	m, err := s.getLast(ioCtx, s.receiptSubject(key))
	if err != nil {
		return memory.Receipt{}, false, fmt.Errorf("jsstore: receipt %q: %w", key, err)
	}
	if m == nil {
		return memory.Receipt{}, false, nil
	}
	r, err := memory.DecodeReceipt(m.Data)
	if err != nil {
		return memory.Receipt{}, false, fmt.Errorf("jsstore: receipt %q: %w", key, err)
	}
	return r, true, nil
}

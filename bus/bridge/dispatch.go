package bridge

import (
	"cmp"
	"context"
	"errors"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/switchboard-chat/switchboard/bus"
	"github.com/switchboard-chat/switchboard/internal/retry"
)

// item is one outbound message held by the dispatcher until it is
// acknowledged, terminated or released.
type item struct {
	seq uint64       // stream sequence, the identity across redeliveries
	out bus.Outbound // decoded and validated envelope
	msg jetstream.Msg
}

// conv is the queue of one conversation.
type conv struct {
	key     string
	queue   []*item // stream order; the head is being handled or next
	running bool    // a worker owns the conversation
	waiting bool    // in dispatcher.ready, waiting for a worker slot
}

// dispatcher fans messages out to one worker per active conversation, at
// most Options.MaxWorkers at a time. One mutex guards all its mutable
// fields, including item.msg.
type dispatcher struct {
	c   *Client
	h   Handler
	log *slog.Logger

	mu      sync.Mutex
	convs   map[string]*conv // conversations with queued messages
	ready   []*conv          // conversations waiting for a worker, FIFO
	pending map[uint64]*item // every held message by stream sequence
	workers int
	stopped bool

	// While holding, messages are queued (sorted) but no worker starts:
	// the start of a run waits for the redeliveries of holdLeft messages
	// with stream sequence up to holdMaxSeq.
	holding    bool
	holdLeft   int
	holdMaxSeq uint64

	wg sync.WaitGroup // workers and the heartbeat
}

func newDispatcher(c *Client, h Handler) *dispatcher {
	return &dispatcher{
		c:       c,
		h:       h,
		log:     c.log,
		convs:   make(map[string]*conv),
		pending: make(map[uint64]*item),
	}
}

// convKey identifies a conversation within the channel.
func convKey(out *bus.Outbound) string { return out.ChatID + "\x00" + out.ThreadID }

// receive is the consumer callback: it validates m and queues it on its
// conversation. It never blocks on a handler.
func (d *dispatcher) receive(ctx context.Context, m jetstream.Msg) {
	defer func() {
		if d.c.afterDispatch != nil {
			d.c.afterDispatch()
		}
	}()
	md, err := m.Metadata()
	if err != nil {
		d.term(ctx, m, 0, "no JetStream metadata: "+err.Error())
		return
	}
	it := &item{seq: md.Sequence.Stream, msg: m}
	if it.out, err = d.c.decodeOutbound(m.Data(), m.Subject()); err != nil {
		d.term(ctx, m, it.seq, err.Error())
		return
	}
	d.enqueue(ctx, it)
}

// term terminates an invalid message so it is never redelivered.
func (d *dispatcher) term(ctx context.Context, m jetstream.Msg, seq uint64, reason string) {
	d.mu.Lock()
	d.arrived(ctx, seq)
	d.mu.Unlock()
	d.log.Error("dropping invalid outbound message", "subject", m.Subject(), "stream_seq", seq, "reason", reason)
	if err := m.TermWithReason(reason); err != nil {
		d.log.Warn("terminate outbound message", "subject", m.Subject(), "stream_seq", seq, "err", err)
	}
}

// enqueue appends it to its conversation and makes sure a worker will
// serve the conversation.
func (d *dispatcher) enqueue(ctx context.Context, it *item) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.stopped {
		return // not acknowledged: redelivered to the next consumer
	}
	if held, ok := d.pending[it.seq]; ok {
		// A redelivery of a message still queued or being handled (its
		// ack timer ran out): keep one copy, acknowledge through the
		// latest delivery.
		held.msg = it.msg
		d.log.Debug("redelivered outbound message already held", "stream_seq", it.seq)
		return
	}
	d.pending[it.seq] = it
	key := convKey(&it.out)
	cv := d.convs[key]
	if cv == nil {
		cv = &conv{key: key}
		d.convs[key] = cv
	}
	cv.insert(it)
	if d.holding {
		d.arrived(ctx, it.seq)
		return
	}
	d.schedule(ctx, cv)
}

// arrived counts a message against the hold and ends the hold when every
// awaited redelivery is in. Called with d.mu held.
func (d *dispatcher) arrived(ctx context.Context, seq uint64) {
	if !d.holding {
		return
	}
	if seq <= d.holdMaxSeq {
		d.holdLeft--
	}
	if d.holdLeft <= 0 {
		d.release(ctx)
	}
}

// insert adds it to the queue in stream order. Messages normally arrive in
// order and are appended; a late redelivery is placed before later
// messages, but never before the head while a worker is handling it.
func (cv *conv) insert(it *item) {
	i := len(cv.queue)
	lowest := 0
	if cv.running {
		lowest = 1
	}
	for i > lowest && cv.queue[i-1].seq > it.seq {
		i--
	}
	cv.queue = slices.Insert(cv.queue, i, it)
}

// schedule makes sure a worker serves cv: it starts one within the
// MaxWorkers bound or queues cv for the next free worker. Called with d.mu
// held.
func (d *dispatcher) schedule(ctx context.Context, cv *conv) {
	if cv.running || cv.waiting || len(cv.queue) == 0 {
		return
	}
	if d.workers < d.c.opts.MaxWorkers {
		d.workers++
		cv.running = true
		d.wg.Go(func() { d.work(ctx, cv) })
		return
	}
	cv.waiting = true
	d.ready = append(d.ready, cv)
}

// holdRedeliveries makes the dispatcher hold the start of handling until
// the redeliveries of n messages with stream sequence up to maxSeq have
// arrived, and returns how long to hold at most (0: no hold). Called
// before the consumer starts.
func (d *dispatcher) holdRedeliveries(n int, maxSeq uint64) time.Duration {
	if n <= 0 {
		return 0
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	d.holding, d.holdLeft, d.holdMaxSeq = true, n, maxSeq
	if d.c.holdMax > 0 {
		return d.c.holdMax
	}
	return redeliveryGate
}

// release ends the hold and schedules every conversation, in stream order
// of their first message. Called with d.mu held.
func (d *dispatcher) release(ctx context.Context) {
	if !d.holding || d.stopped {
		return
	}
	d.holding = false
	convs := slices.Collect(maps.Values(d.convs))
	slices.SortFunc(convs, func(a, b *conv) int { return cmp.Compare(a.queue[0].seq, b.queue[0].seq) })
	for _, cv := range convs {
		d.schedule(ctx, cv)
	}
}

// work serves cv, then whichever conversations wait for a worker, until
// there is nothing left or ctx is cancelled.
func (d *dispatcher) work(ctx context.Context, cv *conv) {
	for cv != nil {
		it, skipped, next := d.next(cv)
		for _, s := range skipped {
			d.ack(s, "superseded")
		}
		if it == nil {
			cv = next
			continue
		}
		if !d.handle(ctx, cv, it) {
			d.mu.Lock()
			cv.running = false
			d.workers--
			d.mu.Unlock()
			return
		}
	}
}

// next returns the message cv's worker handles next, after removing the
// superseded ones at the head of the queue (returned for acknowledgement).
// When cv is empty it forgets cv and returns the conversation the worker
// takes over instead (nil: the worker exits).
func (d *dispatcher) next(cv *conv) (it *item, skipped []*item, next *conv) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for len(cv.queue) > 0 {
		head := cv.queue[0]
		if !superseded(cv.queue) {
			return head, skipped, nil
		}
		cv.queue[0] = nil
		cv.queue = cv.queue[1:]
		delete(d.pending, head.seq)
		skipped = append(skipped, head)
	}
	cv.running = false
	delete(d.convs, cv.key)
	if len(d.ready) > 0 && !d.stopped {
		next = d.ready[0]
		d.ready[0] = nil
		d.ready = d.ready[1:]
		next.waiting = false
		next.running = true
		return nil, skipped, next
	}
	d.workers--
	return nil, skipped, nil
}

// superseded reports whether q[0], a delta or typing message, is made
// pointless by a later message of the same turn in q: the final, a newer
// delta, or (for typing) a newer typing message.
func superseded(q []*item) bool {
	head := &q[0].out
	if head.Final || head.InReplyTo == "" || (head.Kind != bus.KindDelta && head.Kind != bus.KindTyping) {
		return false
	}
	for _, it := range q[1:] {
		o := &it.out
		if o.InReplyTo != head.InReplyTo {
			continue
		}
		if o.Final || o.Kind == bus.KindDelta || (head.Kind == bus.KindTyping && o.Kind == bus.KindTyping) {
			return true
		}
	}
	return false
}

// handle calls the handler for it until it succeeds, fails permanently or
// is superseded, then acknowledges it and returns true. It returns false,
// leaving it queued and unacknowledged, when ctx is cancelled.
func (d *dispatcher) handle(ctx context.Context, cv *conv, it *item) bool {
	if d.c.seen.afterFinal(&it.out) {
		d.done(cv, it, "after the final")
		return true
	}
	if d.c.seen.shown(ctx, d.c, &it.out) {
		d.done(cv, it, "already shown")
		return true
	}
	b := retry.New(retry.Policy{Schedule: retry.Schedule(d.c.opts.Backoff)})
	for {
		if ctx.Err() != nil {
			return false
		}
		err := d.h(ctx, it.out)
		if err == nil {
			d.c.seen.record(ctx, d.c, &it.out)
			d.done(cv, it, "handled")
			return true
		}
		if ctx.Err() != nil {
			return false
		}
		if errors.Is(err, ErrPermanent) {
			d.log.Error("outbound message failed permanently; dropping it", "chat_id", it.out.ChatID, "thread_id", it.out.ThreadID,
				"id", it.out.ID, "kind", it.out.Kind, "stream_seq", it.seq, "err", err)
			d.c.seen.end(&it.out)
			d.done(cv, it, "failed permanently")
			return true
		}
		attempt, wait, _ := b.Next(err)
		d.log.Warn("outbound handler failed; retrying", "chat_id", it.out.ChatID, "thread_id", it.out.ThreadID,
			"id", it.out.ID, "kind", it.out.Kind, "stream_seq", it.seq, "attempt", attempt, "retry_in", wait, "err", err)
		if b.Sleep(ctx, wait) != nil {
			return false
		}
		d.mu.Lock()
		skip := superseded(cv.queue)
		d.mu.Unlock()
		if skip {
			d.done(cv, it, "superseded while retrying")
			return true
		}
	}
}

// done removes it, the head of cv, and acknowledges it.
func (d *dispatcher) done(cv *conv, it *item, why string) {
	d.mu.Lock()
	cv.queue[0] = nil
	cv.queue = cv.queue[1:]
	delete(d.pending, it.seq)
	d.mu.Unlock()
	d.ack(it, why)
}

// ack acknowledges a message that left the dispatcher.
func (d *dispatcher) ack(it *item, why string) {
	d.mu.Lock()
	m := it.msg
	d.mu.Unlock()
	if err := m.Ack(); err != nil {
		d.log.Warn("acknowledge outbound message", "stream_seq", it.seq, "err", err)
		return
	}
	d.log.Debug("outbound message acknowledged", "chat_id", it.out.ChatID, "id", it.out.ID, "kind", it.out.Kind,
		"stream_seq", it.seq, "why", why)
}

// timers runs the dispatcher's clocks until ctx is cancelled: every
// interval it resets the ack timer of every held message, so messages
// queued behind a slow handler or waiting for a retry are not redelivered;
// after gate (when positive) it ends a hold that is still on.
func (d *dispatcher) timers(ctx context.Context, interval, gate time.Duration) {
	ticker := time.NewTicker(interval)
	defer ticker.Stop()
	var gateC <-chan time.Time
	if gate > 0 {
		t := time.NewTimer(gate)
		defer t.Stop()
		gateC = t.C
	}
	var msgs []jetstream.Msg
	for {
		select {
		case <-ctx.Done():
			return
		case <-gateC:
			gateC = nil
			d.mu.Lock()
			if d.holding {
				d.log.Debug("redelivery hold ended by timeout", "missing", d.holdLeft)
			}
			d.release(ctx)
			d.mu.Unlock()
			continue
		case <-ticker.C:
		}
		msgs = msgs[:0]
		d.mu.Lock()
		for _, it := range d.pending {
			msgs = append(msgs, it.msg)
		}
		d.mu.Unlock()
		for _, m := range msgs {
			if err := m.InProgress(); err != nil && ctx.Err() == nil {
				d.log.Debug("in-progress for outbound message", "subject", m.Subject(), "err", err)
			}
		}
	}
}

// stop makes the dispatcher refuse new messages, waits for its goroutines
// (the caller has cancelled their context) and releases every message it
// still holds for immediate redelivery, in conversation order.
func (d *dispatcher) stop() {
	d.mu.Lock()
	d.stopped = true
	d.mu.Unlock()
	d.wg.Wait()
	d.mu.Lock()
	defer d.mu.Unlock()
	released := 0
	for _, cv := range d.convs {
		for _, it := range cv.queue {
			if err := it.msg.Nak(); err != nil {
				d.log.Debug("release outbound message", "stream_seq", it.seq, "err", err)
			}
			released++
		}
	}
	if released > 0 {
		d.log.Debug("released unhandled outbound messages for redelivery", "count", released)
	}
	clear(d.convs)
	clear(d.pending)
	d.ready = nil
}

package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nuid"

	"github.com/switchboard-chat/switchboard/bus"
	"github.com/switchboard-chat/switchboard/internal/failpoint"
	"github.com/switchboard-chat/switchboard/memory"
)

// courier answers inbound messages exactly once: it commits a turn with
// the receipts of the messages it answers, publishes their finals,
// acknowledges the deliveries, replays stored answers for duplicates, and
// keeps every delivery it holds marked in progress on the bus until then.
// Safe for concurrent use; the manager and every session share one.
type courier struct {
	store    memory.Store
	pub      Publisher
	obs      Observer
	subjects bus.Subjects
	now      func() time.Time
	log      *slog.Logger
	// draining is set when shutdown begins: an untracked delivery is then
	// left for the next start instead of being retried now.
	draining atomic.Bool

	mu      sync.Mutex // guards pending and peak; never held while calling out
	pending map[bus.Delivery]struct{}
	peak    int // most entries pending held since it was last rebuilt (shrunk)
}

func newCourier(deps Deps, opt Options, log *slog.Logger) *courier {
	return &courier{store: deps.Store, pub: deps.Publisher, obs: deps.Observer, subjects: opt.Subjects, now: opt.Now, log: log,
		pending: map[bus.Delivery]struct{}{}}
}

// track keeps d marked in progress until it is done or untracked.
func (c *courier) track(d bus.Delivery) {
	c.mu.Lock()
	c.pending[d] = struct{}{}
	c.mu.Unlock()
}

// heartbeat marks every tracked message in progress so the bus does not
// redeliver messages that wait in a session queue or run a long turn.
func (c *courier) heartbeat(ctx context.Context, every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		c.mu.Lock()
		ds := make([]bus.Delivery, 0, len(c.pending))
		for d := range c.pending {
			ds = append(ds, d)
		}
		c.mu.Unlock()
		for _, d := range ds {
			if err := d.InProgress(); err != nil {
				c.log.Debug("in-progress failed", "subject", d.Subject(), "err", err)
			}
		}
	}
}

// remove stops tracking d; the map is rebuilt smaller after a burst.
func (c *courier) remove(d bus.Delivery) {
	c.mu.Lock()
	delete(c.pending, d)
	c.pending = shrunk(c.pending, &c.peak)
	c.mu.Unlock()
}

// done acknowledges d and stops tracking it.
func (c *courier) done(d bus.Delivery) {
	c.remove(d)
	if err := d.Ack(); err != nil {
		c.log.Warn("ack failed; the message may be redelivered and will be answered from its receipt", "subject", d.Subject(), "err", err)
	}
}

// untrack stops tracking d without acknowledging it: it will be redelivered,
// soon when the delivery can be retried (the bus's backoff), else after the
// bus's ack wait. While draining it is left for the next start.
func (c *courier) untrack(d bus.Delivery) {
	c.remove(d)
	if r, ok := d.(retrier); ok && !c.draining.Load() {
		if err := r.Retry(); err != nil {
			c.log.Debug("retry request failed; the message is redelivered after the ack wait", "subject", d.Subject(), "err", err)
		}
	}
}

// forget stops tracking d and leaves it to the bus as it is (no ack, no
// retry request).
func (c *courier) forget(d bus.Delivery) {
	c.remove(d)
}

// retrier is a delivery that can ask to be redelivered soon (natsbus).
type retrier interface{ Retry() error }

// MaxDeliveries bounds the deliveries of an inbound message the runtime
// fails to answer (the history store or the bus failing, a final the bus
// refuses): a failure on the MaxDeliveries-th delivery (about two and a
// half minutes of retries at the bus's growing delays, see
// natsbus.RetryDelay) gives the message up. A failure the store reports as
// permanent ([memory.ErrInvalid]) gives it up at once. A message given up
// is dead-lettered with the failure as its reason, its sender is answered
// with an error final, and it is terminated: no message is redelivered
// forever, so none can hold a consumer's acknowledgement window. The count
// is the bus's (bus.DeliveryInfo.NumDelivered): hand-backs of a flooded
// session count too, and the embedded bus counts from 1 again after a
// restart.
const MaxDeliveries = 10

// outcomeDeadLettered is the Observer.Inbound outcome of a message given
// up (fail).
const outcomeDeadLettered = "dead_lettered"

// publishTimeout bounds a dead letter's publishes.
const publishTimeout = 5 * time.Second

// fail deals with d, which could not be answered because of err: it is
// left for redelivery (untrack), or given up (deadLetter) when err is
// permanent or d was delivered MaxDeliveries times. While ctx is done
// (shutdown) it is always left for the next start.
func (c *courier) fail(ctx context.Context, d bus.Delivery, err error) {
	n := d.Info().NumDelivered
	switch {
	case ctx.Err() != nil:
		c.untrack(d)
	case errors.Is(err, memory.ErrInvalid):
		c.deadLetter(ctx, d, fmt.Errorf("%w: refused for good: %w", bus.ErrUnprocessable, err), outcomeDeadLettered)
	case n >= MaxDeliveries:
		c.deadLetter(ctx, d, fmt.Errorf("%w after %d deliveries: %w", bus.ErrUnprocessable, n, err), outcomeDeadLettered)
	default:
		c.untrack(d)
	}
}

// failAll is fail for the deliveries of as.
func (c *courier) failAll(ctx context.Context, as []answered, err error) {
	for _, a := range as {
		c.fail(ctx, a.d, err)
	}
}

// deadLetter gives d up: it publishes the dead-letter record (the payload
// and reason) on the channel's dead-letter subject, answers the sender
// with an error final when the message is addressable (tellRefused), and
// terminates d so the bus never delivers it again. outcome is counted as
// the channel's inbound outcome. A record that cannot be published is
// logged; d is terminated all the same.
func (c *courier) deadLetter(ctx context.Context, d bus.Delivery, reason error, outcome string) {
	c.remove(d)
	channel := bus.InvalidChannel
	if ch, _, err := c.subjects.ParseIn(d.Subject()); err == nil && bus.ValidChannel(ch) {
		channel = ch // a metric label: never a name the rules refuse
	}
	c.obs.Inbound(channel, outcome)
	pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), publishTimeout)
	defer cancel()
	rec := bus.NewDLQRecord(d.Subject(), d.Data(), reason, c.now().UTC())
	data, err := json.Marshal(rec)
	if err == nil {
		err = c.pub.Publish(pctx, c.subjects.DLQFor(d.Subject()), data, "")
	}
	if err != nil {
		c.log.Error("dead-letter publish failed; dropping the message", "subject", d.Subject(), "reason", reason, "err", err)
	} else {
		c.log.Warn("inbound message dead-lettered", "subject", d.Subject(), "outcome", outcome, "reason", reason)
	}
	c.tellRefused(pctx, d, reason)
	if err := d.Term(); err != nil {
		c.log.Warn("term failed", "subject", d.Subject(), "err", err)
	}
}

// tellRefused answers a refused message whose subject names a valid
// channel and chat with an error final saying why ([bus.RefusalFinal]), so
// the sender is not left waiting; an unaddressable one is dead-lettered
// only. One answer per refused message: its id is derived from the
// message, so a redelivery publishes the same final again, which the out
// stream de-duplicates. The answer is an outbound envelope, which nothing
// in the runtime consumes, so it cannot start a loop.
func (c *courier) tellRefused(ctx context.Context, d bus.Delivery, reason error) {
	out, subject, ok := bus.RefusalFinal(c.subjects, d.Subject(), d.Data(), reason)
	if !ok {
		return
	}
	data, err := json.Marshal(out)
	if err == nil {
		err = c.pub.Publish(ctx, subject, data, out.ID)
	}
	if err != nil {
		c.log.Warn("refused message: error final not published", "subject", d.Subject(), "err", err)
	}
}

// errStore marks an answer not delivered because the history store failed.
// The store's owner logs such failures once per interval and counts them,
// so the per-message line is a debug line.
var errStore = errors.New("history store failed")

// logUndelivered logs an answer that was not delivered: the message is
// delivered again, or given up (courier.fail).
func logUndelivered(log *slog.Logger, err error) {
	level := slog.LevelError
	if errors.Is(err, errStore) {
		level = slog.LevelDebug
	}
	log.Log(context.Background(), level, "answer not delivered; the message is delivered again, or given up after MaxDeliveries", "err", err)
}

// newOutbound starts an outbound envelope answering in.
func newOutbound(in *bus.Inbound, kind, text string, seq int, final bool) bus.Outbound {
	o := bus.ReplyTo(in)
	o.ID = nuid.Next()
	o.Kind, o.Text, o.Seq, o.Final = kind, text, seq, final
	return o
}

// errAlreadyAnswered: the turn was not committed because a message it
// answers had a receipt already; the stored answers were replayed.
var errAlreadyAnswered = errors.New("agent: already answered")

// answered is one inbound message of a turn with its final envelope.
type answered struct {
	in  *bus.Inbound
	d   bus.Delivery
	out bus.Outbound
}

// deliver is deliverAll that logs its error; false when the answer was not
// delivered (the messages are left for redelivery).
func (c *courier) deliver(ctx context.Context, session string, as []answered, msgs []memory.Message, fresh bool) bool {
	err := c.deliverAll(ctx, session, as, msgs, fresh)
	if err != nil && !errors.Is(err, errAlreadyAnswered) {
		logUndelivered(c.log.With("session", session), err)
	}
	return err == nil
}

// finalOverhead is room for a final envelope's fields besides its text.
const finalOverhead = 256

// deliverAll commits a turn: the turn's messages and the receipt of every
// inbound message it answers, in one transaction; then, for each message in
// order, it publishes the final envelope, acknowledges the delivery and
// marks the receipt published. If the store already has a receipt for one
// of the messages, the stored receipts are replayed instead, so a message
// is never answered twice. The answer for the turn's main message is last.
func (c *courier) deliverAll(ctx context.Context, session string, as []answered, msgs []memory.Message, fresh bool) error {
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), commitTimeout)
	defer cancel()
	finals := make([][]byte, len(as))
	receipts := make([]memory.Receipt, len(as))
	for i, a := range as {
		final := bus.AppendOutbound(make([]byte, 0, finalOverhead+len(a.out.Text)), &a.out)
		finals[i] = final
		receipts[i] = memory.Receipt{Key: a.in.DedupKey(), Session: session, Final: final, Time: c.now().UTC()}
	}
	rec := memory.TurnRecord{
		Session:  session,
		Messages: msgs,
		Fresh:    fresh,
		Receipt:  receipts[len(as)-1],
		Also:     receipts[:len(as)-1],
	}
	if err := c.commit(cctx, rec); err != nil {
		if errors.Is(err, memory.ErrDuplicate) {
			for _, a := range as {
				if !c.answered(cctx, a.in, a.d) {
					c.untrack(a.d)
				}
			}
			return errAlreadyAnswered
		}
		err = fmt.Errorf("agent: commit turn: %w: %w", errStore, err)
		c.failAll(ctx, as, err)
		return err
	}
	failpoint.Hit(failpoint.AfterCommit)
	for i, a := range as {
		if err := c.pub.Publish(cctx, c.subjects.Out(a.in.Channel, a.in.ChatID), finals[i], a.out.ID); err != nil {
			// Persisted but not published: leave the messages
			// unacknowledged; their redelivery publishes the stored finals.
			err = fmt.Errorf("agent: publish final: %w", err)
			c.failAll(ctx, as[i:], err)
			return err
		}
		failpoint.Hit(failpoint.AfterPublish)
		c.done(a.d)
		failpoint.Hit(failpoint.AfterAck)
		c.obs.Outbound(a.in.Channel, a.out.Kind)
		c.markPublished(cctx, receipts[i].Key)
	}
	return nil
}

// commit stores a turn record. A message the store refuses must not keep
// the answer from the user or make the message loop: the receipts are
// kept and the turn is dropped.
func (c *courier) commit(ctx context.Context, rec memory.TurnRecord) error {
	err := c.store.CommitTurn(ctx, rec)
	if errors.Is(err, memory.ErrInvalid) && len(rec.Messages) > 0 {
		c.log.Error("turn not storable; answering without saving it to history", "session", rec.Session, "err", err)
		rec.Messages = nil
		err = c.store.CommitTurn(ctx, rec)
	}
	return err
}

// answered reports whether in was answered already (its receipt exists)
// and if so deals with d: the stored final is published again when it may
// not have reached the bus, and d is acknowledged. Nothing else is
// published for it. A failed lookup leaves d for redelivery and reports
// true, so the caller does not process it either.
func (c *courier) answered(ctx context.Context, in *bus.Inbound, d bus.Delivery) bool {
	r, ok, err := c.store.Receipt(ctx, in.DedupKey())
	switch {
	case err != nil:
		c.log.Error("receipt lookup failed", "key", in.DedupKey(), "err", err)
		c.fail(ctx, d, fmt.Errorf("agent: receipt lookup: %w", err))
		return true
	case !ok:
		return false
	}
	c.suppress(ctx, in, r, d)
	return true
}

// suppress answers a duplicate delivery of in from its receipt r.
func (c *courier) suppress(ctx context.Context, in *bus.Inbound, r memory.Receipt, d bus.Delivery) {
	c.obs.Inbound(in.Channel, "duplicate")
	c.obs.DuplicateSuppressed(in.Channel)
	if err := c.replayReceipt(ctx, r, d); err != nil {
		c.log.Error("replay failed", "key", in.DedupKey(), "err", err)
	}
}

// markPublished records that a final envelope reached the bus, so a later
// re-publication of the same inbound message is acknowledged silently.
func (c *courier) markPublished(ctx context.Context, key string) {
	if err := c.store.MarkPublished(ctx, key); err != nil {
		c.log.Warn("could not mark the final answer as published", "key", key, "err", err)
	}
}

// replayReceipt handles a message that already has a receipt: if its final
// envelope was published it just acknowledges d; otherwise (the daemon died
// between commit and publish) it publishes the stored envelope, with the
// same outbound id so the bus de-duplicates it, then acknowledges d.
func (c *courier) replayReceipt(ctx context.Context, r memory.Receipt, d bus.Delivery) error {
	if r.Published {
		c.log.Info("duplicate inbound message ignored: already answered", "key", r.Key)
		c.done(d)
		return nil
	}
	var out bus.Outbound
	if err := json.Unmarshal(r.Final, &out); err != nil {
		// A receipt we cannot read must not make the message loop forever.
		c.log.Error("stored final envelope is unreadable; acknowledging without re-publishing", "key", r.Key, "err", err)
		c.done(d)
		return nil
	}
	if err := c.pub.Publish(ctx, c.subjects.Out(out.Channel, out.ChatID), r.Final, out.ID); err != nil {
		err = fmt.Errorf("agent: re-publish final: %w", err)
		c.fail(ctx, d, err)
		return err
	}
	c.log.Info("answer of an already handled message re-published from its receipt", "key", r.Key)
	c.done(d)
	c.markPublished(ctx, r.Key)
	return nil
}

// finishSimple answers a message with one final envelope and no history.
func (c *courier) finishSimple(ctx context.Context, in *bus.Inbound, d bus.Delivery, kind, text string, fresh bool) {
	out := newOutbound(in, kind, text, 1, true)
	err := c.deliverAll(ctx, in.SessionKey(), []answered{{in: in, d: d, out: out}}, nil, fresh)
	if err != nil && !errors.Is(err, errAlreadyAnswered) {
		logUndelivered(c.log.With("key", in.DedupKey()), err)
	}
}

package bridge

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/switchboard-chat/switchboard/bus"
)

const (
	// pullBuffer is how many messages the pull consumer asks for at a time.
	pullBuffer = 256
	// flushTimeout bounds the flush of acknowledgements when
	// ConsumeOutbound stops.
	flushTimeout = 2 * time.Second
	// drainWait bounds the wait for the pull subscription to stop.
	drainWait = 5 * time.Second
	// redeliveryGate bounds how long ConsumeOutbound waits, when it starts,
	// for the messages a previous run left unacknowledged.
	redeliveryGate = 2 * time.Second
)

// Handler shows one outbound envelope on the platform (sends, edits or
// deletes a message, shows a typing indicator...).
//
// ConsumeOutbound calls it with envelopes that passed
// [bus.Outbound.Validate] and belong to the client's channel. It never calls
// it concurrently for the same conversation (channel, chat_id, thread_id),
// and calls it in stream order within a conversation; different
// conversations are handled concurrently. Returning nil acknowledges the
// message. A non-nil error is retried with backoff (the same envelope,
// before any later message of the conversation) unless it wraps
// [ErrPermanent], in which case the message is logged and acknowledged.
// The handler must return promptly once ctx is cancelled; the message is
// then delivered again by the next ConsumeOutbound. Delivery is
// at-least-once, but a final, reply, notice or error whose id was already
// shown ([Remembered]) is dropped by the kit and never reaches the handler
// twice, unless the bridge died between the handler's success and the
// kit's record of it (a [SeenStore] keeps the record across restarts).
// Nor does a typing or delta message of a turn whose final the handler was
// given (in this run of the client): nothing follows a final, also when
// the server delivers an older message again after it lost the
// acknowledgement (a crash of the daemon's embedded server). For the rest
// the protocol's rules apply (ignore a delta whose seq is not above the
// last one handled for its in_reply_to).
type Handler func(ctx context.Context, out bus.Outbound) error

// ConsumeOutbound delivers the outbound envelopes of the client's channel
// to h until ctx is cancelled, then stops cleanly (every goroutine it
// started has returned, messages received but not handled are released for
// immediate redelivery, acknowledgements are flushed) and returns nil.
//
// It reads through a durable pull consumer named Options.Durable on the
// outbound stream ([StreamOut]), filtered to "<p>.out.<channel>.>", with
// explicit acks, [AckWait] and [MaxAckPending]. The first ConsumeOutbound
// ever creates the consumer with the "deliver new" policy, so a new bridge
// does not replay the stream's history; later runs resume where the
// durable consumer left off and receive what was published while no
// consumer ran. An existing consumer whose settings differ is updated (its
// start position is kept).
//
// Ordering and concurrency: see [Handler]. At most Options.MaxWorkers
// conversations are handled at once; a worker goroutine serves one
// conversation while it has messages queued and exits when it is idle.
// Order holds across restarts too: when the consumer has messages a
// previous run received but did not acknowledge, ConsumeOutbound waits for
// their redelivery (at most a couple of seconds) before it handles
// anything, and queues every conversation in stream order.
//
// Coalescing: a queued delta or typing message that is superseded before
// its turn comes (a newer delta, or the final, for the same in_reply_to; or
// for a typing message also a newer typing message) is acknowledged without
// calling h. Finals, replies, notices and errors are always handled. A
// message whose handler fails and is superseded while waiting to be retried
// is likewise dropped.
//
// Invalid messages (not JSON, failing [bus.Outbound.Validate], another
// channel, a subject that does not match the envelope) are logged and
// terminated: never redelivered, never blocking the conversation.
//
// ConsumeOutbound returns nil when ctx is cancelled, even before it has
// started. It returns an error if the consumer cannot be set up (no
// outbound stream, no permission), if another ConsumeOutbound of this
// client is running, if the client is closed, or if the consumer stops on
// its own (it was deleted, the connection was closed).
func (c *Client) ConsumeOutbound(ctx context.Context, h Handler) error {
	if h == nil {
		return errors.New("bridge: consume outbound: handler is nil")
	}
	if c.closed.Load() {
		return fmt.Errorf("bridge: consume outbound: %w", ErrClosed)
	}
	if !c.consuming.CompareAndSwap(false, true) {
		return errors.New("bridge: consume outbound: already consuming")
	}
	defer c.consuming.Store(false)

	cons, err := c.setupConsumer(ctx)
	if err != nil {
		if ctx.Err() != nil {
			return nil // cancelled while starting
		}
		return fmt.Errorf("bridge: consume outbound: %w", err)
	}
	stream, durable := StreamOut(c.opts.SubjectPrefix), c.opts.Durable

	// Messages a previous run received but did not acknowledge come back
	// first, in no reliable order (the server may rotate its redelivery
	// queue); hold the start of handling until they are in, so each
	// conversation is sorted by stream sequence before its worker starts.
	info, err := cons.Info(ctx)
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return fmt.Errorf("bridge: consume outbound %s/%s: consumer info: %w", stream, durable, err)
	}

	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	d := newDispatcher(c, h)
	gate := d.holdRedeliveries(info.NumAckPending, info.Delivered.Stream)
	interval := c.heartbeat
	if interval <= 0 {
		interval = AckWait / 3
	}
	d.wg.Go(func() { d.timers(runCtx, interval, gate) })

	cc, err := cons.Consume(
		func(m jetstream.Msg) { d.receive(runCtx, m) },
		jetstream.PullMaxMessages(pullBuffer),
		jetstream.ConsumeErrHandler(func(_ jetstream.ConsumeContext, err error) {
			if !c.closed.Load() && runCtx.Err() == nil {
				c.log.Warn("outbound consumer error", "stream", stream, "consumer", durable, "err", err)
			}
		}),
	)
	if err != nil {
		cancel()
		d.stop()
		return fmt.Errorf("bridge: consume outbound %s/%s: %w", stream, durable, err)
	}
	c.log.Info("consuming outbound", "stream", stream, "consumer", durable)

	var stopErr error
	select {
	case <-ctx.Done():
	case <-cc.Closed():
		stopErr = fmt.Errorf("bridge: consume outbound %s/%s: consumer stopped", stream, durable)
		if c.closed.Load() {
			stopErr = fmt.Errorf("%w: %w", stopErr, ErrClosed)
		}
	}
	// Drain hands the messages already buffered to d.receive, which queues
	// them; once Closed, no more callbacks run. Draining needs the server,
	// so without a connection just stop (the server redelivers the rest).
	if c.nc.IsConnected() {
		cc.Drain()
	} else {
		cc.Stop()
	}
	timer := time.NewTimer(drainWait)
	select {
	case <-cc.Closed():
	case <-timer.C:
		c.log.Warn("outbound consumer did not stop in time; going on", "stream", stream, "consumer", durable, "waited", drainWait)
	}
	timer.Stop()
	cancel()
	d.stop()
	if err := c.nc.FlushTimeout(flushTimeout); err != nil && stopErr == nil {
		c.log.Debug("flush after consume", "err", err)
	}
	if stopErr == nil {
		c.log.Info("stopped consuming outbound", "stream", stream, "consumer", durable)
	}
	return stopErr
}

// consumerConfig returns the durable consumer's configuration, with the
// policy used when it is first created.
func (c *Client) consumerConfig() jetstream.ConsumerConfig {
	ackWait := c.ackWait
	if ackWait <= 0 {
		ackWait = AckWait
	}
	return jetstream.ConsumerConfig{
		Durable:       c.opts.Durable,
		Description:   "Switchboard bridge for channel " + c.opts.Channel,
		FilterSubject: c.subj.OutChannel(c.opts.Channel),
		DeliverPolicy: jetstream.DeliverNewPolicy,
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       ackWait,
		MaxAckPending: MaxAckPending,
		MaxDeliver:    -1,
	}
}

// setupConsumer creates the durable consumer, or updates an existing one
// while keeping its start position.
func (c *Client) setupConsumer(ctx context.Context) (jetstream.Consumer, error) {
	stream, cfg := StreamOut(c.opts.SubjectPrefix), c.consumerConfig()
	cons, err := c.js.Consumer(ctx, stream, cfg.Durable)
	switch {
	case errors.Is(err, jetstream.ErrConsumerNotFound):
		cons, err = c.js.CreateConsumer(ctx, stream, cfg)
		if err != nil {
			return nil, fmt.Errorf("create consumer %s/%s: %w", stream, cfg.Durable, err)
		}
		c.log.Info("created outbound consumer", "stream", stream, "consumer", cfg.Durable, "filter", cfg.FilterSubject)
		return cons, nil
	case errors.Is(err, jetstream.ErrNotPullConsumer):
		return nil, fmt.Errorf("consumer %s/%s is a push consumer; delete it or choose another Options.Durable", stream, cfg.Durable)
	case errors.Is(err, jetstream.ErrStreamNotFound):
		return nil, fmt.Errorf("stream %s not found (is the daemon running, with subject prefix %q?): %w", stream, c.opts.SubjectPrefix, err)
	case err != nil:
		return nil, fmt.Errorf("look up consumer %s/%s: %w", stream, cfg.Durable, err)
	}
	have := cons.CachedInfo().Config
	if sameSettings(have, cfg) {
		return cons, nil
	}
	cfg.DeliverPolicy, cfg.OptStartSeq, cfg.OptStartTime = have.DeliverPolicy, have.OptStartSeq, have.OptStartTime
	cons, err = c.js.UpdateConsumer(ctx, stream, cfg)
	if err != nil {
		return nil, fmt.Errorf("update consumer %s/%s: %w", stream, cfg.Durable, err)
	}
	c.log.Info("updated outbound consumer", "stream", stream, "consumer", cfg.Durable, "filter", cfg.FilterSubject)
	return cons, nil
}

// sameSettings reports whether an existing consumer already has the
// settings ConsumeOutbound relies on. The description is free text: a
// consumer the daemon made for a declared bridge says so in its own words,
// and is used as it is (the daemon refuses a bridge's changes to it
// anyway).
func sameSettings(have, want jetstream.ConsumerConfig) bool {
	return have.FilterSubject == want.FilterSubject && len(have.FilterSubjects) == 0 &&
		have.AckPolicy == want.AckPolicy && have.AckWait == want.AckWait &&
		have.MaxAckPending == want.MaxAckPending && have.MaxDeliver == want.MaxDeliver
}

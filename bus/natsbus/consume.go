package natsbus

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/switchboard-chat/switchboard/bus"
	"github.com/switchboard-chat/switchboard/internal/retry"
)

// Consumer settings of the agent runtime's durable consumer on the in stream.
const (
	// ConsumerName is the durable consumer's name.
	ConsumerName = "agent"
	// AckWait is how long a delivered message may stay unacknowledged before
	// it is redelivered; handlers call InProgress more often than this.
	AckWait = 30 * time.Second
	// MaxAckPending bounds delivered-but-unacknowledged messages.
	MaxAckPending = 20_000
	// pullBuffer is how many messages the client buffers ahead.
	pullBuffer = 256
	// pinIDHeader carries the pin id of a pinned consumer's message.
	pinIDHeader = "Nats-Pin-Id"
)

// ConsumerConfig returns the configuration of the durable consumer for a
// subject prefix: explicit acks, [AckWait], [MaxAckPending], unlimited
// deliveries, from the first message in the stream.
func ConsumerConfig(prefix string) jetstream.ConsumerConfig {
	return jetstream.ConsumerConfig{
		Durable:       ConsumerName,
		Description:   "Switchboard agent runtime",
		FilterSubject: bus.Subjects{Prefix: prefix}.InAll(),
		DeliverPolicy: jetstream.DeliverAllPolicy,
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       AckWait,
		MaxAckPending: MaxAckPending,
		MaxDeliver:    -1,
	}
}

// Consume delivers inbound messages from the in stream to handler through the
// durable consumer [ConsumerName], until ctx is cancelled; then it stops the
// consumer, waits until no handler call is running, and returns nil.
//
// The handler is called from one goroutine, one message at a time, in stream
// order; it must not block for long (hand the message to a session and
// return). It owns the acknowledgement of each [bus.Delivery]. Messages the
// client had buffered but not yet handed to handler when Consume stopped are
// redelivered later.
//
// A bridge's inbound messages pass its channels' rate limits (Config.Bridges)
// before they reach the handler. On the embedded server the ingress applies
// them before the message is stored (see [IngressSubject]); with an external
// server Consume does: a valid envelope on a bridge's channel over the limit
// is dead-lettered on "<p>.dlq.<channel>" with the reason [RateLimitReason]
// and terminated, and the handler never sees it; an invalid one reaches the
// handler (which dead-letters it) without spending the channel's budget. A
// flood on one channel thus costs the handler nothing beyond the limit, and
// other channels' messages are not held up behind it.
//
// In embedded mode the consumer is deleted and created afresh, so that
// messages a previous process received but never acknowledged are
// redelivered at once instead of after [AckWait]; this is safe because the
// in-process server has no other consumer. With an external URL the consumer
// is created or updated and shared by every instance. Only the first
// Consume of a Bus recreates the consumer; a later one reuses it, so the
// messages an earlier run handed out are not redelivered before AckWait.
//
// The bus going away does not end Consume. The client reconnects by itself
// (an external server forever) and pulls again; after every reconnect
// Consume re-creates what the server may have lost (the streams, the
// bridges' consumers, its own durable consumer: a server that came back
// with an empty store) and, when its consumer had to be created again or
// stopped on its own (deleted by an operator), restarts the consume loop,
// retrying every [recreateWait] until it succeeds. Nothing acknowledged is
// lost: a message delivered but not yet acknowledged when the connection
// dropped is redelivered after AckWait.
//
// Consume returns an error if the consumer cannot be set up at first, if
// another Consume is running on this Bus or, wrapping [ErrClosed], if the
// Bus is closed meanwhile.
func (b *Bus) Consume(ctx context.Context, handler func(bus.Delivery)) error {
	if b.closed.Load() {
		return fmt.Errorf("natsbus: consume: %w", ErrClosed)
	}
	if !b.consuming.CompareAndSwap(false, true) {
		return errors.New("natsbus: consume: already consuming")
	}
	defer b.consuming.Store(false)

	status := b.nc.StatusChanged(nats.CONNECTED, nats.RECONNECTING, nats.CLOSED)
	defer b.nc.RemoveStatusListener(status)

	parts, err := b.setupConsumers(ctx)
	if err != nil {
		return fmt.Errorf("natsbus: consume: %w", err)
	}
	var one sync.Mutex // the handler is called one message at a time
	for {
		dispatch := b.dispatcher(handler)
		ccs, err := b.startConsuming(ctx, parts, dispatch, &one)
		if err != nil {
			return fmt.Errorf("natsbus: consume: %w", err)
		}
		bctx, stopBalance := context.WithCancel(ctx)
		var balancing sync.WaitGroup
		if b.partitions > 1 {
			balancing.Go(func() { b.balance(bctx, parts, &one) })
			balancing.Go(func() { b.holds(bctx, parts, &one, dispatch) })
		}
		restart := b.watch(ctx, ccs, status)
		stopBalance()
		balancing.Wait()
		for _, cc := range ccs {
			cc.Stop()
		}
		for _, cc := range ccs {
			<-cc.Closed()
		}
		one.Lock()
		for _, p := range parts {
			p.dropHold()
		}
		one.Unlock()
		switch {
		case b.closed.Load():
			return fmt.Errorf("natsbus: consume: %w", ErrClosed)
		case !restart:
			return nil
		}
		if parts, err = b.recreate(ctx); err != nil {
			return nil // ctx ended while retrying
		}
		b.log.Info("consumer re-created; consuming again", "stream", b.streams.In, "consumer", ConsumerName)
	}
}

// dispatcher returns what hands a message of part p, accepted, to the
// handler (under the handler's lock).
func (b *Bus) dispatcher(handler func(bus.Delivery)) func(*part, jetstream.Msg) {
	limit := b.ns == nil && len(b.limits) > 0 // embedded: the ingress limits
	return func(p *part, m jetstream.Msg) {
		d := delivery{Msg: m, subject: publishedSubject(b.subj, m.Subject())}
		if p.k >= 0 {
			d.settle = &settle{held: &p.held}
		}
		if !limit || !b.rateLimited(d) {
			handler(d)
		}
	}
}

// startConsuming starts the consume loop of every part; dispatch is
// called under one. On error the loops started are stopped.
func (b *Bus) startConsuming(ctx context.Context, parts []*part, dispatch func(*part, jetstream.Msg), one *sync.Mutex) ([]jetstream.ConsumeContext, error) {
	ccs := make([]jetstream.ConsumeContext, 0, len(parts))
	for _, p := range parts {
		deliver := func(m jetstream.Msg) {
			one.Lock()
			defer one.Unlock()
			if p.k >= 0 && !p.accept(ctx, m, b.log) {
				return
			}
			dispatch(p, m)
		}
		opts := []jetstream.PullConsumeOpt{
			jetstream.PullMaxMessages(pullBuffer),
			jetstream.ConsumeErrHandler(func(_ jetstream.ConsumeContext, err error) {
				if !b.closed.Load() && !errors.Is(err, jetstream.ErrPinIDMismatch) {
					b.log.Warn("consume error", "stream", b.streams.In, "consumer", p.name, "err", err)
				}
			}),
		}
		if p.k >= 0 {
			opts = append(opts, jetstream.PullPriorityGroup(PriorityGroup), jetstream.PullExpiry(partitionPullExpiry))
		}
		cc, err := p.cons.Consume(deliver, opts...)
		if err != nil {
			for _, c := range ccs {
				c.Stop()
				<-c.Closed()
			}
			return nil, fmt.Errorf("consume %s/%s: %w", b.streams.In, p.name, err)
		}
		b.log.Debug("consuming", "stream", b.streams.In, "consumer", p.name)
		ccs = append(ccs, cc)
	}
	return ccs, nil
}

// delivery is the [bus.Delivery] Consume hands out: the JetStream message,
// with its delivery metadata ([delivery.Info]), which can also be retried
// soon ([delivery.Retry]).
type delivery struct {
	jetstream.Msg
	subject string  // as published: without the partition token
	settle  *settle // nil but on a partition
}

// Ack, Nak, NakWithDelay, Term and TermWithReason settle the message:
// the partition's balance no longer counts it as held here.
func (d delivery) Ack() error  { defer d.settle.done(); return d.Msg.Ack() }
func (d delivery) Nak() error  { defer d.settle.done(); return d.Msg.Nak() }
func (d delivery) Term() error { defer d.settle.done(); return d.Msg.Term() }
func (d delivery) DoubleAck(ctx context.Context) error {
	defer d.settle.done()
	return d.Msg.DoubleAck(ctx)
}
func (d delivery) NakWithDelay(delay time.Duration) error {
	defer d.settle.done()
	return d.Msg.NakWithDelay(delay)
}
func (d delivery) TermWithReason(reason string) error {
	defer d.settle.done()
	return d.Msg.TermWithReason(reason)
}

// Subject returns the subject the message was published on
// ("<p>.in.<channel>.<chat>"), also when the in stream stored it under its
// partition's subject.
func (d delivery) Subject() string { return d.subject }

// Compile-time check: a wrapped JetStream message is a bus.Delivery.
var _ bus.Delivery = delivery{}

// Info implements [bus.Delivery] from the message's reply-subject metadata.
func (d delivery) Info() bus.DeliveryInfo {
	md, err := d.Metadata()
	if err != nil {
		return bus.DeliveryInfo{}
	}
	return bus.DeliveryInfo{Sequence: md.Sequence.Stream, NumDelivered: md.NumDelivered}
}

// Retry asks JetStream to redeliver the message after a delay that doubles
// with each delivery of it: 1 s, 2 s, 4 s ..., at most [AckWait] (what an
// unacknowledged message waits anyway). The runtime calls it when it could
// not answer the message for now (the history store failed, the bus was
// away), so a failing dependency is retried promptly without a hot loop.
func (d delivery) Retry() error {
	return d.NakWithDelay(RetryDelay(max(1, d.Info().NumDelivered)))
}

// RetryDelay is the redelivery delay of [delivery.Retry] for a message
// delivered n times (n >= 1).
func RetryDelay(n uint64) time.Duration {
	d := time.Second
	for i := uint64(1); i < n && d < AckWait; i++ {
		d *= 2
	}
	return min(d, AckWait)
}

// recreateWait is how long Consume waits between attempts to re-create the
// streams and its consumer.
const recreateWait = time.Second

// watch waits while ccs consume. It returns false when ctx ends, true when
// the consume loops must be restarted: one stopped on its own, or after a
// reconnect a consumer was missing on the server.
func (b *Bus) watch(ctx context.Context, ccs []jetstream.ConsumeContext, status <-chan nats.Status) bool {
	stopped := make(chan struct{}, len(ccs))
	done := make(chan struct{})
	var wg sync.WaitGroup
	defer func() { close(done); wg.Wait() }()
	for _, cc := range ccs {
		wg.Go(func() {
			select {
			case <-cc.Closed():
				stopped <- struct{}{}
			case <-done:
			}
		})
	}
	down := false
	for {
		select {
		case <-ctx.Done():
			return false
		case <-stopped:
			if !b.closed.Load() {
				b.log.Warn("consumer stopped; re-creating it", "stream", b.streams.In, "consumer", ConsumerName)
			}
			return true
		case st := <-status:
			switch st {
			case nats.RECONNECTING:
				down = true
			case nats.CLOSED:
				return true
			case nats.CONNECTED:
				if !down {
					continue
				}
				down = false
				if missing := b.ensureAfterReconnect(ctx); missing {
					b.log.Warn("the server lost the runtime's consumer; re-creating it", "stream", b.streams.In, "consumer", ConsumerName)
					return true
				}
			}
		}
	}
}

// ensureAfterReconnect re-creates the streams and the bridges' consumers a
// restarted server may have lost, and reports whether the runtime's own
// consumer is missing. Failures are logged: the consume loop's restart
// retries them.
func (b *Bus) ensureAfterReconnect(ctx context.Context) (missing bool) {
	if err := b.ensureStreams(ctx); err != nil {
		b.log.Warn("after reconnecting: could not ensure the streams", "err", err)
		return true
	}
	if err := b.repairBridgeConsumers(ctx); err != nil {
		b.log.Warn("after reconnecting: could not ensure the bridges' consumers", "err", err)
	}
	for _, cfg := range b.consumerConfigs() {
		if _, err := b.js.Consumer(ctx, b.streams.In, cfg.Durable); err != nil {
			return true
		}
	}
	return false
}

// recreate ensures the streams, the bridges' consumers and the runtime's
// consumer (created or updated, never deleted: its acknowledgement state
// is kept), retrying every recreateWait until it succeeds or ctx ends.
func (b *Bus) recreate(ctx context.Context) ([]*part, error) {
	var parts []*part
	err := retry.Do(ctx, retry.Policy{
		Schedule:  retry.Exponential(recreateWait, recreateWait), // a constant wait
		Retryable: func(err error) bool { return !errors.Is(err, ErrClosed) },
		OnRetry: func(_ int, wait time.Duration, err error) {
			b.log.Warn("could not re-create the consumer; retrying", "stream", b.streams.In, "consumer", ConsumerName, "err", err, "retry_in", wait)
		},
	}, func(ctx context.Context, _ int) error {
		if b.closed.Load() {
			return ErrClosed
		}
		err := b.ensureStreams(ctx)
		if err == nil {
			if rerr := b.repairBridgeConsumers(ctx); rerr != nil { // the watch retries them
				b.log.Warn("could not ensure the bridges' consumers", "err", rerr)
			}
		}
		if err == nil {
			parts, err = b.setupConsumers(ctx)
		}
		return err
	})
	switch {
	case err == nil:
		return parts, nil
	case errors.Is(err, ErrClosed):
		return nil, ErrClosed
	}
	return nil, ctx.Err()
}

package natsbus

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"switchboard/bus"
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
// Consume returns an error if the consumer cannot be set up, if another
// Consume is running on this Bus, if the consumer stops on its own (e.g. it
// was deleted) or, wrapping [ErrClosed], if the Bus is closed meanwhile.
func (b *Bus) Consume(ctx context.Context, handler func(bus.Delivery)) error {
	if b.closed.Load() {
		return fmt.Errorf("natsbus: consume: %w", ErrClosed)
	}
	if !b.consuming.CompareAndSwap(false, true) {
		return errors.New("natsbus: consume: already consuming")
	}
	defer b.consuming.Store(false)

	cons, err := b.setupConsumer(ctx)
	if err != nil {
		return fmt.Errorf("natsbus: consume: %w", err)
	}
	limit := b.ns == nil && len(b.limits) > 0 // embedded: the ingress limits
	cc, err := cons.Consume(
		func(m jetstream.Msg) {
			if !limit || !b.rateLimited(m) {
				handler(delivery{m})
			}
		},
		jetstream.PullMaxMessages(pullBuffer),
		jetstream.ConsumeErrHandler(func(_ jetstream.ConsumeContext, err error) {
			if !b.closed.Load() {
				b.log.Warn("consume error", "stream", b.streams.In, "consumer", ConsumerName, "err", err)
			}
		}),
	)
	if err != nil {
		return fmt.Errorf("natsbus: consume %s/%s: %w", b.streams.In, ConsumerName, err)
	}
	b.log.Debug("consuming", "stream", b.streams.In, "consumer", ConsumerName)
	select {
	case <-ctx.Done():
		cc.Stop()
		<-cc.Closed()
		return nil
	case <-cc.Closed():
		if b.closed.Load() {
			return fmt.Errorf("natsbus: consume: %w", ErrClosed)
		}
		return fmt.Errorf("natsbus: consume %s/%s: consumer stopped", b.streams.In, ConsumerName)
	}
}

func (b *Bus) setupConsumer(ctx context.Context) (jetstream.Consumer, error) {
	cfg := ConsumerConfig(b.subj.Prefix)
	if b.ns == nil || !b.recreated.CompareAndSwap(false, true) {
		cons, err := b.js.CreateOrUpdateConsumer(ctx, b.streams.In, cfg)
		if err != nil {
			return nil, fmt.Errorf("create or update consumer %s/%s: %w", b.streams.In, ConsumerName, err)
		}
		return cons, nil
	}
	if err := b.js.DeleteConsumer(ctx, b.streams.In, ConsumerName); err != nil && !errors.Is(err, jetstream.ErrConsumerNotFound) {
		return nil, fmt.Errorf("delete stale consumer %s/%s: %w", b.streams.In, ConsumerName, err)
	}
	cons, err := b.js.CreateConsumer(ctx, b.streams.In, cfg)
	if err != nil {
		return nil, fmt.Errorf("create consumer %s/%s: %w", b.streams.In, ConsumerName, err)
	}
	return cons, nil
}

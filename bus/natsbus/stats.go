package natsbus

import (
	"context"
	"fmt"
)

// ConsumerStats describes the runtime's inbound consumer.
type ConsumerStats struct {
	// Pending is the number of messages not yet delivered.
	Pending uint64
	// AckPending is the number delivered but not yet acknowledged (queued
	// in sessions or being answered).
	AckPending int
	// Redelivered is the number of messages delivered more than once and
	// not yet acknowledged.
	Redelivered int
}

// ConsumerStats reads the inbound consumer's state from JetStream (one API
// call). Safe for concurrent use.
func (b *Bus) ConsumerStats(ctx context.Context) (ConsumerStats, error) {
	c, err := b.js.Consumer(ctx, b.streams.In, ConsumerName)
	if err != nil {
		return ConsumerStats{}, fmt.Errorf("natsbus: consumer %s/%s: %w", b.streams.In, ConsumerName, err)
	}
	info, err := c.Info(ctx)
	if err != nil {
		return ConsumerStats{}, fmt.Errorf("natsbus: consumer %s/%s info: %w", b.streams.In, ConsumerName, err)
	}
	return ConsumerStats{Pending: info.NumPending, AckPending: info.NumAckPending, Redelivered: info.NumRedelivered}, nil
}

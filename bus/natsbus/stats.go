package natsbus

import (
	"context"
	"fmt"
)

// ConsumerStats describes the runtime's inbound consumers.
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

// ConsumerStats reads the inbound consumers' state from JetStream, summed
// over [ConsumerName] and, with partitions, every partition's consumer
// (one API call each). Safe for concurrent use.
func (b *Bus) ConsumerStats(ctx context.Context) (ConsumerStats, error) {
	names := []string{ConsumerName}
	if ps := b.parts.Load(); ps != nil {
		names = names[:0]
		for _, p := range *ps {
			names = append(names, p.name)
		}
	}
	var st ConsumerStats
	for _, name := range names {
		c, err := b.js.Consumer(ctx, b.streams.In, name)
		if err != nil {
			return ConsumerStats{}, fmt.Errorf("natsbus: consumer %s/%s: %w", b.streams.In, name, err)
		}
		info, err := c.Info(ctx)
		if err != nil {
			return ConsumerStats{}, fmt.Errorf("natsbus: consumer %s/%s info: %w", b.streams.In, name, err)
		}
		st.Pending += info.NumPending
		st.AckPending += info.NumAckPending
		st.Redelivered += info.NumRedelivered
	}
	return st, nil
}

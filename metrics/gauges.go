package metrics

import (
	"context"
	"time"

	"github.com/switchboard-chat/switchboard/bus/natsbus"
)

// Sessions is what the runtime gauges read of the session manager
// (*agent.Manager implements it).
type Sessions interface {
	ActiveSessions() int
	Queued() int
}

// Consumer is what the runtime gauges read of the bus (*natsbus.Bus
// implements it): the inbound consumer's state, one API call a read.
type Consumer interface {
	ConsumerStats(ctx context.Context) (natsbus.ConsumerStats, error)
}

// Runtime registers the gauges read at scrape time: sessions alive and
// messages queued in them, and the inbound consumer's pending,
// acknowledgement-pending and redelivered messages (-1 when the bus does
// not answer within 2 s).
func (m *Metrics) Runtime(s Sessions, c Consumer) {
	m.Gauge("switchboard_active_sessions", "Sessions in memory: processing, or idle within agent.session_idle.", func() float64 { return float64(s.ActiveSessions()) })
	m.Gauge("switchboard_queued_messages", "Messages waiting in session queues.", func() float64 { return float64(s.Queued()) })
	stat := func(f func(natsbus.ConsumerStats) float64) func() float64 {
		return func() float64 {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			st, err := c.ConsumerStats(ctx)
			if err != nil {
				return -1
			}
			return f(st)
		}
	}
	m.Gauge("switchboard_jetstream_pending_messages", "Inbound messages in JetStream not yet delivered to the runtime (-1: unknown).",
		stat(func(s natsbus.ConsumerStats) float64 { return float64(s.Pending) }))
	m.Gauge("switchboard_jetstream_ack_pending_messages", "Inbound messages delivered but not yet acknowledged (-1: unknown).",
		stat(func(s natsbus.ConsumerStats) float64 { return float64(s.AckPending) }))
	m.Gauge("switchboard_jetstream_redelivered_messages", "Inbound messages delivered more than once and not yet acknowledged (-1: unknown).",
		stat(func(s natsbus.ConsumerStats) float64 { return float64(s.Redelivered) }))
}

package metrics

import (
	"context"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/switchboard-chat/switchboard/bus/natsbus"
)

// Sessions is what the runtime gauges read of the session manager
// (*agent.Manager implements it).
type Sessions interface {
	ActiveSessions() int
	Queued() int
}

// Consumer is what the runtime gauges read of the bus (*natsbus.Bus
// implements it): the inbound consumers' state, one API call a read, and
// each partition's (none without agent.partitions).
type Consumer interface {
	ConsumerStats(ctx context.Context) (natsbus.ConsumerStats, error)
	Partitions(ctx context.Context) ([]natsbus.PartitionState, error)
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
	m.reg.MustRegister(partitionCollector{c: c})
}

// Per-partition gauges (agent.partitions > 1), labelled by partition
// number: a bounded label (at most agent.partitions values).
var (
	partitionOwned = prometheus.NewDesc("switchboard_partition_owned",
		"1 when the server pins the inbound partition to this instance, else 0.", []string{"partition"}, nil)
	partitionQueued = prometheus.NewDesc("switchboard_partition_queued_messages",
		"Inbound messages of the partition not yet delivered.", []string{"partition"}, nil)
	partitionAckPending = prometheus.NewDesc("switchboard_partition_ack_pending_messages",
		"Inbound messages of the partition delivered but not yet acknowledged.", []string{"partition"}, nil)
	partitionRedelivered = prometheus.NewDesc("switchboard_partition_redelivered_messages",
		"Inbound messages of the partition delivered more than once and not yet acknowledged.", []string{"partition"}, nil)
)

// partitionCollector reads the partitions at scrape time (one API call
// each, bounded by 2 s); it reports nothing when they cannot be read.
type partitionCollector struct{ c Consumer }

func (p partitionCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{partitionOwned, partitionQueued, partitionAckPending, partitionRedelivered} {
		ch <- d
	}
}

func (p partitionCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	states, _ := p.c.Partitions(ctx) // the partitions read are reported
	for _, st := range states {
		k := strconv.Itoa(st.Partition)
		owned := 0.0
		if st.Owned {
			owned = 1
		}
		ch <- prometheus.MustNewConstMetric(partitionOwned, prometheus.GaugeValue, owned, k)
		ch <- prometheus.MustNewConstMetric(partitionQueued, prometheus.GaugeValue, float64(st.Pending), k)
		ch <- prometheus.MustNewConstMetric(partitionAckPending, prometheus.GaugeValue, float64(st.AckPending), k)
		ch <- prometheus.MustNewConstMetric(partitionRedelivered, prometheus.GaugeValue, float64(st.Redelivered), k)
	}
}

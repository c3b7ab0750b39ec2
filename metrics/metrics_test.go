package metrics

import (
	"context"
	"errors"
	"io"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/switchboard-chat/switchboard/bus/natsbus"
)

// TestQueueCounters: the agent's redelivery, duplicate and collect
// measurements are exported with a channel label.
func TestQueueCounters(t *testing.T) {
	m := New()
	m.Redelivered("telegram")
	m.DuplicateSuppressed("telegram")
	m.DuplicateSuppressed("telegram")
	m.Collected("slack", 3)
	rec := httptest.NewRecorder()
	m.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	body, _ := io.ReadAll(rec.Body)
	for _, want := range []string{
		`switchboard_inbound_redeliveries_total{channel="telegram"} 1`,
		`switchboard_inbound_duplicates_suppressed_total{channel="telegram"} 2`,
		`switchboard_collected_messages_total{channel="slack"} 3`,
	} {
		if !strings.Contains(string(body), want) {
			t.Errorf("metrics lack %s", want)
		}
	}
}

type fakeSessions struct{ active, queued int }

func (f fakeSessions) ActiveSessions() int { return f.active }
func (f fakeSessions) Queued() int         { return f.queued }

type fakeConsumer struct {
	st    natsbus.ConsumerStats
	parts []natsbus.PartitionState
	err   error
}

func (f fakeConsumer) Partitions(context.Context) ([]natsbus.PartitionState, error) {
	return f.parts, f.err
}

func (f fakeConsumer) ConsumerStats(context.Context) (natsbus.ConsumerStats, error) {
	return f.st, f.err
}

// TestRuntimeGauges: the runtime gauges read the manager and the bus at
// scrape time, and an unanswered bus reads -1.
func TestRuntimeGauges(t *testing.T) {
	scrape := func(m *Metrics) string {
		rec := httptest.NewRecorder()
		m.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
		body, _ := io.ReadAll(rec.Body)
		return string(body)
	}
	m := New()
	m.Runtime(fakeSessions{active: 3, queued: 7}, fakeConsumer{st: natsbus.ConsumerStats{Pending: 11, AckPending: 2, Redelivered: 1}})
	body := scrape(m)
	for _, want := range []string{
		"switchboard_active_sessions 3", "switchboard_queued_messages 7",
		"switchboard_jetstream_pending_messages 11", "switchboard_jetstream_ack_pending_messages 2",
		"switchboard_jetstream_redelivered_messages 1",
	} {
		if !strings.Contains(body, want+"\n") {
			t.Errorf("metrics lack %q", want)
		}
	}
	m = New()
	m.Runtime(fakeSessions{}, fakeConsumer{err: errors.New("no responders")})
	if body := scrape(m); !strings.Contains(body, "switchboard_jetstream_pending_messages -1\n") {
		t.Errorf("an unanswered bus does not read -1:\n%s", body)
	}
}

// TestPartitionGauges (issue 17, item 6): each partition reports whether
// this instance owns it, its queued, ack-pending and redelivered messages;
// without partitions there is no partition series.
func TestPartitionGauges(t *testing.T) {
	scrape := func(m *Metrics) string {
		rec := httptest.NewRecorder()
		m.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
		return rec.Body.String()
	}
	m := New()
	m.Runtime(fakeSessions{}, fakeConsumer{parts: []natsbus.PartitionState{
		{Partition: 0, Owned: true, Pending: 4, AckPending: 2, Redelivered: 1},
		{Partition: 1},
	}})
	body := scrape(m)
	for _, want := range []string{
		`switchboard_partition_owned{partition="0"} 1`, `switchboard_partition_owned{partition="1"} 0`,
		`switchboard_partition_queued_messages{partition="0"} 4`, `switchboard_partition_ack_pending_messages{partition="0"} 2`,
		`switchboard_partition_redelivered_messages{partition="0"} 1`,
	} {
		if !strings.Contains(body, want+"\n") {
			t.Errorf("metrics lack %q", want)
		}
	}
	m = New()
	m.Runtime(fakeSessions{}, fakeConsumer{})
	if body := scrape(m); strings.Contains(body, "switchboard_partition_owned{") {
		t.Errorf("partition series without partitions:\n%s", body)
	}
}

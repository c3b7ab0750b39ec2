package natsbus_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/switchboard-chat/switchboard/bus"
	"github.com/switchboard-chat/switchboard/bus/natsbus"
)

// consumersOf lists the in stream's consumers.
func consumersOf(t *testing.T, b *natsbus.Bus) []string {
	t.Helper()
	s, err := b.JetStream().Stream(t.Context(), b.Streams().In)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	l := s.ConsumerNames(t.Context())
	for n := range l.Name() {
		names = append(names, n)
	}
	if err := l.Err(); err != nil {
		t.Fatal(err)
	}
	slices.Sort(names)
	return names
}

// receive takes n deliveries, acknowledging each, and returns their ids.
func receive(t *testing.T, c *consumer, n int) []string {
	t.Helper()
	var ids []string
	for range n {
		select {
		case d := <-c.ch:
			in, err := bus.ParseInbound(bus.Subjects{Prefix: "chat"}, d.Subject(), d.Data(), 1<<16)
			if err != nil {
				t.Fatalf("delivery on %s: %v", d.Subject(), err)
			}
			ids = append(ids, in.ID)
			// Confirmed, so that a restart right after cannot find it.
			if err := d.(interface{ DoubleAck(context.Context) error }).DoubleAck(t.Context()); err != nil {
				t.Fatal(err)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("got %v, want %d deliveries", ids, n)
		}
	}
	return ids
}

// TestPartitionsMigration (issue 17, item 3): a deployment that ran with
// one consumer (agent.partitions 1, or an older version) and restarts
// with partitions loses nothing: what the old consumer held is delivered
// through it, new messages through the partitions. Going back to 1, a
// partition consumer still holding messages is consumed until it is
// empty, and deleted at the next start.
func TestPartitionsMigration(t *testing.T) {
	dir := t.TempDir()
	cfg := inProcessConfig()
	b := open(t, cfg, dir)
	for i := range 3 {
		publishInbound(t, b, inbound(fmt.Sprint("old", i), "before partitions"))
	}
	_ = b.Close()

	cfg.Partitions = 4
	b = open(t, cfg, dir)
	c := startConsume(t, b)
	if got := receive(t, c, 3); !slices.Equal(got, []string{"old0", "old1", "old2"}) {
		t.Fatalf("after partitioning, the old messages came as %v", got)
	}
	publishInbound(t, b, inbound("new0", "with partitions"))
	if got := receive(t, c, 1); got[0] != "new0" {
		t.Fatalf("got %v", got)
	}
	want := []string{"agent", "agent-p0", "agent-p1", "agent-p2", "agent-p3"}
	if got := consumersOf(t, b); !slices.Equal(got, want) {
		t.Fatalf("consumers %v, want %v", got, want)
	}
	_ = c.stop(t)
	if st, err := b.JetStream().Stream(t.Context(), "CHAT_IN"); err != nil || st.CachedInfo().State.Msgs != 0 {
		t.Fatalf("acknowledged messages stay in CHAT_IN: %v %+v", err, st.CachedInfo().State)
	}
	publishInbound(t, b, inbound("left0", "left in a partition"))
	_ = b.Close()

	cfg.Partitions = 1
	b = open(t, cfg, dir)
	c = startConsume(t, b)
	publishInbound(t, b, inbound("one0", "without partitions"))
	got := receive(t, c, 2)
	slices.Sort(got)
	if !slices.Equal(got, []string{"left0", "one0"}) {
		t.Fatalf("back to one consumer: got %v", got)
	}
	_ = c.stop(t)
	_ = b.Close()
	b = open(t, cfg, dir)
	c = startConsume(t, b)
	publishInbound(t, b, inbound("one1", "again"))
	receive(t, c, 1)
	if got := consumersOf(t, b); !slices.Equal(got, []string{"agent"}) {
		t.Fatalf("drained partition consumers were not deleted: %v", got)
	}
}

package clustertest

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/goleak"

	"github.com/switchboard-chat/switchboard/internal/polltest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestClusterReplicatesAndSurvivesRestarts: a stream with 3 replicas on the
// cluster keeps taking writes with one node killed, and holds every
// message after all three nodes were stopped and started again on their
// ports and store directories.
func TestClusterReplicatesAndSurvivesRestarts(t *testing.T) {
	c := Start(t, 3)
	nc := c.Connect(t, nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context() // each request has the client's own timeout
	info, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "T", Subjects: []string{"t.>"}, Replicas: 3})
	if err != nil {
		t.Fatal(err)
	}
	if got := len(info.CachedInfo().Cluster.Replicas) + 1; got != 3 {
		t.Fatalf("stream on %d servers, want 3", got)
	}
	publish := func(n int) {
		t.Helper()
		for range n {
			// A publish may meet a leader election: retry until stored.
			deadline := time.Now().Add(Wait)
			for {
				pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
				_, err := js.Publish(pctx, "t.x", []byte("m"))
				cancel()
				if err == nil {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("publish: %v", err)
				}
			}
		}
	}
	publish(5)

	c.Nodes[0].Kill(t)
	if c.Nodes[0].Running() {
		t.Fatal("killed node still running")
	}
	c.WaitMetaLeader(t)
	publish(5)
	c.Nodes[0].Restart(t)

	c.StopAll(t)
	c.RestartAll(t)
	var msgs uint64
	// The stream's own leader election follows the meta leader's.
	polltest.Until(t, Wait, 50*time.Millisecond, func() bool {
		info, err = js.Stream(ctx, "T")
		if err == nil {
			msgs = info.CachedInfo().State.Msgs
		}
		return err == nil && msgs == 10
	}, func() string {
		return fmt.Sprintf("after restarting every node the stream holds %d messages (err %v), want 10", msgs, err)
	})
}

package jsstore_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/switchboard-chat/switchboard/memory/jsstore"
	"github.com/switchboard-chat/switchboard/memory/memtest"
)

// TestClusterReplicas3: on a 3-node cluster the stream has 3 replicas;
// stopping the node that leads it, commits still succeed (on the new
// leader) and every turn, before and after, reads back from a store
// connected to another node.
func TestClusterReplicas3(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a 3-node cluster")
	}
	servers := startCluster(t, 3)
	var urls []string
	for _, s := range servers {
		urls = append(urls, s.ClientURL())
	}
	nc := connect(t, strings.Join(urls, ","), nats.MaxReconnects(-1))
	st := openStore(t, nc, jsstore.Options{Prefix: "cl", Replicas: 3})
	info, err := st.StreamInfo(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if info.Config.Replicas != 3 || len(info.Cluster.Replicas) != 2 {
		t.Fatalf("stream has %d replicas configured, %d followers; want 3, 2", info.Config.Replicas, len(info.Cluster.Replicas))
	}
	const sess = "telegram/cluster"
	for i := range 5 {
		if err := st.CommitTurn(t.Context(), memtest.Turn(sess, fmt.Sprint(i), fmt.Sprint("u", i), "r")); err != nil {
			t.Fatalf("commit %d: %v", i, err)
		}
	}
	leader := info.Cluster.Leader
	var rest []string
	for _, s := range servers {
		if s.Name() == leader {
			stopServer(s)
			continue
		}
		rest = append(rest, s.ClientURL())
	}
	if len(rest) != 2 {
		t.Fatalf("stream leader %q is not one of the servers", leader)
	}
	// The commits ride out the leader election through the store's retries.
	for i := 5; i < 10; i++ {
		if err := st.CommitTurn(t.Context(), memtest.Turn(sess, fmt.Sprint(i), fmt.Sprint("u", i), "r")); err != nil {
			t.Fatalf("commit %d after stopping the leader %s: %v", i, leader, err)
		}
	}
	other := openStore(t, connect(t, rest[1]), jsstore.Options{Prefix: "cl", Replicas: 3})
	snap, err := other.Load(t.Context(), sess, 100)
	if err != nil {
		t.Fatal(err)
	}
	if snap.Turns != 10 || len(snap.Messages) != 20 || snap.Messages[18].Text() != "u9" {
		t.Fatalf("after losing a node: %d turns, %d messages; want 10, 20", snap.Turns, len(snap.Messages))
	}
	if _, ok, err := other.Receipt(t.Context(), sess+":2"); !ok || err != nil {
		t.Errorf("receipt written before the node stopped = %v, %v", ok, err)
	}
}

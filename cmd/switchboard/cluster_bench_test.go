package main

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/switchboard-chat/switchboard/bus"
	"github.com/switchboard-chat/switchboard/internal/loadgen"
	"github.com/switchboard-chat/switchboard/memory/memcfg"
)

// TestClusterBenchmark is the benchmark of issue 17, run on demand (it
// takes minutes and its figures depend on the machine):
//
//	SWITCHBOARD_CLUSTER_BENCH=1 go test -run TestClusterBenchmark -v -timeout 30m ./cmd/switchboard/
//
// On the 3-node loopback cluster (internal/clustertest, bus.replicas 3)
// with the release binary and the scripted model answering at once, it
// drives closed-loop load (internal/loadgen: each of 32 chats sends its
// next message when the previous one was answered) and prints turns/s
// and latency for one instance on memory.store bolt, and one, two and
// three instances on memory.store jetstream; then, with three instances
// on jetstream and twelve chats sending, it kills the busiest instance
// (SIGKILL) SWITCHBOARD_CLUSTER_KILLS times (default 3, the instance
// started again in between) and prints the time from the kill to the
// first and the last answer of a chat that instance ran.
// SWITCHBOARD_CLUSTER_BENCH=<n> (n > 1) sends n turns per run instead of
// 2000.
func TestClusterBenchmark(t *testing.T) {
	v := os.Getenv("SWITCHBOARD_CLUSTER_BENCH")
	if v == "" {
		t.Skip("the cluster benchmark runs with SWITCHBOARD_CLUSTER_BENCH=1")
	}
	turns := 2000
	if n, err := strconv.Atoi(v); err == nil && n > 1 {
		turns = n
	}
	kills := 3
	if n, err := strconv.Atoi(os.Getenv("SWITCHBOARD_CLUSTER_KILLS")); err == nil && n > 0 {
		kills = n
	}
	var rows []string
	for _, c := range []struct {
		store     string
		instances int
	}{{memcfg.StoreBolt, 1}, {memcfg.StoreJetStream, 1}, {memcfg.StoreJetStream, 2}, {memcfg.StoreJetStream, 3}} {
		name := fmt.Sprintf("%s/%d", c.store, c.instances)
		t.Run(name, func(t *testing.T) {
			r := startClusterRig(t, rigOptions{store: c.store, start: []int{0, 1, 2}[:c.instances]})
			res := benchDrive(t, r, turns)
			rows = append(rows, fmt.Sprintf("| %s | %d | %d | %.0f | %.1f | %.1f | %.1f |", c.store, c.instances,
				res.Turns, res.TurnsPerSecond, res.P50Ms, res.P90Ms, res.P99Ms))
		})
	}
	var firsts, lasts []time.Duration
	t.Run("failover", func(t *testing.T) {
		r := startClusterRig(t, rigOptions{modelDelay: 50 * time.Millisecond, start: []int{0, 1, 2}})
		chats := clusterChats(12)
		s := r.startSending(chats)
		for range kills {
			r.waitMoreAnswered(chats, clusterTurns(t))
			f := r.failover(2 * time.Minute) // measured, not asserted: TestClusterKillInstance asserts 10 s
			var ds []time.Duration
			for _, d := range f.firstAnswer {
				ds = append(ds, d)
			}
			if len(ds) > 0 {
				firsts, lasts = append(firsts, slices.Min(ds)), append(lasts, slices.Max(ds))
			}
			r.waitMoreAnswered(chats, clusterTurns(t))
			r.startInstance(f.victim)
			r.waitReady(f.victim)
		}
		r.drain(s, chats)
	})
	t.Logf("cluster benchmark, %d turns per run, 32 chats, closed loop:\n| memory.store | instances | turns | turns/s | p50 ms | p90 ms | p99 ms |\n|---|---|---|---|---|---|---|\n%s",
		turns, strings.Join(rows, "\n"))
	slices.Sort(firsts)
	slices.Sort(lasts)
	if len(firsts) > 0 {
		t.Logf("SIGKILL to the first answer of a moved chat over %d kills: median %s, max %s; to the last moved chat's: median %s, max %s",
			len(firsts), firsts[len(firsts)/2].Round(time.Millisecond), firsts[len(firsts)-1].Round(time.Millisecond),
			lasts[len(lasts)/2].Round(time.Millisecond), lasts[len(lasts)-1].Round(time.Millisecond))
	}
}

// benchDrive warms the instances up (one message per chat on another
// channel) and then drives turns over 32 chats.
func benchDrive(t *testing.T, r *clusterRig, turns int) loadgen.Result {
	t.Helper()
	nc := r.cl.Connect(t)
	subj := bus.Subjects{Prefix: "chat"}
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Minute)
	defer cancel()
	if _, err := loadgen.Drive(ctx, nc, subj, loadgen.Options{Chats: 32, Messages: 1, Channel: "warmup"}); err != nil {
		t.Fatalf("warm-up: %v", err)
	}
	res, err := loadgen.Drive(ctx, nc, subj, loadgen.Options{Chats: 32, Turns: turns})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%d turns in %.1fs: %.0f turns/s, p50 %.1f ms, p99 %.1f ms", res.Turns, res.Seconds, res.TurnsPerSecond, res.P50Ms, res.P99Ms)
	return res
}

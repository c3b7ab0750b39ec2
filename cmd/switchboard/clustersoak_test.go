package main

import (
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// clusterSoakKills is the number of SIGKILLs of the cluster kill soak in
// short mode (CI); SWITCHBOARD_CLUSTER_SOAK_KILLS makes it more.
const clusterSoakKills = 4

// TestClusterKillSoak (issue 17) keeps twelve chats sending (each with up
// to 3 messages in flight) through the 3-node NATS cluster while the three
// daemon processes are killed with SIGKILL one after the other at random
// moments (after a random number of answers), each restarted at once or
// after the others took its partitions over. After the drain it counts,
// and requires zero of each:
//   - lost: an accepted message without a final;
//   - doubled: a message with two different finals;
//   - order violations: a chat's message sent to the model after a later
//     message of that chat was (a chat is answered in order, across
//     takeovers too);
//   - history faults: a request whose earlier user messages are not in
//     the order sent or hold one twice (the history a dead instance wrote
//     is followed, once).
//
// Short mode: 4 kills. Long mode:
//
//	SWITCHBOARD_CLUSTER_SOAK_KILLS=30 go test -run TestClusterKillSoak -v -timeout 60m ./cmd/switchboard/
//
// The moments come from a seeded generator; the seed is printed and
// SWITCHBOARD_CLUSTER_SOAK_SEED=<seed> replays the schedule.
func TestClusterKillSoak(t *testing.T) {
	kills := envCount(t, "SWITCHBOARD_CLUSTER_SOAK_KILLS", clusterSoakKills)
	seed := envSeed(t, "SWITCHBOARD_CLUSTER_SOAK_SEED")
	t.Logf("cluster kill soak: seed=%d kills=%d (replay: SWITCHBOARD_CLUSTER_SOAK_SEED=%d)", seed, kills, seed)
	rng := rand.New(rand.NewPCG(seed, seed>>1|1))

	r := startClusterRig(t, rigOptions{modelDelay: 50 * time.Millisecond, start: []int{0, 1, 2}})
	chats := clusterChats(12)
	s := r.startSending(chats)
	r.waitMoreAnswered(chats, 2)
	began := time.Now()
	for k := range kills {
		var running []int
		for i, in := range r.inst {
			if in.running {
				running = append(running, i)
			}
		}
		// A random moment: after 1–40 more answers anywhere. The victim is
		// mostly the instance that ran the most chats last (a restarted one
		// holds few partitions until the balance gives it its share).
		r.waitTotalAnswered(1 + rng.IntN(40))
		victim := running[rng.IntN(len(running))]
		if rng.IntN(3) > 0 {
			victim = r.busiest(running)
		}
		at := r.kill(victim)
		immediate := rng.IntN(3) == 0
		t.Logf("kill %d at %s: %s (restarted %s)", k+1, at.UTC().Format("15:04:05.000"), r.inst[victim].name, map[bool]string{true: "at once", false: "after every chat was answered again"}[immediate])
		if !immediate {
			r.waitMoreAnswered(chats, 1) // the others took its partitions over
		}
		r.startInstance(victim)
		r.waitReady(victim)
	}
	r.waitMoreAnswered(chats, 2)
	ids := r.drain(s, chats) // lost and doubled: fails the test

	violations, faults := r.model.orderFaults(t)
	t.Logf("cluster kill soak: %d kills in %s, accepted %d, lost 0, doubled 0, order violations %d, history faults %d",
		kills, time.Since(began).Round(time.Second), len(ids), violations, faults)
	if violations+faults > 0 {
		t.Fatalf("%d order violations and %d history faults, want none", violations, faults)
	}
}

// busiest returns the instance of running whose log holds the latest
// turn of the most chats.
func (r *clusterRig) busiest(running []int) int {
	count := make([]int, len(r.inst))
	for _, i := range r.lastOwner(time.Now()) {
		count[i]++
	}
	best := running[0]
	for _, i := range running {
		if count[i] > count[best] {
			best = i
		}
	}
	return best
}

// envCount reads a positive count from the environment variable name,
// def when it is unset.
func envCount(t *testing.T, name string, def int) int {
	t.Helper()
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		t.Fatalf("%s=%q: want a positive number", name, v)
	}
	return n
}

// envSeed reads a soak's seed from the environment variable name, a new
// one when it is unset.
func envSeed(t *testing.T, name string) uint64 {
	t.Helper()
	v := os.Getenv(name)
	if v == "" {
		return uint64(time.Now().UnixNano())
	}
	n, err := strconv.ParseUint(v, 10, 64)
	if err != nil {
		t.Fatalf("%s=%q: %v", name, v, err)
	}
	return n
}

// waitTotalAnswered waits until n more accepted messages (of any chat)
// have a final than now.
func (r *clusterRig) waitTotalAnswered(n int) {
	r.t.Helper()
	total := func() int {
		sum := 0
		for _, c := range r.answeredPerChat() {
			sum += c
		}
		return sum
	}
	base := total()
	r.waitFor(90*time.Second, func() bool { return total() >= base+n },
		func() string { return fmt.Sprintf("fewer than %d more answers after 90 s (had %d)", n, base) })
}

// waitFor waits until ok, at most timeout, woken by every final.
func (r *clusterRig) waitFor(timeout time.Duration, ok func() bool, why func() string) {
	r.t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		r.w.mu.Lock()
		ch := r.w.changed
		r.w.mu.Unlock()
		if ok() {
			return
		}
		left := time.Until(deadline)
		if left <= 0 {
			r.t.Fatal(why())
		}
		select {
		case <-ch:
		case <-time.After(left):
		}
	}
}

// soakSeq is the order of a message id "chatNN-mNNN" within its chat; the
// "chatNN-last" message comes after all; ok is false for anything else.
func soakSeq(id string) (chat string, seq int, ok bool) {
	chat, rest, found := strings.Cut(id, "-")
	if !found {
		return "", 0, false
	}
	if rest == "last" {
		return chat, 1 << 30, true
	}
	n, err := strconv.Atoi(strings.TrimPrefix(rest, "m"))
	if err != nil || !strings.HasPrefix(rest, "m") {
		return "", 0, false
	}
	return chat, n, true
}

// orderFaults checks the model's requests, in the order they arrived:
// per chat, a request for a message after a request for a later message
// of that chat that did not hold it is an order violation (the later one
// overtook it; a message asked again after a collected turn holding it
// died with its instance is not); a request whose user messages are not
// strictly in the order sent (one twice, or one before an earlier) is a
// history fault. Each is reported (the first ten).
func (m *clusterModel) orderFaults(t *testing.T) (violations, faults int) {
	t.Helper()
	m.mu.Lock()
	defer m.mu.Unlock()
	type asked struct {
		seq   int
		holds map[int]bool
	}
	earlier := map[string][]asked{}
	report := func(format string, args ...any) {
		if violations+faults <= 10 {
			t.Errorf(format, args...)
		}
	}
	for _, req := range m.requests {
		chat, seq, ok := soakSeq(req.id)
		if !ok {
			continue
		}
		var seqs []int
		holds := map[int]bool{}
		for _, u := range req.users {
			if _, n, ok := soakSeq(strings.TrimPrefix(u, "message ")); ok {
				seqs = append(seqs, n)
				holds[n] = true
			}
		}
		for _, e := range earlier[chat] {
			if e.seq > seq && !e.holds[seq] {
				violations++
				report("%s: message %s sent to the model after message %d of its chat, which did not hold it", chat, req.id, e.seq)
				break
			}
		}
		earlier[chat] = append(earlier[chat], asked{seq: seq, holds: holds})
		if !slices.IsSorted(seqs) || len(slices.Compact(slices.Clone(seqs))) != len(seqs) {
			faults++
			report("%s: the request for %s holds its chat's messages out of order or twice: %v", chat, req.id, seqs)
		}
	}
	return violations, faults
}

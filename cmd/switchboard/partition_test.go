package main

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/switchboard-chat/switchboard/agent"
	"github.com/switchboard-chat/switchboard/bus"
	"github.com/switchboard-chat/switchboard/internal/polltest"
	"github.com/switchboard-chat/switchboard/llm/llmtest"
	"github.com/switchboard-chat/switchboard/memory/memcfg"
)

// turnTracker is the scripted model of several instances: each instance
// has its own model server whose responder records which session (chat)
// is in a model call on which instance, the order of each chat's
// messages, and every time a chat is in a model call on two instances at
// once. Instances named in hold block in their model call until released.
type turnTracker struct {
	mu       sync.Mutex
	running  map[string]string // chat -> instance in a model call
	order    map[string][]int  // chat -> message numbers in model-call order
	overlaps []string
	calls    map[string]int // instance -> model calls
	hold     map[string]chan struct{}
	entered  chan string     // "instance chat" of a held call
	dead     map[string]bool // instances cut off: their calls are not counted
}

func newTurnTracker() *turnTracker {
	return &turnTracker{running: map[string]string{}, order: map[string][]int{}, calls: map[string]int{},
		hold: map[string]chan struct{}{}, entered: make(chan string, 100), dead: map[string]bool{}}
}

// responder answers "message <chat>-<n>" with "answer <chat>-<n>" for
// instance inst.
func (tt *turnTracker) responder(inst string) llmtest.Responder {
	return func(req *llmtest.Request) llmtest.Reply {
		text := req.LastUserText()
		id := strings.TrimPrefix(text[strings.LastIndex(text, "message "):], "message ")
		chat, num, _ := strings.Cut(id, "-")
		n, _ := strconv.Atoi(num)
		tt.mu.Lock()
		if tt.dead[inst] {
			tt.mu.Unlock()
			return llmtest.Reply{Text: "answer " + id}
		}
		if other, busy := tt.running[chat]; busy {
			tt.overlaps = append(tt.overlaps, fmt.Sprintf("chat %s: message %d on %s while a turn runs on %s", chat, n, inst, other))
		} else {
			tt.running[chat] = inst
		}
		tt.order[chat] = append(tt.order[chat], n)
		tt.calls[inst]++
		hold := tt.hold[inst]
		tt.mu.Unlock()
		if hold != nil {
			tt.entered <- inst + " " + chat
			<-hold
		} else {
			// The model's work: long enough that a chat's messages
			// handed to two instances would meet here.
			time.Sleep(20 * time.Millisecond)
		}
		tt.mu.Lock()
		if tt.running[chat] == inst {
			delete(tt.running, chat)
		}
		tt.mu.Unlock()
		return llmtest.Reply{Text: "answer " + id}
	}
}

func (tt *turnTracker) check(t *testing.T) {
	t.Helper()
	tt.mu.Lock()
	defer tt.mu.Unlock()
	t.Logf("model calls by instance: %v", tt.calls)
	for _, o := range tt.overlaps[:min(len(tt.overlaps), 10)] {
		t.Error("overlap: " + o)
	}
	for chat, ns := range tt.order {
		if !slices.IsSorted(ns) {
			t.Errorf("chat %s: messages reached the model in the order %v", chat, ns)
		}
	}
}

// partitionedInstance starts an in-process daemon on the external NATS at
// url with memory.store jetstream (agent.partitions defaults to 16), one
// turn per message, its model answering through tt as inst.
func partitionedInstance(t *testing.T, url string, tt *turnTracker, inst string, partitions int) *externalDaemon {
	t.Helper()
	model := llmtest.NewServer(t, llmtest.WithResponder(tt.responder(inst)))
	cfg := externalConfig(t, url, model.URL())
	cfg.Memory.Store = memcfg.StoreJetStream
	cfg.Agent.QueueMode = agent.QueueSequential
	cfg.Agent.Partitions = partitions
	return startExternalDaemon(t, cfg)
}

// sendUntil sends messages to each of chats chats ("c0".."c<n>"), the
// chats concurrently, each one message every 500 ms in order without
// waiting for answers, until stop is closed, and returns the accepted ids.
func sendUntil(t *testing.T, p *publisher, chats int, stop <-chan struct{}) []string {
	t.Helper()
	var wg sync.WaitGroup
	for c := range chats {
		wg.Go(func() {
			tick := time.NewTicker(500 * time.Millisecond)
			defer tick.Stop()
			for n := 0; ; n++ {
				p.send(t.Context(), "c"+strconv.Itoa(c), fmt.Sprintf("c%d-%d", c, n))
				select {
				case <-stop:
					return
				case <-tick.C:
				}
			}
		})
	}
	wg.Wait()
	return p.ids()
}

// callsOf returns the model calls instance inst made.
func (tt *turnTracker) callsOf(inst string) int {
	tt.mu.Lock()
	defer tt.mu.Unlock()
	return tt.calls[inst]
}

func senderOn(t *testing.T, url string) (*publisher, jetstream.JetStream) {
	t.Helper()
	nc, err := nats.Connect(url, quietReconnecting()...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return &publisher{js: js, subj: bus.Subjects{Prefix: "chat"}}, js
}

// exactlyOnce checks that every id got one final, and that CHAT_IN
// (a work queue) lets go of every answered message.
func exactlyOnce(t *testing.T, js jetstream.JetStream, finals map[string]int, ids []string) {
	t.Helper()
	for _, id := range ids {
		if finals[id] != 1 {
			t.Errorf("message %s got %d finals, want 1", id, finals[id])
		}
	}
	var left uint64
	polltest.Until(t, wait, 50*time.Millisecond, func() bool {
		s, err := js.Stream(t.Context(), "CHAT_IN")
		if err != nil {
			return false
		}
		left = s.CachedInfo().State.Msgs
		return left == 0
	}, func() string { return fmt.Sprintf("CHAT_IN keeps %d answered messages", left) })
}

// TestPartitionedInstancesNeverOverlap (issue 17, item 1): two instances
// on one external NATS, many chats sending continuously: no chat's turn
// ever runs on both instances at once, each chat's messages reach the
// model in order, and every message gets exactly one final.
func TestPartitionedInstancesNeverOverlap(t *testing.T) {
	n := newNATSProcess(t)
	tt := newTurnTracker()
	partitionedInstance(t, n.url(), tt, "a", 0)
	partitionedInstance(t, n.url(), tt, "b", 0)
	p, js := senderOn(t, n.url())
	stop := make(chan struct{})
	sent := make(chan []string)
	go func() { sent <- sendUntil(t, p, 12, stop) }()
	// Until both instances answer: the first one started holds every
	// partition at first and releases its excess while chats send.
	polltest.Until(t, 60*time.Second, 20*time.Millisecond, func() bool { return tt.callsOf("a") >= 20 && tt.callsOf("b") >= 20 },
		func() string {
			return fmt.Sprintf("the instances never shared the work: model calls %d and %d", tt.callsOf("a"), tt.callsOf("b"))
		})
	close(stop)
	ids := <-sent
	exactlyOnce(t, js, waitAllAnswered(t, js, ids), ids)
	tt.check(t)
}

// forget drops what instance inst has in flight and ignores its later
// calls: it was cut off from NATS, so its model calls may still run (on
// messages it received before), but nothing it does reaches the bus.
func (tt *turnTracker) forget(inst string) {
	tt.mu.Lock()
	defer tt.mu.Unlock()
	tt.dead[inst] = true
	for chat, i := range tt.running {
		if i == inst {
			delete(tt.running, chat)
		}
	}
}

// TestPartitionFailover (issue 17, items 1 and 3): two instances on one
// external NATS; the first holds the partitions and is cut off from NATS
// (its connection closed abruptly) while its turns run. The other takes
// its partitions over: the messages the dead instance held (delivered,
// never acknowledged) and the ones sent after its death are answered,
// each exactly once, in order.
func TestPartitionFailover(t *testing.T) {
	n := newNATSProcess(t)
	tt := newTurnTracker()
	held := make(chan struct{})
	tt.hold["a"] = held
	a := partitionedInstance(t, n.url(), tt, "a", 0)
	b := partitionedInstance(t, n.url(), tt, "b", 0)
	t.Cleanup(func() { close(held) }) // before the instances stop
	p, js := senderOn(t, n.url())
	const chats = 8
	for c := range chats {
		p.send(t.Context(), "c"+strconv.Itoa(c), fmt.Sprintf("c%d-0", c))
	}
	var first string
	select {
	case first = <-tt.entered:
	case <-time.After(wait):
		t.Fatal("no turn started on the first instance")
	}
	a.s.Bus.Conn().Close()
	killed := time.Now()
	tt.forget("a")
	for c := range chats {
		p.send(t.Context(), "c"+strconv.Itoa(c), fmt.Sprintf("c%d-1", c))
	}
	ids := p.ids()
	finals := waitAllAnswered(t, js, ids)
	t.Logf("turn in flight on the dead instance: %s; every message answered %s after the kill", first, time.Since(killed).Round(100*time.Millisecond))
	exactlyOnce(t, js, finals, ids)
	tt.check(t)
	owned, err := b.s.Bus.Owned(t.Context())
	if err != nil || len(owned) == 0 {
		t.Fatalf("the surviving instance owns %v (%v)", owned, err)
	}
}

// ownedOn returns the partitions /readyz says the instance owns, from its
// line "partitions: owned [0 3] of 16 (instance NAME)".
func ownedOn(t *testing.T, d *externalDaemon) string {
	t.Helper()
	_, body := d.readyz(t)
	for line := range strings.Lines(body) {
		if rest, ok := strings.CutPrefix(line, "partitions: owned "); ok {
			owned, _, _ := strings.Cut(rest, " of ")
			return owned
		}
	}
	return ""
}

// TestPartitionOperations (issue 17, item 6): each instance's /readyz
// says which partitions it owns, its metrics show them per partition,
// and `switchboard status` lists both instances with their partitions.
func TestPartitionOperations(t *testing.T) {
	n := newNATSProcess(t)
	tt := newTurnTracker()
	a := partitionedInstance(t, n.url(), tt, "a", 0)
	b := partitionedInstance(t, n.url(), tt, "b", 0)
	p, js := senderOn(t, n.url())
	for c := range 6 {
		p.send(t.Context(), "c"+strconv.Itoa(c), fmt.Sprintf("c%d-0", c))
	}
	waitAllAnswered(t, js, p.ids())
	var ownedA, ownedB string
	polltest.Until(t, wait, 50*time.Millisecond, func() bool {
		ownedA, ownedB = ownedOn(t, a), ownedOn(t, b)
		return ownedA != "" && ownedB != "" && (ownedA != "none" || ownedB != "none")
	}, func() string { return fmt.Sprintf("/readyz owned: %q and %q", ownedA, ownedB) })
	owner, owned := a, ownedA
	if owned == "none" {
		owner, owned = b, ownedB
	}
	first := strings.Fields(strings.Trim(owned, "[]"))[0]
	resp, err := http.Get(owner.adminURL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if want := `switchboard_partition_owned{partition="` + first + `"} 1`; !strings.Contains(string(body), want+"\n") {
		t.Errorf("metrics of the owner of partition %s lack %q", first, want)
	}
	cfgPath := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(cfgPath, []byte("data_dir: "+t.TempDir()+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	var out, errOut strings.Builder
	polltest.Until(t, wait, 100*time.Millisecond, func() bool {
		out.Reset()
		code := run(t.Context(), []string{"status", "--config", cfgPath, "--url", n.url()}, nil, &out, &errOut)
		return code == 0 && strings.Count(out.String(), " of 16") == 2 && strings.Contains(out.String(), owned+" of 16")
	}, func() string {
		return fmt.Sprintf("switchboard status printed %q (stderr %q)", out.String(), errOut.String())
	})
	t.Logf("switchboard status:\n%s", out.String())
}

// TestPartitionsConfig: agent.partitions is 1 to 1024, or 0 for the
// default (16 with memory.store jetstream, 1 with bolt); anything else is
// refused naming the key.
func TestPartitionsConfig(t *testing.T) {
	for _, tc := range []struct {
		yaml          string
		bolt, js      int
		wantErrSubstr string
	}{
		{yaml: "", bolt: 1, js: 16},
		{yaml: "agent:\n  partitions: 4\n", bolt: 4, js: 4},
		{yaml: "agent:\n  partitions: 1\n", bolt: 1, js: 1},
		{yaml: "agent:\n  partitions: 1025\n", wantErrSubstr: "agent.partitions: must be between 1 and 1024, or 0 for the default (16 with memory.store jetstream, 1 with bolt), got 1025"},
		{yaml: "agent:\n  partitions: -1\n", wantErrSubstr: "agent.partitions: must be between 1 and 1024"},
		{yaml: "agent:\n  partitions: many\n", wantErrSubstr: "agent.partitions"},
	} {
		cfg, err := ParseConfig([]byte(tc.yaml), nil)
		if tc.wantErrSubstr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErrSubstr) {
				t.Errorf("%q: error %v, want one containing %q", tc.yaml, err, tc.wantErrSubstr)
			}
			continue
		}
		if err != nil {
			t.Errorf("%q: %v", tc.yaml, err)
			continue
		}
		if got := cfg.Agent.PartitionCount(false); got != tc.bolt {
			t.Errorf("%q: partitions on bolt %d, want %d", tc.yaml, got, tc.bolt)
		}
		if got := cfg.Agent.PartitionCount(true); got != tc.js {
			t.Errorf("%q: partitions on jetstream %d, want %d", tc.yaml, got, tc.js)
		}
	}
}

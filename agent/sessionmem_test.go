package agent

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/switchboard-chat/switchboard/bus"
	"github.com/switchboard-chat/switchboard/internal/polltest"
	"github.com/switchboard-chat/switchboard/llm"
	"github.com/switchboard-chat/switchboard/llm/llmtest"
	"github.com/switchboard-chat/switchboard/memory"
	"github.com/switchboard-chat/switchboard/workspace"
)

// An answered session keeps no goroutine: once its queue is empty its
// goroutine ends (the session stays in memory, warm, for
// agent.session_idle, without one). Old code kept a goroutine per session
// for the whole of agent.session_idle.
func TestIdleSessionHasNoGoroutine(t *testing.T) {
	const chats = 20
	h := newHarness(t, func(hc *harnessConfig) { hc.cfg.SessionIdle = time.Hour })
	for i := range chats {
		h.model.Enqueue(llmtest.TextReply("hi " + strconv.Itoa(i)))
	}
	for i := range chats {
		h.bus.Send(bus.Inbound{ID: "m" + strconv.Itoa(i), Channel: "console", ChatID: "c" + strconv.Itoa(i), UserID: "u1", Text: "hello"})
	}
	for i := range chats {
		h.final("m" + strconv.Itoa(i))
	}
	waitFor(t, func() bool { return sessionGoroutines() == 0 })
	if n := h.mgr.ActiveSessions(); n != chats {
		t.Fatalf("sessions in memory = %d, want %d (warm until agent.session_idle)", n, chats)
	}
	// A warm session takes its next message with a new goroutine and the
	// context it kept.
	h.model.Enqueue(llmtest.TextReply("again"))
	h.bus.Send(bus.Inbound{ID: "m-again", Channel: "console", ChatID: "c0", UserID: "u1", Text: "more"})
	h.final("m-again")
	if n := len(h.request(chats).Body.Messages); n < 4 {
		t.Fatalf("the warm session's request has %d messages, want the earlier turn in it too", n)
	}
	waitFor(t, func() bool { return sessionGoroutines() == 0 })
}

// waitFor polls cond until it holds, failing after the test deadline wait.
func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(wait)
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("condition not met within %s", wait)
		}
		<-tick.C
	}
}

// sessionGoroutines counts the goroutines running a session.
func sessionGoroutines() int {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	count := 0
	for g := range strings.SplitSeq(string(buf), "\n\n") {
		if strings.Contains(g, "agent.(*session).run(") {
			count++
		}
	}
	return count
}

// BenchmarkSessionMemory answers one message in each of N chats through the
// manager and reports what the N idle sessions that remain cost: live heap
// and stacks (after a GC) and RSS growth per session, and goroutines left
// per session. It runs the manager over a lean in-process bus, a store that
// keeps nothing and a model answering at once, so that what it measures is
// the sessions' own memory (the daemon path, with bbolt and NATS, is
// BenchmarkSessionMemory in cmd/switchboard; 100,000 turns through it take
// minutes). b.N is ignored beyond running each case once.
//
//	go test ./agent -run '^$' -bench SessionMemory -benchtime 1x
func BenchmarkSessionMemory(b *testing.B) {
	for _, n := range []int{10_000, 100_000} {
		b.Run(fmt.Sprintf("sessions=%d", n), func(b *testing.B) {
			for range b.N {
				benchSessionMemory(b, n)
			}
		})
	}
}

func benchSessionMemory(b *testing.B, sessions int) {
	src := &leanSource{ch: make(chan bus.Delivery, 1024)}
	cfg := DefaultConfig()
	cfg.SessionIdle = time.Hour
	prompts := staticPrompts{dir: "/ws", files: []workspace.PromptFile{{Name: "AGENT.md", Content: "You are a test agent."}}}
	mgr, err := NewManager(cfg, Options{ModelName: "m", ContextWindow: 128000, MaxOutputTokens: 1000, Heartbeat: time.Hour},
		Deps{Source: src, Publisher: leanPublisher{}, Store: nullStore{}, Main: Profile{Model: instantModel{}, Prompts: prompts}})
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(b.Context())
	done := make(chan error, 1)
	go func() { done <- mgr.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			b.Error(err)
		}
	}()
	subj := bus.Subjects{Prefix: "chat"}
	var acked sync.WaitGroup
	send := func(i int) {
		chat := "c" + strconv.Itoa(i)
		data, _ := json.Marshal(bus.Inbound{V: bus.Version, ID: "m" + strconv.Itoa(i), Channel: "console", ChatID: chat, UserID: "u", Text: "hello " + chat})
		acked.Add(1)
		src.ch <- &leanDelivery{subject: subj.In("console", chat), data: data, seq: uint64(i + 1), acked: &acked}
	}
	// Warm up: the first turns allocate what every turn shares.
	const warm = 100
	for i := range warm {
		send(i)
	}
	acked.Wait()
	polltest.Until(b, time.Minute, 10*time.Millisecond, func() bool {
		n := sessionGoroutines()
		return n == 0 || n == warm
	}, func() string { return "the warm-up sessions' goroutines never settled" })
	heap0, rss0, g0 := memNow()
	b.ReportAllocs()
	b.ResetTimer()
	for i := warm; i < warm+sessions; i++ {
		send(i)
	}
	acked.Wait()
	waitIdle(b, mgr, g0, sessions)
	b.StopTimer()
	heap1, rss1, g1 := memNow()
	if n := mgr.ActiveSessions(); n != warm+sessions {
		b.Fatalf("sessions in memory = %d, want %d", n, warm+sessions)
	}
	b.ReportMetric(float64(heap1-heap0)/1024/float64(sessions), "heap_KB/session")
	b.ReportMetric(float64(rss1-rss0)/float64(sessions), "rss_KB/session")
	b.ReportMetric(float64(g1-g0)/float64(sessions), "goroutines/session")
	b.ReportMetric(float64(rss1)/1024, "rss_MB")
}

// waitIdle waits until no message is queued and the session goroutines
// are gone, or (the old design) each of the new sessions has one waiting
// for its idle timer, which does not end within the benchmark. base is the
// number of goroutines before the new sessions.
func waitIdle(b *testing.B, mgr *Manager, base, sessions int) {
	extra := 0
	polltest.Until(b, 5*time.Minute, 10*time.Millisecond, func() bool {
		extra = runtime.NumGoroutine() - base
		return mgr.Queued() == 0 && (extra <= 0 || extra >= sessions)
	}, func() string { return fmt.Sprintf("sessions did not go idle: %d goroutines beyond the base", extra) })
}

// memNow is the live heap plus stacks after a GC (bytes), the RSS (KB) and
// the number of goroutines.
func memNow() (heap uint64, rssKB int, goroutines int) {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc + ms.StackInuse, selfRSSKB(), runtime.NumGoroutine()
}

// selfRSSKB reads this process's VmRSS (0 where unavailable).
func selfRSSKB() int {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
			n, _ := strconv.Atoi(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")))
			return n
		}
	}
	return 0
}

// leanSource hands the deliveries of ch to the manager, in order.
type leanSource struct{ ch chan bus.Delivery }

func (s *leanSource) Consume(ctx context.Context, handler func(bus.Delivery)) error {
	for {
		select {
		case <-ctx.Done():
			return nil
		case d := <-s.ch:
			handler(d)
		}
	}
}

// leanDelivery is a delivery that only reports its ack.
type leanDelivery struct {
	subject string
	data    []byte
	seq     uint64
	done    atomic.Bool
	acked   *sync.WaitGroup
}

func (d *leanDelivery) Subject() string { return d.subject }
func (d *leanDelivery) Data() []byte    { return d.data }
func (d *leanDelivery) Info() bus.DeliveryInfo {
	return bus.DeliveryInfo{Sequence: d.seq, NumDelivered: 1}
}
func (d *leanDelivery) Ack() error {
	if d.done.CompareAndSwap(false, true) {
		d.acked.Done()
	}
	return nil
}
func (d *leanDelivery) InProgress() error                { return nil }
func (d *leanDelivery) NakWithDelay(time.Duration) error { return nil }
func (d *leanDelivery) Term() error                      { return d.Ack() }

// leanPublisher drops what is published.
type leanPublisher struct{}

func (leanPublisher) Publish(context.Context, string, []byte, string) error { return nil }
func (leanPublisher) PublishCore(string, []byte) error                      { return nil }

// nullStore keeps nothing: every session starts empty, no message was
// answered before.
type nullStore struct{}

func (nullStore) Load(context.Context, string, int) (memory.Snapshot, error) {
	return memory.Snapshot{}, nil
}
func (nullStore) CommitTurn(context.Context, memory.TurnRecord) error { return nil }
func (nullStore) Receipt(context.Context, string) (memory.Receipt, bool, error) {
	return memory.Receipt{}, false, nil
}
func (nullStore) MarkPublished(context.Context, string) error { return nil }
func (nullStore) Close() error                                { return nil }

// instantModel answers every request at once with the same short text.
type instantModel struct{}

func (instantModel) Stream(context.Context, llm.Request, func(llm.Delta)) (*llm.Response, error) {
	return &llm.Response{Text: "Hello! How can I help?", FinishReason: "stop"}, nil
}

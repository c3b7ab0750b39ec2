package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/switchboard-chat/switchboard/bus"
	"github.com/switchboard-chat/switchboard/llm/llmtest"
)

// BenchmarkTurns runs N sessions, each sending its messages one after the
// other (the next as soon as the previous one's final reply arrived), through
// the whole daemon: embedded NATS with JetStream, durable bbolt history, the
// executor, and the OpenAI-compatible scripted model over HTTP at zero
// latency. b.N is the total number of turns. It reports turns/s, the latency
// from publish to final reply (what Switchboard adds on top of the model),
// and the RSS of the test process (daemon, model and clients together).
//
//	go test ./cmd/switchboard -run '^$' -bench Turns -benchtime 20000x
//
// The tools=files variants offer only the four file tools of the foundation
// issue (smaller requests); the others offer the whole default tool set.
func BenchmarkTurns(b *testing.B) {
	for _, sessions := range []int{1, 1000} {
		for _, filesOnly := range []bool{false, true} {
			name := fmt.Sprintf("sessions=%d", sessions)
			if filesOnly {
				name += "/tools=files"
			}
			b.Run(name, func(b *testing.B) { benchTurns(b, sessions, filesOnly) })
		}
	}
}

func benchTurns(b *testing.B, sessions int, filesOnly bool) {
	model := llmtest.NewServer(b, llmtest.WithResponder(llmtest.EchoResponder), llmtest.WithRecordLimit(0))
	cfg := testConfig(b, model.URL())
	if filesOnly {
		cfg.Tools.Disabled = []string{"search_files", "web_fetch", "send_message", "schedule", "memory_*"}
	}
	d := startDaemon(b, cfg)
	js, err := jetstream.New(d.nc)
	if err != nil {
		b.Fatal(err)
	}
	subj := d.subjects()
	if sessions > b.N {
		sessions = b.N
	}
	// One channel per session receives that session's final replies.
	finals := make([]chan struct{}, sessions)
	for i := range finals {
		finals[i] = make(chan struct{}, 1)
	}
	sub, err := d.nc.Subscribe(subj.OutAll(), func(m *nats.Msg) {
		var o bus.Outbound
		if json.Unmarshal(m.Data, &o) != nil || !o.Final {
			return
		}
		i, err := strconv.Atoi(strings.TrimPrefix(o.ChatID, "s"))
		if err == nil && i >= 0 && i < sessions {
			finals[i] <- struct{}{}
		}
	})
	if err != nil {
		b.Fatal(err)
	}
	defer sub.Unsubscribe()
	if err := sub.SetPendingLimits(-1, -1); err != nil {
		b.Fatal(err)
	}

	var mu sync.Mutex
	lat := make([]time.Duration, 0, b.N)
	var wg sync.WaitGroup
	errs := make(chan error, sessions)
	b.ReportAllocs()
	b.ResetTimer()
	start := time.Now()
	for s := range sessions {
		n := b.N / sessions
		if s < b.N%sessions {
			n++
		}
		wg.Go(func() {
			chat := "s" + strconv.Itoa(s)
			local := make([]time.Duration, 0, n)
			for k := range n {
				id := chat + "-" + strconv.Itoa(k)
				in := bus.Inbound{V: 1, ID: id, Channel: "console", ChatID: chat, UserID: "u", Text: "ping " + id}
				data, _ := json.Marshal(in)
				t0 := time.Now()
				if _, err := js.Publish(context.Background(), subj.In("console", chat), data, jetstream.WithMsgID(in.DedupKey())); err != nil {
					errs <- err
					return
				}
				select {
				case <-finals[s]:
				case <-time.After(2 * time.Minute):
					errs <- fmt.Errorf("session %s: no final reply for %s", chat, id)
					return
				}
				local = append(local, time.Since(t0))
			}
			mu.Lock()
			lat = append(lat, local...)
			mu.Unlock()
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	b.StopTimer()
	select {
	case err := <-errs:
		b.Fatal(err)
	default:
	}
	slices.Sort(lat)
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "turns/s")
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "p50_ms")
	b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds())/1000, "p99_ms")
	b.ReportMetric(float64(rssKB(os.Getpid()))/1024, "rss_MB")
}

// BenchmarkStartupAndIdleRSS starts the real binary, measures the time until
// GET /readyz answers 200 and the resident memory of the idle daemon.
//
//	go test ./cmd/switchboard -run '^$' -bench StartupAndIdleRSS -benchtime 5x
func BenchmarkStartupAndIdleRSS(b *testing.B) {
	bin := buildBinary(b)
	var startup []time.Duration
	var rss []int
	client := &http.Client{Timeout: time.Second}
	for range b.N {
		dir := b.TempDir()
		admin := freePort(b)
		config := writeConfig(b, dir, freePort(b), admin, "http://127.0.0.1:1/v1")
		t0 := time.Now()
		p := startProcess(b, bin, config)
		for {
			resp, err := client.Get("http://" + admin + "/readyz")
			if err == nil {
				resp.Body.Close()
				if resp.StatusCode == http.StatusOK {
					break
				}
			}
			if time.Since(t0) > 20*time.Second {
				b.Fatalf("not ready: %v", err)
			}
			time.Sleep(time.Millisecond)
		}
		startup = append(startup, time.Since(t0))
		time.Sleep(500 * time.Millisecond) // let the daemon settle before reading its RSS
		rss = append(rss, rssKB(p.cmd.Process.Pid))
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
		<-p.done
	}
	slices.Sort(startup)
	slices.Sort(rss)
	b.ReportMetric(float64(startup[len(startup)/2].Microseconds())/1000, "startup_ms")
	b.ReportMetric(float64(rss[len(rss)/2])/1024, "idle_rss_MB")
}

// rssKB reads VmRSS of a process from /proc (0 where unavailable).
func rssKB(pid int) int { return statusKB(pid, "VmRSS") }

// statusKB reads a field in kB of a process's /proc status (VmRSS,
// RssAnon, RssFile), 0 where unavailable.
func statusKB(pid int, field string) int {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), field+":"); ok {
			n, _ := strconv.Atoi(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")))
			return n
		}
	}
	return 0
}

// BenchmarkSessionRSS answers one message in each of N chats through the
// whole daemon (embedded NATS with JetStream, durable bbolt history, the
// scripted model over HTTP) and reports the growth of the test process's
// RSS (all of it, and its anonymous part: without the pages of the files
// bbolt and JetStream map or read) and of its live heap (after a GC) per
// chat, the chats' sessions then idle in memory. The figures include what the bus and the store keep per
// message (the stored envelopes, bbolt's pages), the daemon's session
// costs being BenchmarkSessionMemory in package agent, which also runs
// 100,000 sessions. b.N is ignored beyond running each case once.
//
//	go test ./cmd/switchboard -run '^$' -bench SessionRSS -benchtime 1x
func BenchmarkSessionRSS(b *testing.B) {
	for _, n := range []int{3_000, 10_000} {
		b.Run(fmt.Sprintf("sessions=%d", n), func(b *testing.B) {
			for range b.N {
				benchSessionRSS(b, n)
			}
		})
	}
}

func benchSessionRSS(b *testing.B, sessions int) {
	model := llmtest.NewServer(b, llmtest.WithResponder(llmtest.EchoResponder), llmtest.WithRecordLimit(0))
	cfg := testConfig(b, model.URL())
	cfg.Agent.SessionIdle = time.Hour
	d := startDaemon(b, cfg)
	js, err := jetstream.New(d.nc)
	if err != nil {
		b.Fatal(err)
	}
	subj := d.subjects()
	const warm, workers = 100, 64
	total := warm + sessions
	finals := make([]chan struct{}, total)
	for i := range finals {
		finals[i] = make(chan struct{}, 1)
	}
	sub, err := d.nc.Subscribe(subj.OutAll(), func(m *nats.Msg) {
		var o bus.Outbound
		if json.Unmarshal(m.Data, &o) != nil || !o.Final {
			return
		}
		if i, err := strconv.Atoi(strings.TrimPrefix(o.ChatID, "r")); err == nil && i >= 0 && i < total {
			finals[i] <- struct{}{}
		}
	})
	if err != nil {
		b.Fatal(err)
	}
	defer sub.Unsubscribe()
	if err := sub.SetPendingLimits(-1, -1); err != nil {
		b.Fatal(err)
	}
	// ask sends one message in each chat from..to-1, workers at a time.
	ask := func(from, to int) {
		var wg sync.WaitGroup
		errs := make(chan error, workers)
		for w := range workers {
			wg.Go(func() {
				for i := from + w; i < to; i += workers {
					chat := "r" + strconv.Itoa(i)
					in := bus.Inbound{V: 1, ID: "m" + strconv.Itoa(i), Channel: "console", ChatID: chat, UserID: "u", Text: "ping " + chat}
					data, _ := json.Marshal(in)
					if _, err := js.Publish(context.Background(), subj.In("console", chat), data, jetstream.WithMsgID(in.DedupKey())); err != nil {
						errs <- err
						return
					}
					select {
					case <-finals[i]:
					case <-time.After(2 * time.Minute):
						errs <- fmt.Errorf("chat %s: no final reply", chat)
						return
					}
				}
			})
		}
		wg.Wait()
		select {
		case err := <-errs:
			b.Fatal(err)
		default:
		}
	}
	ask(0, warm)
	heap0, rss0, anon0 := liveHeap(), rssKB(os.Getpid()), statusKB(os.Getpid(), "RssAnon")
	b.ReportAllocs()
	b.ResetTimer()
	ask(warm, total)
	b.StopTimer()
	heap1, rss1, anon1 := liveHeap(), rssKB(os.Getpid()), statusKB(os.Getpid(), "RssAnon")
	b.ReportMetric(float64(rss1-rss0)/float64(sessions), "rss_KB/session")
	b.ReportMetric(float64(anon1-anon0)/float64(sessions), "rss_anon_KB/session")
	b.ReportMetric(float64(heap1-heap0)/1024/float64(sessions), "heap_KB/session")
	b.ReportMetric(float64(rss1)/1024, "rss_MB")
}

// liveHeap is the live heap and stacks after a GC, in bytes.
func liveHeap() int64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return int64(ms.HeapAlloc + ms.StackInuse)
}

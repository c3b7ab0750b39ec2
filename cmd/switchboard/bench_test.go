package main

import (
	"bytes"
	"fmt"
	"net/http"
	"os/exec"
	"regexp"
	"runtime"
	"runtime/debug"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/switchboard-chat/switchboard/internal/loadgen"
	"github.com/switchboard-chat/switchboard/llm/llmtest"
)

// BenchmarkTurns runs N sessions, each sending its messages one after the
// other (the next as soon as the previous one's final reply arrived), through
// the whole daemon: embedded NATS with JetStream, durable bbolt history, the
// executor, and the OpenAI-compatible scripted model over HTTP at zero
// latency. b.N is the total number of turns; the load is loadgen.Drive,
// the driver of `switchboard bench`. It reports turns/s, the latency from
// publish to final reply (what Switchboard adds on top of the model), the
// bytes and allocations per turn (B/op and allocs/op, and the same as
// B/turn and allocs/turn from the driver's MemStats deltas), and the RSS
// of the test process (daemon, model and clients together).
//
//	go test ./cmd/switchboard -run '^$' -bench Turns -benchtime 5000x
//
// The figures of issue 16: sessions=1000 and sessions=1000/tools=files
// (turns/s at 1,000 sessions, whole tool set and file tools only;
// allocations per turn at 1,000 sessions), sessions=1 (turns/s, p50 and
// p99 of one session; with 5000x, the allocations per turn of a long
// chat). The tools=files variants offer only the four file tools of the
// foundation issue (smaller requests); the others the whole default tool set.
//
// The model=apart variants serve the same scripted model from another
// process (cmd/fakellm --mode echo): the allocations per turn are then
// Switchboard's (and the small load client's) alone, and the model's CPU
// is another process's on the same two cores.
func BenchmarkTurns(b *testing.B) {
	for _, sessions := range []int{1, 1000} {
		for _, v := range []struct {
			name             string
			filesOnly, apart bool
		}{{"", false, false}, {"/tools=files", true, false}, {"/model=apart", false, true}} {
			b.Run(fmt.Sprintf("sessions=%d%s", sessions, v.name), func(b *testing.B) { benchTurns(b, sessions, v.filesOnly, v.apart) })
		}
	}
}

// benchDaemon starts the daemon of the benchmarks: the zero-latency echo
// model, durable history, the whole tool set or the file tools only.
func benchDaemon(b *testing.B, filesOnly bool) *daemon {
	model := llmtest.NewServer(b, llmtest.WithResponder(llmtest.EchoResponder), llmtest.WithRecordLimit(0))
	return benchDaemonWith(b, model.URL(), filesOnly)
}

func benchDaemonWith(b *testing.B, modelURL string, filesOnly bool) *daemon {
	cfg := testConfig(b, modelURL)
	if filesOnly {
		cfg.Tools.Disabled = loadgen.FileToolsOnly
	}
	return startDaemon(b, cfg)
}

func benchTurns(b *testing.B, sessions int, filesOnly, apart bool) {
	var d *daemon
	if apart {
		d = benchDaemonWith(b, startFakeLLM(b), filesOnly)
	} else {
		d = benchDaemon(b, filesOnly)
	}
	b.ReportAllocs()
	b.ResetTimer()
	r, err := loadgen.Drive(b.Context(), d.nc, d.subjects(), loadgen.Options{Chats: sessions, Turns: b.N, Metrics: d.s.Metrics.Gatherer()})
	b.StopTimer()
	if err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(r.TurnsPerSecond, "turns/s")
	b.ReportMetric(r.P50Ms, "p50_ms")
	b.ReportMetric(r.P99Ms, "p99_ms")
	b.ReportMetric(r.MaxMs, "max_ms")
	b.ReportMetric(r.TurnMs, "turn_ms")
	b.ReportMetric(r.ModelMs, "model_ms")
	b.ReportMetric(r.CommitMs, "commit_ms")
	b.ReportMetric(r.BytesPerTurn, "B/turn")
	b.ReportMetric(r.AllocsPerTurn, "allocs/turn")
	b.ReportMetric(float64(r.RSSBytes)/(1<<20), "rss_MB")
}

// BenchmarkSessionMemory opens b.N chats, one message each, on one daemon
// and reports what each session costs: the growth of the process's RSS
// and of the live heap (after a GC) over the run, divided by the number of
// sessions. Issue 16's figure is at 3,000 chats:
//
//	go test ./cmd/switchboard -run '^$' -bench SessionMemory -benchtime 3000x
//
// RSS growth includes the daemon's, the model's and the clients' buffers,
// the collector's headroom and the touched pages of the memory-mapped
// history (file pages: anon_KB/session is the anonymous part); the live
// heap is the steadier figure. settled_KB/session is the RSS growth once
// the collector has given the load's garbage back to the system
// (debug.FreeOSMemory): what the idle sessions hold. 10,000 and 100,000
// chats: -benchtime 10000x, 100000x (about a minute).
func BenchmarkSessionMemory(b *testing.B) {
	d := benchDaemon(b, false)
	heapBefore := liveHeap()
	rssBefore, err := loadgen.RSS(0)
	if err != nil {
		b.Fatal(err)
	}
	anonBefore, err := loadgen.AnonRSS(0)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.ResetTimer()
	r, err := loadgen.Drive(b.Context(), d.nc, d.subjects(), loadgen.Options{Chats: b.N, Messages: 1})
	b.StopTimer()
	if err != nil {
		b.Fatal(err)
	}
	heapAfter := liveHeap()
	anonAfter, err := loadgen.AnonRSS(0)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(r.RSSBytes-rssBefore)/1024/float64(b.N), "rss_KB/session")
	b.ReportMetric(float64(anonAfter-anonBefore)/1024/float64(b.N), "anon_KB/session")
	debug.FreeOSMemory()
	settled, err := loadgen.RSS(0)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(settled-rssBefore)/1024/float64(b.N), "settled_KB/session")
	b.ReportMetric(float64(int64(heapAfter)-int64(heapBefore))/1024/float64(b.N), "heap_KB/session")
	b.ReportMetric(float64(r.RSSBytes)/(1<<20), "rss_MB")
}

// startFakeLLM runs cmd/fakellm --mode echo on a free loopback port until
// the benchmark ends and returns its base URL.
func startFakeLLM(b *testing.B) string {
	bin := buildPackage(b, "../fakellm", "fakellm", "", false)
	banner := make(chan string, 1)
	cmd := exec.Command(bin, "--mode", "echo", "--listen", "127.0.0.1:0")
	cmd.Stdout = &firstLine{line: banner}
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		_ = cmd.Wait()
	})
	select {
	case line := <-banner: // "fakellm: OpenAI-compatible scripted model on http://ADDR/v1 (mode echo)"
		url := regexp.MustCompile(`http://\S+/v1`).FindString(line)
		if url == "" {
			b.Fatalf("fakellm did not say where it listens: %q", line)
		}
		return url
	case <-time.After(wait):
		b.Fatal("fakellm did not start")
		return ""
	}
}

// firstLine sends the first line written to it on line and drops the rest.
type firstLine struct {
	buf  []byte
	line chan<- string
}

func (w *firstLine) Write(p []byte) (int, error) {
	if w.line != nil {
		w.buf = append(w.buf, p...)
		if i := bytes.IndexByte(w.buf, '\n'); i >= 0 {
			w.line <- string(w.buf[:i])
			w.line, w.buf = nil, nil
		}
	}
	return len(p), nil
}

// liveHeap is the heap in use after a full collection.
func liveHeap() uint64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// BenchmarkStartupAndIdleRSS starts the real binary, measures the time until
// GET /readyz answers 200 and the resident memory of the idle daemon.
//
//	go test ./cmd/switchboard -run '^$' -bench StartupAndIdleRSS -benchtime 5x
func BenchmarkStartupAndIdleRSS(b *testing.B) {
	bin := buildBinary(b)
	var startup []time.Duration
	var rss, anon []int64
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
		n, err := loadgen.RSS(p.cmd.Process.Pid)
		if err != nil {
			b.Fatal(err)
		}
		a, err := loadgen.AnonRSS(p.cmd.Process.Pid)
		if err != nil {
			b.Fatal(err)
		}
		rss, anon = append(rss, n), append(anon, a)
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
		<-p.done
	}
	slices.Sort(startup)
	slices.Sort(rss)
	slices.Sort(anon)
	b.ReportMetric(float64(startup[len(startup)/2].Microseconds())/1000, "startup_ms")
	b.ReportMetric(float64(rss[len(rss)/2])/(1<<20), "idle_rss_MB")
	b.ReportMetric(float64(anon[len(anon)/2])/(1<<20), "idle_anon_MB")
}

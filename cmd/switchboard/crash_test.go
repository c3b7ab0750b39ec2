package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/switchboard-chat/switchboard/bus"
	"github.com/switchboard-chat/switchboard/bus/bustest"
	"github.com/switchboard-chat/switchboard/bus/natsbus"
	"github.com/switchboard-chat/switchboard/internal/syncbuf"
	"github.com/switchboard-chat/switchboard/llm/llmtest"
)

// builds holds the switchboard binaries built by this test run, by build
// tags ("" for the release build).
var builds struct {
	mu   sync.Mutex
	bins map[string]*builtBinary
}

type builtBinary struct {
	once sync.Once
	path string
	err  error
}

// buildBinary builds the release switchboard binary (as `go build
// ./cmd/switchboard` does) once per test run.
func buildBinary(t testing.TB) string { return buildBinaryTags(t, "") }

// buildBinaryTags builds the switchboard binary with the given build tags
// (comma-separated, e.g. "failpoints") once per test run, with -race when
// the test runs with it.
func buildBinaryTags(t testing.TB, tags string) string { return buildBinaryRace(t, tags, raceEnabled) }

// buildPlainBinary builds the release binary without -race even when the
// test runs with it: for tests that run several daemons at once (the
// cluster tests), where the race detector's cost in each of them would
// buy nothing the single-daemon tests do not already check.
func buildPlainBinary(t testing.TB) string { return buildBinaryRace(t, "", false) }

func buildBinaryRace(t testing.TB, tags string, race bool) string {
	t.Helper()
	return buildPackage(t, ".", "switchboard", tags, race)
}

// buildPackage builds the command in pkg (a path relative to this
// package's folder) as name, once per test run and build settings.
func buildPackage(t testing.TB, pkg, name, tags string, race bool) string {
	t.Helper()
	key := pkg + "/" + tags + "/race=" + strconv.FormatBool(race)
	builds.mu.Lock()
	if builds.bins == nil {
		builds.bins = map[string]*builtBinary{}
	}
	b := builds.bins[key]
	if b == nil {
		b = &builtBinary{}
		builds.bins[key] = b
	}
	builds.mu.Unlock()
	b.once.Do(func() {
		dir, err := os.MkdirTemp("", "switchboard-bin-")
		if err != nil {
			b.err = err
			return
		}
		b.path = filepath.Join(dir, name)
		args := []string{"build", "-o", b.path}
		if race {
			args = append(args, "-race")
		}
		if tags != "" {
			args = append(args, "-tags", tags)
		}
		out, err := exec.Command("go", append(args, pkg)...).CombinedOutput()
		if err != nil {
			b.err = fmt.Errorf("go build %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	})
	if b.err != nil {
		t.Fatal(b.err)
	}
	return b.path
}

// freePort returns a loopback port that was free a moment ago.
func freePort(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// process is one running switchboard binary.
type process struct {
	cmd    *exec.Cmd
	out    *syncbuf.Buffer // its stdout and stderr
	done   chan error
	exited atomic.Bool // Wait returned (set before done is sent)
}

func startProcess(t testing.TB, bin, config string) *process {
	t.Helper()
	return startProcessEnv(t, bin, config)
}

// startProcessEnv starts `bin serve` with env added to the test's
// environment (e.g. "SWITCHBOARD_FAILPOINT=after-commit").
func startProcessEnv(t testing.TB, bin, config string, env ...string) *process {
	t.Helper()
	p := &process{cmd: exec.Command(bin, "serve", "--config", config), out: &syncbuf.Buffer{}, done: make(chan error, 1)}
	p.cmd.Env = append(os.Environ(), env...)
	p.cmd.Stdout, p.cmd.Stderr = p.out, p.out
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		err := p.cmd.Wait()
		p.exited.Store(true)
		p.done <- err
	}()
	t.Cleanup(func() {
		// Not p.cmd.ProcessState: Wait writes it, and nobody may have
		// received from done since.
		if !p.exited.Load() {
			_ = p.cmd.Process.Kill()
			<-p.done
		}
		if t.Failed() {
			t.Logf("daemon log:\n%s", p.out.String())
		}
	})
	return p
}

// connectWhenUp connects to the daemon's bus as its operator (with the
// credential it generates in dataDir), retrying until it listens.
func connectWhenUp(t testing.TB, p *process, url, dataDir string) *nats.Conn {
	t.Helper()
	deadline := time.Now().Add(wait)
	for {
		var nc *nats.Conn
		token, err := natsbus.ReadOperatorToken(dataDir)
		if err == nil {
			nc, err = nats.Connect(url, nats.Token(token), nats.Timeout(time.Second))
		}
		if err == nil {
			js, _ := jetstream.New(nc)
			if _, err = js.Stream(context.Background(), "CHAT_IN"); err == nil {
				return nc
			}
			nc.Close()
		}
		select {
		case perr := <-p.done:
			t.Fatalf("daemon exited: %v", perr)
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("daemon bus not up: %v", err)
		}
	}
}

func writeConfig(t testing.TB, dir, busAddr, adminAddr, llmURL string) string {
	t.Helper()
	cfg := fmt.Sprintf(`data_dir: %s
log:
  level: debug
bus:
  listen: %q
admin:
  listen: %q
llm:
  base_url: %s
  api_key: test
  model: crash-model
  max_retries: 0
agent:
  workspace: %s
`, filepath.Join(dir, "data"), busAddr, adminAddr, llmURL, filepath.Join(dir, "workspace"))
	path := filepath.Join(dir, "config.yaml")
	if err := os.WriteFile(path, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestCrashMidTurnAnswersExactlyOnce kills the real daemon with SIGKILL while
// the model is answering, restarts it, and checks that the message gets
// exactly one final reply and is stored once in history.
func TestCrashMidTurnAnswersExactlyOnce(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binary; skipped with -short")
	}
	bin := buildBinary(t)
	model := llmtest.NewServer(t)
	hold := make(chan struct{})
	t.Cleanup(func() { close(hold) })
	model.Enqueue(llmtest.Reply{Text: "lost in the crash", Block: hold}, llmtest.TextReply("the answer"), llmtest.TextReply("second answer"))

	dir := t.TempDir()
	busAddr := freePort(t)
	config := writeConfig(t, dir, busAddr, "", model.URL())
	url := "nats://" + busAddr

	p1 := startProcess(t, bin, config)
	nc := connectWhenUp(t, p1, url, filepath.Join(dir, "data"))
	subj := bus.Subjects{Prefix: "chat"}
	in := bus.Inbound{V: 1, ID: "crash-1", Channel: "console", ChatID: "c1", UserID: "u", Text: "answer me"}
	bustest.PublishInbound(t, nc, subj, in)
	model.WaitRequests(t, 1, wait) // the turn is mid-flight
	nc.Close()
	if err := p1.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-p1.done

	p2 := startProcess(t, bin, config)
	nc = connectWhenUp(t, p2, url, filepath.Join(dir, "data"))
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	// Follow everything published on CHAT_OUT, before and after the crash.
	finals := make(chan bus.Outbound, 16)
	cons, err := js.OrderedConsumer(t.Context(), "CHAT_OUT", jetstream.OrderedConsumerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	cc, err := cons.Consume(func(m jetstream.Msg) {
		var o bus.Outbound
		if json.Unmarshal(m.Data(), &o) == nil && o.Final {
			finals <- o
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Stop()
	next := func() bus.Outbound {
		select {
		case o := <-finals:
			return o
		case <-time.After(wait):
			t.Fatal("no final reply")
		case perr := <-p2.done:
			t.Fatalf("daemon exited: %v", perr)
		}
		return bus.Outbound{}
	}
	if got := next(); got.InReplyTo != "crash-1" || got.Text != "the answer" {
		t.Fatalf("first final = %+v", got)
	}
	// A second message in the same session is processed after any
	// duplicate of the first: when its final arrives, no second final for
	// crash-1 may have come before it.
	bustest.PublishInbound(t, nc, subj, bus.Inbound{V: 1, ID: "crash-2", Channel: "console", ChatID: "c1", UserID: "u", Text: "again"})
	if got := next(); got.InReplyTo != "crash-2" {
		t.Fatalf("second final = %+v (a duplicate final for crash-1?)", got)
	}
	cc.Stop()
	nc.Close()

	if err := p2.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-p2.done:
		if err != nil {
			t.Fatalf("daemon exit after SIGTERM: %v", err)
		}
	case <-time.After(wait):
		t.Fatal("daemon did not stop on SIGTERM")
	}
	cfg := defaultConfig()
	cfg.DataDir = filepath.Join(dir, "data")
	assertHistoryOnce(t, cfg, "console/c1", "console:crash-1")
}

// TestGracefulShutdownLosesNothing sends SIGTERM to the real daemon while 20
// turns run: the turns that finish within shutdown_timeout are answered
// before it exits (with status 0), the others are cancelled and answered
// after the restart; every message gets exactly one final reply.
func TestGracefulShutdownLosesNothing(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binary; skipped with -short")
	}
	bin := buildBinary(t)
	even, odd := make(chan struct{}), make(chan struct{})
	var restarted atomic.Bool
	t.Cleanup(func() { close(odd) })
	model := llmtest.NewServer(t, llmtest.WithResponder(func(r *llmtest.Request) llmtest.Reply {
		text := r.LastUserText()
		reply := llmtest.TextReply("answer to " + text)
		if restarted.Load() {
			return reply
		}
		n, _ := strconv.Atoi(strings.TrimPrefix(text, "q"))
		reply.Block = odd
		if n%2 == 0 {
			reply.Block = even
		}
		return reply
	}), llmtest.WithRecordLimit(100))

	dir := t.TempDir()
	busAddr := freePort(t)
	config := writeConfig(t, dir, busAddr, "", model.URL())
	f, err := os.OpenFile(config, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintln(f, "shutdown_timeout: 3s")
	f.Close()
	url := "nats://" + busAddr

	p1 := startProcess(t, bin, config)
	nc := connectWhenUp(t, p1, url, filepath.Join(dir, "data"))
	subj := bus.Subjects{Prefix: "chat"}
	const n = 20
	for i := range n {
		bustest.PublishInbound(t, nc, subj, bus.Inbound{V: 1, ID: fmt.Sprintf("g%d", i), Channel: "console",
			ChatID: fmt.Sprintf("chat%d", i), UserID: "u", Text: fmt.Sprintf("q%d", i)})
	}
	model.WaitRequests(t, n, wait) // all 20 turns are running
	nc.Close()
	if err := p1.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	close(even) // half of the turns can finish during the drain
	select {
	case err := <-p1.done:
		if err != nil {
			t.Fatalf("exit after SIGTERM: %v", err)
		}
	case <-time.After(wait):
		t.Fatal("daemon did not exit")
	}

	restarted.Store(true)
	p2 := startProcess(t, bin, config)
	nc = connectWhenUp(t, p2, url, filepath.Join(dir, "data"))
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	finals := map[string]int{}
	var mu sync.Mutex
	got := make(chan struct{}, 64)
	cons, err := js.OrderedConsumer(t.Context(), "CHAT_OUT", jetstream.OrderedConsumerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	cc, err := cons.Consume(func(m jetstream.Msg) {
		var o bus.Outbound
		if json.Unmarshal(m.Data(), &o) == nil && o.Final {
			mu.Lock()
			finals[o.InReplyTo]++
			mu.Unlock()
			got <- struct{}{}
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Stop()
	deadline := time.After(wait)
	for {
		mu.Lock()
		done := len(finals) == n
		mu.Unlock()
		if done {
			break
		}
		select {
		case <-got:
		case <-deadline:
			mu.Lock()
			t.Fatalf("finals after restart: %d of %d: %v", len(finals), n, finals)
		}
	}
	// Each session processes in order; a second message per chat proves no
	// duplicate final of the first is still to come.
	for i := range n {
		bustest.PublishInbound(t, nc, subj, bus.Inbound{V: 1, ID: fmt.Sprintf("h%d", i), Channel: "console",
			ChatID: fmt.Sprintf("chat%d", i), UserID: "u", Text: "again"})
	}
	deadline = time.After(wait)
	for {
		mu.Lock()
		done := len(finals) == 2*n
		mu.Unlock()
		if done {
			break
		}
		select {
		case <-got:
		case <-deadline:
			t.Fatal("second round not answered")
		}
	}
	mu.Lock()
	defer mu.Unlock()
	for id, c := range finals {
		if c != 1 {
			t.Errorf("%s has %d finals", id, c)
		}
	}
}

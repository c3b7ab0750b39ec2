package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/switchboard-chat/switchboard/bus"
	"github.com/switchboard-chat/switchboard/internal/clustertest"
	"github.com/switchboard-chat/switchboard/internal/polltest"
	"github.com/switchboard-chat/switchboard/llm/llmtest"
)

// natsServerBinary builds nats-server from the module cache (it is a
// dependency of the embedded bus) once per test run.
func natsServerBinary(t testing.TB) string { return clustertest.ServerBinary(t) }

// natsProcess is an external nats-server with JetStream on a fixed port
// and store directory, so that it can be killed and started again.
type natsProcess struct {
	bin, addr, storeDir string
	cmd                 *exec.Cmd
	done                chan struct{}
}

func newNATSProcess(t *testing.T) *natsProcess {
	t.Helper()
	p := &natsProcess{bin: natsServerBinary(t), addr: freePort(t), storeDir: t.TempDir()}
	p.start(t)
	t.Cleanup(func() { p.kill(t) })
	return p
}

func (p *natsProcess) url() string { return "nats://" + p.addr }

// start runs the server and waits until it accepts clients.
func (p *natsProcess) start(t *testing.T) {
	t.Helper()
	host, port, _ := strings.Cut(p.addr, ":")
	p.cmd = exec.Command(p.bin, "-js", "-sd", p.storeDir, "-a", host, "-p", port, "-n", "test-nats")
	p.cmd.Stdout, p.cmd.Stderr = io.Discard, io.Discard
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p.done = make(chan struct{})
	go func(cmd *exec.Cmd, done chan struct{}) { _ = cmd.Wait(); close(done) }(p.cmd, p.done)
	deadline := time.Now().Add(wait)
	for {
		nc, err := nats.Connect(p.url(), nats.Timeout(time.Second))
		if err == nil {
			nc.Close()
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("nats-server did not start on %s: %v", p.addr, err)
		}
		select {
		case <-p.done:
			t.Fatalf("nats-server exited at start")
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// kill stops the server with SIGKILL and waits for it; idempotent.
func (p *natsProcess) kill(t *testing.T) {
	t.Helper()
	if p.cmd == nil {
		return
	}
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.done
	p.cmd = nil
}

// externalDaemon runs serve in-process (against an external NATS URL, or
// the embedded bus) with the admin server, logging to log.
type externalDaemon struct {
	adminURL string
	s        started
	stop     func()
}

func startExternalDaemon(t *testing.T, cfg Config) *externalDaemon {
	t.Helper()
	return startServe(t, cfg, testLog())
}

// testLog discards, or with -v writes debug lines to stderr.
func testLog() *slog.Logger {
	if testing.Verbose() {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

func startServe(t *testing.T, cfg Config, log *slog.Logger) *externalDaemon {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan started, 1)
	done := make(chan error, 1)
	go func() { done <- serve(ctx, cfg, log, func(s started) { ready <- s }) }()
	var s started
	select {
	case s = <-ready:
	case err := <-done:
		cancel()
		t.Fatalf("serve: %v", err)
	case <-time.After(wait):
		cancel()
		t.Fatal("daemon did not start")
	}
	<-s.Admin.Listening()
	d := &externalDaemon{adminURL: "http://" + s.Admin.Addr(), s: s}
	var once sync.Once
	d.stop = func() {
		once.Do(func() {
			cancel()
			select {
			case err := <-done:
				if err != nil {
					t.Errorf("serve returned %v", err)
				}
			case <-time.After(wait):
				t.Error("daemon did not stop")
			}
		})
	}
	t.Cleanup(d.stop)
	return d
}

// readyz returns /readyz's status code and body.
func (d *externalDaemon) readyz(t *testing.T) (int, string) {
	t.Helper()
	resp, err := http.Get(d.adminURL + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

// waitReadyz waits until /readyz answers with status and a body that
// satisfies match, and returns the body.
func (d *externalDaemon) waitReadyz(t *testing.T, status int, match func(string) bool) string {
	t.Helper()
	var code int
	var body string
	polltest.Until(t, wait, 20*time.Millisecond, func() bool {
		code, body = d.readyz(t)
		return code == status && match(body)
	}, func() string {
		return fmt.Sprintf("/readyz = %d %q; want %d with the expected reason", code, body, status)
	})
	return body
}

// publisher is a bridge-like sender: it publishes through JetStream and
// retries (same id, so the stream de-duplicates) until the message is
// stored, as a bridge must while the bus is away.
type publisher struct {
	js   jetstream.JetStream
	subj bus.Subjects

	mu       sync.Mutex
	accepted []string
}

func (p *publisher) send(ctx context.Context, chat, id string) bool {
	in := bus.Inbound{V: 1, ID: id, Channel: "console", ChatID: chat, UserID: "u-" + chat, Text: "message " + id}
	data, err := json.Marshal(in)
	if err != nil {
		panic(err)
	}
	for ctx.Err() == nil {
		pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		_, err := p.js.Publish(pctx, p.subj.In("console", chat), data, jetstream.WithMsgID(in.DedupKey()))
		cancel()
		if err == nil {
			p.mu.Lock()
			p.accepted = append(p.accepted, id)
			p.mu.Unlock()
			return true
		}
		select {
		case <-ctx.Done():
		case <-time.After(100 * time.Millisecond):
		}
	}
	return false
}

func (p *publisher) ids() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.accepted...)
}

// storedFinals reads CHAT_OUT and counts the final envelopes per inbound id.
func storedFinals(t *testing.T, js jetstream.JetStream) map[string]int {
	t.Helper()
	ctx := t.Context()
	cons, err := js.OrderedConsumer(ctx, "CHAT_OUT", jetstream.OrderedConsumerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	info, err := js.Stream(ctx, "CHAT_OUT")
	if err != nil {
		t.Fatal(err)
	}
	total := info.CachedInfo().State.Msgs
	finals := map[string]int{}
	for n := uint64(0); n < total; {
		batch, err := cons.Fetch(int(min(total-n, 500)), jetstream.FetchMaxWait(5*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		got := 0
		for m := range batch.Messages() {
			got++
			var o bus.Outbound
			if err := json.Unmarshal(m.Data(), &o); err != nil {
				t.Fatalf("CHAT_OUT holds %q: %v", m.Data(), err)
			}
			if o.Final {
				finals[o.InReplyTo]++
			}
		}
		if err := batch.Error(); err != nil && !errors.Is(err, jetstream.ErrNoMessages) {
			t.Fatal(err)
		}
		if got == 0 {
			t.Fatalf("CHAT_OUT: read %d of %d messages", n, total)
		}
		n += uint64(got)
	}
	return finals
}

// quietReconnecting are the options of a test client that outlives server
// restarts without printing the disconnects.
func quietReconnecting() []nats.Option {
	return []nats.Option{nats.MaxReconnects(-1), nats.ReconnectWait(100 * time.Millisecond),
		nats.DisconnectErrHandler(func(*nats.Conn, error) {}),
		nats.ErrorHandler(func(*nats.Conn, *nats.Subscription, error) {})}
}

func externalConfig(t *testing.T, natsURL, llmURL string) Config {
	t.Helper()
	cfg := testConfig(t, llmURL)
	cfg.Bus.URL = natsURL
	cfg.Bus.Listen = ""
	return cfg
}

// waitAllAnswered waits until every accepted id has a final in CHAT_OUT
// and returns the counts.
func waitAllAnswered(t *testing.T, js jetstream.JetStream, ids []string) map[string]int {
	t.Helper()
	var finals map[string]int
	var missing []string
	// Each look reads CHAT_OUT through an ephemeral consumer: not too often.
	polltest.Until(t, 90*time.Second, 200*time.Millisecond, func() bool {
		finals, missing = storedFinals(t, js), missing[:0]
		for _, id := range ids {
			if finals[id] == 0 {
				missing = append(missing, id)
			}
		}
		return len(missing) == 0
	}, func() string {
		return fmt.Sprintf("%d of %d accepted messages never got a final, e.g. %v", len(missing), len(ids), missing[:min(len(missing), 5)])
	})
	return finals
}

// startBusRestartRig starts an external nats-server, a daemon on it with
// an echoing model, ready, and a sender's connection to the server.
func startBusRestartRig(t *testing.T) (*natsProcess, *externalDaemon, jetstream.JetStream, *publisher) {
	t.Helper()
	ns := newNATSProcess(t)
	model := llmtest.NewServer(t, llmtest.WithResponder(llmtest.EchoResponder))
	d := startExternalDaemon(t, externalConfig(t, ns.url(), model.URL()))
	d.waitReadyz(t, http.StatusOK, func(string) bool { return true })
	nc, err := nats.Connect(ns.url(), quietReconnecting()...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return ns, d, js, &publisher{js: js, subj: bus.Subjects{Prefix: "chat"}}
}

// TestBusRestartUnderLoad: the external NATS server is killed and started
// again (same store) while eight chats keep sending. While it is down
// /readyz says 503 with the bus's reason; afterwards the daemon is ready
// again and every message accepted before, during (retried by the sender)
// and after the outage has exactly one final answer.
func TestBusRestartUnderLoad(t *testing.T) {
	ns, d, js, pub := startBusRestartRig(t)

	const chats = 8
	ctx, stopSending := context.WithCancel(t.Context())
	var wg sync.WaitGroup
	sent := make(chan struct{}, 1024)
	for c := range chats {
		wg.Go(func() {
			for i := 0; ctx.Err() == nil; i++ {
				if pub.send(ctx, fmt.Sprintf("c%d", c), fmt.Sprintf("c%d-m%d", c, i)) {
					select {
					case sent <- struct{}{}:
					default:
					}
				}
				time.Sleep(50 * time.Millisecond)
			}
		})
	}
	waitSent := func(n int) {
		t.Helper()
		timer := time.NewTimer(wait)
		defer timer.Stop()
		for range n {
			select {
			case <-sent:
			case <-timer.C:
				t.Fatalf("the senders did not get %d messages accepted", n)
			}
		}
	}
	waitSent(40)

	ns.kill(t)
	body := d.waitReadyz(t, http.StatusServiceUnavailable, func(b string) bool { return strings.Contains(b, "bus: ") })
	t.Logf("while the bus is down: %q", body)
	if !strings.Contains(body, ns.addr) {
		t.Errorf("/readyz reason %q does not name the server %s", body, ns.addr)
	}
	ns.start(t)
	d.waitReadyz(t, http.StatusOK, func(string) bool { return true })
	waitSent(40)
	stopSending()
	wg.Wait()

	ids := pub.ids()
	t0 := time.Now()
	finals := waitAllAnswered(t, js, ids)
	t.Logf("all answered %s after the senders stopped", time.Since(t0).Round(time.Millisecond))
	for _, id := range ids {
		if finals[id] != 1 {
			t.Errorf("message %s has %d finals in CHAT_OUT, want 1", id, finals[id])
		}
	}
	t.Logf("%d messages accepted from %d chats, each answered once", len(ids), chats)
}

// TestBusRestartWithEmptyStore: the external server comes back without its
// JetStream store (a new machine, a wiped volume). The daemon re-creates
// the streams and its durable consumer and answers new messages.
func TestBusRestartWithEmptyStore(t *testing.T) {
	ns, d, js, pub := startBusRestartRig(t)
	if !pub.send(t.Context(), "c1", "before") {
		t.Fatal("not accepted")
	}
	waitAllAnswered(t, js, []string{"before"})

	ns.kill(t)
	if err := os.RemoveAll(ns.storeDir); err != nil {
		t.Fatal(err)
	}
	ns.start(t)
	d.waitReadyz(t, http.StatusOK, func(string) bool { return true })
	sctx, cancel := context.WithTimeout(t.Context(), wait)
	defer cancel()
	if !pub.send(sctx, "c1", "after") {
		t.Fatal("the streams were not re-created: a message sent after the restart was never accepted")
	}
	finals := waitAllAnswered(t, js, []string{"after"})
	if finals["after"] != 1 {
		t.Errorf("%d finals for the message sent after the restart", finals["after"])
	}
}

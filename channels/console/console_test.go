package console_test

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/goleak"

	"github.com/switchboard-chat/switchboard/bus"
	"github.com/switchboard-chat/switchboard/bus/bridge"
	"github.com/switchboard-chat/switchboard/bus/bustest"
	"github.com/switchboard-chat/switchboard/channels/console"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var update = flag.Bool("update", false, "rewrite the golden files")

// wait bounds every wait for an event.
const wait = 10 * time.Second

// watched is an io.Writer safe for concurrent use that a test can wait on.
type watched struct {
	mu      sync.Mutex
	b       bytes.Buffer
	changed chan struct{}
}

func newWatched() *watched { return &watched{changed: make(chan struct{}, 1)} }

func (w *watched) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	select {
	case w.changed <- struct{}{}:
	default:
	}
	return w.b.Write(p)
}

func (w *watched) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.String()
}

func (w *watched) waitFor(t *testing.T, s string) {
	t.Helper()
	deadline := time.After(wait)
	for !strings.Contains(w.String(), s) {
		select {
		case <-w.changed:
		case <-deadline:
			t.Fatalf("output lacks %q after %s:\n%s", s, wait, w.String())
		}
	}
}

// daemon stands for the runtime: it sees the inbound envelopes the console
// publishes and answers on the console's subjects.
type daemon struct {
	nc   *nats.Conn
	js   jetstream.JetStream
	subj bus.Subjects
	in   *bustest.Collector
}

// setup starts a server with the bus streams, a daemon connection and a
// console client dialled as the operator would be (credentials in the URL
// not needed: the test server has no authentication).
func setup(t *testing.T, maxText int) (*daemon, *bridge.Client) {
	t.Helper()
	s := bustest.StartServer(t)
	nc := bustest.Connect(t, s)
	js := bustest.Streams(t, nc)
	d := &daemon{nc: nc, js: js, subj: bus.Subjects{Prefix: "chat"}, in: bustest.Collect(t, nc, "chat.in.console.>")}
	br, err := console.Dial(t.Context(), s.ClientURL(), bridge.Credentials{}, bridge.Options{SubjectPrefix: "chat", MaxTextBytes: maxText})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = br.Close() })
	return d, br
}

// inbound waits for the n-th inbound envelope (1-based) and checks its
// de-duplication header.
func (d *daemon) inbound(t *testing.T, n int) bus.Inbound {
	t.Helper()
	count := 0
	m := d.in.WaitFor(t, wait, func(*nats.Msg) bool { count++; return count == n })
	var in bus.Inbound
	if err := json.Unmarshal(m.Data, &in); err != nil {
		t.Fatal(err)
	}
	if got, want := m.Header.Get(jetstream.MsgIDHeader), "console:"+in.ID; got != want {
		t.Fatalf("Nats-Msg-Id %q, want %q", got, want)
	}
	return in
}

func (d *daemon) publish(t *testing.T, subject string, v any) {
	t.Helper()
	data, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	if err := d.nc.Publish(subject, data); err != nil {
		t.Fatal(err)
	}
}

func (d *daemon) out(t *testing.T, chat string, o bus.Outbound) {
	t.Helper()
	o.V, o.Channel, o.ChatID = 1, "console", chat
	d.publish(t, d.subj.Out("console", chat), o)
}

func (d *daemon) event(t *testing.T, chat, typ, data string) {
	t.Helper()
	d.publish(t, d.subj.Event("console", chat), bus.Event{V: 1, Type: typ, Channel: "console", ChatID: chat, Data: json.RawMessage(data)})
}

// running is a console Run in a goroutine, fed through a pipe.
type running struct {
	input  *io.PipeWriter
	out    *watched
	done   chan error
	cancel context.CancelFunc
}

func run(t *testing.T, br *bridge.Client, opts console.Options) *running {
	t.Helper()
	out := newWatched()
	c, err := console.New(br, opts, out)
	if err != nil {
		t.Fatal(err)
	}
	pr, pw := io.Pipe()
	ctx, cancel := context.WithCancel(t.Context())
	r := &running{input: pw, out: out, done: make(chan error, 1), cancel: cancel}
	go func() { r.done <- c.Run(ctx, pr) }()
	t.Cleanup(func() {
		cancel()
		_ = pw.Close()
		select {
		case <-r.done:
		case <-time.After(wait):
			t.Error("Run did not return")
		}
	})
	return r
}

func (r *running) send(t *testing.T, line string) {
	t.Helper()
	if _, err := io.WriteString(r.input, line+"\n"); err != nil {
		t.Fatal(err)
	}
}

// end closes the input and returns Run's result.
func (r *running) end(t *testing.T) error {
	t.Helper()
	_ = r.input.Close()
	select {
	case err := <-r.done:
		r.done <- err // for the cleanup
		return err
	case <-time.After(wait):
		t.Fatalf("Run did not return after the input ended:\n%s", r.out.String())
		return nil
	}
}

func golden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if got != string(want) {
		t.Errorf("output differs from %s (go test -update to rewrite):\n got:\n%s\nwant:\n%s", path, got, want)
	}
}

// TestConsoleSession: lines become inbound envelopes of the console's chat
// (with the kit's de-duplication header); the answer streams (each part
// printed once), tool calls and results show, post-turn tools do not, a
// final published again is shown once, another chat's traffic is not
// shown, notices print as "[notice] ..."; when the input ends, Run waits
// for the last answer and returns nil.
func TestConsoleSession(t *testing.T) {
	d, br := setup(t, 0)
	r := run(t, br, console.Options{ChatID: "t1", UserID: "ann"})
	r.send(t, "   ")
	r.send(t, "what is in my workspace?")
	in := d.inbound(t, 1)
	if in.Channel != "console" || in.ChatID != "t1" || in.UserID != "ann" || in.UserName != "ann" || in.Text != "what is in my workspace?" || in.ID == "" {
		t.Fatalf("inbound %+v", in)
	}
	d.out(t, "t1", bus.Outbound{ID: "o0", InReplyTo: in.ID, Kind: bus.KindTyping, Seq: 1})
	d.event(t, "t1", bus.EventToolCall, `{"name":"list_dir","arguments":"{}"}`)
	d.event(t, "t1", bus.EventToolResult, `{"name":"list_dir","text":"AGENT.md\nnotes/"}`)
	d.event(t, "t1", bus.EventToolCall, `{"name":"memory_save","arguments":"{}","stage":"post_turn"}`)
	d.event(t, "t1", bus.EventToolResult, `{"name":"read_file","error":true,"text":"no such file"}`)
	d.out(t, "t2", bus.Outbound{ID: "x1", InReplyTo: "other", Kind: bus.KindReply, Text: "not yours", Seq: 1, Final: true})
	d.out(t, "t1", bus.Outbound{ID: "o1", InReplyTo: in.ID, Kind: bus.KindDelta, Text: "Your work", Seq: 2})
	d.out(t, "t1", bus.Outbound{ID: "o2", InReplyTo: in.ID, Kind: bus.KindDelta, Text: "Your workspace holds", Seq: 3})
	final := bus.Outbound{ID: "o3", InReplyTo: in.ID, Kind: bus.KindReply, Text: "Your workspace holds two files.", Seq: 4, Final: true}
	d.out(t, "t1", final)
	d.out(t, "t1", final) // the daemon's re-publication after a crash
	r.out.waitFor(t, "two files.\n")

	r.send(t, "/status")
	st := d.inbound(t, 2)
	d.out(t, "t1", bus.Outbound{ID: "o4", InReplyTo: st.ID, Kind: bus.KindNotice, Text: "Session: console/t1", Seq: 1, Final: true})
	if err := r.end(t); err != nil {
		t.Fatalf("Run = %v", err)
	}
	golden(t, "session.golden", r.out.String())
}

// TestConsoleWaitsForAnswers: when the input ends with an answer missing,
// Run waits at most Options.Wait and says how many are missing.
func TestConsoleWaitsForAnswers(t *testing.T) {
	d, br := setup(t, 0)
	r := run(t, br, console.Options{ChatID: "t1", UserID: "ann", Wait: time.Millisecond})
	r.send(t, "hello?")
	d.inbound(t, 1)
	err := r.end(t)
	if err == nil || err.Error() != "chat: 1 message(s) still unanswered after 1ms" {
		t.Fatalf("Run = %v, want the unanswered message reported", err)
	}
}

// TestConsoleRefusedLineIsReported: a line the runtime would refuse (over
// bus.max_text_bytes) is not published; the user is told why and the
// session goes on.
func TestConsoleRefusedLineIsReported(t *testing.T) {
	d, br := setup(t, 16)
	r := run(t, br, console.Options{ChatID: "t1", UserID: "ann"})
	r.send(t, strings.Repeat("x", 17))
	r.out.waitFor(t, "[error] not sent: ")
	r.send(t, "short")
	in := d.inbound(t, 1)
	if in.Text != "short" {
		t.Fatalf("first inbound published is %q, want the short line (the long one refused)", in.Text)
	}
	d.out(t, "t1", bus.Outbound{ID: "o1", InReplyTo: in.ID, Kind: bus.KindReply, Text: "ok", Seq: 1, Final: true})
	if err := r.end(t); err != nil {
		t.Fatalf("Run = %v", err)
	}
	if got := r.out.String(); !strings.Contains(got, `field "text": must be at most 16 bytes, got 17`) || !strings.HasSuffix(got, "ok\n") {
		t.Fatalf("output:\n%s", got)
	}
}

// TestConsoleStopsWithContext: a cancelled context ends Run with nil
// while the input is still open, and everything it started is joined
// (goleak checks the rest of the package).
func TestConsoleStopsWithContext(t *testing.T) {
	_, br := setup(t, 0)
	r := run(t, br, console.Options{ChatID: "t1", UserID: "ann"})
	r.send(t, "hi")
	r.cancel()
	select {
	case err := <-r.done:
		r.done <- err
		if err != nil {
			t.Fatalf("Run after cancel = %v, want nil", err)
		}
	case <-time.After(wait):
		t.Fatal("Run did not return after cancel")
	}
}

func TestConsoleNewValidates(t *testing.T) {
	_, br := setup(t, 0)
	if c, err := console.New(br, console.Options{}, io.Discard); err != nil || c.ChatID() != "console-console" {
		t.Fatalf("New without chat and user = %v, chat %q; want the defaults", err, c.ChatID())
	}
	if c, err := console.New(br, console.Options{UserID: "ann"}, io.Discard); err != nil || c.ChatID() != "console-ann" {
		t.Fatalf("New for user ann = %v, chat %q; want console-ann", err, c.ChatID())
	}
	if _, err := console.New(br, console.Options{Wait: -time.Second}, io.Discard); err == nil || !strings.Contains(err.Error(), "Options.Wait: must not be negative") {
		t.Fatalf("New with a negative wait = %v", err)
	}
	other, err := bridge.New(br.Conn(), bridge.Options{Channel: "telegram"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := console.New(other, console.Options{ChatID: "c", UserID: "u"}, io.Discard); err == nil || !strings.Contains(err.Error(), `want "console"`) {
		t.Fatalf("New over a telegram client = %v", err)
	}
}

func TestDialRefused(t *testing.T) {
	s := bustest.StartServer(t)
	url := s.ClientURL()
	s.Shutdown()
	s.WaitForShutdown()
	_, err := console.Dial(t.Context(), "nats://secret-token@"+strings.TrimPrefix(url, "nats://"), bridge.Credentials{}, bridge.Options{})
	if err == nil || !strings.Contains(err.Error(), "is `switchboard serve` running?") || strings.Contains(err.Error(), "secret-token") {
		t.Fatalf("Dial to a stopped server = %v", err)
	}
}

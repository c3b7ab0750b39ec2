package main

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/switchboard-chat/switchboard/bus"
	"github.com/switchboard-chat/switchboard/bus/bridge"
	"github.com/switchboard-chat/switchboard/bus/natsbus"
	"github.com/switchboard-chat/switchboard/memory"
	"github.com/switchboard-chat/switchboard/memory/boltstore"
)

// outWatcher follows the daemon's outbound messages across its crashes and
// restarts, as two kinds of consumer see them:
//
//   - the wire: a core subscription on "<p>.out.>" (what `switchboard chat`
//     and bridges without JetStream get: every copy published, typing and
//     deltas included; it reconnects after each restart and may miss what
//     is published while it is disconnected);
//   - the bridge kit: a [bridge.Client] consuming channel console through
//     its durable consumer (what a JetStream bridge shows; nothing stored
//     is missed).
//
// Per inbound id it records the final ids seen, how often each copy came,
// and what arrived after a final on the wire or at the kit's handler (a
// protocol violation).
type outWatcher struct {
	t      testing.TB
	wireNC *nats.Conn
	kitNC  *nats.Conn
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu      sync.Mutex
	byIn    map[string]*inboundView
	changed chan struct{} // closed and replaced on every final
	fresh   int           // distinct final ids seen on the wire
}

// inboundView is what the watcher saw for one inbound message.
type inboundView struct {
	wire      map[string]int // final id → copies on the wire
	shown     map[string]int // final id → times the bridge kit's handler got it
	final     bool           // a final was seen on the wire
	violation []string       // wire messages (kind) after a final
	kitAfter  []string       // messages (kind) the kit handed over after a final it handed over
}

// finalIDs is the union of the final ids seen on the wire and by the kit.
func (v *inboundView) finalIDs() []string {
	ids := map[string]bool{}
	for id := range v.wire {
		ids[id] = true
	}
	for id := range v.shown {
		ids[id] = true
	}
	out := make([]string, 0, len(ids))
	for id := range ids {
		out = append(out, id)
	}
	sort.Strings(out)
	return out
}

// reconnecting are the options of a client that follows the daemon across
// restarts (the operator token in data_dir stays the same). It retries
// every 2 ms, so that it is back within a few milliseconds of the restarted
// daemon's listener, before the agent runtime starts consuming (what a
// restart re-publishes comes right then); disconnections are expected and
// not reported.
func reconnecting(token string) []nats.Option {
	return []nats.Option{nats.Token(token), nats.MaxReconnects(-1), nats.ReconnectWait(2 * time.Millisecond),
		nats.ReconnectJitter(0, 0), nats.Timeout(time.Second), nats.RetryOnFailedConnect(true),
		nats.ErrorHandler(func(*nats.Conn, *nats.Subscription, error) {}),
		nats.DisconnectErrHandler(func(*nats.Conn, error) {})}
}

// newOutWatcher starts both consumers on the running daemon of dataDir at
// url and returns once the kit's durable consumer exists (it delivers what
// is published from then on). Close stops them.
func newOutWatcher(t testing.TB, url, dataDir string) *outWatcher {
	t.Helper()
	token, err := natsbus.ReadOperatorToken(dataDir)
	if err != nil {
		t.Fatal(err)
	}
	w := &outWatcher{t: t, byIn: map[string]*inboundView{}, changed: make(chan struct{})}
	if w.wireNC, err = nats.Connect(url, reconnecting(token)...); err != nil {
		t.Fatal(err)
	}
	if _, err := w.wireNC.Subscribe(bus.Subjects{Prefix: "chat"}.OutAll(), w.onWire); err != nil {
		t.Fatal(err)
	}
	if err := w.wireNC.Flush(); err != nil {
		t.Fatal(err)
	}
	if w.kitNC, err = nats.Connect(url, reconnecting(token)...); err != nil {
		t.Fatal(err)
	}
	kit, err := bridge.New(w.kitNC, bridge.Options{Channel: "console"})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	w.cancel = cancel
	w.wg.Go(func() {
		for ctx.Err() == nil {
			if err := kit.ConsumeOutbound(ctx, w.onKit); err != nil && ctx.Err() == nil {
				// The daemon (and its bus) is down: try again once it is back.
				select {
				case <-ctx.Done():
				case <-time.After(50 * time.Millisecond):
				}
			}
		}
	})
	js, err := jetstream.New(w.kitNC)
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(wait)
	for {
		if _, err := js.Consumer(ctx, bridge.StreamOut("chat"), "bridge_console"); err == nil {
			break
		} else if time.Now().After(deadline) {
			t.Fatalf("bridge kit consumer not created: %v", err)
		}
		w.waitChange(20 * time.Millisecond)
	}
	return w
}

// Close stops both consumers.
func (w *outWatcher) Close() {
	w.cancel()
	w.wg.Wait()
	w.kitNC.Close()
	w.wireNC.Close()
}

func (w *outWatcher) view(id string) *inboundView {
	v := w.byIn[id]
	if v == nil {
		v = &inboundView{wire: map[string]int{}, shown: map[string]int{}}
		w.byIn[id] = v
	}
	return v
}

func (w *outWatcher) notify() {
	close(w.changed)
	w.changed = make(chan struct{})
}

func (w *outWatcher) onWire(m *nats.Msg) {
	var o bus.Outbound
	if json.Unmarshal(m.Data, &o) != nil || o.InReplyTo == "" {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	v := w.view(o.InReplyTo)
	switch {
	case o.Final:
		v.wire[o.ID]++
		if v.wire[o.ID] == 1 {
			w.fresh++
		}
		v.final = true
		w.notify()
	case v.final:
		v.violation = append(v.violation, o.Kind)
	}
}

func (w *outWatcher) onKit(_ context.Context, o bus.Outbound) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !o.Final {
		if v := w.byIn[o.InReplyTo]; v != nil && len(v.shown) > 0 {
			v.kitAfter = append(v.kitAfter, o.Kind)
		}
		return nil
	}
	w.view(o.InReplyTo).shown[o.ID]++
	w.notify()
	return nil
}

// freshFinals returns how many distinct final ids the wire has carried.
func (w *outWatcher) freshFinals() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.fresh
}

// waitFresh waits until the wire has carried more than n distinct final
// ids, at most timeout, and reports whether it did.
func (w *outWatcher) waitFresh(n int, timeout time.Duration) bool {
	deadline := time.Now().Add(timeout)
	for {
		w.mu.Lock()
		ok, ch := w.fresh > n, w.changed
		w.mu.Unlock()
		if ok {
			return true
		}
		left := time.Until(deadline)
		if left <= 0 {
			return false
		}
		select {
		case <-ch:
		case <-time.After(left):
		}
	}
}

// waitChange waits until a final arrives or d passes.
func (w *outWatcher) waitChange(d time.Duration) {
	w.mu.Lock()
	ch := w.changed
	w.mu.Unlock()
	select {
	case <-ch:
	case <-time.After(d):
	}
}

// waitFor waits until cond (called under the watcher's lock) holds, or
// fails the test after timeout with what was seen.
func (w *outWatcher) waitFor(timeout time.Duration, what string, cond func(byIn map[string]*inboundView) bool) {
	w.t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		w.mu.Lock()
		ok, ch := cond(w.byIn), w.changed
		w.mu.Unlock()
		if ok {
			return
		}
		left := time.Until(deadline)
		if left <= 0 {
			w.t.Fatalf("%s: not within %s; seen %s", what, timeout, w.summary())
		}
		select {
		case <-ch:
		case <-time.After(left):
		}
	}
}

// answered reports whether id has a final on the wire or at the kit.
func answered(byIn map[string]*inboundView, id string) bool {
	v := byIn[id]
	return v != nil && (len(v.wire) > 0 || len(v.shown) > 0)
}

// snapshot copies the views (for assertions after Close).
func (w *outWatcher) snapshot() map[string]inboundView {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := make(map[string]inboundView, len(w.byIn))
	for id, v := range w.byIn {
		c := inboundView{wire: map[string]int{}, shown: map[string]int{}, final: v.final, violation: append([]string(nil), v.violation...),
			kitAfter: append([]string(nil), v.kitAfter...)}
		for k, n := range v.wire {
			c.wire[k] = n
		}
		for k, n := range v.shown {
			c.shown[k] = n
		}
		out[id] = c
	}
	return out
}

func (w *outWatcher) summary() string {
	var b strings.Builder
	for id, v := range w.snapshot() {
		b.WriteString("\n  " + id + ": wire=" + jsonString(v.wire) + " kit=" + jsonString(v.shown) + " after_final=" + jsonString(v.violation) + " kit_after_final=" + jsonString(v.kitAfter))
	}
	return b.String()
}

func jsonString(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

// killedBySIGKILL reports whether a process's Wait error says it died by
// SIGKILL.
func killedBySIGKILL(err error) bool {
	var ee interface{ Sys() any }
	if !errors.As(err, &ee) {
		return false
	}
	ws, ok := ee.Sys().(syscall.WaitStatus)
	return ok && ws.Signaled() && ws.Signal() == syscall.SIGKILL
}

// stopProcess sends SIGTERM and waits for a clean exit.
func stopProcess(t testing.TB, p *process) {
	t.Helper()
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-p.done:
		if err != nil {
			t.Fatalf("daemon exit after SIGTERM: %v", err)
		}
	case <-time.After(wait):
		t.Fatal("daemon did not stop on SIGTERM")
	}
}

// historyInbound counts, over every stored session of the stopped
// daemon's history.db, the user messages that start a turn per inbound
// key ("<channel>:<id>").
func historyInbound(t testing.TB, dataDir string) map[string]int {
	t.Helper()
	st, err := boltstore.Open(filepath.Join(dataDir, "history.db"), boltstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	sessions, err := st.Sessions(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	counts := map[string]int{}
	for _, s := range sessions {
		f, err := os.CreateTemp(t.TempDir(), "export-")
		if err != nil {
			t.Fatal(err)
		}
		if err := st.Export(context.Background(), s.Key, f); err != nil {
			t.Fatal(err)
		}
		if _, err := f.Seek(0, 0); err != nil {
			t.Fatal(err)
		}
		dec := json.NewDecoder(f)
		for {
			var m memory.Message
			if err := dec.Decode(&m); errors.Is(err, io.EOF) {
				break
			} else if err != nil {
				t.Fatalf("history export of %s: %v", s.Key, err)
			}
			if m.Role == memory.RoleUser && m.TurnStart && m.InboundID != "" {
				counts[m.InboundID]++
			}
		}
		f.Close()
	}
	return counts
}

// TestOutWatcherCounts feeds the watcher's wire and kit handlers directly:
// a second copy of a final is a repeat, a typing after the final a
// violation (on the wire and at the kit), a second final id a double.
func TestOutWatcherCounts(t *testing.T) {
	w := &outWatcher{t: t, byIn: map[string]*inboundView{}, changed: make(chan struct{})}
	wire := func(o bus.Outbound) {
		data, err := json.Marshal(o)
		if err != nil {
			t.Fatal(err)
		}
		w.onWire(&nats.Msg{Data: data})
	}
	in := &bus.Inbound{V: 1, ID: "a", Channel: "console", ChatID: "c", UserID: "u", Text: "x"}
	final := bus.ReplyTo(in)
	final.ID, final.Kind, final.Text, final.Seq, final.Final = "f1", bus.KindReply, "answer", 2, true
	typing := bus.ReplyTo(in)
	typing.ID, typing.Kind, typing.Seq = "t1", bus.KindTyping, 1
	wire(typing) // before the final: fine
	wire(final)
	wire(final) // the same final again: a repeat
	wire(typing)
	other := final
	other.ID = "f2"
	wire(other)
	_ = w.onKit(context.Background(), typing) // before the final: fine
	if err := w.onKit(context.Background(), final); err != nil {
		t.Fatal(err)
	}
	_ = w.onKit(context.Background(), final)
	_ = w.onKit(context.Background(), typing)
	v := w.snapshot()["a"]
	if got := v.finalIDs(); len(got) != 2 {
		t.Errorf("final ids = %v, want f1 and f2", got)
	}
	if v.wire["f1"] != 2 || v.shown["f1"] != 2 || len(v.violation) != 1 || v.violation[0] != bus.KindTyping ||
		len(v.kitAfter) != 1 || v.kitAfter[0] != bus.KindTyping {
		t.Errorf("view = %+v", v)
	}
}

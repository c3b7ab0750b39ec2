package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/switchboard-chat/switchboard/agent/agenttest"
	"github.com/switchboard-chat/switchboard/bus"
	"github.com/switchboard-chat/switchboard/llm/llmtest"
	"github.com/switchboard-chat/switchboard/memory"
	"github.com/switchboard-chat/switchboard/memory/boltstore"
)

// gatedEcho answers every request with "re: <last user text>", holding the
// requests whose last user text is gated until the gate is closed.
func gatedEcho(gated string, gate <-chan struct{}) llmtest.Responder {
	return func(req *llmtest.Request) llmtest.Reply {
		text := req.LastUserText()
		r := llmtest.TextReply("re: " + text)
		if strings.HasSuffix(text, gated) {
			r.Block = gate
		}
		return r
	}
}

func withResponder(r llmtest.Responder) func(*harnessConfig) {
	return func(hc *harnessConfig) { hc.modelOption = append(hc.modelOption, llmtest.WithResponder(r)) }
}

func withQueueMode(mode string) func(*harnessConfig) {
	return func(hc *harnessConfig) {
		hc.cfg.QueueMode = mode
		hc.opt.DeferDelay = 200 * time.Millisecond
	}
}

// finalsByID returns every final published, by in_reply_to.
func finalsByID(b *agenttest.Bus) map[string][]bus.Outbound {
	out := map[string][]bus.Outbound{}
	for _, o := range b.Outbounds() {
		if o.Final {
			out[o.InReplyTo] = append(out[o.InReplyTo], o)
		}
	}
	return out
}

// waitAllFinals waits until every id has a final.
func waitAllFinals(t *testing.T, b *agenttest.Bus, ids []string) {
	t.Helper()
	b.Wait(t, 60*time.Second, func() bool {
		got := finalsByID(b)
		for _, id := range ids {
			if len(got[id]) == 0 {
				return false
			}
		}
		return true
	}, fmt.Sprintf("a final for each of %d messages", len(ids)))
}

// flood sends n messages f1..fn in chat c1 while the turn of "hold" is held
// by the model, then releases it and waits for every final.
func flood(t *testing.T, h *harness, n int, gate chan struct{}) []string {
	t.Helper()
	h.send("hold", "please hold")
	h.model.WaitRequests(t, 1, wait)
	ids := []string{"hold"}
	for i := 1; i <= n; i++ {
		id := fmt.Sprintf("f%d", i)
		ids = append(ids, id)
		h.send(id, fmt.Sprintf("line %d", i))
	}
	close(gate)
	waitAllFinals(t, h.bus, ids)
	return ids
}

// checkOneFinalEach asserts exactly one final per id, none an error.
func checkOneFinalEach(t *testing.T, b *agenttest.Bus, ids []string) {
	t.Helper()
	finals := finalsByID(b)
	errs := 0
	for _, id := range ids {
		fs := finals[id]
		if len(fs) != 1 {
			t.Errorf("message %s got %d finals; want exactly 1", id, len(fs))
			continue
		}
		if fs[0].Kind == bus.KindError {
			errs++
		}
	}
	if errs > 0 {
		t.Errorf("%d messages got an error final; a flood must be absorbed, not refused", errs)
	}
}

// checkHistoryOnceInOrder asserts every line is stored once, in order.
func checkHistoryOnceInOrder(t *testing.T, h *harness, n int) {
	t.Helper()
	snap, err := h.mem.Load(t.Context(), "console/c1", 1000)
	if err != nil {
		t.Fatal(err)
	}
	var users []string
	for _, m := range snap.Messages {
		if m.Role == memory.RoleUser && len(m.Blocks) > 0 {
			users = append(users, m.Blocks[0].Text)
		}
	}
	want := []string{"please hold"}
	for i := 1; i <= n; i++ {
		want = append(want, fmt.Sprintf("line %d", i))
	}
	if strings.Join(users, "\n") != strings.Join(want, "\n") {
		t.Errorf("history holds %d user messages; want each of the %d once and in order (first differences: %v)", len(users), len(want), firstDiff(users, want))
	}
}

func firstDiff(got, want []string) string {
	for i := range max(len(got), len(want)) {
		var g, w string
		if i < len(got) {
			g = got[i]
		}
		if i < len(want) {
			w = want[i]
		}
		if g != w {
			return fmt.Sprintf("#%d got %q want %q", i, g, w)
		}
	}
	return "none"
}

// TestFloodCollected: 400 quick messages while a turn runs get no error
// final, one final each, far fewer model calls than messages, and each is
// stored once and in order; the session held at most maxHeldPerSession of
// them, the rest were handed back to the bus.
func TestFloodCollected(t *testing.T) {
	gate := make(chan struct{})
	h := newHarness(t, withQueueMode(QueueCollect), withResponder(gatedEcho("please hold", gate)))
	const n = 400
	ids := flood(t, h, n, gate)
	checkOneFinalEach(t, h.bus, ids)
	if calls := len(h.model.Requests()); calls > n/10 {
		t.Errorf("%d model calls for %d messages; collect mode must answer them together", calls, n+1)
	}
	if h.bus.Naks() == 0 {
		t.Errorf("no message was handed back to the bus; a session must hold at most %d in memory", maxHeldPerSession)
	}
	checkHistoryOnceInOrder(t, h, n)
	// Collected finals: the reply answers the last of a turn; each earlier
	// one gets an empty notice pointing at a message whose final has text.
	finals := finalsByID(h.bus)
	pointers := 0
	for _, id := range ids {
		f := finals[id][0]
		if by := f.Meta[MetaAnsweredBy]; by != "" {
			pointers++
			if f.Kind != bus.KindNotice || f.Text != "" {
				t.Errorf("collected final of %s = %s %q; want an empty notice", id, f.Kind, f.Text)
			}
			if a := finals[by]; len(a) != 1 || a[0].Text == "" || a[0].Meta[MetaAnsweredBy] != "" {
				t.Errorf("final of %s points at %s, which holds no answer: %+v", id, by, a)
			}
		}
	}
	if pointers == 0 {
		t.Error("no message was collected")
	}
	h.checkRequestsValid()
}

// TestFloodSequential: in sequential mode each message gets its own turn,
// in order, and a flood still gets no error final.
func TestFloodSequential(t *testing.T) {
	gate := make(chan struct{})
	h := newHarness(t, withQueueMode(QueueSequential), withResponder(gatedEcho("please hold", gate)),
		func(hc *harnessConfig) { hc.cfg.MaxContextTurns = 1000 })
	const n = 300 // more than the old in-memory limit of 256
	ids := flood(t, h, n, gate)
	checkOneFinalEach(t, h.bus, ids)
	reqs := h.model.Requests()
	if len(reqs) != n+1 {
		t.Fatalf("%d model calls; want one per message (%d)", len(reqs), n+1)
	}
	for i, r := range reqs[1:] {
		if got, want := r.LastUserText(), fmt.Sprintf("line %d", i+1); got != want {
			t.Fatalf("model call %d answers %q; want %q (in order)", i+1, got, want)
		}
	}
	finals := finalsByID(h.bus)
	for i := 1; i <= n; i++ {
		if f := finals[fmt.Sprintf("f%d", i)][0]; f.Text != fmt.Sprintf("re: line %d", i) {
			t.Fatalf("final of f%d = %q", i, f.Text)
		}
	}
	checkHistoryOnceInOrder(t, h, n)
}

// TestFloodDoesNotDelayOtherChats: while one chat's turn is held and 400
// more of its messages wait, another chat's single message is answered.
func TestFloodDoesNotDelayOtherChats(t *testing.T) {
	for _, mode := range []string{QueueCollect, QueueSequential} {
		t.Run(mode, func(t *testing.T) {
			gate := make(chan struct{})
			h := newHarness(t, withQueueMode(mode), withResponder(gatedEcho("please hold", gate)))
			h.send("hold", "please hold")
			h.model.WaitRequests(t, 1, wait)
			for i := 1; i <= 400; i++ {
				h.send(fmt.Sprintf("f%d", i), fmt.Sprintf("line %d", i))
			}
			h.bus.Send(bus.Inbound{ID: "other", Channel: "console", ChatID: "c2", UserID: "u2", UserName: "Bo", Text: "hello from c2"})
			if f := h.bus.WaitFinal(t, wait, "other"); f.Text != "re: hello from c2" {
				t.Errorf("other chat's final = %+v", f)
			}
			if n := len(finalsByID(h.bus)); n != 1 {
				t.Errorf("%d messages answered while the flooding chat's turn is held; want only the other chat's", n)
			}
			close(gate)
			h.final("f400")
		})
	}
}

// TestCommandsNotCollected: commands queued behind a turn keep their own
// answers and order; the messages around them are collected separately.
func TestCommandsNotCollected(t *testing.T) {
	gate := make(chan struct{})
	h := newHarness(t, withQueueMode(QueueCollect), withResponder(gatedEcho("please hold", gate)))
	h.send("hold", "please hold")
	h.model.WaitRequests(t, 1, wait)
	h.send("a1", "one")
	h.send("a2", "two")
	h.send("h", "/help")
	h.send("b1", "three")
	close(gate)
	h.final("b1")
	if f := h.final("h"); f.Kind != bus.KindNotice || !strings.Contains(f.Text, "/steer") {
		t.Errorf("/help final = %+v", f)
	}
	reqs := h.model.Requests()
	if len(reqs) != 3 {
		t.Fatalf("%d model calls; want 3 (hold, one+two, three)", len(reqs))
	}
	var texts []string
	for _, m := range reqs[1].Body.Messages {
		if m.Role == "user" {
			texts = append(texts, llmtest.MessageText(m))
		}
	}
	if got := strings.Join(texts, "|"); !strings.HasSuffix(got, "|one|two") {
		t.Errorf("collected request's user messages = %q; want ...|one|two", got)
	}
	if f := h.final("a1"); f.Meta[MetaAnsweredBy] != "a2" || f.Text != "" {
		t.Errorf("a1's final = %+v; want an empty notice answered_by a2", f)
	}
	if f := h.final("a2"); f.Text != "re: two" {
		t.Errorf("a2's final = %+v", f)
	}
	if r := h.request(2); r.LastUserText() != "three" {
		t.Errorf("third call answers %q; want three (not collected across /help)", r.LastUserText())
	}
}

// TestGroupCollectedKeepsSpeakers: in a group, one member's lines are
// collected with their speaker prefix; another member's line is not mixed
// into that turn.
func TestGroupCollectedKeepsSpeakers(t *testing.T) {
	gate := make(chan struct{})
	h := newHarness(t, withQueueMode(QueueCollect), withResponder(gatedEcho("hold", gate)))
	g := func(id, user, name, text string) {
		h.bus.Send(bus.Inbound{ID: id, Channel: "console", ChatID: "g1", UserID: user, UserName: name, IsGroup: true, Text: text})
	}
	g("g0", "u1", "Ann", "hold")
	h.model.WaitRequests(t, 1, wait)
	g("g1", "u1", "Ann", "first")
	g("g2", "u1", "Ann", "second")
	g("g3", "u2", "Bob", "mine")
	close(gate)
	h.bus.WaitFinal(t, wait, "g3")
	reqs := h.model.Requests()
	if len(reqs) != 3 {
		t.Fatalf("%d model calls; want 3", len(reqs))
	}
	var texts []string
	for _, m := range reqs[1].Body.Messages[len(reqs[1].Body.Messages)-2:] {
		texts = append(texts, llmtest.MessageText(m))
	}
	ann := SpeakerLabel("console", "u1", "Ann")
	if want := "[" + ann + "]: first|[" + ann + "]: second"; strings.Join(texts, "|") != want {
		t.Errorf("collected group turn ends with %q; want %q", strings.Join(texts, "|"), want)
	}
	if got := reqs[2].LastUserText(); !strings.Contains(got, "mine") {
		t.Errorf("Bob's line was answered in %q", got)
	}
}

// outboundsFor returns everything published on the out and event subjects
// for inbound id.
func outboundsFor(b *agenttest.Bus, id string) (outs []bus.Outbound, events []bus.Event) {
	for _, o := range b.Outbounds() {
		if o.InReplyTo == id {
			outs = append(outs, o)
		}
	}
	for _, e := range b.Events() {
		if e.InReplyTo == id {
			events = append(events, e)
		}
	}
	return outs, events
}

func waitAcked(t *testing.T, b *agenttest.Bus, d *agenttest.Delivery) {
	t.Helper()
	b.Wait(t, wait, func() bool { acked, _ := d.State(); return acked }, "delivery acknowledged")
}

// TestRedeliveredAnsweredMessageShowsNothingNew: an answered message or
// command delivered again gets no typing, delta, notice or event: nothing
// at all once its final is marked published.
func TestRedeliveredAnsweredMessageShowsNothingNew(t *testing.T) {
	for _, text := range []string{"hello", "/help", "/status", "/stop", "/new"} {
		t.Run(text, func(t *testing.T) {
			h := newHarness(t, withResponder(gatedEcho("", nil)))
			d := h.send("m1", text)
			h.final("m1")
			waitAcked(t, h.bus, d)
			if !strings.HasPrefix(text, "/") {
				// A turn's turn_end event follows its acknowledgement:
				// the snapshot is taken once the turn published all.
				h.bus.WaitEventWhere(t, wait, func(e bus.Event) bool { return e.Type == bus.EventTurnEnd && e.InReplyTo == "m1" })
			}
			outs, evs := outboundsFor(h.bus, "m1")
			again := h.bus.Redeliver(d)
			waitAcked(t, h.bus, again)
			outs2, evs2 := outboundsFor(h.bus, "m1")
			if len(outs2) != len(outs) || len(evs2) != len(evs) {
				t.Errorf("redelivery published %d outbound and %d events for an answered message; want none", len(outs2)-len(outs), len(evs2)-len(evs))
			}
		})
	}
}

// TestRedeliveredUnpublishedReceiptReplaysOnlyTheFinal: a message whose
// receipt exists but was never marked published (crash after the commit)
// gets the stored final again and nothing else.
func TestRedeliveredUnpublishedReceiptReplaysOnlyTheFinal(t *testing.T) {
	h := newHarness(t, withResponder(gatedEcho("", nil)))
	in := bus.Inbound{V: bus.Version, ID: "m1", Channel: "console", ChatID: "c1", UserID: "u1", UserName: "Ann", Text: "hello"}
	stored := newOutbound(&in, bus.KindReply, "stored answer", 2, true)
	final, err := json.Marshal(stored)
	if err != nil {
		t.Fatal(err)
	}
	if err := h.mem.CommitTurn(t.Context(), memory.TurnRecord{Session: in.SessionKey(),
		Receipt: memory.Receipt{Key: in.DedupKey(), Final: final}}); err != nil {
		t.Fatal(err)
	}
	d := h.bus.Send(in)
	waitAcked(t, h.bus, d)
	outs, evs := outboundsFor(h.bus, "m1")
	if len(outs) != 1 || outs[0].ID != stored.ID || outs[0].Text != "stored answer" || len(evs) != 0 {
		t.Errorf("published for a message with a receipt: %+v, events %+v; want only the stored final", outs, evs)
	}
	if n := len(h.model.Requests()); n != 0 {
		t.Errorf("model called %d times for an answered message", n)
	}
}

// TestRedeliveredCopyWhileQueued: a second copy of a message delivered
// while the first waits behind a running turn is answered once: in collect
// mode the two copies are not collected into one turn twice.
func TestRedeliveredCopyWhileQueued(t *testing.T) {
	for _, mode := range []string{QueueCollect, QueueSequential} {
		t.Run(mode, func(t *testing.T) {
			gate := make(chan struct{})
			h := newHarness(t, withQueueMode(mode), withResponder(gatedEcho("please hold", gate)))
			h.send("hold", "please hold")
			h.model.WaitRequests(t, 1, wait)
			d := h.send("m2", "second")
			again := h.bus.Redeliver(d)
			close(gate)
			h.final("m2")
			waitAcked(t, h.bus, d)
			waitAcked(t, h.bus, again)
			outs, _ := outboundsFor(h.bus, "m2")
			finals := 0
			for _, o := range outs {
				if finals > 0 {
					t.Errorf("published after m2's final: %+v", o)
				}
				if o.Final {
					finals++
				}
			}
			if finals != 1 {
				t.Errorf("m2 got %d finals", finals)
			}
			n := 0
			for _, m := range h.history() {
				if m == "user|second" {
					n++
				}
			}
			if n != 1 {
				t.Errorf("history holds m2 %d times", n)
			}
		})
	}
}

// TestRedeliveredSteerNotAppliedTwice: a /steer delivered again while the
// turn it steered still runs is not offered to that turn a second time.
func TestRedeliveredSteerNotAppliedTwice(t *testing.T) {
	gate := make(chan struct{})
	h := newHarness(t, withResponder(gatedEcho("please hold", gate)))
	h.send("m1", "please hold")
	h.model.WaitRequests(t, 1, wait)
	d := h.send("s1", "/steer go left")
	if f := h.final("s1"); f.Kind != bus.KindNotice {
		t.Fatalf("/steer final = %+v", f)
	}
	waitAcked(t, h.bus, d)
	outs, _ := outboundsFor(h.bus, "s1")
	again := h.bus.Redeliver(d)
	waitAcked(t, h.bus, again)
	if outs2, _ := outboundsFor(h.bus, "s1"); len(outs2) != len(outs) {
		t.Errorf("redelivered /steer published %d more outbound messages", len(outs2)-len(outs))
	}
	close(gate)
	h.final("m1")
	reqs := h.model.WaitRequests(t, 2, wait)
	n := 0
	for _, m := range reqs[len(reqs)-1].Body.Messages {
		n += strings.Count(llmtest.MessageText(m), "go left")
	}
	if n != 1 {
		t.Errorf("the steering text reached the model %d times; want once", n)
	}
}

// failFinals is a publisher whose durable publishes of finals answering
// the messages in fail do not reach the bus (a crash between the commit and
// the publish, as the store sees it); failed receives one value per refusal.
type failFinals struct {
	*agenttest.Bus
	fail   map[string]bool
	failed chan string
}

func (f *failFinals) Publish(ctx context.Context, subject string, data []byte, msgID string) error {
	var o bus.Outbound
	if json.Unmarshal(data, &o) == nil && f.fail[o.InReplyTo] {
		f.failed <- o.InReplyTo
		return errors.New("bus gone")
	}
	return f.Bus.Publish(ctx, subject, data, msgID)
}

// TestCollectedReceiptsSurviveCrash: a collected turn is committed with
// every message's receipt; when its finals were not published (the daemon
// died after the commit), the batch delivered again to a new runtime over
// the reopened store is answered once each from the receipts, without a
// model call and without doubling the history.
func TestCollectedReceiptsSurviveCrash(t *testing.T) {
	path := filepath.Join(t.TempDir(), "history.db")
	open := func() *boltstore.Store {
		s, err := boltstore.Open(path, boltstore.Options{})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	st := open()
	gate := make(chan struct{})
	b1 := agenttest.NewBus()
	pub := &failFinals{Bus: b1, fail: map[string]bool{"c1": true, "c2": true, "c3": true}, failed: make(chan string, 8)}
	h := newHarness(t, withQueueMode(QueueCollect), withResponder(gatedEcho("please hold", gate)),
		func(hc *harnessConfig) { hc.store, hc.publisher, hc.bus = st, pub, b1 })
	h.send("hold", "please hold")
	h.model.WaitRequests(t, 1, wait)
	var ds []*agenttest.Delivery
	for i := 1; i <= 3; i++ {
		ds = append(ds, h.send(fmt.Sprintf("c%d", i), fmt.Sprintf("line %d", i)))
	}
	close(gate)
	h.final("hold")
	select {
	case <-pub.failed: // the collected turn is committed; its first final failed
	case <-time.After(wait):
		t.Fatal("the collected turn never tried to publish")
	}
	if n := len(h.model.Requests()); n != 2 {
		t.Fatalf("%d model calls; want 2 (hold, then c1..c3 together)", n)
	}
	h.stop()
	for _, d := range ds {
		if acked, _ := d.State(); acked {
			t.Fatal("a message whose final was not published was acknowledged")
		}
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}

	st2 := open()
	defer st2.Close()
	h2 := newHarness(t, withQueueMode(QueueCollect), withResponder(gatedEcho("", nil)),
		func(hc *harnessConfig) { hc.store = st2 })
	for _, d := range ds {
		h2.bus.Redeliver(d)
	}
	ids := []string{"c1", "c2", "c3"}
	waitAllFinals(t, h2.bus, ids)
	checkOneFinalEach(t, h2.bus, ids)
	finals := finalsByID(h2.bus)
	if f := finals["c3"][0]; f.Text != "re: line 3" {
		t.Errorf("c3's replayed final = %+v", f)
	}
	for _, id := range []string{"c1", "c2"} {
		if f := finals[id][0]; f.Meta[MetaAnsweredBy] != "c3" {
			t.Errorf("%s's replayed final = %+v", id, f)
		}
	}
	if n := len(h2.model.Requests()); n != 0 {
		t.Errorf("the new runtime called the model %d times for answered messages", n)
	}
	var users []string
	for _, m := range h2.history() {
		if text, ok := strings.CutPrefix(m, "user|"); ok {
			users = append(users, text)
		}
	}
	if got := strings.Join(users, ","); got != "please hold,line 1,line 2,line 3" {
		t.Errorf("history user messages = %q", got)
	}
}

// countObserver counts the queue measurements.
type countObserver struct {
	nopObserver
	redelivered, duplicates, collected atomic.Int64
}

func (c *countObserver) Redelivered(string)         { c.redelivered.Add(1) }
func (c *countObserver) DuplicateSuppressed(string) { c.duplicates.Add(1) }
func (c *countObserver) Collected(_ string, n int)  { c.collected.Add(int64(n)) }

// TestQueueMetrics: redeliveries, suppressed duplicates and collected
// messages reach the observer (the metrics package's counters).
func TestQueueMetrics(t *testing.T) {
	obs := &countObserver{}
	gate := make(chan struct{})
	h := newHarness(t, withQueueMode(QueueCollect), withResponder(gatedEcho("please hold", gate)),
		func(hc *harnessConfig) { hc.observer = obs })
	h.send("hold", "please hold")
	h.model.WaitRequests(t, 1, wait)
	for i := 1; i <= 3; i++ {
		h.send(fmt.Sprintf("c%d", i), fmt.Sprintf("line %d", i))
	}
	// All three wait behind the held turn before it ends, so the next turn
	// collects them all.
	// (Queueing publishes nothing on the bus: poll the manager, bounded.)
	for deadline := time.Now().Add(wait); h.mgr.Queued() != 3; {
		if time.Now().After(deadline) {
			close(gate)
			t.Fatalf("c1..c3 not queued behind the held turn within %s (queued %d)", wait, h.mgr.Queued())
		}
		runtime.Gosched()
	}
	close(gate)
	h.final("c3")
	first := h.send("m1", "hi")
	h.final("m1") // the session counted c1..c3 before it took m1
	if got := obs.collected.Load(); got != 3 {
		t.Errorf("collected = %d; want 3", got)
	}
	waitAcked(t, h.bus, first)
	waitAcked(t, h.bus, h.bus.Redeliver(first))
	if r, dup := obs.redelivered.Load(), obs.duplicates.Load(); r != 1 || dup != 1 {
		t.Errorf("redelivered = %d, duplicates suppressed = %d; want 1 and 1", r, dup)
	}
}

package bridge

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/switchboard-chat/switchboard/bus"
	"github.com/switchboard-chat/switchboard/bus/bustest"
)

// ready creates the client's durable consumer now, so that messages
// published afterwards are delivered (the consumer starts at "new").
func ready(t *testing.T, c *Client) {
	t.Helper()
	if _, err := c.setupConsumer(t.Context()); err != nil {
		t.Fatalf("setupConsumer: %v", err)
	}
}

func TestConsumeOrderPerConversation(t *testing.T) {
	e := newEnv(t)
	c := e.newClient(t, Options{})
	ready(t, c)

	convs := []struct{ chat, thread string }{{"a", ""}, {"b", ""}, {"a", "t1"}}
	const perConv = 20
	for i := range perConv {
		for j, cv := range convs {
			e.publishOut(t, out(fmt.Sprintf("%d-%d", j, i), cv.chat, cv.thread, fmt.Sprintf("in%d-%d", j, i), bus.KindReply, 1, true))
		}
	}

	rec := newRecorder()
	bDone := make(chan struct{})
	var inflight [3]atomic.Int32
	h := func(ctx context.Context, o bus.Outbound) error {
		var j, i int
		if _, err := fmt.Sscanf(o.ID, "%d-%d", &j, &i); err != nil {
			t.Errorf("unexpected id %q", o.ID)
			return nil
		}
		if n := inflight[j].Add(1); n != 1 {
			t.Errorf("%d concurrent handler calls for conversation %d", n, j)
		}
		defer inflight[j].Add(-1)
		if o.ID == "0-0" {
			// Hold conversation a until conversation b has finished: this
			// only completes if conversations run concurrently.
			select {
			case <-bDone:
			case <-time.After(waitTimeout):
				t.Error("conversation b made no progress while conversation a was blocked")
			}
		}
		rec.add(o)
		if o.ID == fmt.Sprintf("1-%d", perConv-1) {
			close(bDone)
		}
		return nil
	}
	run := startConsume(t, c, h)
	got := rec.waitN(t, perConv*len(convs))
	if err := run.stop(t); err != nil {
		t.Fatalf("ConsumeOutbound = %v, want nil after cancel", err)
	}

	next := make([]int, len(convs))
	for _, o := range got {
		var j, i int
		fmt.Sscanf(o.ID, "%d-%d", &j, &i)
		if i != next[j] {
			t.Fatalf("conversation %d: got message %d, want %d (order %v)", j, i, next[j], ids(got))
		}
		next[j]++
	}
	info := e.waitSettled(t, "bridge_tg")
	if info.Config.DeliverPolicy != jetstream.DeliverNewPolicy || info.Config.AckWait != AckWait ||
		info.Config.MaxAckPending != MaxAckPending || info.Config.FilterSubject != "chat.out.tg.>" || info.Config.AckPolicy != jetstream.AckExplicitPolicy {
		t.Errorf("consumer config = %+v", info.Config)
	}
}

func TestConsumeCoalescesDeltas(t *testing.T) {
	e := newEnv(t)
	c := e.newClient(t, Options{})
	const total = 9
	var received atomic.Int32
	allQueued := make(chan struct{})
	c.afterDispatch = func() {
		if received.Add(1) == total {
			close(allQueued)
		}
	}
	ready(t, c)

	e.publishOut(t, out("m0.9", "c1", "", "m0", bus.KindReply, 9, true))
	e.publishOut(t, out("m1.1", "c1", "", "m1", bus.KindTyping, 1, false))
	for s := 2; s <= 6; s++ {
		e.publishOut(t, out(fmt.Sprintf("m1.%d", s), "c1", "", "m1", bus.KindDelta, s, false))
	}
	e.publishOut(t, out("m1.7", "c1", "", "m1", bus.KindReply, 7, true))
	// A typing message of the next turn, superseded by nothing: handled.
	e.publishOut(t, out("m2.1", "c1", "", "m2", bus.KindTyping, 1, false))

	rec := newRecorder()
	h := func(ctx context.Context, o bus.Outbound) error {
		if o.ID == "m0.9" {
			waitClosed(t, allQueued, "every message to be queued")
		}
		rec.add(o)
		return nil
	}
	run := startConsume(t, c, h)
	rec.waitN(t, 3)
	if err := run.stop(t); err != nil {
		t.Fatal(err)
	}
	got := rec.all()

	// The protocol-level properties: no delta after a newer one or after
	// the final, the final last of its turn.
	lastSeq, finalSeen := 0, false
	for _, o := range got {
		if o.InReplyTo != "m1" {
			continue
		}
		if finalSeen {
			t.Errorf("%s handled after the final of m1", o.ID)
		}
		if o.Seq <= lastSeq {
			t.Errorf("%s (seq %d) handled after seq %d", o.ID, o.Seq, lastSeq)
		}
		lastSeq, finalSeen = o.Seq, o.Final
	}
	if !finalSeen {
		t.Errorf("the final of m1 was not handled: %v", ids(got))
	}
	// Everything was queued behind m0.9, so every typing and delta of m1
	// was superseded by its final.
	if want := "m0.9 m1.7 m2.1"; strings.Join(ids(got), " ") != want {
		t.Errorf("handled %v, want %s", ids(got), want)
	}
	e.waitSettled(t, "bridge_tg") // skipped messages acked
}

func TestSuperseded(t *testing.T) {
	q := func(outs ...bus.Outbound) []*item {
		items := make([]*item, len(outs))
		for i := range outs {
			items[i] = &item{out: outs[i]}
		}
		return items
	}
	delta := func(irt string, seq int) bus.Outbound { return out("d", "c", "", irt, bus.KindDelta, seq, false) }
	typing := func(irt string) bus.Outbound { return out("t", "c", "", irt, bus.KindTyping, 1, false) }
	final := func(irt string) bus.Outbound { return out("f", "c", "", irt, bus.KindReply, 9, true) }
	notice := func(irt string) bus.Outbound { return out("n", "c", "", irt, bus.KindNotice, 5, false) }
	tests := []struct {
		name string
		q    []*item
		want bool
	}{
		{"delta alone", q(delta("a", 1)), false},
		{"delta then newer delta", q(delta("a", 1), delta("a", 2)), true},
		{"delta then final", q(delta("a", 1), notice("b"), final("a")), true},
		{"delta then other turn", q(delta("a", 1), delta("b", 2), final("b")), false},
		{"delta then non-final notice", q(delta("a", 1), notice("a")), false},
		{"typing then typing", q(typing("a"), typing("a")), true},
		{"typing then delta", q(typing("a"), delta("a", 2)), true},
		{"typing then final", q(typing("a"), final("a")), true},
		{"typing alone", q(typing("a")), false},
		{"proactive delta", q(delta("", 1), delta("", 2)), false},
		{"final delta never skipped", q(bus.Outbound{Kind: bus.KindDelta, InReplyTo: "a", Final: true}, final("a")), false},
		{"reply never skipped", q(out("r", "c", "", "a", bus.KindReply, 1, false), final("a")), false},
		{"notice never skipped", q(notice("a"), final("a")), false},
		{"error never skipped", q(out("e", "c", "", "a", bus.KindError, 1, false), final("a")), false},
	}
	for _, tt := range tests {
		if got := superseded(tt.q); got != tt.want {
			t.Errorf("%s: superseded = %v, want %v", tt.name, got, tt.want)
		}
	}
}

func TestConsumeRetriesInOrder(t *testing.T) {
	e := newEnv(t)
	var mu sync.Mutex
	var attempts []int
	c := e.newClient(t, Options{Backoff: func(a int) time.Duration {
		mu.Lock()
		attempts = append(attempts, a)
		mu.Unlock()
		return time.Millisecond
	}})
	ready(t, c)
	e.publishOut(t, out("r1", "c1", "", "i1", bus.KindReply, 1, true))
	e.publishOut(t, out("r2", "c1", "", "i2", bus.KindReply, 1, true))

	rec := newRecorder()
	failures := 2
	h := func(ctx context.Context, o bus.Outbound) error {
		rec.add(o)
		mu.Lock()
		defer mu.Unlock()
		if o.ID == "r1" && failures > 0 {
			failures--
			return errors.New("telegram: 502 Bad Gateway")
		}
		return nil
	}
	run := startConsume(t, c, h)
	rec.waitN(t, 4)
	if err := run.stop(t); err != nil {
		t.Fatal(err)
	}
	if got, want := strings.Join(ids(rec.all()), " "), "r1 r1 r1 r2"; got != want {
		t.Errorf("handler calls = %s, want %s", got, want)
	}
	mu.Lock()
	defer mu.Unlock()
	if fmt.Sprint(attempts) != "[1 2]" {
		t.Errorf("backoff attempts = %v, want [1 2]", attempts)
	}
	e.waitSettled(t, "bridge_tg")
}

func TestConsumePermanentErrorAcks(t *testing.T) {
	e := newEnv(t)
	c := e.newClient(t, Options{})
	ready(t, c)
	e.publishOut(t, out("p1", "gone", "", "i1", bus.KindReply, 1, true))
	e.publishOut(t, out("p2", "gone", "", "i2", bus.KindReply, 1, true))

	rec := newRecorder()
	h := func(ctx context.Context, o bus.Outbound) error {
		rec.add(o)
		if o.ID == "p1" {
			return fmt.Errorf("telegram: send: %w", Permanent(errors.New("chat not found")))
		}
		return nil
	}
	run := startConsume(t, c, h)
	rec.waitN(t, 2)
	if err := run.stop(t); err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(ids(rec.all()), " "); got != "p1 p2" {
		t.Errorf("handler calls = %s, want p1 p2 (no retry)", got)
	}
	e.waitSettled(t, "bridge_tg")
}

func TestConsumeTerminatesInvalid(t *testing.T) {
	e := newEnv(t)
	c := e.newClient(t, Options{})
	ready(t, c)
	subj := e.subj.Out("tg", "c1")
	e.publishRaw(t, subj, []byte("not json"))
	e.publishRaw(t, subj, []byte(`[1,2]`))
	bad := out("x1", "c1", "", "i", "bogus", 1, true)
	e.publishOut(t, bad)
	v2 := out("x2", "c1", "", "i", bus.KindReply, 1, true)
	v2.V = 2
	e.publishOut(t, v2)
	other := out("x3", "c1", "", "i", bus.KindReply, 1, true)
	other.Channel = "slack"
	e.publishRaw(t, subj, mustJSON(t, other))
	wrongChat := out("x4", "c2", "", "i", bus.KindReply, 1, true)
	e.publishRaw(t, subj, mustJSON(t, wrongChat))
	e.publishOut(t, out("ok", "c1", "", "i", bus.KindReply, 1, true))

	rec := newRecorder()
	run := startConsume(t, c, func(ctx context.Context, o bus.Outbound) error { rec.add(o); return nil })
	rec.waitN(t, 1)
	if err := run.stop(t); err != nil {
		t.Fatal(err)
	}
	if got := ids(rec.all()); len(got) != 1 || got[0] != "ok" {
		t.Errorf("handler saw %v, want only the valid message", got)
	}
	e.waitSettled(t, "bridge_tg") // invalid messages terminated
}

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	data, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

func TestConsumeResumesAndNewDurableStartsAtNew(t *testing.T) {
	e := newEnv(t)
	c := e.newClient(t, Options{})
	rec := newRecorder()
	h := func(ctx context.Context, o bus.Outbound) error { rec.add(o); return nil }

	ready(t, c)
	e.publishOut(t, out("o1", "c1", "", "i1", bus.KindReply, 1, true))
	run := startConsume(t, c, h)
	rec.waitN(t, 1)
	if err := run.stop(t); err != nil {
		t.Fatal(err)
	}

	// Published while no consumer runs.
	e.publishOut(t, out("o2", "c1", "", "i2", bus.KindReply, 1, true))
	e.publishOut(t, out("o3", "c2", "", "i3", bus.KindNotice, 1, true))

	run = startConsume(t, c, h)
	rec.waitN(t, 3)
	if err := run.stop(t); err != nil {
		t.Fatal(err)
	}
	got := ids(rec.all())
	slices.Sort(got) // o2 and o3 are different conversations: any order
	if strings.Join(got, " ") != "o1 o2 o3" {
		t.Errorf("handled %v, want o1 o2 o3 once each (resume after restart, no replay)", got)
	}

	// A new durable does not replay o1..o3.
	c2 := e.newClient(t, Options{Durable: "late"})
	ready(t, c2)
	e.publishOut(t, out("o4", "c1", "", "i4", bus.KindReply, 1, true))
	rec2 := newRecorder()
	run2 := startConsume(t, c2, func(ctx context.Context, o bus.Outbound) error { rec2.add(o); return nil })
	rec2.waitN(t, 1)
	if err := run2.stop(t); err != nil {
		t.Fatal(err)
	}
	// o1..o3 precede o4 in the stream and share its conversation or come
	// first, so had they been delivered they would have been handled first.
	if got := strings.Join(ids(rec2.all()), " "); got != "o4" {
		t.Errorf("new durable handled %s, want only o4", got)
	}
}

func TestConsumeReleasesUnhandledOnStop(t *testing.T) {
	e := newEnv(t)
	c := e.newClient(t, Options{})
	ready(t, c)
	const n = 12
	var want []string
	for i := range n {
		id := fmt.Sprintf("h%02d", i)
		want = append(want, id)
		e.publishOut(t, out(id, "c1", "", "i"+id, bus.KindReply, 1, true))
	}
	e.publishOut(t, out("other", "c2", "", "io", bus.KindReply, 1, true))

	var received atomic.Int32
	allQueued := make(chan struct{})
	c.afterDispatch = func() {
		if received.Add(1) == n+1 {
			close(allQueued)
		}
	}
	started := make(chan struct{})
	var once sync.Once
	run := startConsume(t, c, func(ctx context.Context, o bus.Outbound) error {
		if o.ChatID == "c2" {
			return nil
		}
		once.Do(func() { close(started) })
		<-ctx.Done()
		return ctx.Err()
	})
	waitClosed(t, started, "the first handler call")
	waitClosed(t, allQueued, "every message to be queued")
	if err := run.stop(t); err != nil {
		t.Fatal(err)
	}

	// Released with Nak, all come back at once (not after AckWait, which is
	// longer than the test's wait) and are handled in stream order.
	c.afterDispatch = nil
	rec := newRecorder()
	run = startConsume(t, c, func(ctx context.Context, o bus.Outbound) error {
		if o.ChatID == "c1" { // "other" may come again if run 1 had not handled it yet
			rec.add(o)
		}
		return nil
	})
	rec.waitN(t, n)
	if err := run.stop(t); err != nil {
		t.Fatal(err)
	}
	if got := ids(rec.all()); !slices.Equal(got, want) {
		t.Errorf("after restart handled %v, want %v", got, want)
	}
}

func TestConsumeHeartbeatPreventsRedelivery(t *testing.T) {
	e := newEnv(t)
	c := e.newClient(t, Options{})
	c.ackWait, c.heartbeat = 500*time.Millisecond, 50*time.Millisecond
	var received atomic.Int32
	c.afterDispatch = func() { received.Add(1) }
	ready(t, c)
	e.publishOut(t, out("k1", "c1", "", "i1", bus.KindReply, 1, true))
	e.publishOut(t, out("k2", "c1", "", "i2", bus.KindReply, 1, true))

	rec := newRecorder()
	run := startConsume(t, c, func(ctx context.Context, o bus.Outbound) error {
		if o.ID == "k1" {
			// Hold k1 (and k2 queued behind it) for several ack waits.
			timer := time.NewTimer(3 * c.ackWait)
			defer timer.Stop()
			select {
			case <-timer.C:
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		rec.add(o)
		return nil
	})
	rec.waitN(t, 2)
	if err := run.stop(t); err != nil {
		t.Fatal(err)
	}
	if n := received.Load(); n != 2 {
		t.Errorf("received %d deliveries for 2 messages; in-progress signals did not prevent redelivery", n)
	}
}

func TestConsumeRedeliveryOfHeldMessageIsDeduplicated(t *testing.T) {
	e := newEnv(t)
	c := e.newClient(t, Options{})
	// No heartbeat within the test: the server redelivers what we hold.
	c.ackWait, c.heartbeat = 200*time.Millisecond, time.Hour
	var received atomic.Int32
	redelivered := make(chan struct{})
	c.afterDispatch = func() {
		if received.Add(1) == 4 {
			close(redelivered)
		}
	}
	ready(t, c)
	e.publishOut(t, out("k1", "c1", "", "i1", bus.KindReply, 1, true))
	e.publishOut(t, out("k2", "c1", "", "i2", bus.KindReply, 1, true))

	rec := newRecorder()
	run := startConsume(t, c, func(ctx context.Context, o bus.Outbound) error {
		if o.ID == "k1" {
			waitClosed(t, redelivered, "the server to redeliver both held messages")
		}
		rec.add(o)
		return nil
	})
	rec.waitN(t, 2)
	if err := run.stop(t); err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(ids(rec.all()), " "); got != "k1 k2" {
		t.Errorf("handled %s, want k1 k2 once each", got)
	}
	// Acknowledged through the latest delivery, so nothing is left pending.
	e.waitSettled(t, "bridge_tg")
}

func TestConsumeBoundsWorkers(t *testing.T) {
	e := newEnv(t)
	c := e.newClient(t, Options{MaxWorkers: 2})
	ready(t, c)
	for i := range 5 {
		e.publishOut(t, out(fmt.Sprintf("w%d", i), fmt.Sprintf("chat%d", i), "", "i", bus.KindReply, 1, true))
	}
	var inflight, peak atomic.Int32
	both := make(chan struct{})
	var bothOnce sync.Once
	rec := newRecorder()
	run := startConsume(t, c, func(ctx context.Context, o bus.Outbound) error {
		n := inflight.Add(1)
		defer inflight.Add(-1)
		for {
			p := peak.Load()
			if n <= p || peak.CompareAndSwap(p, n) {
				break
			}
		}
		if n == 2 {
			bothOnce.Do(func() { close(both) })
		}
		waitClosed(t, both, "two conversations in flight at once")
		rec.add(o)
		return nil
	})
	rec.waitN(t, 5)
	if err := run.stop(t); err != nil {
		t.Fatal(err)
	}
	if p := peak.Load(); p != 2 {
		t.Errorf("peak concurrent handlers = %d, want 2 (MaxWorkers)", p)
	}
}

func TestConsumeAlreadyConsuming(t *testing.T) {
	e := newEnv(t)
	c := e.newClient(t, Options{})
	ready(t, c)
	e.publishOut(t, out("a1", "c1", "", "i1", bus.KindReply, 1, true))
	rec := newRecorder()
	h := func(ctx context.Context, o bus.Outbound) error { rec.add(o); return nil }
	run := startConsume(t, c, h)
	rec.waitN(t, 1)
	if err := c.ConsumeOutbound(t.Context(), h); err == nil || !strings.Contains(err.Error(), "already consuming") {
		t.Errorf("second ConsumeOutbound = %v, want already consuming", err)
	}
	if err := run.stop(t); err != nil {
		t.Fatal(err)
	}
	if err := c.ConsumeOutbound(t.Context(), nil); err == nil {
		t.Error("ConsumeOutbound(nil handler) succeeded")
	}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if err := c.ConsumeOutbound(ctx, h); err != nil {
		t.Errorf("ConsumeOutbound with a cancelled context = %v, want nil", err)
	}
}

func TestConsumeStopsWhenConsumerDeleted(t *testing.T) {
	e := newEnv(t)
	c := e.newClient(t, Options{})
	ready(t, c)
	e.publishOut(t, out("d1", "c1", "", "i1", bus.KindReply, 1, true))
	rec := newRecorder()
	run := startConsume(t, c, func(ctx context.Context, o bus.Outbound) error { rec.add(o); return nil })
	rec.waitN(t, 1)
	if err := e.js.DeleteConsumer(t.Context(), "CHAT_OUT", "bridge_tg"); err != nil {
		t.Fatal(err)
	}
	if err := run.waitDone(t); err == nil || !strings.Contains(err.Error(), "consumer stopped") {
		t.Errorf("ConsumeOutbound after the consumer was deleted = %v, want consumer stopped", err)
	}
}

func TestConsumeNoStream(t *testing.T) {
	e := newEnv(t)
	c := e.newClient(t, Options{SubjectPrefix: "acme.bot"})
	err := c.ConsumeOutbound(t.Context(), func(context.Context, bus.Outbound) error { return nil })
	if err == nil || !strings.Contains(err.Error(), "ACME_BOT_OUT not found") {
		t.Errorf("ConsumeOutbound without stream = %v, want stream not found", err)
	}
}

func TestConsumeUpdatesExistingConsumer(t *testing.T) {
	e := newEnv(t)
	// As created by the docs' `nats consumer add ... --deliver new --defaults`.
	e.publishOut(t, out("old", "c1", "", "i0", bus.KindReply, 1, true))
	if _, err := e.js.CreateConsumer(t.Context(), "CHAT_OUT", jetstream.ConsumerConfig{
		Durable: "wechat-bridge", FilterSubject: "chat.out.tg.>", DeliverPolicy: jetstream.DeliverNewPolicy,
		AckPolicy: jetstream.AckExplicitPolicy, AckWait: 30 * time.Second,
	}); err != nil {
		t.Fatal(err)
	}
	e.publishOut(t, out("new", "c1", "", "i1", bus.KindReply, 1, true))
	c := e.newClient(t, Options{Durable: "wechat-bridge"})
	rec := newRecorder()
	run := startConsume(t, c, func(ctx context.Context, o bus.Outbound) error { rec.add(o); return nil })
	rec.waitN(t, 1)
	if err := run.stop(t); err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(ids(rec.all()), " "); got != "new" {
		t.Errorf("handled %s, want new (start position kept)", got)
	}
	info := e.consumerInfo(t, "wechat-bridge")
	if info.Config.AckWait != AckWait || info.Config.MaxAckPending != MaxAckPending || info.Config.DeliverPolicy != jetstream.DeliverNewPolicy {
		t.Errorf("consumer not updated: %+v", info.Config)
	}
}

func TestConsumePushConsumerRejected(t *testing.T) {
	e := newEnv(t)
	if _, err := e.js.CreateOrUpdatePushConsumer(t.Context(), "CHAT_OUT", jetstream.ConsumerConfig{
		Durable: "pushy", DeliverSubject: "deliver.here", FilterSubject: "chat.out.tg.>", AckPolicy: jetstream.AckExplicitPolicy,
	}); err != nil {
		t.Fatal(err)
	}
	c := e.newClient(t, Options{Durable: "pushy"})
	err := c.ConsumeOutbound(t.Context(), func(context.Context, bus.Outbound) error { return nil })
	if err == nil || !strings.Contains(err.Error(), "push consumer") {
		t.Errorf("ConsumeOutbound on a push consumer = %v", err)
	}
}

func TestConsumeStopsWhenConnectionCloses(t *testing.T) {
	e := newEnv(t)
	nc := bustest.Connect(t, e.s)
	c, err := New(nc, Options{Channel: "tg"})
	if err != nil {
		t.Fatal(err)
	}
	ready(t, c)
	e.publishOut(t, out("n1", "c1", "", "i1", bus.KindReply, 1, true))
	rec := newRecorder()
	run := startConsume(t, c, func(ctx context.Context, o bus.Outbound) error { rec.add(o); return nil })
	rec.waitN(t, 1)
	nc.Close()
	if err := run.waitDone(t); err == nil || !strings.Contains(err.Error(), "consumer stopped") {
		t.Errorf("ConsumeOutbound after the connection closed = %v, want consumer stopped", err)
	}
}

func TestConsumeHoldEndsWithoutRedeliveries(t *testing.T) {
	e := newEnv(t)
	c := e.newClient(t, Options{})
	c.holdMax = 100 * time.Millisecond
	ready(t, c)
	// A crashed process received m1 and neither acknowledged nor released
	// it: the server redelivers it only after AckWait (60 s).
	e.publishOut(t, out("m1", "c1", "", "i1", bus.KindReply, 1, true))
	cons, err := e.js.Consumer(t.Context(), "CHAT_OUT", "bridge_tg")
	if err != nil {
		t.Fatal(err)
	}
	batch, err := cons.Fetch(1)
	if err != nil {
		t.Fatal(err)
	}
	for range batch.Messages() {
	}
	if err := batch.Error(); err != nil {
		t.Fatal(err)
	}
	e.publishOut(t, out("m2", "c2", "", "i2", bus.KindReply, 1, true))

	rec := newRecorder()
	run := startConsume(t, c, func(ctx context.Context, o bus.Outbound) error { rec.add(o); return nil })
	if got := rec.waitN(t, 1); got[0].ID != "m2" {
		t.Errorf("handled %v first, want m2 once the hold timed out", ids(got))
	}
	if err := run.stop(t); err != nil {
		t.Fatal(err)
	}
}

package natsbus_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/goleak"

	"github.com/switchboard-chat/switchboard/bus"
	"github.com/switchboard-chat/switchboard/bus/bustest"
	"github.com/switchboard-chat/switchboard/bus/natsbus"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const wait = 10 * time.Second // well below AckWait (30 s)

func inProcessConfig() natsbus.Config {
	cfg := natsbus.DefaultConfig()
	cfg.Listen = ""
	return cfg
}

func open(t testing.TB, cfg natsbus.Config, dir string) *natsbus.Bus {
	t.Helper()
	b, err := natsbus.Open(t.Context(), cfg, dir, nil)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { _ = b.Close() })
	return b
}

func inbound(id, text string) bus.Inbound {
	return bus.Inbound{V: 1, ID: id, Channel: "console", ChatID: "demo", UserID: "me", Text: text}
}

func publishInbound(t testing.TB, b *natsbus.Bus, in bus.Inbound) {
	t.Helper()
	bustest.PublishInbound(t, b.Conn(), b.Subjects(), in)
}

// consumer runs Bus.Consume in a goroutine and hands deliveries to the test.
type consumer struct {
	ch     chan bus.Delivery
	cancel context.CancelFunc
	done   chan error
}

func startConsume(t testing.TB, b *natsbus.Bus) *consumer {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	c := &consumer{ch: make(chan bus.Delivery, 4096), cancel: cancel, done: make(chan error, 1)}
	go func() {
		c.done <- b.Consume(ctx, func(d bus.Delivery) {
			select {
			case c.ch <- d:
			default:
				panic("test consumer buffer full")
			}
		})
	}()
	t.Cleanup(func() { c.stop(t) })
	return c
}

// stop cancels Consume and returns its result (once; later calls return nil).
func (c *consumer) stop(t testing.TB) error {
	t.Helper()
	c.cancel()
	select {
	case err, ok := <-c.done:
		if ok {
			close(c.done)
		}
		return err
	case <-time.After(wait):
		t.Fatalf("Consume did not return after cancel")
		return nil
	}
}

func (c *consumer) next(t testing.TB) bus.Delivery {
	t.Helper()
	select {
	case d := <-c.ch:
		return d
	case err := <-c.done:
		t.Fatalf("Consume returned early: %v", err)
	case <-time.After(wait):
		t.Fatalf("no delivery within %s", wait)
	}
	return nil
}

func decode(t testing.TB, b *natsbus.Bus, d bus.Delivery) *bus.Inbound {
	t.Helper()
	in, err := bus.ParseInbound(b.Subjects(), d.Subject(), d.Data(), 0)
	if err != nil {
		t.Fatalf("ParseInbound: %v", err)
	}
	return in
}

func doubleAck(t testing.TB, d bus.Delivery) {
	t.Helper()
	if err := d.(interface {
		DoubleAck(context.Context) error
	}).DoubleAck(t.Context()); err != nil {
		t.Fatalf("DoubleAck: %v", err)
	}
}

func streamMsgs(t testing.TB, b *natsbus.Bus, name string) uint64 {
	t.Helper()
	s, err := b.JetStream().Stream(t.Context(), name)
	if err != nil {
		t.Fatalf("stream %s: %v", name, err)
	}
	return s.CachedInfo().State.Msgs
}

func TestOpenCreatesStreams(t *testing.T) {
	b := open(t, inProcessConfig(), t.TempDir())
	if !b.Embedded() || b.ClientURL() != "" {
		t.Errorf("Embedded() = %v, ClientURL() = %q, want true, \"\"", b.Embedded(), b.ClientURL())
	}
	if got := b.Streams(); got != (natsbus.Streams{In: "CHAT_IN", Out: "CHAT_OUT", DLQ: "CHAT_DLQ"}) {
		t.Errorf("Streams() = %+v", got)
	}
	if err := b.Ready(t.Context()); err != nil {
		t.Fatalf("Ready: %v", err)
	}
	type want struct {
		subject   string
		retention jetstream.RetentionPolicy
		maxAge    time.Duration
		perSubj   int64
		maxMsgs   int64
		maxBytes  int64
		discard   jetstream.DiscardPolicy
		newPer    bool
		dupWindow time.Duration
	}
	for name, w := range map[string]want{
		"CHAT_IN":  {"chat.in.>", jetstream.WorkQueuePolicy, 0, 1000, -1, 1 << 30, jetstream.DiscardNew, true, 2 * time.Minute},
		"CHAT_OUT": {"chat.out.>", jetstream.LimitsPolicy, 24 * time.Hour, 1000, -1, -1, jetstream.DiscardOld, false, 24 * time.Hour},
		"CHAT_DLQ": {"chat.dlq.>", jetstream.LimitsPolicy, 7 * 24 * time.Hour, 10000, 100000, -1, jetstream.DiscardOld, false, 2 * time.Minute},
	} {
		s, err := b.JetStream().Stream(t.Context(), name)
		if err != nil {
			t.Fatalf("stream %s: %v", name, err)
		}
		c := s.CachedInfo().Config
		if len(c.Subjects) != 1 || c.Subjects[0] != w.subject || c.Retention != w.retention ||
			c.Storage != jetstream.FileStorage || c.Discard != w.discard || c.DiscardNewPerSubject != w.newPer ||
			c.MaxAge != w.maxAge || c.MaxMsgsPerSubject != w.perSubj || c.MaxMsgs != w.maxMsgs || c.MaxBytes != w.maxBytes ||
			c.Duplicates != w.dupWindow {
			t.Errorf("stream %s config = %+v", name, c)
		}
	}
}

func TestOpenTwiceOnSameStore(t *testing.T) {
	dir := t.TempDir()
	b := open(t, inProcessConfig(), dir)
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	// Streams exist now: CreateOrUpdateStream updates them in place.
	b2 := open(t, inProcessConfig(), dir)
	if err := b2.Ready(t.Context()); err != nil {
		t.Fatalf("Ready after reopen: %v", err)
	}
}

func TestCustomPrefix(t *testing.T) {
	cfg := inProcessConfig()
	cfg.SubjectPrefix = "acme.bot"
	b := open(t, cfg, t.TempDir())
	if got := b.Streams(); got != (natsbus.Streams{In: "ACME_BOT_IN", Out: "ACME_BOT_OUT", DLQ: "ACME_BOT_DLQ"}) {
		t.Errorf("Streams() = %+v", got)
	}
	if got := b.Subjects().In("console", "demo"); got != "acme.bot.in.console.demo" {
		t.Errorf("In = %q", got)
	}
	c := startConsume(t, b)
	publishInbound(t, b, inbound("m1", "hi"))
	d := c.next(t)
	if d.Subject() != "acme.bot.in.console.demo" {
		t.Errorf("subject = %q", d.Subject())
	}
	doubleAck(t, d)
}

func TestOpenRejectsBadInput(t *testing.T) {
	closedPort := func() string {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := ln.Addr().String()
		ln.Close()
		return addr
	}
	tests := []struct {
		name     string
		cfg      natsbus.Config
		dir      string
		wantText []string
	}{
		{"bad config", natsbus.Config{SubjectPrefix: "bad prefix", MaxTextBytes: 0, Listen: "nope"}, "x",
			[]string{"bus.subject_prefix", "bus.max_text_bytes", "bus.listen"}},
		{"bad port", natsbus.Config{SubjectPrefix: "chat", MaxTextBytes: 10, Listen: "127.0.0.1:http"}, "x",
			[]string{"bus.listen", "port"}},
		{"embedded without store", inProcessConfig(), "", []string{"store directory"}},
		{"external unreachable", natsbus.Config{URL: "nats://" + closedPort(), SubjectPrefix: "chat", MaxTextBytes: 10, Replicas: 1}, "",
			[]string{"connect"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b, err := natsbus.Open(t.Context(), tt.cfg, tt.dir, nil)
			if err == nil {
				b.Close()
				t.Fatal("Open succeeded, want error")
			}
			for _, s := range tt.wantText {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("error %q does not mention %q", err, s)
				}
			}
		})
	}
}

func TestOpenCancelledContext(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	b, err := natsbus.Open(ctx, inProcessConfig(), t.TempDir(), nil)
	if err == nil {
		b.Close()
		t.Fatal("Open with a cancelled context succeeded")
	}
	if !errors.Is(err, context.Canceled) {
		t.Errorf("error = %v, want context.Canceled", err)
	}
	// goleak (TestMain) checks that the server and connection were released.
}

func TestListenPortInUse(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	cfg := natsbus.DefaultConfig()
	cfg.Listen = ln.Addr().String()
	b, err := natsbus.Open(t.Context(), cfg, t.TempDir(), nil)
	if err == nil {
		b.Close()
		t.Fatal("Open on a busy port succeeded")
	}
	if !strings.Contains(err.Error(), "cannot listen on "+cfg.Listen) {
		t.Errorf("error = %v", err)
	}
}

func TestPublishConsumeRoundTrip(t *testing.T) {
	b := open(t, inProcessConfig(), t.TempDir())
	c := startConsume(t, b)
	for i := range 3 {
		publishInbound(t, b, inbound(fmt.Sprint("m", i), fmt.Sprint("hello ", i)))
	}
	for i := range 3 {
		d := c.next(t)
		in := decode(t, b, d)
		if in.ID != fmt.Sprint("m", i) || in.Text != fmt.Sprint("hello ", i) {
			t.Errorf("delivery %d = %+v, want m%d in order", i, in, i)
		}
		if err := d.InProgress(); err != nil {
			t.Errorf("InProgress: %v", err)
		}
		doubleAck(t, d)
	}
	if n := streamMsgs(t, b, "CHAT_IN"); n != 0 {
		t.Errorf("CHAT_IN holds %d messages after acks, want 0 (work queue)", n)
	}
	if err := c.stop(t); err != nil {
		t.Errorf("Consume returned %v after cancel, want nil", err)
	}
}

func TestPublishDeduplicates(t *testing.T) {
	b := open(t, inProcessConfig(), t.TempDir())
	subject := b.Subjects().Out("console", "demo")
	for range 3 {
		if err := b.Publish(t.Context(), subject, []byte(`{"v":1}`), "out-1"); err != nil {
			t.Fatalf("Publish: %v", err)
		}
	}
	if err := b.Publish(t.Context(), subject, []byte(`{"v":1}`), "out-2"); err != nil {
		t.Fatalf("Publish: %v", err)
	}
	if n := streamMsgs(t, b, "CHAT_OUT"); n != 2 {
		t.Errorf("CHAT_OUT holds %d messages, want 2", n)
	}
	// Without a msg id there is no de-duplication.
	for range 2 {
		if err := b.Publish(t.Context(), subject, []byte(`{}`), ""); err != nil {
			t.Fatal(err)
		}
	}
	if n := streamMsgs(t, b, "CHAT_OUT"); n != 4 {
		t.Errorf("CHAT_OUT holds %d messages, want 4", n)
	}
}

func TestPublishUncapturedSubjectFails(t *testing.T) {
	b := open(t, inProcessConfig(), t.TempDir())
	if err := b.Publish(t.Context(), "nowhere.at.all", []byte("x"), ""); err == nil || !strings.Contains(err.Error(), "nowhere.at.all") {
		t.Fatalf("Publish to an uncaptured subject = %v, want an error naming it", err)
	}
}

func TestRedeliveryAfterReopen(t *testing.T) {
	dir := t.TempDir()
	cfg := inProcessConfig()

	b1, err := natsbus.Open(t.Context(), cfg, dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	c1 := startConsume(t, b1)
	publishInbound(t, b1, inbound("unacked", "one"))
	publishInbound(t, b1, inbound("acked", "two"))
	if in := decode(t, b1, c1.next(t)); in.ID != "unacked" { // received, never acked
		t.Fatalf("first delivery = %s", in.ID)
	}
	d := c1.next(t)
	if in := decode(t, b1, d); in.ID != "acked" {
		t.Fatalf("second delivery = %s", in.ID)
	}
	doubleAck(t, d)
	if err := c1.stop(t); err != nil {
		t.Fatal(err)
	}
	if err := b1.Close(); err != nil {
		t.Fatal(err)
	}

	// A new process on the same store: the unacked message comes back at
	// once (the wait is a third of AckWait), the acked one never does.
	b2 := open(t, cfg, dir)
	c2 := startConsume(t, b2)
	d = c2.next(t)
	if in := decode(t, b2, d); in.ID != "unacked" {
		t.Fatalf("first delivery after reopen = %s, want unacked", in.ID)
	}
	doubleAck(t, d)
	publishInbound(t, b2, inbound("marker", "three"))
	// Deliveries follow stream order, so had "acked" been redelivered it
	// would come before the marker.
	d = c2.next(t)
	if in := decode(t, b2, d); in.ID != "marker" {
		t.Fatalf("delivery after reopen = %s, want marker", in.ID)
	}
	doubleAck(t, d)
}

func TestCorePublishCapturedByInStream(t *testing.T) {
	b := open(t, inProcessConfig(), t.TempDir())
	c := startConsume(t, b)
	// A bridge publishing with plain core NATS, no headers.
	data := []byte(`{"v":1,"id":"c1","channel":"console","chat_id":"demo","user_id":"me","text":"core"}`)
	if err := b.PublishCore(b.Subjects().In("console", "demo"), data); err != nil {
		t.Fatal(err)
	}
	d := c.next(t)
	if in := decode(t, b, d); in.ID != "c1" || in.Text != "core" {
		t.Errorf("delivery = %+v", in)
	}
	doubleAck(t, d)
}

func TestTermRemovesMessage(t *testing.T) {
	b := open(t, inProcessConfig(), t.TempDir())
	c := startConsume(t, b)
	if err := b.PublishCore(b.Subjects().In("console", "demo"), []byte("garbage")); err != nil {
		t.Fatal(err)
	}
	d := c.next(t)
	if err := d.Term(); err != nil {
		t.Fatal(err)
	}
	// Terminated messages are gone: the next delivery is the next message.
	publishInbound(t, b, inbound("after", "x"))
	if in := decode(t, b, c.next(t)); in.ID != "after" {
		t.Fatalf("delivery = %s, want after", in.ID)
	}
}

func TestReadyAndClose(t *testing.T) {
	b, err := natsbus.Open(t.Context(), inProcessConfig(), t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Ready(t.Context()); err != nil {
		t.Fatalf("Ready: %v", err)
	}
	if err := b.JetStream().DeleteStream(t.Context(), "CHAT_OUT"); err != nil {
		t.Fatal(err)
	}
	if err := b.Ready(t.Context()); err == nil || !strings.Contains(err.Error(), "CHAT_OUT") {
		t.Errorf("Ready without CHAT_OUT = %v, want an error naming it", err)
	}

	var wg sync.WaitGroup
	for range 3 {
		wg.Go(func() {
			if err := b.Close(); err != nil {
				t.Errorf("Close: %v", err)
			}
		})
	}
	wg.Wait()
	if err := b.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	if err := b.Ready(t.Context()); !errors.Is(err, natsbus.ErrClosed) {
		t.Errorf("Ready after Close = %v, want ErrClosed", err)
	}
	if err := b.Publish(t.Context(), "chat.out.x.y", nil, ""); !errors.Is(err, natsbus.ErrClosed) {
		t.Errorf("Publish after Close = %v, want ErrClosed", err)
	}
	if err := b.PublishCore("chat.out.x.y", nil); !errors.Is(err, natsbus.ErrClosed) {
		t.Errorf("PublishCore after Close = %v, want ErrClosed", err)
	}
	if err := b.Consume(t.Context(), func(bus.Delivery) {}); !errors.Is(err, natsbus.ErrClosed) {
		t.Errorf("Consume after Close = %v, want ErrClosed", err)
	}
}

func TestConsumeEndsWhenBusCloses(t *testing.T) {
	b, err := natsbus.Open(t.Context(), inProcessConfig(), t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	c := startConsume(t, b)
	publishInbound(t, b, inbound("m1", "x"))
	doubleAck(t, c.next(t)) // Consume is running
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-c.done:
		close(c.done)
		if !errors.Is(err, natsbus.ErrClosed) {
			t.Errorf("Consume returned %v, want ErrClosed", err)
		}
	case <-time.After(wait):
		t.Fatal("Consume did not return after Close")
	}
}

func TestConsumeOnlyOnce(t *testing.T) {
	b := open(t, inProcessConfig(), t.TempDir())
	c := startConsume(t, b)
	publishInbound(t, b, inbound("m1", "x"))
	doubleAck(t, c.next(t)) // the first Consume is running
	err := b.Consume(t.Context(), func(bus.Delivery) {})
	if err == nil || !strings.Contains(err.Error(), "already consuming") {
		t.Fatalf("second Consume = %v, want already consuming", err)
	}
}

func TestListenerClientURL(t *testing.T) {
	cfg := natsbus.DefaultConfig()
	cfg.Listen = "127.0.0.1:0"
	cfg.Admin = natsbus.AdminConfig{Token: "ops-token"}
	b := open(t, cfg, t.TempDir())
	u := b.ClientURL()
	if !strings.HasPrefix(u, "nats://127.0.0.1:") || strings.HasSuffix(u, ":0") {
		t.Fatalf("ClientURL() = %q, want nats://127.0.0.1:<real port>", u)
	}
	c := startConsume(t, b)

	// An outside client (an operator): sees outbound messages and can
	// publish inbound ones.
	nc, err := nats.Connect(u, nats.Token("ops-token"))
	if err != nil {
		t.Fatalf("connect to ClientURL %s: %v", u, err)
	}
	defer nc.Close()
	col := bustest.Collect(t, nc, b.Subjects().OutChannel("console"))
	bustest.PublishInbound(t, nc, b.Subjects(), inbound("ext1", "from outside"))
	d := c.next(t)
	in := decode(t, b, d)
	out := bus.ReplyTo(in)
	out.ID, out.Kind, out.Text, out.Seq, out.Final = "o1", bus.KindReply, "hi", 1, true
	if err := b.Publish(t.Context(), b.Subjects().Out(out.Channel, out.ChatID), mustJSON(t, out), out.ID); err != nil {
		t.Fatal(err)
	}
	doubleAck(t, d)
	got := col.WaitOutbound(t, wait, func(o bus.Outbound) bool { return o.Final })
	if got.InReplyTo != "ext1" || got.Text != "hi" {
		t.Errorf("outbound = %+v", got)
	}
}

func TestExternalURL(t *testing.T) {
	s := bustest.StartServer(t)
	cfg := natsbus.DefaultConfig()
	cfg.URL = s.ClientURL()
	b := open(t, cfg, "")
	if b.Embedded() || b.ClientURL() != s.ClientURL() {
		t.Errorf("Embedded() = %v, ClientURL() = %q", b.Embedded(), b.ClientURL())
	}
	if err := b.Ready(t.Context()); err != nil {
		t.Fatalf("Ready: %v", err)
	}

	c := startConsume(t, b)
	publishInbound(t, b, inbound("m1", "x"))
	doubleAck(t, c.next(t))
	if err := c.stop(t); err != nil {
		t.Fatal(err)
	}
	info1, err := b.JetStream().Consumer(t.Context(), "CHAT_IN", natsbus.ConsumerName)
	if err != nil {
		t.Fatal(err)
	}

	// A second Consume reuses the consumer (other instances may share it).
	c = startConsume(t, b)
	publishInbound(t, b, inbound("m2", "y"))
	doubleAck(t, c.next(t))
	info2, err := b.JetStream().Consumer(t.Context(), "CHAT_IN", natsbus.ConsumerName)
	if err != nil {
		t.Fatal(err)
	}
	if !info1.CachedInfo().Created.Equal(info2.CachedInfo().Created) {
		t.Errorf("consumer was recreated in external mode: created %v then %v", info1.CachedInfo().Created, info2.CachedInfo().Created)
	}
	cc := info2.CachedInfo().Config
	want := natsbus.ConsumerConfig("chat")
	if cc.Durable != want.Durable || cc.FilterSubject != "chat.in.>" || cc.AckPolicy != jetstream.AckExplicitPolicy ||
		cc.AckWait != 30*time.Second || cc.MaxAckPending != 20000 || cc.MaxDeliver != -1 || cc.DeliverPolicy != jetstream.DeliverAllPolicy {
		t.Errorf("consumer config = %+v", cc)
	}
}

func TestEmbeddedRecreatesConsumerOncePerOpen(t *testing.T) {
	dir := t.TempDir()
	created := func(b *natsbus.Bus, id string) time.Time {
		t.Helper()
		c := startConsume(t, b)
		publishInbound(t, b, inbound(id, "x"))
		doubleAck(t, c.next(t))
		if err := c.stop(t); err != nil {
			t.Fatal(err)
		}
		cons, err := b.JetStream().Consumer(t.Context(), "CHAT_IN", natsbus.ConsumerName)
		if err != nil {
			t.Fatal(err)
		}
		return cons.CachedInfo().Created
	}
	b := open(t, inProcessConfig(), dir)
	first := created(b, "m1")
	if again := created(b, "m2"); !again.Equal(first) {
		t.Errorf("a second Consume on the same Bus recreated the consumer")
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	b = open(t, inProcessConfig(), dir)
	if reopened := created(b, "m3"); reopened.Equal(first) {
		t.Errorf("Consume after reopening reused the consumer; want it recreated")
	}
}

// TestFloodDoesNotFillAckPending: a chat holding as many unacknowledged
// messages as CHAT_IN keeps for one chat (some held by the runtime, some
// handed back with NakWithDelay) leaves the consumer's MaxAckPending room
// for other chats: another chat's message is still delivered. A handed-back
// message comes back with the same stream sequence and one more delivery.
func TestFloodDoesNotFillAckPending(t *testing.T) {
	b := open(t, inProcessConfig(), t.TempDir())
	flood := func(id string) bus.Inbound {
		in := inbound(id, "flood")
		in.ChatID = "flood"
		return in
	}
	for i := range natsbus.InMaxMsgsPerSubject {
		publishInbound(t, b, flood(fmt.Sprintf("f%d", i)))
	}
	c := startConsume(t, b)
	var first bus.Delivery
	for i := range natsbus.InMaxMsgsPerSubject {
		d := c.next(t)
		if info := d.Info(); info.Sequence == 0 || info.NumDelivered != 1 {
			t.Fatalf("first delivery info = %+v", info)
		}
		switch {
		case i == 0:
			first = d // handed back after the loop, so it cannot come back among the first deliveries
		case i%2 == 1:
			if err := d.NakWithDelay(time.Hour); err != nil {
				t.Fatal(err)
			}
		} // the others stay held, unacknowledged
	}
	if err := first.NakWithDelay(10 * time.Millisecond); err != nil {
		t.Fatal(err)
	}
	again := c.next(t)
	if got, want := again.Info(), (bus.DeliveryInfo{Sequence: first.Info().Sequence, NumDelivered: 2}); got != want {
		t.Errorf("handed-back message came back with %+v; want %+v", got, want)
	}
	publishInbound(t, b, inbound("other", "hello"))
	if in := decode(t, b, c.next(t)); in.ID != "other" {
		t.Errorf("delivered %q; want the other chat's message", in.ID)
	}
	if natsbus.MaxAckPending < 4*natsbus.InMaxMsgsPerSubject {
		t.Errorf("MaxAckPending %d leaves room for fewer than 4 flooding chats (%d each)", natsbus.MaxAckPending, natsbus.InMaxMsgsPerSubject)
	}
}

// TestDescribe: the start-up line says what the bus is, and never shows a
// credential of an external URL.
func TestDescribe(t *testing.T) {
	if got := open(t, inProcessConfig(), t.TempDir()).Describe(); got != "embedded, in-process only" {
		t.Errorf("in-process: %q", got)
	}
	cfg := natsbus.DefaultConfig()
	cfg.Listen = "127.0.0.1:0"
	cfg.Admin.Token = "operator-secret"
	embedded := open(t, cfg, t.TempDir())
	if got := embedded.Describe(); got != "embedded, listening on "+embedded.ClientURL() || !strings.HasPrefix(embedded.ClientURL(), "nats://127.0.0.1:") {
		t.Errorf("embedded listener: %q", got)
	}
	ext := natsbus.DefaultConfig()
	ext.URL = strings.Replace(embedded.ClientURL(), "nats://", "nats://operator-secret@", 1)
	external := open(t, ext, t.TempDir())
	if got := external.Describe(); strings.Contains(got, "operator-secret") || !strings.Contains(got, strings.TrimPrefix(embedded.ClientURL(), "nats://")) {
		t.Errorf("external: %q (credential shown, or the host missing)", got)
	}
}

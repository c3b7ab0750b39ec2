package bustest_test

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/goleak"

	"github.com/switchboard-chat/switchboard/bus"
	"github.com/switchboard-chat/switchboard/bus/bustest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestCollectorWaitFor(t *testing.T) {
	s := bustest.StartServer(t)
	nc := bustest.Connect(t, s)
	c := bustest.Collect(t, nc, "chat.out.console.>")

	if err := nc.Publish("chat.out.console.demo", []byte(`{"v":1,"id":"o1","kind":"delta","text":"he","seq":1}`)); err != nil {
		t.Fatal(err)
	}
	if err := nc.Publish("chat.out.console.demo", []byte(`not json`)); err != nil {
		t.Fatal(err)
	}
	if err := nc.Publish("chat.out.other.demo", []byte(`{}`)); err != nil { // not collected
		t.Fatal(err)
	}
	if err := nc.Publish("chat.out.console.demo", []byte(`{"v":1,"id":"o2","kind":"reply","text":"hello","seq":2,"final":true}`)); err != nil {
		t.Fatal(err)
	}
	final := c.WaitOutbound(t, 5*time.Second, func(o bus.Outbound) bool { return o.Final })
	if final.ID != "o2" || final.Text != "hello" {
		t.Errorf("final = %+v", final)
	}
	m := c.WaitFor(t, 5*time.Second, func(m *nats.Msg) bool { return string(m.Data) == "not json" })
	if m.Subject != "chat.out.console.demo" {
		t.Errorf("subject = %q", m.Subject)
	}
	if got := len(c.All()); got != 3 {
		t.Errorf("All() has %d messages, want 3", got)
	}
	outs := c.Outbounds()
	if len(outs) != 2 || outs[0].Kind != bus.KindDelta || outs[1].Kind != bus.KindReply {
		t.Errorf("Outbounds() = %+v", outs)
	}
}

func TestCollectorWakesWaiter(t *testing.T) {
	s := bustest.StartServer(t)
	nc := bustest.Connect(t, s)
	c := bustest.Collect(t, nc, "x.>")
	var wg sync.WaitGroup
	wg.Go(func() {
		// Publish after the waiter has (very likely) started waiting; the
		// test is correct in either order.
		for i := range 5 {
			_ = nc.Publish("x.y", fmt.Appendf(nil, "%d", i))
		}
	})
	m := c.WaitFor(t, 5*time.Second, func(m *nats.Msg) bool { return string(m.Data) == "4" })
	wg.Wait()
	if m.Subject != "x.y" {
		t.Errorf("subject = %q", m.Subject)
	}
}

// recordingTB records a Fatalf instead of stopping the test.
type recordingTB struct {
	testing.TB
	mu     sync.Mutex
	failed string
}

func (r *recordingTB) Helper() {}
func (r *recordingTB) Fatalf(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.failed = fmt.Sprintf(format, args...)
}

func TestCollectorWaitForFailsAtDeadline(t *testing.T) {
	s := bustest.StartServer(t)
	nc := bustest.Connect(t, s)
	c := bustest.Collect(t, nc, "x.>")
	if err := nc.Publish("x.seen", []byte("payload-one")); err != nil {
		t.Fatal(err)
	}
	c.WaitFor(t, 5*time.Second, func(*nats.Msg) bool { return true })

	rec := &recordingTB{TB: t}
	if m := c.WaitFor(rec, 10*time.Millisecond, func(*nats.Msg) bool { return false }); m != nil {
		t.Fatalf("WaitFor returned %v, want nil", m)
	}
	if !strings.Contains(rec.failed, "x.seen payload-one") || !strings.Contains(rec.failed, "received 1") {
		t.Errorf("failure message = %q, want it to list what was received", rec.failed)
	}
}

func TestPublishInbound(t *testing.T) {
	s := bustest.StartServer(t)
	nc := bustest.Connect(t, s)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	subj := bus.Subjects{Prefix: "chat"}
	stream, err := js.CreateStream(t.Context(), jetstream.StreamConfig{Name: "IN", Subjects: []string{subj.InAll()}})
	if err != nil {
		t.Fatal(err)
	}
	in := bus.Inbound{V: 1, ID: "m1", Channel: "console", ChatID: "a.b", UserID: "me", Text: "hi"}
	bustest.PublishInbound(t, nc, subj, in)
	bustest.PublishInbound(t, nc, subj, in) // de-duplicated by Nats-Msg-Id

	info, err := stream.Info(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if info.State.Msgs != 1 {
		t.Fatalf("stream holds %d messages, want 1", info.State.Msgs)
	}
	msg, err := stream.GetMsg(t.Context(), info.State.FirstSeq)
	if err != nil {
		t.Fatal(err)
	}
	if msg.Subject != "chat.in.console.a%2Eb" || msg.Header.Get(bus.HeaderMsgID) != "console:m1" {
		t.Errorf("stored subject %q, msg id %q", msg.Subject, msg.Header.Get(bus.HeaderMsgID))
	}
}

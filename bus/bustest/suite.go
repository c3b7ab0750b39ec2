package bustest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/switchboard-chat/switchboard/bus"
)

// Source is what the agent runtime consumes inbound messages through
// (agent.Source declares the same method; bus must not import agent):
// Consume calls handler from one goroutine in delivery order and blocks
// until ctx is cancelled.
type Source interface {
	Consume(ctx context.Context, handler func(bus.Delivery)) error
}

// Publisher is what the agent runtime publishes through (agent.Publisher
// declares the same methods): Publish sends durably with a Nats-Msg-Id and
// blocks until the bus acknowledged it; PublishCore sends best-effort
// without waiting.
type Publisher interface {
	Publish(ctx context.Context, subject string, data []byte, msgID string) error
	PublishCore(subject string, data []byte) error
}

// Harness is one bus under test for [RunSourcePublisher]: the Source and
// Publisher themselves, plus what the suite needs to drive and observe
// them from outside.
type Harness interface {
	Source
	Publisher
	// Subjects is the bus's subject scheme.
	Subjects() bus.Subjects
	// Inject stores data on an inbound subject as an adapter's publish
	// would, for Consume to deliver.
	Inject(t testing.TB, subject string, data []byte)
	// Stored returns the payloads the bus holds durably on subject, in
	// order: what a new reader of the stream would get (nil for none).
	Stored(t testing.TB, subject string) [][]byte
	// WatchCore starts a live subscriber on subject and returns a function
	// that waits (failing t at a deadline) until it has received n
	// messages and returns them.
	WatchCore(t testing.TB, subject string) func(n int) [][]byte
	// Restart stands for a restart of the process owning the bus (no
	// Consume is running): a message delivered but not settled is
	// delivered again by the next Consume, one acknowledged or terminated
	// never.
	Restart(t testing.TB)
}

// suiteWait bounds every wait of the suite.
const suiteWait = 15 * time.Second

// RunSourcePublisher is the conformance suite of the agent runtime's bus
// (agent.Source and agent.Publisher): the NATS implementation and the
// in-memory test bus both pass it. open returns a fresh, empty bus for each
// call and registers its own cleanup.
func RunSourcePublisher(t *testing.T, open func(t *testing.T) Harness) {
	t.Helper()
	tests := []struct {
		name string
		fn   func(t *testing.T, h Harness)
	}{
		{"PublishDeduplicatesByMsgID", testPublishDedup},
		{"PublishCoreReachesSubscribersNotStream", testPublishCore},
		{"ConsumeInOrder", testConsumeOrder},
		{"NakWithDelayRedelivers", testNakRedelivers},
		{"SettledNotRedeliveredAfterRestart", testRestart},
		{"SecondAckFails", testSecondAck},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) { tc.fn(t, open(t)) })
	}
}

// envelope is a valid inbound envelope as JSON.
func envelope(t testing.TB, chat, id string) []byte {
	t.Helper()
	data, err := json.Marshal(bus.Inbound{V: bus.Version, ID: id, Channel: "console", ChatID: chat, UserID: "u1", Text: "text " + id})
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// testPublishDedup: a durable publish whose msg id the bus already has is
// acknowledged but not stored again; without an id nothing is
// de-duplicated; what is stored keeps the publish order.
func testPublishDedup(t *testing.T, h Harness) {
	subj := h.Subjects().Out("console", "c1")
	ctx := t.Context()
	steps := []struct {
		data, id string
	}{
		{"first", "m1"},
		{"first again, other bytes", "m1"},
		{"second", "m2"},
		{"no id", ""},
		{"no id", ""},
		{"first once more", "m1"},
	}
	for _, s := range steps {
		if err := h.Publish(ctx, subj, []byte(s.data), s.id); err != nil {
			t.Fatalf("Publish(%q, %q) = %v, want nil (a duplicate is a success)", s.data, s.id, err)
		}
	}
	want := []string{"first", "second", "no id", "no id"}
	if got := strs(h.Stored(t, subj)); !slices.Equal(got, want) {
		t.Errorf("stored %q, want %q", got, want)
	}
}

// testPublishCore: a core publish reaches a live subscriber, every copy
// (no de-duplication), and is not stored.
func testPublishCore(t *testing.T, h Harness) {
	subj := h.Subjects().Event("console", "c1")
	wait := h.WatchCore(t, subj)
	for range 2 {
		if err := h.PublishCore(subj, []byte("typing")); err != nil {
			t.Fatalf("PublishCore = %v", err)
		}
	}
	if got := strs(wait(2)); !slices.Equal(got, []string{"typing", "typing"}) {
		t.Errorf("subscriber got %q, want two copies", got)
	}
	if got := h.Stored(t, subj); len(got) != 0 {
		t.Errorf("a core publish was stored: %q", strs(got))
	}
}

// consumer runs Consume in a goroutine and hands deliveries to the test.
type consumer struct {
	ch     chan bus.Delivery
	cancel context.CancelFunc
	done   chan error
	once   sync.Once
}

func consume(t *testing.T, s Source, react func(bus.Delivery)) *consumer {
	ctx, cancel := context.WithCancel(t.Context())
	c := &consumer{ch: make(chan bus.Delivery, 64), cancel: cancel, done: make(chan error, 1)}
	go func() {
		c.done <- s.Consume(ctx, func(d bus.Delivery) {
			if react != nil {
				react(d)
			}
			c.ch <- d
		})
	}()
	t.Cleanup(func() { c.stop(t) })
	return c
}

// next waits for the next delivery.
func (c *consumer) next(t *testing.T) bus.Delivery {
	t.Helper()
	select {
	case d := <-c.ch:
		return d
	case err := <-c.done:
		c.done <- err
		t.Fatalf("Consume returned %v before the next delivery", err)
	case <-time.After(suiteWait):
		t.Fatalf("no delivery within %s", suiteWait)
	}
	return nil
}

// stop cancels Consume and waits for it to return nil.
func (c *consumer) stop(t *testing.T) {
	t.Helper()
	c.once.Do(func() {
		c.cancel()
		select {
		case err := <-c.done:
			if err != nil {
				t.Errorf("Consume after cancel = %v, want nil", err)
			}
		case <-time.After(suiteWait):
			t.Errorf("Consume did not return within %s of its ctx ending", suiteWait)
		}
	})
}

// testConsumeOrder: messages of two chats are delivered once each, in the
// order they were stored, with their subject, bytes and rising sequence. A
// harness whose PerChatOrder() reports true (a partitioned bus) keeps the
// order within each chat only.
func testConsumeOrder(t *testing.T, h Harness) {
	s := h.Subjects()
	type msg struct {
		subject string
		data    []byte
	}
	var sent []msg
	for i := range 6 {
		chat := []string{"a", "b"}[i%2]
		m := msg{s.In("console", chat), envelope(t, chat, fmt.Sprint("m", i))}
		h.Inject(t, m.subject, m.data)
		sent = append(sent, m)
	}
	c := consume(t, h, func(d bus.Delivery) { _ = d.Ack() })
	perChat := false
	if po, ok := h.(interface{ PerChatOrder() bool }); ok {
		perChat = po.PerChatOrder()
	}
	last := map[string]uint64{}
	next := map[string]int{}
	for i := range sent {
		d := c.next(t)
		key := ""
		if perChat {
			key = d.Subject()
		}
		m := sent[i]
		if perChat { // the chat's next message, whichever chat comes
			for j := next[key]; j < len(sent); j++ {
				if sent[j].subject == key {
					m, next[key] = sent[j], j+1
					break
				}
			}
		}
		if d.Subject() != m.subject || !bytes.Equal(d.Data(), m.data) {
			t.Fatalf("delivery %d: %s %s, want %s %s", i, d.Subject(), d.Data(), m.subject, m.data)
		}
		info := d.Info()
		if info.NumDelivered != 1 || info.Sequence <= last[key] {
			t.Errorf("delivery %d: %+v, want NumDelivered 1 and a sequence above %d", i, info, last[key])
		}
		last[key] = info.Sequence
	}
	c.stop(t)
}

// testNakRedelivers: a message handed back with NakWithDelay comes again
// with the same sequence and bytes and one more delivery; a later message
// need not wait for it.
func testNakRedelivers(t *testing.T, h Harness) {
	s := h.Subjects()
	first, second := envelope(t, "a", "m1"), envelope(t, "a", "m2")
	h.Inject(t, s.In("console", "a"), first)
	h.Inject(t, s.In("console", "a"), second)
	c := consume(t, h, nil)
	d1 := c.next(t)
	if !bytes.Equal(d1.Data(), first) {
		t.Fatalf("first delivery %s, want %s", d1.Data(), first)
	}
	if err := d1.NakWithDelay(50 * time.Millisecond); err != nil {
		t.Fatalf("NakWithDelay = %v", err)
	}
	var again bus.Delivery
	for again == nil {
		d := c.next(t)
		switch {
		case bytes.Equal(d.Data(), second):
			if err := d.Ack(); err != nil {
				t.Fatalf("Ack = %v", err)
			}
		case bytes.Equal(d.Data(), first):
			again = d
		default:
			t.Fatalf("unexpected delivery %s", d.Data())
		}
	}
	if got, want := again.Info(), (bus.DeliveryInfo{Sequence: d1.Info().Sequence, NumDelivered: 2}); got != want {
		t.Errorf("redelivery %+v, want %+v", got, want)
	}
	if err := again.Ack(); err != nil {
		t.Errorf("Ack of the redelivery = %v", err)
	}
	c.stop(t)
}

// testRestart: after a restart, what was acknowledged or terminated is
// gone; what was delivered and not settled (in progress or not) comes
// again, in stream order, before what was stored later.
func testRestart(t *testing.T, h Harness) {
	s := h.Subjects()
	subj := s.In("console", "a")
	var data [][]byte
	for i := range 4 {
		data = append(data, envelope(t, "a", fmt.Sprint("m", i)))
		h.Inject(t, subj, data[i])
	}
	c := consume(t, h, nil)
	var seqs []uint64
	for i := range 4 {
		d := c.next(t)
		if !bytes.Equal(d.Data(), data[i]) {
			t.Fatalf("delivery %d: %s, want %s", i, d.Data(), data[i])
		}
		seqs = append(seqs, d.Info().Sequence)
		var err error
		switch i {
		case 0:
			err = d.Ack()
		case 1:
			err = d.Term()
		case 3:
			err = d.InProgress()
		}
		if err != nil {
			t.Fatalf("settling delivery %d: %v", i, err)
		}
	}
	c.stop(t)
	h.Restart(t)
	later := envelope(t, "a", "m4")
	h.Inject(t, subj, later)
	c = consume(t, h, func(d bus.Delivery) { _ = d.Ack() })
	for _, want := range []struct {
		data []byte
		seq  uint64
	}{{data[2], seqs[2]}, {data[3], seqs[3]}, {later, 0}} {
		d := c.next(t)
		if !bytes.Equal(d.Data(), want.data) {
			t.Fatalf("after the restart: %s, want %s (acknowledged and terminated messages must not come again)", d.Data(), want.data)
		}
		// NumDelivered is not checked: the embedded bus's consumer is new
		// after a restart (see bus.DeliveryInfo).
		if want.seq != 0 && d.Info().Sequence != want.seq {
			t.Errorf("redelivery of %s: %+v, want sequence %d", d.Data(), d.Info(), want.seq)
		}
	}
	c.stop(t)
}

// testSecondAck: a delivery is settled once; a second Ack fails.
func testSecondAck(t *testing.T, h Harness) {
	h.Inject(t, h.Subjects().In("console", "a"), envelope(t, "a", "m1"))
	c := consume(t, h, nil)
	d := c.next(t)
	if err := d.Ack(); err != nil {
		t.Fatalf("Ack = %v", err)
	}
	if err := d.Ack(); err == nil {
		t.Errorf("a second Ack = nil, want an error")
	}
	c.stop(t)
}

func strs(b [][]byte) []string {
	var out []string
	for _, x := range b {
		out = append(out, string(x))
	}
	return out
}

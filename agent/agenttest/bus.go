// Package agenttest provides an in-memory bus for testing the agent
// runtime without NATS: it delivers inbound envelopes to the manager,
// records acknowledgements, and captures every published outbound
// envelope, event and dead letter.
package agenttest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/switchboard-chat/switchboard/bus"
)

// Bus is an in-memory agent.Source and agent.Publisher. It is safe for
// concurrent use. Create it with NewBus.
type Bus struct {
	subj bus.Subjects

	mu        sync.Mutex
	cond      chan struct{} // closed and replaced on every change
	queue     []*Delivery
	later     []*Delivery // handed back with NakWithDelay, by due time
	published []Published
	msgIDs    map[string]bool // stream kind + msg id of the durable publishes stored
	seq       uint64
	naks      int
}

// Published is one message the runtime published.
type Published struct {
	Subject string
	Data    []byte
	MsgID   string
	Durable bool // published with Publish (JetStream) rather than PublishCore
	// Duplicate marks a durable publish whose MsgID the bus already had
	// on that stream: acknowledged but not stored, as JetStream's
	// de-duplication does (a core subscriber still sees it).
	Duplicate bool
}

// Delivery is one inbound message handed to the runtime.
type Delivery struct {
	b       *Bus
	subject string
	data    []byte

	info bus.DeliveryInfo
	due  time.Time // when a NakWithDelay'd message is delivered again

	acked, termed, nakked bool
	inProgress            int
}

// NewBus returns a bus using the "chat" subject prefix.
func NewBus() *Bus {
	return &Bus{subj: bus.Subjects{Prefix: "chat"}, cond: make(chan struct{}), msgIDs: make(map[string]bool)}
}

// Subjects returns the subject scheme in use.
func (b *Bus) Subjects() bus.Subjects { return b.subj }

func (b *Bus) changed() {
	close(b.cond)
	b.cond = make(chan struct{})
}

// Send queues in (as JSON) on its inbound subject.
func (b *Bus) Send(in bus.Inbound) *Delivery {
	if in.V == 0 {
		in.V = bus.Version
	}
	data, err := json.Marshal(in)
	if err != nil {
		panic(err)
	}
	return b.SendRaw(b.subj.In(in.Channel, in.ChatID), data)
}

// SendRaw queues raw bytes on subject.
func (b *Bus) SendRaw(subject string, data []byte) *Delivery {
	b.mu.Lock()
	b.seq++
	d := &Delivery{b: b, subject: subject, data: data, info: bus.DeliveryInfo{Sequence: b.seq, NumDelivered: 1}}
	b.queue = append(b.queue, d)
	b.changed()
	b.mu.Unlock()
	return d
}

// Redeliver delivers d's message again, as JetStream does after a crash or
// an expired AckWait: same subject, data and stream sequence, one more
// delivery. It returns the new delivery.
func (b *Bus) Redeliver(d *Delivery) *Delivery {
	b.mu.Lock()
	defer b.mu.Unlock()
	nd := b.again(d)
	b.queue = append(b.queue, nd)
	b.changed()
	return nd
}

// again is the next delivery of d's message. The caller holds b.mu.
func (b *Bus) again(d *Delivery) *Delivery {
	info := d.info
	info.NumDelivered++
	return &Delivery{b: b, subject: d.subject, data: d.data, info: info}
}

// Naks returns how many deliveries were handed back with NakWithDelay.
func (b *Bus) Naks() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.naks
}

// Consume delivers queued messages in order until ctx ends; a message
// handed back with NakWithDelay is delivered again once its delay is over,
// before newer messages (as JetStream does).
func (b *Bus) Consume(ctx context.Context, handler func(bus.Delivery)) error {
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		b.mu.Lock()
		now := time.Now()
		if len(b.later) > 0 && !b.later[0].due.After(now) {
			d := b.later[0]
			b.later = b.later[1:]
			b.mu.Unlock()
			handler(d)
			continue
		}
		if len(b.queue) > 0 {
			d := b.queue[0]
			b.queue = b.queue[1:]
			b.mu.Unlock()
			handler(d)
			continue
		}
		wait := b.cond
		var due <-chan time.Time
		if len(b.later) > 0 {
			timer.Reset(b.later[0].due.Sub(now))
			due = timer.C
		}
		b.mu.Unlock()
		select {
		case <-ctx.Done():
			return nil
		case <-wait:
		case <-due:
		}
		if !timer.Stop() {
			select {
			case <-timer.C:
			default:
			}
		}
	}
}

// Publish records a durable publish.
func (b *Bus) Publish(_ context.Context, subject string, data []byte, msgID string) error {
	return b.record(Published{Subject: subject, Data: append([]byte(nil), data...), MsgID: msgID, Durable: true})
}

// PublishCore records a core publish.
func (b *Bus) PublishCore(subject string, data []byte) error {
	return b.record(Published{Subject: subject, Data: append([]byte(nil), data...)})
}

func (b *Bus) record(p Published) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if p.Durable && p.MsgID != "" {
		// One de-duplication window per stream (in, out, dlq), like
		// JetStream; the window's length is not modelled.
		kind, _, _ := strings.Cut(strings.TrimPrefix(p.Subject, b.subj.Prefix+"."), ".")
		key := kind + "\x00" + p.MsgID
		p.Duplicate = b.msgIDs[key]
		b.msgIDs[key] = true
	}
	b.published = append(b.published, p)
	b.changed()
	return nil
}

// All returns everything published so far.
func (b *Bus) All() []Published {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]Published(nil), b.published...)
}

// decodeAll decodes, in order, what was published on subjects of a kind
// ("out", "event", "dlq"); undecodable messages are skipped.
func decodeAll[T any](b *Bus, kind string) []T {
	var out []T
	prefix := b.subj.Prefix + "." + kind + "."
	for _, p := range b.All() {
		var v T
		if strings.HasPrefix(p.Subject, prefix) && json.Unmarshal(p.Data, &v) == nil {
			out = append(out, v)
		}
	}
	return out
}

// Outbounds returns the outbound envelopes published so far, in order.
func (b *Bus) Outbounds() []bus.Outbound { return decodeAll[bus.Outbound](b, "out") }

// Events returns the agent events published so far, in order.
func (b *Bus) Events() []bus.Event { return decodeAll[bus.Event](b, "event") }

// DeadLetters returns the DLQ records published so far.
func (b *Bus) DeadLetters() []bus.DLQRecord { return decodeAll[bus.DLQRecord](b, "dlq") }

// waitUntil calls found after every change until it reports true,
// failing the test with what() at the deadline.
func (b *Bus) waitUntil(t testing.TB, timeout time.Duration, found func() bool, what func() string) {
	t.Helper()
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for {
		b.mu.Lock()
		wait := b.cond
		b.mu.Unlock()
		if found() {
			return
		}
		select {
		case <-wait:
		case <-deadline.C:
			t.Fatalf("agenttest: %s within %s", what(), timeout)
			return
		}
	}
}

// Wait waits until cond holds, re-checking after every change of the bus
// (a publish, an acknowledgement, a delivery), failing the test with what
// at the deadline.
func (b *Bus) Wait(t testing.TB, timeout time.Duration, cond func() bool, what string) {
	t.Helper()
	b.waitUntil(t, timeout, cond, func() string { return what })
}

// WaitFor waits until pred holds for an outbound envelope and returns it,
// failing the test at the deadline.
func (b *Bus) WaitFor(t testing.TB, timeout time.Duration, pred func(bus.Outbound) bool) bus.Outbound {
	t.Helper()
	var got bus.Outbound
	b.waitUntil(t, timeout, func() bool {
		for _, o := range b.Outbounds() {
			if pred(o) {
				got = o
				return true
			}
		}
		return false
	}, func() string { return fmt.Sprintf("no matching outbound; saw %+v", b.Outbounds()) })
	return got
}

// WaitEvent waits until an agent event of type typ was published and
// returns it, failing the test at the deadline.
func (b *Bus) WaitEvent(t testing.TB, timeout time.Duration, typ string) bus.Event {
	t.Helper()
	return b.WaitEventWhere(t, timeout, func(e bus.Event) bool { return e.Type == typ })
}

// WaitEventWhere waits until an agent event satisfying pred was published
// and returns it, failing the test at the deadline.
func (b *Bus) WaitEventWhere(t testing.TB, timeout time.Duration, pred func(bus.Event) bool) bus.Event {
	t.Helper()
	var got bus.Event
	b.waitUntil(t, timeout, func() bool {
		for _, e := range b.Events() {
			if pred(e) {
				got = e
				return true
			}
		}
		return false
	}, func() string { return "no matching event" })
	return got
}

// WaitFinal waits for the final outbound envelope answering inbound id.
func (b *Bus) WaitFinal(t testing.TB, timeout time.Duration, id string) bus.Outbound {
	t.Helper()
	return b.WaitFor(t, timeout, func(o bus.Outbound) bool { return o.InReplyTo == id && o.Final })
}

// Ack implements bus.Delivery.
func (d *Delivery) Ack() error { return d.settle(&d.acked) }

// Term implements bus.Delivery.
func (d *Delivery) Term() error { return d.settle(&d.termed) }

// NakWithDelay implements bus.Delivery: the message is delivered again
// (a new Delivery, NumDelivered one more) after delay.
func (d *Delivery) NakWithDelay(delay time.Duration) error {
	if err := d.settle(&d.nakked); err != nil {
		return err
	}
	b := d.b
	b.mu.Lock()
	defer b.mu.Unlock()
	b.naks++
	nd := b.again(d)
	nd.due = time.Now().Add(delay)
	i := len(b.later)
	for i > 0 && b.later[i-1].due.After(nd.due) {
		i--
	}
	b.later = append(b.later[:i], append([]*Delivery{nd}, b.later[i:]...)...)
	b.changed()
	return nil
}

// Info implements bus.Delivery.
func (d *Delivery) Info() bus.DeliveryInfo { return d.info }

func (d *Delivery) settle(flag *bool) error {
	d.b.mu.Lock()
	defer d.b.mu.Unlock()
	if d.acked || d.termed || d.nakked {
		return errors.New("agenttest: message already acknowledged")
	}
	*flag = true
	d.b.changed()
	return nil
}

// InProgress implements bus.Delivery.
func (d *Delivery) InProgress() error {
	d.b.mu.Lock()
	defer d.b.mu.Unlock()
	d.inProgress++
	return nil
}

// Subject implements bus.Delivery.
func (d *Delivery) Subject() string { return d.subject }

// Data implements bus.Delivery.
func (d *Delivery) Data() []byte { return d.data }

// Nakked reports whether the delivery was handed back with NakWithDelay.
func (d *Delivery) Nakked() bool {
	d.b.mu.Lock()
	defer d.b.mu.Unlock()
	return d.nakked
}

// State reports whether the message was acknowledged or terminated.
func (d *Delivery) State() (acked, termed bool) {
	d.b.mu.Lock()
	defer d.b.mu.Unlock()
	return d.acked, d.termed
}

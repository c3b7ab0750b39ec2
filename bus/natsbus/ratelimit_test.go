package natsbus_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/switchboard-chat/switchboard/bus"
	"github.com/switchboard-chat/switchboard/bus/bustest"
	"github.com/switchboard-chat/switchboard/bus/natsbus"
)

func TestRateLimitDeadLettersExcess(t *testing.T) {
	cfg := isolatedConfig()
	// One message per 100 s: the bucket holds 1, so of a quick burst exactly
	// the first passes.
	cfg.Bridges["wechat"] = natsbus.BridgeConfig{Channels: []string{"wechat"}, Token: wechatToken, MaxMsgsPerSec: 0.01}
	b := open(t, cfg, t.TempDir())
	dlq := bustest.Collect(t, b.Conn(), "chat.dlq.>")
	agent := startConsume(t, b)
	wechat := asBridge(t, b, "wechat", nats.Token(wechatToken))

	// The ingress refuses the excess before it is stored, and says why.
	for i := range 5 {
		in := bus.Inbound{V: 1, ID: fmt.Sprint("w", i), Channel: "wechat", ChatID: "c", UserID: "u", Text: "hi"}
		_, err := wechat.js.Publish(t.Context(), subjIn(b, in), mustJSON(t, in), jetstream.WithMsgID(in.DedupKey()))
		switch {
		case i == 0 && err != nil:
			t.Fatalf("first message: %v", err)
		case i > 0 && (apiErrorCode(err) != 429 || !strings.Contains(err.Error(), "rate limit exceeded for channel wechat")):
			t.Fatalf("message %d = %v, want a 429 API error", i, err)
		}
	}
	// A channel no bridge claims has no limit.
	for i := range 5 {
		publishInbound(t, b, bus.Inbound{V: 1, ID: fmt.Sprint("c", i), Channel: "console", ChatID: "c", UserID: "u", Text: "hi"})
	}
	var got []string
	for range 6 {
		d := agent.next(t)
		got = append(got, decode(t, b, d).ID)
		doubleAck(t, d)
	}
	if fmt.Sprint(got) != "[w0 c0 c1 c2 c3 c4]" {
		t.Fatalf("handler got %v, want w0 and every console message", got)
	}
	dlq.WaitFor(t, wait, func(*nats.Msg) bool { return len(dlq.All()) >= 4 })
	for i, r := range dlq.DLQRecords(t) {
		var in bus.Inbound
		if r.Reason != "rate limit exceeded for channel wechat" || r.Subject != "chat.in.wechat.c" ||
			json.Unmarshal([]byte(r.Payload), &in) != nil || in.ID != fmt.Sprint("w", i+1) {
			t.Errorf("DLQ record %d = %+v", i, r)
		}
	}
	if n := streamMsgs(t, b, "CHAT_IN"); n != 0 {
		t.Errorf("CHAT_IN holds %d messages, want 0 (rate-limited ones never stored)", n)
	}
}

// TestExternalRateLimitAfterValidation: with an external server (no
// accounts, no ingress in the path) Consume applies the limits, to valid
// envelopes only, and spares redeliveries.
func TestExternalRateLimitAfterValidation(t *testing.T) {
	s := bustest.StartServer(t)
	cfg := natsbus.DefaultConfig()
	cfg.URL = s.ClientURL()
	cfg.Bridges = map[string]natsbus.BridgeConfig{"wechat": {Channels: []string{"wechat"}, MaxMsgsPerSec: 0.01}}
	b := open(t, cfg, "")
	dlq := bustest.Collect(t, b.Conn(), "chat.dlq.wechat")
	agent := startConsume(t, b)
	// Invalid envelopes spend nothing of the valid messages' budget. The
	// first reaches the handler (which dead-letters and answers it); the
	// others are over the channel's answer budget (a bucket of one) and are
	// dead-lettered without an answer before the handler.
	for i := range 3 {
		if err := b.Publish(t.Context(), "chat.in.wechat.c", []byte(`{"v":1}`), ""); err != nil {
			t.Fatal(err)
		}
		if i == 0 {
			doubleAck(t, agent.next(t))
		}
	}
	dlq.WaitFor(t, wait, func(*nats.Msg) bool { return len(dlq.All()) == 2 })
	publishInbound(t, b, bus.Inbound{V: 1, ID: "m1", Channel: "wechat", ChatID: "c", UserID: "u", Text: "hi"})
	d := agent.next(t)
	if in := decode(t, b, d); in.ID != "m1" {
		t.Fatalf("delivery = %s", in.ID)
	}
	if err := d.(interface{ Nak() error }).Nak(); err != nil { // the runtime could not take it yet
		t.Fatal(err)
	}
	// The bucket is empty now, but the redelivery was judged already.
	d = agent.next(t)
	if in := decode(t, b, d); in.ID != "m1" {
		t.Fatalf("redelivery = %s", in.ID)
	}
	doubleAck(t, d)
	publishInbound(t, b, bus.Inbound{V: 1, ID: "m2", Channel: "wechat", ChatID: "c", UserID: "u", Text: "hi"})
	dlq.WaitFor(t, wait, func(m *nats.Msg) bool { return strings.Contains(string(m.Data), natsbus.RateLimitReason("wechat")) })
	if recs := dlq.DLQRecords(t); len(recs) != 3 || recs[2].Reason != natsbus.RateLimitReason("wechat") {
		t.Fatalf("DLQ = %+v", recs)
	}
}

// runtime stands in for the agent runtime: it dead-letters invalid
// envelopes, as the runtime does, and acknowledges valid ones.
type runtime struct {
	b *natsbus.Bus

	mu      sync.Mutex
	invalid map[string]int // channel -> invalid envelopes handled
	valid   []string       // ids of valid envelopes, in order
	changed chan struct{}
}

func (r *runtime) handle(d bus.Delivery) {
	in, err := bus.ParseInbound(r.b.Subjects(), d.Subject(), d.Data(), 0)
	if err != nil {
		rec := bus.NewDLQRecord(d.Subject(), d.Data(), err, time.Now())
		data, _ := json.Marshal(rec)
		_ = r.b.PublishCore(r.b.Subjects().DLQFor(d.Subject()), data)
		_ = d.Term()
	} else {
		_ = d.Ack()
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if err != nil {
		r.invalid[r.b.Subjects().DLQFor(d.Subject())]++
	} else {
		r.valid = append(r.valid, in.ID)
	}
	select {
	case r.changed <- struct{}{}:
	default:
	}
}

// waitUntil waits for cond (checked under the lock) with a deadline.
func (r *runtime) waitUntil(t *testing.T, timeout time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for {
		r.mu.Lock()
		ok := cond()
		r.mu.Unlock()
		if ok {
			return
		}
		select {
		case <-r.changed:
		case <-deadline.C:
			t.Fatalf("condition not reached within %s", timeout)
		}
	}
}

// TestFloodDoesNotHoldUpOtherChannels has the wechat bridge send 10,000
// messages, half of them invalid, while the line bridge talks normally:
// the invalid ones are refused and dead-lettered at the ingress without
// spending wechat's budget, the valid ones reach the handler only up to the
// rate limit, the rest is dead-lettered before it is stored, and every line
// message is handled.
func TestFloodDoesNotHoldUpOtherChannels(t *testing.T) {
	const flood, rateLimit, lineMsgs = 10_000, 50, 5
	cfg := isolatedConfig()
	cfg.Bridges["wechat"] = natsbus.BridgeConfig{Channels: []string{"wechat"}, Token: wechatToken, MaxMsgsPerSec: rateLimit}
	b := open(t, cfg, t.TempDir())
	rt := &runtime{b: b, invalid: map[string]int{}, changed: make(chan struct{}, 1)}
	// Dead letters are recorded with the runtime's state, so one wait sees
	// both.
	var dead []*nats.Msg
	sub, err := b.Conn().Subscribe("chat.dlq.>", func(m *nats.Msg) {
		rt.mu.Lock()
		dead = append(dead, m)
		rt.mu.Unlock()
		select {
		case rt.changed <- struct{}{}:
		default:
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := sub.SetPendingLimits(-1, -1); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	if err := b.Conn().Flush(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- b.Consume(ctx, rt.handle) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Consume: %v", err)
		}
	})

	wechat := asBridge(t, b, "wechat", nats.Token(wechatToken))
	line := asBridge(t, b, "line", nats.UserInfo("line", linePassword))
	garbage := []byte(`{"v":1,"id":"x","channel":"wechat","chat_id":"flood","user_id":"u"}`) // no text
	start := time.Now()
	for i := range flood {
		data := garbage
		if i%2 == 1 {
			data = mustJSON(t, bus.Inbound{V: 1, ID: fmt.Sprint("w", i), Channel: "wechat", ChatID: "flood", UserID: "u", Text: "hi"})
		}
		if err := wechat.nc.Publish("chat.in.wechat.flood", data); err != nil {
			t.Fatal(err)
		}
		if i == flood/2 {
			for j := range lineMsgs {
				bustest.PublishInbound(t, line.nc, b.Subjects(), bus.Inbound{V: 1, ID: fmt.Sprint("l", j), Channel: "line", ChatID: "g", UserID: "u", Text: "hello"})
			}
		}
	}
	if err := wechat.nc.Flush(); err != nil {
		t.Fatal(err)
	}

	// Every valid flood message is either handled or rate-limited; every
	// invalid one is refused at the ingress.
	// count and handledValid are called with rt.mu held.
	count := func() (invalid, limited int) {
		for _, m := range dead {
			var r bus.DLQRecord
			if err := json.Unmarshal(m.Data, &r); err != nil {
				t.Errorf("DLQ record %s: %v", m.Data, err)
			}
			switch {
			case r.Reason == natsbus.RateLimitReason("wechat"):
				limited++
			case strings.HasPrefix(r.Reason, "bus:"):
				invalid++
			}
		}
		return invalid, limited
	}
	handledValid := func() int {
		n := 0
		for _, id := range rt.valid {
			if strings.HasPrefix(id, "w") {
				n++
			}
		}
		return n
	}
	rt.waitUntil(t, 3*wait, func() bool {
		invalid, limited := count()
		return len(rt.valid)-handledValid() == lineMsgs && invalid == flood/2 && limited+handledValid() == flood/2
	})
	// Every message was judged after start and before now.
	published := time.Since(start)

	rt.mu.Lock()
	handled, lineIDs := handledValid(), []string{}
	for _, id := range rt.valid {
		if strings.HasPrefix(id, "l") {
			lineIDs = append(lineIDs, id)
		}
	}
	invalidHandled := len(rt.invalid)
	_, limited := count()
	var elsewhere []string
	for _, m := range dead {
		if m.Subject != "chat.dlq.wechat" {
			elsewhere = append(elsewhere, m.Subject)
		}
	}
	rt.mu.Unlock()
	if fmt.Sprint(lineIDs) != "[l0 l1 l2 l3 l4]" {
		t.Errorf("line messages handled: %v", lineIDs)
	}
	if invalidHandled != 0 {
		t.Errorf("the handler saw invalid messages: %v", rt.invalid)
	}
	// The bucket holds one second's worth and refills at the rate.
	if most := rateLimit + int(float64(rateLimit)*published.Seconds()) + 1; handled > most {
		t.Errorf("the handler saw %d flood messages; the limit allows at most %d in %s", handled, most, published)
	}
	if limited == 0 {
		t.Error("nothing was rate-limited")
	}
	if len(elsewhere) > 0 {
		t.Errorf("dead letters outside wechat's channel: %v", elsewhere)
	}
	if m := streamMsgs(t, b, "CHAT_IN"); m != 0 {
		t.Errorf("CHAT_IN holds %d messages", m)
	}
}

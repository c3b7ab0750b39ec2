package natsbus_test

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"switchboard/bus"
	"switchboard/bus/bustest"
	"switchboard/bus/natsbus"
)

// dlqRecords decodes the dead letters a collector received.
func dlqRecords(t *testing.T, col *bustest.Collector) []bus.DLQRecord {
	t.Helper()
	var recs []bus.DLQRecord
	for _, m := range col.All() {
		var r bus.DLQRecord
		if err := json.Unmarshal(m.Data, &r); err != nil {
			t.Fatalf("DLQ record %s: %v", m.Data, err)
		}
		recs = append(recs, r)
	}
	return recs
}

func TestRateLimitDeadLettersExcess(t *testing.T) {
	cfg := isolatedConfig()
	// One message per 100 s: the bucket holds 1, so of a quick burst exactly
	// the first passes.
	cfg.Bridges["wechat"] = natsbus.BridgeConfig{Channels: []string{"wechat"}, Token: wechatToken, MaxMsgsPerSec: 0.01}
	b := open(t, cfg, t.TempDir())
	dlq := bustest.Collect(t, b.Conn(), "chat.dlq.>")
	agent := startConsume(t, b)
	wechat := asBridge(t, b, "wechat", nats.Token(wechatToken))

	for i := range 5 {
		bustest.PublishInbound(t, wechat.nc, b.Subjects(), bus.Inbound{V: 1, ID: fmt.Sprint("w", i), Channel: "wechat", ChatID: "c", UserID: "u", Text: "hi"})
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
	for i, r := range dlqRecords(t, dlq) {
		var in bus.Inbound
		if r.Reason != "rate limit exceeded for channel wechat" || r.Subject != "chat.in.wechat.c" ||
			json.Unmarshal([]byte(r.Payload), &in) != nil || in.ID != fmt.Sprint("w", i+1) {
			t.Errorf("DLQ record %d = %+v", i, r)
		}
	}
	if n := streamMsgs(t, b, "CHAT_IN"); n != 0 {
		t.Errorf("CHAT_IN holds %d messages, want 0 (rate-limited ones terminated)", n)
	}
}

func TestRateLimitSparesRedeliveries(t *testing.T) {
	cfg := isolatedConfig()
	cfg.Bridges["wechat"] = natsbus.BridgeConfig{Channels: []string{"wechat"}, Token: wechatToken, MaxMsgsPerSec: 0.01}
	b := open(t, cfg, t.TempDir())
	dlq := bustest.Collect(t, b.Conn(), "chat.dlq.wechat")
	agent := startConsume(t, b)
	publishInbound(t, b, bus.Inbound{V: 1, ID: "m1", Channel: "wechat", ChatID: "c", UserID: "u", Text: "hi"})
	d := agent.next(t)
	if err := d.(jetstream.Msg).Nak(); err != nil { // the runtime could not take it yet
		t.Fatal(err)
	}
	// The bucket is empty now, but the redelivery was judged already.
	d = agent.next(t)
	if in := decode(t, b, d); in.ID != "m1" {
		t.Fatalf("redelivery = %s", in.ID)
	}
	doubleAck(t, d)
	publishInbound(t, b, bus.Inbound{V: 1, ID: "m2", Channel: "wechat", ChatID: "c", UserID: "u", Text: "hi"})
	dlq.WaitFor(t, wait, func(*nats.Msg) bool { return true })
	if recs := dlqRecords(t, dlq); len(recs) != 1 || recs[0].Reason != natsbus.RateLimitReason("wechat") {
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
// invalid messages while the line bridge talks normally: wechat's flood
// reaches the handler only up to its rate limit, the rest is dead-lettered
// before it, and every line message is handled.
func TestFloodDoesNotHoldUpOtherChannels(t *testing.T) {
	const flood, rateLimit, lineMsgs = 10_000, 50, 5
	cfg := isolatedConfig()
	cfg.Bridges["wechat"] = natsbus.BridgeConfig{Channels: []string{"wechat"}, Token: wechatToken, MaxMsgsPerSec: rateLimit}
	b := open(t, cfg, t.TempDir())
	limited := bustest.Collect(t, b.Conn(), "chat.dlq.wechat")
	rt := &runtime{b: b, invalid: map[string]int{}, changed: make(chan struct{}, 1)}
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
		if err := wechat.nc.Publish("chat.in.wechat.flood", garbage); err != nil {
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

	// Every flood message is either handled (and dead-lettered by the
	// runtime as invalid) or rate-limited before the handler.
	rateLimited := func() int {
		n := 0
		for _, r := range dlqRecords(t, limited) {
			if r.Reason == natsbus.RateLimitReason("wechat") {
				n++
			}
		}
		return n
	}
	limited.WaitFor(t, 3*wait, func(*nats.Msg) bool { return len(limited.All()) >= flood })
	rt.waitUntil(t, wait, func() bool { return len(rt.valid) == lineMsgs })
	// The stream stamped every message after start and before now.
	published := time.Since(start)

	rt.mu.Lock()
	handled, valid := rt.invalid["chat.dlq.wechat"], fmt.Sprint(rt.valid)
	rt.mu.Unlock()
	if valid != "[l0 l1 l2 l3 l4]" {
		t.Errorf("line messages handled: %s", valid)
	}
	n := rateLimited()
	if handled+n != flood {
		t.Errorf("flood: %d handled + %d rate-limited, want %d in all", handled, n, flood)
	}
	// The bucket holds one second's worth and refills at the rate.
	if most := rateLimit + int(float64(rateLimit)*published.Seconds()) + 1; handled > most {
		t.Errorf("the handler saw %d flood messages; the limit allows at most %d in %s", handled, most, published)
	}
	if n == 0 {
		t.Error("nothing was rate-limited")
	}
	if m := streamMsgs(t, b, "CHAT_IN"); m != 0 {
		t.Errorf("CHAT_IN holds %d messages", m)
	}
}

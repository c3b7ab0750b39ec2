package bridge

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/switchboard-chat/switchboard/bus"
	"github.com/switchboard-chat/switchboard/bus/bustest"
	"github.com/switchboard-chat/switchboard/internal/polltest"
)

// subscribing runs c.Subscribe(s) in a goroutine and waits for Ready. stop
// cancels it and returns its result; done waits for it to return on its
// own.
func subscribing(t *testing.T, c *Client, s Subscription) (stop, done func() error) {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	ready := make(chan struct{})
	s.Ready = func() { close(ready) }
	errc := make(chan error, 1)
	go func() { errc <- c.Subscribe(ctx, s) }()
	select {
	case <-ready:
	case err := <-errc:
		cancel()
		t.Fatalf("Subscribe returned %v before Ready", err)
	case <-time.After(waitTimeout):
		cancel()
		t.Fatal("Subscribe never called Ready")
	}
	var once sync.Once
	var err error
	wait := func(cancelFirst bool) error {
		once.Do(func() {
			if cancelFirst {
				cancel()
			}
			select {
			case err = <-errc:
			case <-time.After(waitTimeout):
				t.Fatal("Subscribe did not return")
			}
			cancel()
		})
		return err
	}
	t.Cleanup(func() { _ = wait(true) })
	return func() error { return wait(true) }, func() error { return wait(false) }
}

func (e *env) publishCore(t *testing.T, subject string, v any) {
	t.Helper()
	data, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	if err := e.nc.Publish(subject, data); err != nil {
		t.Fatal(err)
	}
}

// TestSubscribeOneChatWithEvents: a subscription narrowed to one chat gets
// that chat's outbound envelopes and agent events, in the order they were
// published, from the moment Ready is called (no message published after it
// is lost); other chats' traffic, and events whose envelope disagrees with
// the subject, never reach the handlers.
func TestSubscribeOneChatWithEvents(t *testing.T) {
	e := newEnv(t)
	c := e.newClient(t, Options{})
	var mu sync.Mutex
	var got []string
	changed := make(chan struct{}, 100)
	note := func(s string) {
		mu.Lock()
		got = append(got, s)
		mu.Unlock()
		changed <- struct{}{}
	}
	subscribing(t, c, Subscription{
		ChatID:   "c 1",
		Outbound: func(_ context.Context, o bus.Outbound) error { note("out:" + o.ID); return nil },
		Events:   func(_ context.Context, ev bus.Event) { note("event:" + ev.Type) },
	})
	other := e.subj.Out("tg", "c2")
	e.publishCore(t, other, out("x1", "c2", "", "m0", bus.KindReply, 1, true))
	e.publishCore(t, e.subj.Event("tg", "c2"), bus.Event{V: 1, Type: bus.EventToolCall, Channel: "tg", ChatID: "c2"})
	e.publishCore(t, e.subj.Event("tg", "c 1"), bus.Event{V: 1, Type: bus.EventTurnStart, Channel: "tg", ChatID: "c 1"})
	e.publishCore(t, e.subj.Out("tg", "c 1"), out("o1", "c 1", "", "m1", bus.KindDelta, 1, false))
	e.publishCore(t, e.subj.Event("tg", "c 1"), bus.Event{V: 1, Type: bus.EventToolCall, Channel: "tg", ChatID: "elsewhere"})
	e.publishCore(t, e.subj.Event("tg", "c 1"), bus.Event{V: 1, Type: bus.EventToolResult, Channel: "tg", ChatID: "c 1"})
	e.publishCore(t, e.subj.Out("tg", "c 1"), out("o2", "c 1", "", "m1", bus.KindReply, 2, true))
	e.publishCore(t, e.subj.Out("tg", "c 1"), out("o2", "c 1", "", "m1", bus.KindReply, 2, true)) // a copy
	e.publishCore(t, e.subj.Event("tg", "c 1"), bus.Event{V: 1, Type: bus.EventTurnEnd, Channel: "tg", ChatID: "c 1"})
	want := []string{"event:turn_start", "out:o1", "event:tool_result", "out:o2", "event:turn_end"}
	deadline := time.After(waitTimeout)
	for {
		mu.Lock()
		n := len(got)
		mu.Unlock()
		if n >= len(want) {
			break
		}
		select {
		case <-changed:
		case <-deadline:
			t.Fatalf("handled %v, want %v", got, want)
		}
	}
	// A last marker proves nothing else is still on its way.
	e.publishCore(t, e.subj.Out("tg", "c 1"), out("end", "c 1", "", "m2", bus.KindReply, 1, true))
	want = append(want, "out:end")
	for {
		mu.Lock()
		n := len(got)
		mu.Unlock()
		if n >= len(want) {
			break
		}
		select {
		case <-changed:
		case <-deadline:
			t.Fatalf("handled %v, want %v", got, want)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if len(got) != len(want) {
		t.Fatalf("handled %v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("handled %v, want %v", got, want)
		}
	}
}

// TestSubscribeEndsWhenTheConnectionCloses: a closed connection ends
// Subscribe with an error instead of leaving it waiting forever.
func TestSubscribeEndsWhenTheConnectionCloses(t *testing.T) {
	e := newEnv(t)
	nc := bustest.Connect(t, e.s)
	c, err := New(nc, Options{Channel: "tg"})
	if err != nil {
		t.Fatal(err)
	}
	_, done := subscribing(t, c, Subscription{ChatID: "c1", Outbound: func(context.Context, bus.Outbound) error { return nil },
		Events: func(context.Context, bus.Event) {}})
	nc.Close()
	if err := done(); !errors.Is(err, nats.ErrConnectionClosed) {
		t.Fatalf("Subscribe after the connection closed = %v, want ErrConnectionClosed", err)
	}
}

func TestSubscribeNeedsAHandler(t *testing.T) {
	e := newEnv(t)
	c := e.newClient(t, Options{})
	if err := c.Subscribe(t.Context(), Subscription{ChatID: "c1"}); err == nil {
		t.Fatal("Subscribe without any handler succeeded")
	}
}

// TestSubscribeEventsOnly: a subscription with only an event handler gets
// the events and leaves the outbound envelopes alone: a final published
// meanwhile is not remembered as shown, so the client's durable consumer
// still hands it over (the OpenAI channel reads events this way beside
// ConsumeOutbound).
func TestSubscribeEventsOnly(t *testing.T) {
	e := newEnv(t)
	c := e.newClient(t, Options{})
	events := make(chan string, 10)
	subscribing(t, c, Subscription{Events: func(_ context.Context, ev bus.Event) { events <- ev.Type + ":" + ev.ChatID }})
	outs := make(chan string, 10)
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() {
		done <- c.ConsumeOutbound(ctx, func(_ context.Context, o bus.Outbound) error { outs <- o.ID; return nil })
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("ConsumeOutbound = %v", err)
		}
	})
	e.publishCore(t, e.subj.Event("tg", "c1"), bus.Event{V: 1, Type: bus.EventToolCall, Channel: "tg", ChatID: "c1"})
	select {
	case got := <-events:
		if got != "tool_call:c1" {
			t.Fatalf("event = %s", got)
		}
	case <-time.After(waitTimeout):
		t.Fatal("no event")
	}
	// The durable consumer delivers only what is published after it
	// exists: wait for it (the server announces no such event).
	polltest.Until(t, waitTimeout, 5*time.Millisecond, func() bool {
		_, err := e.js.Consumer(t.Context(), "CHAT_OUT", "bridge_tg")
		return err == nil
	}, func() string { return "the durable consumer was never created" })
	e.publishOut(t, out("o1", "c1", "", "m1", bus.KindReply, 1, true))
	select {
	case got := <-outs:
		if got != "o1" {
			t.Fatalf("consumed %s, want o1", got)
		}
	case <-time.After(waitTimeout):
		t.Fatal("the final never reached the durable consumer")
	}
}

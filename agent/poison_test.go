package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/switchboard-chat/switchboard/agent/agenttest"
	"github.com/switchboard-chat/switchboard/bus"
	"github.com/switchboard-chat/switchboard/llm/llmtest"
	"github.com/switchboard-chat/switchboard/memory"
	"github.com/switchboard-chat/switchboard/memory/memtest"
)

// refusingStore is an in-memory store that fails the operations refuse
// names for a key (a session or receipt key): as a store refusing what it
// cannot keep (memory.ErrInvalid), or failing for a while (any other
// error). failed receives the op of every failure.
type refusingStore struct {
	*memtest.MemStore
	refuse func(op, key string) error
	failed chan string
}

func newRefusingStore(refuse func(op, key string) error) *refusingStore {
	return &refusingStore{MemStore: memtest.NewMemStore(), refuse: refuse, failed: make(chan string, 64)}
}

func (s *refusingStore) check(op, key string) error {
	err := s.refuse(op, key)
	if err != nil {
		s.failed <- op
	}
	return err
}

func (s *refusingStore) Receipt(ctx context.Context, key string) (memory.Receipt, bool, error) {
	if err := s.check("receipt", key); err != nil {
		return memory.Receipt{}, false, err
	}
	return s.MemStore.Receipt(ctx, key)
}

func (s *refusingStore) Load(ctx context.Context, session string, maxTurns int) (memory.Snapshot, error) {
	if err := s.check("load", session); err != nil {
		return memory.Snapshot{}, err
	}
	return s.MemStore.Load(ctx, session, maxTurns)
}

func (s *refusingStore) CommitTurn(ctx context.Context, rec memory.TurnRecord) error {
	if err := s.check("commit", rec.Session); err != nil {
		return err
	}
	return s.MemStore.CommitTurn(ctx, rec)
}

// poisonIn is an inbound message of chat "poison".
func poisonIn(id string) bus.Inbound {
	return bus.Inbound{ID: id, Channel: "console", ChatID: "poison", UserID: "u1", Text: "hello " + id}
}

// checkGivenUp asserts that d was dead-lettered with a reason naming want,
// terminated, and answered with one error final.
func checkGivenUp(t *testing.T, b *agenttest.Bus, d *agenttest.Delivery, id string, want ...string) {
	t.Helper()
	got := b.WaitFinal(t, wait, id)
	if got.Kind != bus.KindError || !strings.HasPrefix(got.ID, bus.RefusalIDPrefix) || !strings.Contains(got.Text, "could not process it") {
		t.Errorf("answer = %+v, want an error final saying the message could not be processed", got)
	}
	b.Wait(t, wait, func() bool { _, termed := d.State(); return termed }, "the message terminated")
	var reasons []string
	for _, r := range b.DeadLetters() {
		if r.Subject == "chat.in.console.poison" {
			reasons = append(reasons, r.Reason)
		}
	}
	if len(reasons) != 1 {
		t.Fatalf("dead letters of the poison chat: %q, want one", reasons)
	}
	for _, w := range append(want, bus.ErrUnprocessable.Error()) {
		if !strings.Contains(reasons[0], w) {
			t.Errorf("dead-letter reason %q lacks %q", reasons[0], w)
		}
	}
	n := 0
	for _, o := range b.Outbounds() {
		if o.InReplyTo == id && o.Final {
			n++
		}
	}
	if n != 1 {
		t.Errorf("%d finals for %s, want 1", n, id)
	}
}

// TestStoreRefusalDeadLetteredAtOnce: a message the history store refuses
// for good (memory.ErrInvalid: a key it cannot keep), whether it refuses
// the receipt lookup, the history load or the commit, is dead-lettered
// with the store's reason on its first delivery, answered with an error
// final and terminated, never left for a redelivery that would fail the
// same way forever; another chat is answered meanwhile and after.
func TestStoreRefusalDeadLetteredAtOnce(t *testing.T) {
	for _, op := range []string{"receipt", "load", "commit"} {
		t.Run(op, func(t *testing.T) {
			st := newRefusingStore(func(o, key string) error {
				if o == op && strings.Contains(key, "poison") {
					return fmt.Errorf("memtest: %s %q: %w: the store cannot keep it", o, key, memory.ErrInvalid)
				}
				return nil
			})
			h := newHarness(t, func(hc *harnessConfig) {
				hc.store = st
				hc.modelOption = append(hc.modelOption, llmtest.WithResponder(llmtest.EchoResponder))
			})
			d := h.bus.Send(poisonIn("poison-1"))
			if got := h.ask("m1", "still there?"); got.Text != "echo: still there?" {
				t.Fatalf("other chat's final = %+v", got)
			}
			checkGivenUp(t, h.bus, d, "poison-1", "memory: invalid record", op)
			if got := h.ask("m2", "and now?"); got.Text != "echo: and now?" {
				t.Fatalf("other chat's final after = %+v", got)
			}
		})
	}
}

// TestFailingMessageDeadLetteredAfterMaxDeliveries: a message whose commit
// fails on every delivery (a store error that is not permanent) is left
// for redelivery MaxDeliveries-1 times, nothing published for it but the
// typing signals and deltas of its attempts; the failure on delivery MaxDeliveries gives it up: dead
// letter naming the count and the cause, an error final, terminated.
// Another chat is answered throughout.
func TestFailingMessageDeadLetteredAfterMaxDeliveries(t *testing.T) {
	st := newRefusingStore(func(op, key string) error {
		if op == "commit" && strings.Contains(key, "poison") {
			return errors.New("memtest: disk on fire")
		}
		return nil
	})
	h := newHarness(t, func(hc *harnessConfig) {
		hc.store = st
		hc.modelOption = append(hc.modelOption, llmtest.WithResponder(llmtest.EchoResponder))
	})
	d := h.bus.Send(poisonIn("poison-1"))
	for n := 1; n < MaxDeliveries; n++ {
		select {
		case op := <-st.failed:
			if op != "commit" {
				t.Fatalf("failed %s, want commit", op)
			}
		case <-time.After(wait):
			t.Fatalf("delivery %d: no commit attempted", n)
		}
		if got := h.ask(fmt.Sprintf("m%d", n), "ping"); got.Kind != bus.KindReply {
			t.Fatalf("other chat's final during delivery %d = %+v", n, got)
		}
		if acked, termed := d.State(); acked || termed || len(h.bus.DeadLetters()) > 0 {
			t.Fatalf("delivery %d of %d: acked %v, termed %v, dead letters %+v: given up too early", n, MaxDeliveries, acked, termed, h.bus.DeadLetters())
		}
		for _, o := range h.bus.Outbounds() {
			if o.InReplyTo == "poison-1" && (o.Final || o.Kind != bus.KindTyping && o.Kind != bus.KindDelta) {
				t.Fatalf("delivery %d: published %+v for a message not answered", n, o)
			}
		}
		d = h.bus.Redeliver(d)
	}
	checkGivenUp(t, h.bus, d, "poison-1", fmt.Sprintf("after %d deliveries", MaxDeliveries), "disk on fire")
	if got := h.ask("last", "ping"); got.Kind != bus.KindReply {
		t.Fatalf("other chat's final after = %+v", got)
	}
}

// TestStoreRefusalQueuedAtStart: messages already waiting on the bus when
// the manager starts (a restart after the store began refusing one) are
// handled in order: the refused one is dead-lettered on its first delivery
// of this run, the others are answered.
func TestStoreRefusalQueuedAtStart(t *testing.T) {
	b := agenttest.NewBus()
	d := b.Send(poisonIn("poison-1"))
	b.Send(bus.Inbound{ID: "m1", Channel: "console", ChatID: "c1", UserID: "u1", Text: "queued behind it"})
	st := newRefusingStore(func(op, key string) error {
		if strings.Contains(key, "poison") {
			return fmt.Errorf("memtest: %s %q: %w", op, key, memory.ErrInvalid)
		}
		return nil
	})
	h := newHarness(t, func(hc *harnessConfig) {
		hc.bus, hc.store = b, st
		hc.modelOption = append(hc.modelOption, llmtest.WithResponder(llmtest.EchoResponder))
	})
	if got := h.final("m1"); got.Text != "echo: queued behind it" {
		t.Fatalf("queued message answered with %+v", got)
	}
	checkGivenUp(t, h.bus, d, "poison-1", "memory: invalid record")
}

// TestEnvelopeRulesCoverStoreKeys: the envelope rules are a superset of the
// history store's key rules: the longest valid envelope's session and
// de-duplication keys are accepted, and an envelope whose key the store
// would refuse (a NUL in the chat, thread or message id) is refused by
// the envelope rules first, so no valid message can be refused for its
// key.
func TestEnvelopeRulesCoverStoreKeys(t *testing.T) {
	subj := bus.Subjects{Prefix: "chat"}
	parse := func(in bus.Inbound) (*bus.Inbound, error) {
		data, err := json.Marshal(in)
		if err != nil {
			t.Fatal(err)
		}
		return bus.ParseInbound(subj, subj.In(in.Channel, in.ChatID), data, 0)
	}
	longest := bus.Inbound{V: 1, ID: strings.Repeat("i", bus.MaxIDBytes), Channel: strings.Repeat("c", bus.MaxChannelBytes),
		ChatID: strings.Repeat("张", bus.MaxRefBytes/3), ThreadID: strings.Repeat("t", bus.MaxRefBytes), UserID: "u", Text: "x"}
	in, err := parse(longest)
	if err != nil {
		t.Fatalf("the longest envelope: %v", err)
	}
	if err := memory.ValidateSession(in.SessionKey()); err != nil {
		t.Errorf("session key of the longest valid envelope (%d bytes): %v", len(in.SessionKey()), err)
	}
	if err := memory.ValidateReceiptKey(in.DedupKey()); err != nil {
		t.Errorf("de-duplication key of the longest valid envelope: %v", err)
	}
	for _, edit := range []func(in *bus.Inbound){
		func(in *bus.Inbound) { in.ID = "a\x00" },
		func(in *bus.Inbound) { in.ChatID = "a\x00" },
		func(in *bus.Inbound) { in.ThreadID = "a\x00" },
	} {
		in := bus.Inbound{V: 1, ID: "m", Channel: "console", ChatID: "c", UserID: "u", Text: "x"}
		edit(&in)
		if memory.ValidateSession(in.SessionKey()) == nil && memory.ValidateReceiptKey(in.DedupKey()) == nil {
			t.Fatalf("%+v: the store accepts its keys; the test case is wrong", in)
		}
		if _, err := parse(in); !errors.Is(err, bus.ErrInvalid) {
			t.Errorf("%+v: ParseInbound = %v, want it refused (the store would refuse its key)", in, err)
		}
	}
}

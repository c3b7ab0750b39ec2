package natsbus_test

import (
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/switchboard-chat/switchboard/bus/natsbus"
)

// A core publish on the embedded server reaches every kind of listener —
// a client of the daemon's account, a bridge through its account's import,
// a stream — and is not sent at all while nothing listens (the daemon's
// connection counts no outgoing message).
func TestPublishCoreOnlyWhenSomebodyListens(t *testing.T) {
	b := open(t, isolatedConfig(), t.TempDir())
	subj := b.Subjects()
	event := subj.Event("wechat", "c1")
	sent := func() uint64 { return b.Conn().Stats().OutMsgs }

	before := sent()
	if err := b.PublishCore(event, []byte(`{"nobody":"listens"}`)); err != nil {
		t.Fatal(err)
	}
	if got := sent(); got != before {
		t.Fatalf("published %d messages with nobody listening", got-before)
	}

	// A bridge follows its channel's events through its import.
	wechat := asBridge(t, b, "wechat", nats.Token(wechatToken))
	got := make(chan *nats.Msg, 4)
	sub, err := wechat.nc.ChanSubscribe(subj.Prefix+".event.wechat.>", got)
	if err != nil {
		t.Fatal(err)
	}
	if err := wechat.nc.Flush(); err != nil {
		t.Fatal(err)
	}
	waitInterest(t, b, event, got)
	if err := b.PublishCore(event, []byte(`{"to":"bridge"}`)); err != nil {
		t.Fatal(err)
	}
	for m := range eventsOn(t, got) {
		if string(m.Data) == `{"to":"bridge"}` {
			break
		}
		if len(m.Data) > 0 { // probes sent while the first one was on its way are empty
			t.Fatalf("bridge got %q", m.Data)
		}
	}
	if err := sub.Unsubscribe(); err != nil {
		t.Fatal(err)
	}
	if err := wechat.nc.Flush(); err != nil {
		t.Fatal(err)
	}

	// A client of the daemon's own account.
	tail := make(chan *nats.Msg, 4)
	if _, err := b.Conn().ChanSubscribe(subj.EventAll(), tail); err != nil {
		t.Fatal(err)
	}
	if err := b.Conn().Flush(); err != nil {
		t.Fatal(err)
	}
	if err := b.PublishCore(event, []byte(`{"to":"tail"}`)); err != nil {
		t.Fatal(err)
	}
	select {
	case m := <-tail:
		if string(m.Data) != `{"to":"tail"}` {
			t.Fatalf("tail got %q", m.Data)
		}
	case <-time.After(wait):
		t.Fatal("the operator's subscription got no event")
	}

	// Outbound subjects are the CHAT_OUT stream's: always sent.
	before = sent()
	if err := b.PublishCore(subj.Out("wechat", "c1"), []byte(`{"v":1}`)); err != nil {
		t.Fatal(err)
	}
	if got := sent(); got != before+1 {
		t.Fatalf("an outbound core publish was not sent (%d)", got-before)
	}
}

// eventsOn yields what ch receives until the caller stops; it fails the
// test when nothing comes for a while.
func eventsOn(t *testing.T, ch <-chan *nats.Msg) func(func(*nats.Msg) bool) {
	return func(yield func(*nats.Msg) bool) {
		for {
			select {
			case m := <-ch:
				if !yield(m) {
					return
				}
			case <-time.After(wait):
				t.Fatal("the subscription got no event")
				return
			}
		}
	}
}

// waitInterest waits until a listener of subject that delivers to got
// receives an empty probe: the embedded server counts it as interest.
func waitInterest(t *testing.T, b *natsbus.Bus, subject string, got <-chan *nats.Msg) {
	t.Helper()
	deadline := time.After(wait)
	for {
		if err := b.PublishCore(subject, nil); err != nil {
			t.Fatal(err)
		}
		select {
		case m := <-got:
			if len(m.Data) != 0 {
				t.Fatalf("got %q before the probe", m.Data)
			}
			return
		case <-deadline:
			t.Fatalf("no interest in %s after %s", subject, wait)
		case <-time.After(5 * time.Millisecond): // not counted yet: probe again
		}
	}
}

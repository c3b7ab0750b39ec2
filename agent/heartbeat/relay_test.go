package heartbeat

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/switchboard-chat/switchboard/bus"
	"github.com/switchboard-chat/switchboard/bus/bustest"
	"github.com/switchboard-chat/switchboard/internal/polltest"
)

// jsPub publishes through JetStream with the message id, as the daemon's
// bus does; hold, when set, is called after the publish is stored and
// its error returned (a crash between the relay and its ack).
type jsPub struct {
	js   jetstream.JetStream
	hold func(ctx context.Context) error
}

func (p jsPub) Publish(ctx context.Context, subject string, data []byte, msgID string) error {
	if _, err := p.js.Publish(ctx, subject, data, jetstream.WithMsgID(msgID)); err != nil {
		return err
	}
	if p.hold != nil {
		return p.hold(ctx)
	}
	return nil
}

// relayed returns the heartbeat messages stored for telegram 42.
func relayed(t *testing.T, js jetstream.JetStream) []bus.Outbound {
	t.Helper()
	s, err := js.Stream(t.Context(), "CHAT_OUT")
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	var out []bus.Outbound
	for seq := info.State.FirstSeq; seq <= info.State.LastSeq && seq > 0; seq++ {
		m, err := s.GetMsg(t.Context(), seq)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		var o bus.Outbound
		if m.Subject == "chat.out.telegram.42" && json.Unmarshal(m.Data, &o) == nil {
			out = append(out, o)
		}
	}
	return out
}

// waitFor waits until cond holds, at most beyond relayAckWait (an answer
// whose Nak was lost is delivered again then).
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	polltest.Until(t, 2*relayAckWait, 20*time.Millisecond, cond, func() string { return "timed out waiting for " + what })
}

// TestRelayDurableAcrossRestart: an answer published while no runner
// runs is relayed by the next one; a runner stopped between the relay and
// its acknowledgement leaves the answer to the next runner, whose relay is
// dropped as a duplicate: each answer reaches the chat once.
func TestRelayDurableAcrossRestart(t *testing.T) {
	srv := bustest.StartServer(t)
	nc := bustest.Connect(t, srv)
	js := bustest.Streams(t, nc)
	agents := []Agent{{Name: "main", Config: Config{To: telegram42}}} // no slots: relays only
	run := func(pub Publisher) (stop func()) {
		r := New(Options{DataDir: t.TempDir(), Publisher: pub, Conn: nc}, agents)
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan error, 1)
		go func() { done <- r.Run(ctx) }()
		waitFor(t, "the relay consumer", func() bool {
			c, err := js.Consumer(t.Context(), "CHAT_OUT", RelayConsumer)
			return err == nil && c != nil
		})
		return func() {
			cancel()
			if err := <-done; err != nil {
				t.Error(err)
			}
		}
	}
	var lastFinal uint64 // the stream sequence of the last answer published
	publishFinal := func(turn, text string) {
		data, _ := json.Marshal(bus.Outbound{V: 1, ID: "o-" + turn, Channel: Channel, ChatID: "main", InReplyTo: turn, Kind: bus.KindReply, Text: text, Final: true})
		ack, err := js.Publish(t.Context(), "chat.out.heartbeat.main", data, jetstream.WithMsgID("o-"+turn))
		if err != nil {
			t.Fatal(err)
		}
		lastFinal = ack.Sequence
	}
	waitAcked := func() {
		t.Helper()
		waitFor(t, "the answer acknowledged", func() bool {
			c, err := js.Consumer(t.Context(), "CHAT_OUT", RelayConsumer)
			if err != nil {
				return false
			}
			info, err := c.Info(t.Context())
			return err == nil && info.NumAckPending == 0 && info.NumPending == 0 && info.AckFloor.Stream >= lastFinal
		})
	}

	// The first run creates the consumer; the answer comes while the
	// daemon is down.
	run(jsPub{js: js})()
	publishFinal("hb:main:1", "Your train leaves at 9.")
	stop := run(jsPub{js: js})
	waitFor(t, "the relay after the restart", func() bool { return len(relayed(t, js)) == 1 })
	waitAcked()
	stop()

	// Stopped between the relay (stored) and its ack.
	held := make(chan struct{})
	stop = run(jsPub{js: js, hold: func(ctx context.Context) error { close(held); <-ctx.Done(); return ctx.Err() }})
	publishFinal("hb:main:2", "Rain at 5 pm.")
	<-held
	stop()
	if got := relayed(t, js); len(got) != 2 {
		t.Fatalf("relays stored before the restart: %+v", got)
	}
	stop = run(jsPub{js: js})
	waitAcked()
	stop()
	got := relayed(t, js)
	if len(got) != 2 || got[0].Text != "Your train leaves at 9." || got[1].Text != "Rain at 5 pm." || got[1].ID != "hb-out:hb:main:2" {
		t.Fatalf("relayed %+v, want each answer once", got)
	}
}

package telegram

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/switchboard-chat/switchboard/bus"
)

// publishCopy publishes o through JetStream without a Nats-Msg-Id: the
// copy of a final the daemon re-published after the stream's
// de-duplication window, which the stream stores and delivers again.
func (e *env) publishCopy(t *testing.T, o bus.Outbound) {
	t.Helper()
	o.V, o.Channel = bus.Version, Name
	data, err := json.Marshal(o)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.js.Publish(t.Context(), e.subj.Out(o.Channel, o.ChatID), data); err != nil {
		t.Fatal(err)
	}
}

// sentTexts returns the texts of the sendMessage calls so far.
func (e *env) sentTexts() []string {
	var texts []string
	for _, r := range e.bot.all("sendMessage") {
		texts = append(texts, r.params.Get("text"))
	}
	return texts
}

func countText(texts []string, sub string) int {
	n := 0
	for _, s := range texts {
		if strings.Contains(s, sub) {
			n++
		}
	}
	return n
}

// waitAcked waits until the adapter's durable consumer holds nothing
// unacknowledged or pending (server state the test cannot be notified of).
func (e *env) waitAcked(t *testing.T) {
	t.Helper()
	deadline := time.Now().Add(waitTimeout)
	for {
		cons, err := e.js.Consumer(t.Context(), "CHAT_OUT", "bridge_telegram")
		if err != nil {
			t.Fatal(err)
		}
		info, err := cons.Info(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		if info.NumAckPending == 0 && info.NumPending == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("consumer: %d ack pending, %d pending", info.NumAckPending, info.NumPending)
		}
		select {
		case <-t.Context().Done():
			t.Fatal(t.Context().Err())
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// TestRepublishedFinalSentOnce: a final the daemon publishes again with the
// same id (a crash after its publish, before its ack) reaches the adapter
// again; it is sent to Telegram once, also after the adapter restarted with
// the same state file, its copies are acknowledged (no redelivery loop),
// and each suppressed copy is counted.
func TestRepublishedFinalSentOnce(t *testing.T) {
	e := newEnv(t)
	mx := &countingMetrics{}
	a := e.newAdapter(t, e.config(), Deps{Metrics: mx})
	r := run(t, a)
	f1 := out("f1", bus.KindReply, "the first answer", 1, true)
	e.publishOut(t, f1)
	e.bot.waitN(t, "sendMessage", 1)
	e.publishCopy(t, f1)
	f2 := out("f2", bus.KindReply, "the second answer", 1, true)
	f2.InReplyTo = "in2"
	e.publishOut(t, f2)
	e.bot.waitN(t, "sendMessage", 2)
	e.waitAcked(t)
	if got := e.sentTexts(); countText(got, "first answer") != 1 || len(got) != 2 {
		t.Fatalf("sendMessage texts %q; want the first answer once", got)
	}
	if n := mx.duplicates(Name); n != 1 {
		t.Fatalf("duplicates counted: %d, want 1", n)
	}
	if err := r.stop(t); err != nil {
		t.Fatal(err)
	}

	// Restart with the same state file (data_dir/telegram.db): the copy
	// re-published after the restart is still recognised.
	a2 := e.newAdapter(t, e.config(), Deps{Metrics: mx})
	run(t, a2)
	e.publishCopy(t, f1)
	f3 := out("f3", bus.KindReply, "the third answer", 1, true)
	f3.InReplyTo = "in3"
	e.publishOut(t, f3)
	e.bot.waitN(t, "sendMessage", 3)
	e.waitAcked(t)
	if got := e.sentTexts(); countText(got, "first answer") != 1 || len(got) != 3 {
		t.Fatalf("after a restart, sendMessage texts %q; want the first answer once", got)
	}
	if n := mx.duplicates(Name); n != 2 {
		t.Fatalf("duplicates counted: %d, want 2", n)
	}
}

// TestReadyBeforeFirstPollReturns: the channel is ready once getMe and
// deleteWebhook succeeded and the poll loop runs, while the first long
// poll of a quiet bot is still open; a failing poll makes it not ready
// with the reason, the next successful poll ready again.
func TestReadyBeforeFirstPollReturns(t *testing.T) {
	e := newEnv(t)
	cfg := e.config()
	cfg.PollTimeout = 50 * time.Second // longer than every wait of the test: the fake holds the poll open
	a := e.newAdapter(t, cfg, Deps{})
	run(t, a)
	// The fake holds the long poll open (no update queued) until the test
	// releases it.
	e.bot.waitN(t, "getUpdates", 1)
	e.status.waitFor(t, "ready while the first long poll is open", func(err error) bool { return err == nil })
	if n := len(e.bot.all("getUpdates")); n != 1 {
		t.Fatalf("%d getUpdates calls, want the first one still open", n)
	}

	// The next poll fails: not ready, with the reason.
	e.bot.fail("getUpdates", 1, fakeFailure{status: 502, description: "Bad Gateway"})
	e.bot.addUpdate(1, privateMsg(1, user(7, "Ann", ""), "hello")) // releases the open poll
	bad := e.status.waitFor(t, "not ready after a failing poll", func(err error) bool {
		return err != nil && strings.Contains(err.Error(), "Bad Gateway")
	})
	if !strings.Contains(bad.Error(), "getUpdates") {
		t.Errorf("status %q does not name the failing call", bad)
	}
	// The retry is held open too; release it with an update: the poll
	// succeeded, ready again.
	e.bot.waitN(t, "getUpdates", 3)
	e.bot.addUpdate(2, privateMsg(2, user(7, "Ann", ""), "again"))
	e.waitStatusAfter(t, bad, nil)
}

// waitStatusAfter waits until a status equal to want (nil: healthy) is
// reported after the status after.
func (e *env) waitStatusAfter(t *testing.T, after, want error) {
	t.Helper()
	timer := time.NewTimer(waitTimeout)
	defer timer.Stop()
	for {
		e.status.mu.Lock()
		errs, ch := append([]error(nil), e.status.errs...), e.status.changed
		e.status.mu.Unlock()
		seen := false
		for _, err := range errs {
			if seen && (err == want || (want != nil && errors.Is(err, want))) {
				return
			}
			if err == after {
				seen = true
			}
		}
		select {
		case <-ch:
		case <-timer.C:
			t.Fatalf("no status %v after %v; got %v", want, after, errs)
		}
	}
}

package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/switchboard-chat/switchboard/bus"
	"github.com/switchboard-chat/switchboard/bus/bustest"
	"github.com/switchboard-chat/switchboard/bus/natsbus"
	"github.com/switchboard-chat/switchboard/internal/polltest"
	"github.com/switchboard-chat/switchboard/llm/llmtest"
	"github.com/switchboard-chat/switchboard/memory/memcfg"
)

// poison is one envelope an attacker sends to stall the runtime: ids the
// history store, a file name or a terminal would refuse or obey.
type poison struct {
	name string
	chat string // the subject's chat token
	data string // the payload, raw (invalid UTF-8 included)
	// why is what the dead letter's reason must say.
	why string
	// answered: the subject and payload name a valid chat, so the sender
	// is answered with an error final (in_reply_to replyTo, thread_id
	// thread); otherwise it gets only the dead letter (and, through
	// JetStream, its publish's error).
	answered        bool
	replyTo, thread string
}

// poisons are envelopes of channel ch that break the id rules.
func poisons(ch string) []poison {
	env := func(id, chat, thread, user string) string {
		return `{"v":1,"id":"` + id + `","channel":"` + ch + `","chat_id":"` + chat + `","thread_id":"` + thread + `","user_id":"` + user + `","text":"poison"}`
	}
	return []poison{
		{"NUL in id", "room", env(`p\u00001`, "room", "", "u"), `field "id": must not contain NUL`, true, "", ""},
		{"ESC in id", "room", env(`p2\u001b[2J`, "room", "", "u"), `field "id": must not contain control characters, got U+001B`, true, "", ""},
		{"C1 control in id", "room", env(`p3\u009b`, "room", "", "u"), `field "id": must not contain control characters, got U+009B`, true, "", ""},
		{"DEL in user_id", "room", env("p4", "room", "", `u\u007f`), `field "user_id": must not contain control characters, got U+007F`, true, "p4", ""},
		{"NUL in chat_id", "ro%00om", env("p5", `ro\u0000om`, "", "u"), `field "chat_id": must not contain NUL`, false, "", ""},
		{"newline in chat_id", "ro%0Aom", env("p6", `ro\nom`, "", "u"), `field "chat_id": must not contain control characters, got U+000A`, false, "", ""},
		{"NUL in thread_id", "room", env("p7", "room", `t\u00001`, "u"), `field "thread_id": must not contain NUL`, true, "p7", ""},
		{"tab in thread_id", "room", env("p8", "room", `t\t8`, "u"), `field "thread_id": must not contain control characters, got U+0009`, true, "p8", ""},
		{"invalid UTF-8 in id", "room", env("p9\xff", "room", "", "u"), "not valid UTF-8", true, "", ""},
		{"invalid UTF-8 in chat_id", "%FF", env("p10", "\xff", "", "u"), "not valid UTF-8", false, "", ""},
		{"invalid UTF-8 in thread_id", "room", env("p11", "room", "t\xc3", "u"), "not valid UTF-8", true, "", ""},
	}
}

// refusalID is the id of the error final answering data refused on
// subject (bus.RefusalFinal: derived from the subject and the message).
func refusalID(t *testing.T, subj bus.Subjects, subject string, data []byte) string {
	t.Helper()
	out, _, ok := bus.RefusalFinal(subj, subject, data, bus.ErrInvalid)
	if !ok {
		t.Fatalf("%s: not addressable", subject)
	}
	return out.ID
}

// checkRefused waits for the dead letter of p (published on subject) and,
// when p is addressable, for its error final among outs.
func checkRefused(t *testing.T, subj bus.Subjects, p poison, subject string, dlq, outs *bustest.Collector) {
	t.Helper()
	dlq.WaitFor(t, wait, func(m *nats.Msg) bool {
		var r bus.DLQRecord
		return json.Unmarshal(m.Data, &r) == nil && r.Subject == subject && strings.Contains(r.Reason, p.why) && r.Size == len(p.data)
	})
	if !p.answered {
		return
	}
	id := refusalID(t, subj, subject, []byte(p.data))
	got := outs.WaitOutbound(t, wait, func(o bus.Outbound) bool { return o.ID == id })
	if !got.Final || got.Kind != bus.KindError || got.InReplyTo != p.replyTo || got.ThreadID != p.thread || got.ChatID != "room" ||
		!strings.HasPrefix(got.Text, "Your message was not accepted: ") {
		t.Errorf("%s: answer = %+v", p.name, got)
	}
	if err := got.Validate(); err != nil {
		t.Errorf("%s: the answer is not a valid outbound envelope: %v", p.name, err)
	}
}

// inboundSettled waits until the agent runtime holds no inbound message:
// nothing waits in CHAT_IN for its consumers and none is delivered and
// unacknowledged (a message redelivered forever stays pending).
func inboundSettled(t *testing.T, js jetstream.JetStream) {
	t.Helper()
	var last string
	polltest.Until(t, wait, 20*time.Millisecond, func() bool {
		st, err := js.Stream(t.Context(), "CHAT_IN")
		if err != nil {
			last = err.Error()
			return false
		}
		pending, ackPending, n := uint64(0), 0, 0
		for info := range st.ListConsumers(t.Context()).Info() {
			pending += info.NumPending
			ackPending += info.NumAckPending
			n++
		}
		last = fmt.Sprintf("%d consumers, %d pending, %d delivered and unacknowledged", n, pending, ackPending)
		return n > 0 && pending == 0 && ackPending == 0
	}, func() string { return "the inbound consumers did not settle: " + last })
}

// TestAttackPoisonIDsFromBridge: a bridge with its own credential sends
// envelopes with NUL, other control characters and invalid UTF-8 (raw
// bytes) in id, chat_id, thread_id and user_id. The daemon's ingress
// refuses each before it is stored: the publish fails with 400, the
// reason is in the bridge's dead-letter queue, and an addressable one is
// answered with a valid error final on the bridge's own channel. Nothing
// reaches the history store or the model, no inbound message stays
// pending, and another bridge's channel and the operator's console are
// answered during and after the attack (as is the attacking channel's
// next valid message).
func TestAttackPoisonIDsFromBridge(t *testing.T) {
	model := llmtest.NewServer(t, llmtest.WithResponder(llmtest.EchoResponder))
	d := startAuthDaemon(t, bridgeConfig(t, model.URL()))
	subj := d.bus.Subjects()
	wechat, wechatJS := d.connectBridge(t, "wechat", nats.Token(testWechatToken))
	line, lineJS := d.connectBridge(t, "line", nats.UserInfo("line", testLinePass))
	lineCons, err := lineJS.Consumer(t.Context(), "CHAT_OUT", natsbus.BridgeConsumerName("line"))
	if err != nil {
		t.Fatal(err)
	}
	// What the attacker sees: its own dead letters and outbound subjects.
	dlq := bustest.Collect(t, wechat, subj.DLQ("wechat"))
	outs := bustest.Collect(t, wechat, subj.OutChannel("wechat"))
	console := bustest.Collect(t, d.admin, subj.Out("console", "ops"))

	legit := 0
	lineTurn := func(id string) {
		t.Helper()
		legit++
		bustest.PublishInbound(t, line, subj, bus.Inbound{V: 1, ID: id, Channel: "line", ChatID: "g1", UserID: "alice", Text: "hello " + id})
		if got := nextFinal(t, lineCons, id); got.Text != "echo: hello "+id {
			t.Fatalf("line's %s answered with %+v", id, got)
		}
	}
	for i, p := range poisons("wechat") {
		subject := "chat.in.wechat." + p.chat
		m := nats.NewMsg(subject)
		m.Data = []byte(p.data)
		m.Header.Set(jetstream.MsgIDHeader, fmt.Sprintf("wechat:poison-%d", i))
		ack, err := wechatJS.PublishMsg(t.Context(), m)
		var apiErr *jetstream.APIError
		if !errors.As(err, &apiErr) || apiErr.Code != http.StatusBadRequest || !strings.Contains(apiErr.Description, p.why) {
			t.Fatalf("%s: publish = %+v, %v; want a 400 naming %q", p.name, ack, err, p.why)
		}
		checkRefused(t, subj, p, subject, dlq, outs)
		lineTurn(fmt.Sprint("l", i)) // another channel, during the attack
	}
	if n := len(dlq.DLQRecords(t)); n != len(poisons("wechat")) {
		t.Errorf("%d dead letters, want one per poison", n)
	}

	// After: every channel is answered, the attacker's own included.
	lineTurn("l-after")
	legit++
	bustest.PublishInbound(t, d.admin, subj, bus.Inbound{V: 1, ID: "ops-1", Channel: "console", ChatID: "ops", UserID: "op", Text: "status?"})
	if got := console.WaitOutbound(t, wait, finalFor("ops-1")); got.Text != "echo: status?" {
		t.Fatalf("console answered with %+v", got)
	}
	legit++
	bustest.PublishInbound(t, wechat, subj, bus.Inbound{V: 1, ID: "w-ok", Channel: "wechat", ChatID: "room", UserID: "u", Text: "a fair question"})
	if got := outs.WaitOutbound(t, wait, finalFor("w-ok")); got.Text != "echo: a fair question" {
		t.Fatalf("wechat's valid message answered with %+v", got)
	}
	adminJS, err := jetstream.New(d.admin)
	if err != nil {
		t.Fatal(err)
	}
	inboundSettled(t, adminJS)
	if n := model.RequestCount(); n != legit {
		t.Errorf("%d model requests, want %d (the legitimate messages only)", n, legit)
	}
}

// TestAttackPoisonInChatInAcrossRestart: envelopes with control characters
// or invalid UTF-8 in their ids stored straight in CHAT_IN (as an operator
// can, bypassing the ingress, or a bridge on an external server) are
// refused by the runtime's own validation (dead letter, error final where
// addressable, terminated) instead of being refused by the history store
// on every redelivery forever: also when they are already in CHAT_IN when
// the daemon starts. An envelope with the longest ids the rules allow is
// answered (its session key fits the store). The console's other chat is
// answered during and after, and no inbound message stays pending.
func TestAttackPoisonInChatInAcrossRestart(t *testing.T) {
	eachStore(t, testAttackPoisonInChatInAcrossRestart)
}

func testAttackPoisonInChatInAcrossRestart(t *testing.T, store string) {
	model := llmtest.NewServer(t, llmtest.WithResponder(llmtest.EchoResponder))
	cfg := storeConfig(t, model.URL(), store)
	d := startDaemon(t, cfg)
	subj := d.subjects()
	js, err := jetstream.New(d.nc)
	if err != nil {
		t.Fatal(err)
	}
	dlq := bustest.Collect(t, d.nc, subj.DLQ("console"))
	outs := bustest.Collect(t, d.nc, subj.OutChannel("console"))
	ask := func(id string) {
		t.Helper()
		d.send(t, "c1", id, "hello "+id)
		if got := outs.WaitOutbound(t, wait, finalFor(id)); got.Text != "echo: hello "+id {
			t.Fatalf("%s answered with %+v", id, got)
		}
	}
	for i, p := range poisons("console") {
		subject := "chat.in.console." + p.chat
		if _, err := js.Publish(t.Context(), subject, []byte(p.data), jetstream.WithMsgID(fmt.Sprintf("console:poison-%d", i))); err != nil {
			t.Fatalf("%s: %v", p.name, err)
		}
		checkRefused(t, subj, p, subject, dlq, outs)
		ask(fmt.Sprint("m", i))
	}
	longest := bus.Inbound{V: 1, ID: strings.Repeat("i", bus.MaxIDBytes), Channel: strings.Repeat("c", bus.MaxChannelBytes),
		ChatID: strings.Repeat("@", bus.MaxRefBytes), ThreadID: strings.Repeat("t", bus.MaxRefBytes), UserID: strings.Repeat("u", bus.MaxRefBytes),
		Text: "the longest ids"}
	longOut := bustest.Collect(t, d.nc, subj.Out(longest.Channel, longest.ChatID))
	bustest.PublishInbound(t, d.nc, subj, longest)
	if got := longOut.WaitOutbound(t, wait, finalFor(longest.ID)); got.Text != "echo: the longest ids" {
		t.Fatalf("the envelope with the longest ids answered with %+v", got)
	}
	inboundSettled(t, js)
	d.stop()

	// A run that died before it took them left poison in CHAT_IN: store
	// it with the daemon down (its embedded server alone on data_dir).
	busCfg := cfg.Bus
	busCfg.Listen = ""
	busCfg.Partitions = cfg.Agent.PartitionCount(store == memcfg.StoreJetStream)
	b, err := natsbus.Open(t.Context(), busCfg, filepath.Join(cfg.DataDir, "jetstream"), nil)
	if err != nil {
		t.Fatal(err)
	}
	left := poisons("console")
	for i, p := range left {
		if _, err := b.JetStream().Publish(t.Context(), "chat.in.console."+p.chat, []byte(p.data), jetstream.WithMsgID(fmt.Sprintf("console:left-%d", i))); err != nil {
			t.Fatalf("%s: %v", p.name, err)
		}
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}

	d = startDaemon(t, cfg)
	js, err = jetstream.New(d.nc)
	if err != nil {
		t.Fatal(err)
	}
	outs = bustest.Collect(t, d.nc, subj.OutChannel("console"))
	ask("after-restart")
	inboundSettled(t, js)
	// Each one left is dead-lettered again, on its first delivery after the
	// start (read back from CHAT_DLQ: it happened as the daemon started).
	records := storedDeadLetters(t, js)
	for _, p := range left {
		subject := "chat.in.console." + p.chat
		payload := bus.NewDLQRecord(subject, []byte(p.data), nil, time.Time{}).Payload
		n := 0
		for _, r := range records {
			if r.Subject == subject && r.Payload == payload && strings.Contains(r.Reason, p.why) {
				n++
			}
		}
		if n != 2 { // before the restart and after it
			t.Errorf("%s: %d dead letters with its payload, want 2", p.name, n)
		}
	}
	ask("last")
}

// storedDeadLetters reads every record CHAT_DLQ holds.
func storedDeadLetters(t *testing.T, js jetstream.JetStream) []bus.DLQRecord {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), wait)
	defer cancel()
	st, err := js.Stream(ctx, "CHAT_DLQ")
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var out []bus.DLQRecord
	for seq := info.State.FirstSeq; info.State.Msgs > 0 && seq <= info.State.LastSeq; seq++ {
		m, err := st.GetMsg(ctx, seq)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		var r bus.DLQRecord
		if err := json.Unmarshal(m.Data, &r); err != nil {
			t.Fatal(err)
		}
		out = append(out, r)
	}
	return out
}

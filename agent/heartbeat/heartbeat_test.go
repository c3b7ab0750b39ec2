package heartbeat

import (
	"context"
	"encoding/json"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"go.uber.org/goleak"

	"github.com/switchboard-chat/switchboard/bus"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// fakeBus is a publisher that drops a message id it saw already, as
// JetStream's de-duplication does.
type fakeBus struct {
	mu   sync.Mutex
	seen map[string]bool
	msgs []published
}

type published struct {
	subject, msgID string
	data           []byte
}

func newFakeBus() *fakeBus { return &fakeBus{seen: map[string]bool{}} }

func (b *fakeBus) Publish(_ context.Context, subject string, data []byte, msgID string) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.seen[msgID] {
		return nil
	}
	b.seen[msgID] = true
	b.msgs = append(b.msgs, published{subject, msgID, data})
	return nil
}

// ids are the ids of the inbound triggers published, in order.
func (b *fakeBus) ids() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []string
	for _, m := range b.msgs {
		var in bus.Inbound
		if strings.Contains(m.subject, ".in.") && json.Unmarshal(m.data, &in) == nil {
			out = append(out, in.ID)
		}
	}
	return out
}

func (b *fakeBus) outbound() []bus.Outbound {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []bus.Outbound
	for _, m := range b.msgs {
		var o bus.Outbound
		if strings.Contains(m.subject, ".out.") && json.Unmarshal(m.data, &o) == nil {
			out = append(out, o)
		}
	}
	return out
}

type counts struct {
	mu sync.Mutex
	n  map[string]int
}

func (c *counts) Heartbeat(agent, outcome string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.n == nil {
		c.n = map[string]int{}
	}
	c.n[agent+":"+outcome]++
}

func (c *counts) get(k string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n[k]
}

var telegram42 = Target{Channel: "telegram", ChatID: "42"}

// start runs a runner of agents on dir in the bubble; stop ends and joins
// it and closes its file.
func start(t *testing.T, dir string, pub Publisher, opt Options, agents ...Agent) (r *Runner, stop func()) {
	t.Helper()
	opt.DataDir, opt.Publisher = dir, pub
	r = New(opt, agents)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	return r, func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	}
}

// at advances the bubble's clock to t (UTC on 2000-01-01, the bubble's
// start) and lets the runner act.
func at(t *testing.T, clock string) {
	t.Helper()
	want, err := time.Parse("2006-01-02 15:04", "2000-01-01 "+clock)
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Until(want))
	synctest.Wait()
}

func slotID(agent, clock string) string {
	ts, _ := time.Parse("2006-01-02 15:04", "2000-01-01 "+clock)
	return "hb:" + agent + ":" + strconv.FormatInt(ts.Unix(), 10)
}

// TestFiresAtIntervalWithinActiveHours: one trigger per slot of every,
// only within active_hours, with the slot's id, on the agent's heartbeat
// subject, in a session of its own.
func TestFiresAtIntervalWithinActiveHours(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b, obs := newFakeBus(), &counts{}
		_, stop := start(t, t.TempDir(), b, Options{Observer: obs},
			Agent{Name: "main", Config: Config{Every: 30 * time.Minute, To: telegram42, ActiveHours: "08:00-10:00", Timezone: "UTC"}})
		defer stop()
		at(t, "07:59")
		if got := b.ids(); len(got) != 0 {
			t.Fatalf("fired outside the active hours: %v", got)
		}
		at(t, "08:00")
		at(t, "09:45")
		at(t, "12:00")
		want := []string{slotID("main", "08:00"), slotID("main", "08:30"), slotID("main", "09:00"), slotID("main", "09:30")}
		if got := b.ids(); !slices.Equal(got, want) {
			t.Fatalf("fired %v, want %v", got, want)
		}
		if n := obs.get("main:fired"); n != 4 {
			t.Errorf("fired counted %d times, want 4", n)
		}
		b.mu.Lock()
		m := b.msgs[0]
		b.mu.Unlock()
		var in bus.Inbound
		if err := json.Unmarshal(m.data, &in); err != nil {
			t.Fatal(err)
		}
		if m.subject != "chat.in.heartbeat.main" || m.msgID != "heartbeat:"+in.ID || in.SessionKey() != "heartbeat/main" ||
			!strings.Contains(in.Text, "HEARTBEAT.md") || in.Meta[MetaAgent] != "main" {
			t.Errorf("trigger: subject %s, msg id %s, %+v", m.subject, m.msgID, in)
		}
	})
}

// TestFiresOnceAcrossRestart: a slot recorded is not fired again by the
// next process, and a slot published but not recorded (a crash between
// the two) is published again with the same id, which the bus drops.
func TestFiresOnceAcrossRestart(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		dir, b := t.TempDir(), newFakeBus()
		hb := Agent{Name: "work", Config: Config{Every: time.Hour, To: telegram42}}
		_, stop := start(t, dir, b, Options{}, hb)
		at(t, "00:10")
		stop()
		_, stop = start(t, dir, b, Options{}, hb) // the restart, in the same slot
		at(t, "00:20")
		stop()
		if got, want := b.ids(), []string{slotID("work", "00:00")}; !slices.Equal(got, want) {
			t.Fatalf("after a restart in the same slot: %v, want %v", got, want)
		}
		// A process that lost its record publishes the same id: dropped.
		lost := &recorder{next: b}
		_, stop = start(t, t.TempDir(), lost, Options{}, hb)
		at(t, "00:30")
		stop()
		if len(lost.ids) != 1 || lost.ids[0] != "heartbeat:"+slotID("work", "00:00") {
			t.Fatalf("unrecorded slot published as %v, want the slot's own id", lost.ids)
		}
		_, stop = start(t, dir, b, Options{}, hb)
		at(t, "01:05")
		stop()
		if got, want := b.ids(), []string{slotID("work", "00:00"), slotID("work", "01:00")}; !slices.Equal(got, want) {
			t.Fatalf("fired %v, want %v", got, want)
		}
	})
}

type recorder struct {
	next Publisher
	ids  []string
}

func (r *recorder) Publish(ctx context.Context, subject string, data []byte, msgID string) error {
	r.ids = append(r.ids, msgID)
	return r.next.Publish(ctx, subject, data, msgID)
}

// TestSkippedWhileChatBusy: a slot whose target chat has a turn running is
// skipped (counted), and the next slot fires.
func TestSkippedWhileChatBusy(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var mu sync.Mutex
		busy := map[string]bool{"telegram/42": true}
		isBusy := func(k string) bool { mu.Lock(); defer mu.Unlock(); return busy[k] }
		b, obs := newFakeBus(), &counts{}
		_, stop := start(t, t.TempDir(), b, Options{Busy: isBusy, Observer: obs}, Agent{Name: "main", Config: Config{Every: 10 * time.Minute, To: telegram42}})
		defer stop()
		at(t, "00:05")
		if got := b.ids(); len(got) != 0 || obs.get("main:skipped_busy") != 1 {
			t.Fatalf("busy chat: fired %v, skipped %d", got, obs.get("main:skipped_busy"))
		}
		mu.Lock()
		busy["telegram/42"] = false
		mu.Unlock()
		at(t, "00:15")
		if got, want := b.ids(), []string{slotID("main", "00:10")}; !slices.Equal(got, want) {
			t.Fatalf("fired %v, want %v", got, want)
		}
	})
}

// TestLastDirectChat: to: last is the last direct chat of the agent's,
// groups and other agents' chats aside; before any, the slot is skipped.
func TestLastDirectChat(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b, obs := newFakeBus(), &counts{}
		resolve := func(sp bus.Speaker) string {
			if sp.Channel == "slack" {
				return "work"
			}
			return "main"
		}
		dir := t.TempDir()
		r, stop := start(t, dir, b, Options{Resolve: resolve, Observer: obs}, Agent{Name: "main", Config: Config{Every: 10 * time.Minute, To: Target{Last: true}}})
		at(t, "00:05")
		if obs.get("main:skipped_no_target") != 1 {
			t.Fatalf("no chat yet: outcomes %v", obs.n)
		}
		for _, in := range []bus.Inbound{
			{Channel: "telegram", ChatID: "7", UserID: "7"},
			{Channel: "telegram", ChatID: "-100", UserID: "7", IsGroup: true},
			{Channel: "slack", ChatID: "D1", UserID: "U1"},
		} {
			data, _ := json.Marshal(in)
			r.noteInbound(data)
		}
		stop()
		r, stop = start(t, dir, b, Options{Resolve: resolve, Observer: obs}, Agent{Name: "main", Config: Config{Every: 10 * time.Minute, To: Target{Last: true}}})
		defer stop()
		synctest.Wait() // the restarted runner has read its state
		r.relay(context.Background(), final("main", "hb:main:1", bus.KindReply, "Your train leaves at 9."))
		got := b.outbound()
		if len(got) != 1 || got[0].Channel != "telegram" || got[0].ChatID != "7" {
			t.Fatalf("sent %+v, want one message to telegram 7 (the last direct chat, kept across a restart)", got)
		}
	})
}

func final(agent, inReplyTo, kind, text string) []byte {
	data, _ := json.Marshal(bus.Outbound{V: 1, ID: "o1", Channel: Channel, ChatID: agent, InReplyTo: inReplyTo, Kind: kind, Text: text, Final: true})
	return data
}

// TestRelaySendsOrStaysSilent: what the turn says goes to the target chat
// as a proactive message; HEARTBEAT_OK, an empty answer, an error and a
// delta send nothing.
func TestRelaySendsOrStaysSilent(t *testing.T) {
	b, obs := newFakeBus(), &counts{}
	r := New(Options{DataDir: t.TempDir(), Publisher: b, Observer: obs}, []Agent{{Name: "main", Config: Config{Every: time.Hour, To: telegram42}}})
	ctx := t.Context()
	for _, text := range []string{"HEARTBEAT_OK", "", "  **HEARTBEAT_OK.**\n", "heartbeat_ok"} {
		r.relay(ctx, final("main", "hb:main:1", bus.KindReply, text))
	}
	r.relay(ctx, final("main", "hb:main:2", bus.KindError, "The model is not configured."))
	delta, _ := json.Marshal(bus.Outbound{V: 1, ID: "d", Channel: Channel, ChatID: "main", InReplyTo: "hb:main:3", Kind: "delta", Text: "Rain"})
	r.relay(ctx, delta)
	if got := b.outbound(); len(got) != 0 {
		t.Fatalf("silent answers sent %+v", got)
	}
	if obs.get("main:silent") != 4 || obs.get("main:failed") != 1 {
		t.Errorf("outcomes %v", obs.n)
	}
	r.relay(ctx, final("main", "hb:main:4", bus.KindReply, "Rain at 5 pm: take an umbrella."))
	r.relay(ctx, final("main", "hb:main:4", bus.KindReply, "Rain at 5 pm: take an umbrella.")) // redelivered final
	got := b.outbound()
	want := []bus.Outbound{{V: 1, ID: "hb-out:hb:main:4", Channel: "telegram", ChatID: "42", Kind: bus.KindReply,
		Text: "Rain at 5 pm: take an umbrella.", Final: true, Meta: map[string]string{MetaAgent: "main"}}}
	if len(got) != 1 || got[0].InReplyTo != "" || got[0].ID != want[0].ID || got[0].Text != want[0].Text || got[0].ChatID != "42" || !got[0].Final {
		t.Fatalf("sent %+v, want %+v", got, want)
	}
	b.mu.Lock()
	subj := b.msgs[0].subject
	b.mu.Unlock()
	if subj != "chat.out.telegram.42" {
		t.Errorf("subject %s", subj)
	}
}

// TestConfigValidate: every problem named by its key.
func TestConfigValidate(t *testing.T) {
	for _, tt := range []struct {
		c    Config
		want string
	}{
		{Config{}, ""},
		{Config{Every: 30 * time.Minute, To: Target{Last: true}, ActiveHours: "22:00-06:00", Timezone: "Asia/Tokyo"}, ""},
		{Config{Every: 4 * time.Minute, To: telegram42}, "heartbeat.every: 4m0s is too often: at least 5m0s"},
		{Config{Every: time.Hour}, "heartbeat.to: required with every"},
		{Config{Every: time.Hour, To: Target{Channel: "Tele gram", ChatID: "1"}}, "heartbeat.to.channel: \"Tele gram\" is not a channel name"},
		{Config{Every: time.Hour, To: Target{Channel: Channel, ChatID: "1"}}, "heartbeat.to.channel: \"heartbeat\" is the heartbeat's own channel"},
		{Config{Every: time.Hour, To: telegram42, ActiveHours: "08:00"}, "heartbeat.active_hours: \"08:00\": want HH:MM-HH:MM"},
		{Config{Every: time.Hour, To: telegram42, ActiveHours: "08:00-08:00"}, "empty range"},
		{Config{Every: time.Hour, To: telegram42, Timezone: "Nowhere/City"}, "heartbeat.timezone: unknown time zone Nowhere/City"},
	} {
		err := tt.c.Validate()
		if tt.want == "" && err != nil || tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)) {
			t.Errorf("Validate(%+v) = %v, want %q", tt.c, err, tt.want)
		}
	}
	night := Config{ActiveHours: "22:00-06:00", Timezone: "UTC"}
	for clock, want := range map[string]bool{"23:30": true, "05:59": true, "06:00": false, "12:00": false, "22:00": true} {
		ts, _ := time.Parse("2006-01-02 15:04", "2000-01-01 "+clock)
		if got := night.active(ts); got != want {
			t.Errorf("active(%s) in 22:00-06:00 = %t", clock, got)
		}
	}
}

// TestSwapChangesSchedules: a reload's heartbeats apply at once (a new
// schedule fires in its slot, a removed one stops) and each change is
// described.
func TestSwapChangesSchedules(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := newFakeBus()
		r, stop := start(t, t.TempDir(), b, Options{}, Agent{Name: "main"})
		defer stop()
		at(t, "00:30")
		changes := r.Swap([]Agent{{Name: "main", Config: Config{Every: time.Hour, To: telegram42}}})
		if len(changes) != 1 || changes[0] != "agents.main.heartbeat: every 1h0m0s to telegram/42" {
			t.Fatalf("changes %q", changes)
		}
		synctest.Wait()
		at(t, "01:10")
		if got, want := b.ids(), []string{slotID("main", "00:00"), slotID("main", "01:00")}; !slices.Equal(got, want) {
			t.Fatalf("fired %v, want %v (the current slot at once, then the next)", got, want)
		}
		if changes := r.Swap([]Agent{{Name: "main"}}); len(changes) != 1 || changes[0] != "agents.main.heartbeat: off" {
			t.Fatalf("changes %q", changes)
		}
		at(t, "03:00")
		if n := len(b.ids()); n != 2 {
			t.Fatalf("fired %d after the heartbeat was turned off", n)
		}
	})
}

// TestInboundNotFollowedWithoutLastTarget: the runner follows inbound
// messages only while some agent's heartbeat goes to "last" (a message
// per chat would otherwise cost a decode and a state-file write: at a
// thousand chats, one fsync per message); a reload that sets "last"
// turns it on.
func TestInboundNotFollowedWithoutLastTarget(t *testing.T) {
	fixed := Config{Every: time.Hour, To: Target{Channel: "telegram", ChatID: "1"}}
	r := New(Options{}, []Agent{{Name: "main", Config: fixed}})
	if r.wantLast.Load() {
		t.Fatal("inbound messages are followed with no heartbeat to last")
	}
	r.noteInbound([]byte(`{"v":1,"id":"m1","channel":"console","chat_id":"c1","user_id":"u","text":"hi"}`)) // no state file: must not be touched
	if len(r.last) != 0 {
		t.Fatalf("last chats recorded: %v", r.last)
	}
	r.Swap([]Agent{{Name: "main", Config: Config{Every: time.Hour, To: Target{Last: true}}}})
	if !r.wantLast.Load() {
		t.Fatal("a heartbeat to last does not follow inbound messages")
	}
}

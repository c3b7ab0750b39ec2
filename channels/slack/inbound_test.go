package slack

import (
	"encoding/base64"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/nats-io/nats.go"

	"github.com/switchboard-chat/switchboard/bus"
	"github.com/switchboard-chat/switchboard/internal/kvstate"
)

func TestSocketModeDirectMessageRoundTrip(t *testing.T) {
	e := newEnv(t)
	in := e.collectIn()
	e.answer(func(in bus.Inbound) []bus.Outbound {
		return []bus.Outbound{outFor(in, bus.KindReply, "**Hello** "+in.UserName, 2, true)}
	})
	e.start(e.adapter(e.config()))

	e.send("env1", dm("U1", "D1", "1700000000.000100", "hi &amp; &lt;there&gt;"))
	got, m := waitInbound(t, in, "hi & <there>")
	want := bus.Inbound{
		V: 1, ID: "T1:D1:1700000000.000100", Channel: "slack", ChatID: "D1", UserID: "U1", UserName: "Ann",
		Text: "hi & <there>", TS: "2023-11-14T22:13:20.0001Z",
		Meta: map[string]string{"team": "T1", "ts": "1700000000.000100"},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("inbound (-want +got):\n%s", diff)
	}
	if id := m.Header.Get(bus.HeaderMsgID); id != "slack:T1:D1:1700000000.000100" {
		t.Errorf("Nats-Msg-Id = %q", id)
	}
	posts := e.slack.waitCalls(t, "chat.postMessage", 1)
	if p := posts[0].form; p.Get("channel") != "D1" || p.Get("text") != "*Hello* Ann" || p.Get("thread_ts") != "" {
		t.Errorf("reply posted as %v, want *Hello* Ann at the top level of D1", p)
	}
}

func TestSocketModeAcksEveryEnvelope(t *testing.T) {
	e := newEnv(t)
	in := e.collectIn()
	e.start(e.adapter(e.config()))

	// An event the adapter ignores, an event type slack-go cannot parse,
	// and a slash command are acknowledged as well as a message.
	e.send("ign", map[string]any{"type": "reaction_added", "user": "U1", "item": map[string]any{}, "channel": "C1"})
	e.slack.sendRaw([]byte(`{"type":"events_api","envelope_id":"bad","payload":{"type":"event_callback","event_id":"EvBad","event":{"type":"message","channel":"D1","channel_type":"im","user":"U1","ts":"5.1","text":"odd","blocks":"not a list"}}}`))
	e.slack.waitAck(t, "bad")
	e.slack.sendRaw([]byte(`{"type":"slash_commands","envelope_id":"cmd","payload":{"command":"/x","text":"y"}}`))
	e.slack.waitAck(t, "cmd")
	e.send("msg", dm("U1", "D1", "6.1", "after"))
	waitInbound(t, in, "after")
	if got := texts(t, in); !slices.Contains(got, "odd") {
		t.Errorf("inbound texts %q: the event slack-go could not parse was not processed", got)
	}
}

func TestNoLoops(t *testing.T) {
	e := newEnv(t)
	in := e.collectIn()
	e.start(e.adapter(e.config()))

	botMsg := dm("U1", "D1", "1.1", "from a bot")
	botMsg["bot_id"] = "B9"
	own := dm(botUser, "D1", "1.2", "from myself")
	edited := dm("U1", "D1", "1.3", "edited")
	edited["subtype"] = "message_changed"
	joined := channelMsg("U1", "C1", "1.4", "", "<@UBOT> joined")
	joined["subtype"] = "channel_join"
	botMention := mention("U1", "C1", "1.5", "", "<@UBOT> from a bot")
	botMention["bot_id"] = "B9"
	for i, ev := range []map[string]any{botMsg, own, edited, joined, botMention} {
		e.send("loop"+itoa(i), ev)
	}
	// Events are processed in order per channel: once these arrive, the
	// ones before them were handled.
	e.send("s1", dm("U1", "D1", "2.1", "sentinel dm"))
	e.send("s2", mention("U1", "C1", "2.2", "", "<@UBOT> sentinel channel"))
	waitInbound(t, in, "sentinel dm")
	waitInbound(t, in, "sentinel channel")
	if got := texts(t, in); len(got) != 2 {
		t.Errorf("inbound texts = %q, want only the sentinels", got)
	}
}

func TestDeduplication(t *testing.T) {
	e := newEnv(t)
	in := e.collectIn()
	e.start(e.adapter(e.config()))

	// A Socket Mode retry of the same event.
	p := payload("EvRetry", mention("U1", "C1", "3.1", "", "<@UBOT> retried"))
	e.slack.sendEnvelope("r1", 0, p)
	e.slack.sendEnvelope("r2", 1, p)
	e.slack.waitAck(t, "r1")
	e.slack.waitAck(t, "r2")
	// A mention that also arrives as a channel message (different event
	// ids, same channel and ts), in both orders.
	e.send("m1", mention("U1", "C1", "3.2", "", "<@UBOT> twice"))
	e.send("m2", channelMsg("U1", "C1", "3.2", "", "<@UBOT> twice"))
	e.send("m3", channelMsg("U1", "C1", "3.3", "", "<@UBOT> twice again"))
	e.send("m4", mention("U1", "C1", "3.3", "", "<@UBOT> twice again"))
	e.send("s", mention("U1", "C1", "3.4", "", "<@UBOT> sentinel"))
	waitInbound(t, in, "sentinel")
	if got, want := texts(t, in), []string{"retried", "twice", "twice again", "sentinel"}; !cmp.Equal(got, want) {
		t.Errorf("inbound texts = %q, want %q", got, want)
	}
}

func TestDeduplicationAcrossRestartsUsesMsgID(t *testing.T) {
	e := newEnv(t)
	in := e.collectIn()
	r := e.start(e.adapter(e.config()))
	e.send("a", mention("U1", "C1", "4.1", "", "<@UBOT> once"))
	waitInbound(t, in, "once")
	r.stop(t)

	// A new adapter has no memory of the message; the bus drops the copy
	// by its Nats-Msg-Id.
	e.start(e.adapter(e.config()))
	e.send("b", channelMsg("U1", "C1", "4.1", "", "<@UBOT> once"))
	e.send("c", mention("U1", "C1", "4.2", "", "<@UBOT> sentinel"))
	waitInbound(t, in, "sentinel")
	var ids []string
	for _, m := range in.All() {
		ids = append(ids, m.Header.Get(bus.HeaderMsgID))
	}
	if want := []string{"slack:T1:C1:4.1", "slack:T1:C1:4.1", "slack:T1:C1:4.2"}; !cmp.Equal(ids, want) {
		t.Errorf("published Nats-Msg-Ids = %q, want %q", ids, want)
	}
	// The collector sees a publish before the stream has stored it: wait
	// until the sentinel is stored, then count.
	n := e.streamMsgs()
	for deadline := time.Now().Add(5 * time.Second); n < 2 && time.Now().Before(deadline); n = e.streamMsgs() {
		runtime.Gosched()
	}
	if n != 2 {
		t.Errorf("CHAT_IN holds %d messages, want 2 (the copy de-duplicated)", n)
	}
}

func TestThreadsAndSessions(t *testing.T) {
	e := newEnv(t)
	in := e.collectIn()
	e.answer(func(in bus.Inbound) []bus.Outbound {
		return []bus.Outbound{outFor(in, bus.KindReply, "re: "+in.Text, 2, true)}
	})
	e.start(e.adapter(e.config()))

	// A top-level mention starts a thread of its own.
	e.send("a", mention("U1", "C1", "10.1", "", "<@UBOT> start"))
	top, _ := waitInbound(t, in, "start")
	if top.ThreadID != "10.1" || !top.IsGroup || !top.Mentioned || top.ReplyTo != "" || top.Meta["thread_ts"] != "10.1" {
		t.Errorf("top-level mention = %+v, want thread 10.1, group, mentioned", top)
	}
	post := e.slack.waitCalls(t, "chat.postMessage", 1)[0].form
	if post.Get("thread_ts") != "10.1" || post.Get("text") != "re: start" {
		t.Errorf("reply = %v, want it in thread 10.1", post)
	}
	// A reply in that thread, without a mention: the same session.
	e.send("b", channelMsg("U2", "C1", "10.2", "10.1", "follow up"))
	reply, _ := waitInbound(t, in, "follow up")
	if reply.ThreadID != "10.1" || !reply.Mentioned || reply.UserName != "Bob" || reply.ReplyTo != "T1:C1:10.1" {
		t.Errorf("thread reply = %+v, want thread 10.1, mentioned, from Bob", reply)
	}
	post = e.slack.waitCalls(t, "chat.postMessage", 2)[1].form
	if post.Get("thread_ts") != "10.1" {
		t.Errorf("second reply = %v, want it in thread 10.1", post)
	}
	// A DM reply inside a DM thread goes to that thread; the session is
	// still the DM.
	e.send("c", map[string]any{"type": "message", "channel_type": "im", "user": "U1", "channel": "D1", "ts": "11.2", "thread_ts": "11.1", "text": "in dm thread"})
	d, _ := waitInbound(t, in, "in dm thread")
	if d.ThreadID != "" || d.IsGroup || d.Meta["thread_ts"] != "11.1" {
		t.Errorf("dm thread message = %+v, want the DM session, reply thread 11.1", d)
	}
	post = e.slack.waitCalls(t, "chat.postMessage", 3)[2].form
	if post.Get("channel") != "D1" || post.Get("thread_ts") != "11.1" {
		t.Errorf("dm reply = %v, want D1 thread 11.1", post)
	}
}

func TestThreadContextOnFirstMentionInThread(t *testing.T) {
	e := newEnv(t)
	in := e.collectIn()
	e.slack.setReplies("20.1", []map[string]any{
		{"type": "message", "user": "U2", "text": "the build is red", "ts": "20.1"},
		{"type": "message", "user": "U1", "text": "since <https://ci.example/42|run 42>", "ts": "20.2"},
		{"type": "message", "bot_id": "B7", "username": "ci-bot", "text": "still failing", "ts": "20.3", "subtype": "bot_message"},
		{"type": "message", "user": "U1", "text": "joined", "ts": "20.35", "subtype": "channel_join"},
		{"type": "message", "user": "U1", "text": "<@UBOT> why?", "ts": "20.4"},
	})
	e.start(e.adapter(e.config()))
	e.send("a", mention("U1", "C1", "20.4", "20.1", "<@UBOT> why?"))
	want := "(Earlier messages in this thread:)\n[Bob]: the build is red\n[Ann]: since run 42 (https://ci.example/42)\n[ci-bot]: still failing\n(End of earlier messages.)\n\nwhy?"
	got, _ := waitInbound(t, in, want)
	if got.ThreadID != "20.1" {
		t.Errorf("thread_id = %q, want 20.1", got.ThreadID)
	}
	// Once the bot is part of the thread, no context is added again.
	e.send("b", mention("U1", "C1", "20.5", "20.1", "<@UBOT> and now?"))
	waitInbound(t, in, "and now?")
	if n := len(e.slack.callsOf("conversations.replies")); n != 1 {
		t.Errorf("conversations.replies called %d times, want 1", n)
	}
}

func TestGroupTriggers(t *testing.T) {
	for _, tt := range []struct {
		trigger string
		want    []string
	}{
		{TriggerMentionOrThread, []string{"mention", "reply in answered thread", "sentinel"}},
		{TriggerMention, []string{"mention", "sentinel"}},
		{TriggerAll, []string{"plain", "mention", "reply in answered thread", "reply in other thread", "sentinel"}},
	} {
		t.Run(tt.trigger, func(t *testing.T) {
			e := newEnv(t)
			in := e.collectIn()
			cfg := e.config()
			cfg.GroupTrigger = tt.trigger
			e.start(e.adapter(cfg))
			e.send("a", channelMsg("U1", "C1", "30.1", "", "plain"))
			e.send("b", mention("U1", "C1", "30.2", "", "<@UBOT> mention"))
			e.send("c", channelMsg("U1", "C1", "30.3", "30.2", "reply in answered thread"))
			e.send("d", channelMsg("U1", "C1", "30.5", "30.4", "reply in other thread"))
			e.send("z", mention("U1", "C1", "30.9", "", "<@UBOT> sentinel"))
			waitInbound(t, in, "sentinel")
			if got := texts(t, in); !cmp.Equal(got, tt.want) {
				t.Errorf("inbound texts = %q, want %q", got, tt.want)
			}
		})
	}
}

func TestAnsweredThreadsSurviveRestart(t *testing.T) {
	e := newEnv(t)
	in := e.collectIn()
	r := e.start(e.adapter(e.config()))
	e.send("a", mention("U1", "C1", "40.1", "", "<@UBOT> start"))
	waitInbound(t, in, "start")
	r.stop(t)

	e.start(e.adapter(e.config())) // same data file
	e.send("b", channelMsg("U1", "C1", "40.2", "40.1", "still here?"))
	got, _ := waitInbound(t, in, "still here?")
	if !got.Mentioned || got.ThreadID != "40.1" {
		t.Errorf("reply after restart = %+v, want a mentioned message of thread 40.1", got)
	}
}

func TestAllowUsersDeniesWithOneEphemeral(t *testing.T) {
	e := newEnv(t)
	in := e.collectIn()
	cfg := e.config()
	cfg.AllowUsers = []string{"U2"}
	e.start(e.adapter(cfg))

	e.send("a", dm("U1", "D1", "50.1", "let me in"))
	e.send("b", mention("U1", "C1", "50.2", "", "<@UBOT> please"))
	e.send("c", dm("U2", "D2", "50.3", "allowed"))
	waitInbound(t, in, "allowed")
	eph := e.slack.waitCalls(t, "chat.postEphemeral", 1)
	e.send("d", mention("U2", "C1", "50.4", "", "<@UBOT> sentinel"))
	waitInbound(t, in, "sentinel")
	if got := texts(t, in); !cmp.Equal(got, []string{"allowed", "sentinel"}) {
		t.Errorf("inbound texts = %q", got)
	}
	if n := len(e.slack.callsOf("chat.postEphemeral")); n != 1 {
		t.Errorf("%d ephemeral messages, want 1", n)
	}
	// The two denied events are handled concurrently: the one refused
	// first (the direct message or the mention) gets the explanation.
	f := eph[0].form
	if ch := f.Get("channel"); f.Get("user") != "U1" || (ch != "D1" && ch != "C1") || !strings.Contains(f.Get("text"), "`U1`") ||
		!strings.Contains(f.Get("text"), "channels.slack.allow_users") {
		t.Errorf("ephemeral = %v, want one to U1 naming its id and channels.slack.allow_users", f)
	}
}

func TestAllowUsersEmptyDeniesEveryone(t *testing.T) {
	e := newEnv(t)
	cfg := e.config()
	cfg.AllowUsers = nil
	e.start(e.adapter(cfg))
	e.send("a", mention("U2", "C1", "51.1", "51.0", "<@UBOT> hi"))
	f := e.slack.waitCalls(t, "chat.postEphemeral", 1)[0].form
	if f.Get("user") != "U2" || f.Get("thread_ts") != "51.0" {
		t.Errorf("ephemeral = %v, want to U2 in thread 51.0", f)
	}
	if n := e.streamMsgs(); n != 0 {
		t.Errorf("%d inbound messages published, want none", n)
	}
}

func TestAllowChannels(t *testing.T) {
	e := newEnv(t)
	in := e.collectIn()
	cfg := e.config()
	cfg.AllowChannels = []string{"C2"}
	e.start(e.adapter(cfg))
	e.send("a", mention("U1", "C1", "52.1", "", "<@UBOT> elsewhere"))
	e.send("b", mention("U1", "C2", "52.2", "", "<@UBOT> here"))
	e.send("c", dm("U1", "D1", "52.3", "dm still works"))
	waitInbound(t, in, "here")
	waitInbound(t, in, "dm still works")
	e.send("d", mention("U1", "C1", "52.4", "", "<@UBOT> sentinel"))
	e.send("e", mention("U1", "C2", "52.5", "", "<@UBOT> sentinel 2"))
	waitInbound(t, in, "sentinel 2")
	if got := texts(t, in); slices.Contains(got, "elsewhere") || slices.Contains(got, "sentinel") {
		t.Errorf("inbound texts = %q: a message of a channel not allowed got through", got)
	}
	if n := len(e.slack.callsOf("chat.postEphemeral")); n != 0 {
		t.Errorf("%d ephemeral messages for a channel not allowed, want 0", n)
	}
}

func TestFilesSharedWithTheBot(t *testing.T) {
	e := newEnv(t)
	in := e.collectIn()
	png := []byte("\x89PNG\r\n\x1a\nfake image")
	e.slack.addFile("F1", map[string]any{"name": "cat.png", "mimetype": "image/png", "size": len(png)}, png)
	e.slack.addFile("F2", map[string]any{"name": "../Q3 report.pdf", "mimetype": "application/pdf", "size": 9}, []byte("%PDF-1.7"))
	e.slack.addFile("F3", map[string]any{"name": "notes.txt", "mimetype": "text/plain", "size": 5}, []byte("notes"))
	big := []byte(strings.Repeat("x", maxImageBytes+1))
	e.slack.addFile("F4", map[string]any{"name": "huge.jpg", "mimetype": "image/jpeg", "size": len(big)}, big)
	e.start(e.adapter(e.config()))

	ev := dm("U1", "D1", "60.1", "look")
	ev["subtype"] = "file_share"
	e.slack.mu.Lock()
	ev["files"] = []map[string]any{
		e.slack.files["F1"].info,
		e.slack.files["F2"].info,
		{"id": "F3", "file_access": "check_file_info"}, // Slack Connect: only the id
		e.slack.files["F4"].info,
	}
	e.slack.mu.Unlock()
	e.send("a", ev)
	got, _ := waitInbound(t, in, "look\n\n"+
		"[file \"../Q3 report.pdf\" saved in the workspace as inbox/slack/D1/F2-_Q3_report.pdf (application/pdf, 8 bytes)]\n"+
		"[file \"notes.txt\" saved in the workspace as inbox/slack/D1/F3-notes.txt (text/plain, 5 bytes)]\n"+
		"[file \"huge.jpg\" saved in the workspace as inbox/slack/D1/F4-huge.jpg (image/jpeg, 524289 bytes)]")
	want := []bus.Attachment{{Kind: "image", MIME: "image/png", Name: "cat.png", Size: int64(len(png)), Data: base64.StdEncoding.EncodeToString(png)}}
	if diff := cmp.Diff(want, got.Attachments); diff != "" {
		t.Errorf("attachments (-want +got):\n%s", diff)
	}
	for name, content := range map[string]string{"inbox/slack/D1/F2-_Q3_report.pdf": "%PDF-1.7", "inbox/slack/D1/F3-notes.txt": "notes"} {
		b, err := e.root.ReadFile(name)
		if err != nil || string(b) != content {
			t.Errorf("%s = %q, %v; want %q", name, b, err, content)
		}
	}
	if n := len(e.slack.callsOf("files.info")); n != 1 {
		t.Errorf("files.info called %d times, want 1 (for the Slack Connect file)", n)
	}
}

func TestFileDownloadFailureIsDescribed(t *testing.T) {
	e := newEnv(t)
	in := e.collectIn()
	e.start(e.adapter(e.config()))
	ev := dm("U1", "D1", "61.1", "")
	ev["subtype"] = "file_share"
	ev["files"] = []map[string]any{
		{"id": "FX", "name": "gone.png", "mimetype": "image/png", "size": 3, "url_private_download": e.slack.srv.URL + "/files/FX"},
		{"id": "FY", "file_access": "check_file_info"},
		{"id": "FZ", "name": "deleted.txt", "mode": "tombstone"},
	}
	e.send("a", ev)
	waitInbound(t, in, "[image \"gone.png\" was shared but could not be downloaded]\n"+
		"[a file (FY) was shared but could not be read: file_not_found]\n"+
		"[file \"deleted.txt\" is not available]")
}

func TestMentionTextConversion(t *testing.T) {
	e := newEnv(t)
	in := e.collectIn()
	e.start(e.adapter(e.config()))
	e.send("a", mention("U1", "C1", "70.1", "", "<@UBOT> ask <@U2> about <#C9|general> and <https://x.example/a?b=1&amp;c=2|this>, <!here>"))
	waitInbound(t, in, "ask @Bob about #general and this (https://x.example/a?b=1&c=2), @here")
	e.send("b", mention("U1", "C1", "70.2", "", "<@UBOT>"))
	waitInbound(t, in, "(empty message)")
}

func TestMaxTextBytesCutsLongMessages(t *testing.T) {
	e := newEnv(t)
	in := e.collectIn()
	a, err := New(e.config(), Options{Conn: e.nc, MaxTextBytes: 64})
	if err != nil {
		t.Fatal(err)
	}
	a.rate = 1e9
	e.start(a)
	e.send("a", dm("U1", "D1", "80.1", strings.Repeat("é", 100)))
	m := in.WaitFor(t, waitTimeout, func(*nats.Msg) bool { return true })
	got := inbound(t, m).Text
	if len(got) > 64 || !strings.HasSuffix(got, "[…message cut: too long]") {
		t.Errorf("text = %q (%d bytes), want at most 64 bytes ending with the cut mark", got, len(got))
	}
}

// Two instances share the answered threads (memory.store jetstream): the
// instance that takes the channel over, with a data_dir of its own, still
// answers replies in a thread the first one answered.
func TestAnsweredThreadsTakenOverByAnotherInstance(t *testing.T) {
	e := newEnv(t)
	in := e.collectIn()
	shared := func() State {
		nc, err := nats.Connect(e.nc.ConnectedUrl())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(nc.Close)
		set, err := kvstate.Open(t.Context(), nc, kvstate.Config{Prefix: "chat"}, nil)
		if err != nil {
			t.Fatal(err)
		}
		return set.Channels
	}
	instance := func() *Adapter {
		e.store = filepath.Join(t.TempDir(), "slack.db")
		a := e.adapter(e.config())
		a.opts.State = shared()
		return a
	}
	r := e.start(instance())
	e.send("a", mention("U1", "C1", "40.1", "", "<@UBOT> start"))
	waitInbound(t, in, "start")
	r.stop(t)

	e.start(instance())
	e.send("b", channelMsg("U1", "C1", "40.2", "40.1", "still here?"))
	got, _ := waitInbound(t, in, "still here?")
	if !got.Mentioned || got.ThreadID != "40.1" {
		t.Errorf("reply on the second instance = %+v, want a mentioned message of thread 40.1", got)
	}
}

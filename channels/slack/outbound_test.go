package slack

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"
	"unicode/utf8"

	slackapi "github.com/slack-go/slack"

	"github.com/switchboard-chat/switchboard/bus"
	"github.com/switchboard-chat/switchboard/bus/bridge"
	"github.com/switchboard-chat/switchboard/channels"
)

// offline returns an adapter ready to handle outbound messages directly
// (its handler called by the test, no bus): Web API client on the fake,
// identity set, state in memory or in storePath.
func (e *env) offline(storePath string) *Adapter {
	e.t.Helper()
	a := e.adapter(e.config())
	a.api = slackapi.New(botToken, slackapi.OptionAPIURL(a.cfg.APIURL))
	st, err := openStore(e.t.Context(), storePath, nil, a.now)
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { _ = st.close() })
	a.store = st
	a.self = identity{UserID: botUser, BotID: botID, TeamID: teamID}
	return a
}

// turnIn is the inbound message the outbound envelopes of these tests
// answer: a mention in channel C1 that started thread 10.1.
var turnIn = bus.Inbound{ID: "T1:C1:10.1", Channel: "slack", ChatID: "C1", ThreadID: "10.1",
	Meta: map[string]string{"team": "T1", "ts": "10.1", "thread_ts": "10.1"}}

func mustHandle(t *testing.T, a *Adapter, o bus.Outbound) {
	t.Helper()
	if err := a.out.handle(t.Context(), o); err != nil {
		t.Fatalf("handle %s %s: %v", o.Kind, o.ID, err)
	}
}

// counts returns how often each method was called.
func (f *fakeSlack) counts(methods ...string) map[string]int {
	out := make(map[string]int)
	for _, m := range methods {
		out[m] = len(f.callsOf(m))
	}
	return out
}

func wantCounts(t *testing.T, f *fakeSlack, want map[string]int) {
	t.Helper()
	var methods []string
	for m := range want {
		methods = append(methods, m)
	}
	got := f.counts(methods...)
	for m, n := range want {
		if got[m] != n {
			t.Errorf("%s called %d times, want %d (calls: %s)", m, got[m], n, f.describe())
		}
	}
}

// shownText returns the current text of a posted message.
func (f *fakeSlack) shownText(ts string) string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.msgs[ts].Get("text")
}

func TestStreamingPostsThenEditsAtMostOncePerSecond(t *testing.T) {
	e := newEnv(t)
	a := e.offline("")
	mustHandle(t, a, outFor(turnIn, bus.KindTyping, "", 1, false))
	wantCounts(t, e.slack, map[string]int{"assistant.threads.setStatus": 1, "chat.postMessage": 0})
	st := e.slack.callsOf("assistant.threads.setStatus")[0].form
	if st.Get("channel_id") != "C1" || st.Get("thread_ts") != "10.1" || st.Get("status") != statusText {
		t.Errorf("setStatus = %v", st)
	}

	mustHandle(t, a, outFor(turnIn, bus.KindDelta, "Hello", 2, false))
	wantCounts(t, e.slack, map[string]int{"chat.postMessage": 1, "chat.update": 0})
	e.clock.Add(500 * time.Millisecond)
	mustHandle(t, a, outFor(turnIn, bus.KindDelta, "Hello, wor", 3, false))
	wantCounts(t, e.slack, map[string]int{"chat.postMessage": 1, "chat.update": 0})
	e.clock.Add(500 * time.Millisecond)
	mustHandle(t, a, outFor(turnIn, bus.KindDelta, "Hello, world", 4, false))
	wantCounts(t, e.slack, map[string]int{"chat.postMessage": 1, "chat.update": 1})
	e.clock.Add(2 * time.Second)
	mustHandle(t, a, outFor(turnIn, bus.KindDelta, "Hello", 3, false)) // stale
	mustHandle(t, a, outFor(turnIn, bus.KindTyping, "", 4, false))     // something is shown already
	wantCounts(t, e.slack, map[string]int{"chat.update": 1, "assistant.threads.setStatus": 1})

	mustHandle(t, a, outFor(turnIn, bus.KindReply, "Hello, **world**!", 5, true))
	mustHandle(t, a, outFor(turnIn, bus.KindDelta, "late", 6, false))
	wantCounts(t, e.slack, map[string]int{"chat.postMessage": 1, "chat.update": 2, "chat.delete": 0})
	post := e.slack.callsOf("chat.postMessage")[0].form
	if post.Get("thread_ts") != "10.1" || post.Get("channel") != "C1" {
		t.Errorf("stream posted as %v, want in thread 10.1 of C1", post)
	}
	if got := e.slack.shownText("1800000000.000001"); got != "Hello, *world*!" {
		t.Errorf("message shows %q, want the final text", got)
	}
}

func TestStatusFallsBackToAPlaceholder(t *testing.T) {
	e := newEnv(t)
	e.slack.setStatusError("not_allowed_token_type")
	a := e.offline("")
	mustHandle(t, a, outFor(turnIn, bus.KindTyping, "", 1, false))
	posts := e.slack.waitCalls(t, "chat.postMessage", 1)
	if got := posts[0].form.Get("text"); got != placeholderText {
		t.Errorf("placeholder = %q", got)
	}
	// The first delta replaces the placeholder at once.
	mustHandle(t, a, outFor(turnIn, bus.KindDelta, "Thinking done", 2, false))
	wantCounts(t, e.slack, map[string]int{"chat.postMessage": 1, "chat.update": 1})
	mustHandle(t, a, outFor(turnIn, bus.KindReply, "Thinking done.", 3, true))
	if got := e.slack.shownText("1800000000.000001"); got != "Thinking done." {
		t.Errorf("message shows %q", got)
	}

	// The next turn goes straight to a placeholder; one that ends with
	// nothing to say removes it.
	next := turnIn
	next.ID = "T1:C1:10.2"
	mustHandle(t, a, outFor(next, bus.KindTyping, "", 1, false))
	mustHandle(t, a, outFor(next, bus.KindReply, "", 2, true))
	wantCounts(t, e.slack, map[string]int{"assistant.threads.setStatus": 1, "chat.postMessage": 2, "chat.delete": 1})
}

func TestEmptyFinalClearsTheStatus(t *testing.T) {
	e := newEnv(t)
	a := e.offline("")
	mustHandle(t, a, outFor(turnIn, bus.KindTyping, "", 1, false))
	mustHandle(t, a, outFor(turnIn, bus.KindNotice, "", 2, true))
	calls := e.slack.callsOf("assistant.threads.setStatus")
	if len(calls) != 2 || calls[1].form.Get("status") != "" {
		t.Errorf("setStatus calls = %v, want the status set then cleared", calls)
	}
	wantCounts(t, e.slack, map[string]int{"chat.postMessage": 0})
}

func TestDirectMessageStatusUsesTheMessageTS(t *testing.T) {
	e := newEnv(t)
	a := e.offline("")
	in := bus.Inbound{ID: "T1:D1:5.5", Channel: "slack", ChatID: "D1", Meta: map[string]string{"team": "T1", "ts": "5.5"}}
	mustHandle(t, a, outFor(in, bus.KindTyping, "", 1, false))
	mustHandle(t, a, outFor(in, bus.KindReply, "hi", 2, true))
	if st := e.slack.callsOf("assistant.threads.setStatus")[0].form; st.Get("thread_ts") != "5.5" {
		t.Errorf("setStatus = %v, want thread_ts 5.5", st)
	}
	if p := e.slack.callsOf("chat.postMessage")[0].form; p.Get("thread_ts") != "" || p.Get("channel") != "D1" {
		t.Errorf("reply = %v, want the top level of D1", p)
	}
}

func TestLongRepliesAreSplit(t *testing.T) {
	e := newEnv(t)
	a := e.offline("")
	para := strings.Repeat("word ", 400) // 2000 characters
	code := "```go\n" + strings.Repeat("fmt.Println(\"line\")\n", 200) + "```"
	text := para + "\n\n" + para + "\n\n" + code + "\n\n" + para
	mustHandle(t, a, outFor(turnIn, bus.KindReply, text, 1, true))
	posts := e.slack.callsOf("chat.postMessage")
	if len(posts) < 3 {
		t.Fatalf("%d messages posted, want the reply split in at least 3", len(posts))
	}
	var all strings.Builder
	for i, p := range posts {
		msg := p.form.Get("text")
		if n := utf8.RuneCountInString(msg); n > pieceLimit {
			t.Errorf("message %d has %d characters, want at most %d", i, n, pieceLimit)
		}
		if strings.Count(msg, "```")%2 != 0 {
			t.Errorf("message %d breaks a code block:\n%s", i, msg)
		}
		if p.form.Get("thread_ts") != "10.1" {
			t.Errorf("message %d not in the thread", i)
		}
		all.WriteString(msg)
	}
	if got, want := strings.Count(all.String(), "fmt.Println"), 200; got != want {
		t.Errorf("the pieces hold %d code lines, want %d", got, want)
	}
}

func TestStreamedMessagesFollowTheFinalSplit(t *testing.T) {
	e := newEnv(t)
	a := e.offline("")
	long := strings.Repeat("a ", 1500) + "\n\n" + strings.Repeat("b ", 1500) // two pieces
	mustHandle(t, a, outFor(turnIn, bus.KindDelta, long, 1, false))
	wantCounts(t, e.slack, map[string]int{"chat.postMessage": 2})
	// The final is short: the second message goes away.
	mustHandle(t, a, outFor(turnIn, bus.KindReply, "short after all", 2, true))
	wantCounts(t, e.slack, map[string]int{"chat.postMessage": 2, "chat.update": 1, "chat.delete": 1})
	if d := e.slack.callsOf("chat.delete")[0].form; d.Get("ts") != "1800000000.000002" {
		t.Errorf("deleted %v, want the second message", d)
	}
}

func TestEditOfAVanishedMessagePostsANewOne(t *testing.T) {
	e := newEnv(t)
	a := e.offline("")
	mustHandle(t, a, outFor(turnIn, bus.KindDelta, "draft", 1, false))
	e.slack.mu.Lock()
	delete(e.slack.msgs, "1800000000.000001") // someone deleted it
	e.slack.mu.Unlock()
	mustHandle(t, a, outFor(turnIn, bus.KindReply, "final", 2, true))
	posts := e.slack.callsOf("chat.postMessage")
	if len(posts) != 2 || posts[1].form.Get("text") != "final" {
		t.Errorf("posts = %v, want the final posted anew", posts)
	}
}

func TestRateLimitedPostWaitsRetryAfter(t *testing.T) {
	e := newEnv(t)
	e.slack.failNext("chat.postMessage", failure{status: http.StatusTooManyRequests, retryAfter: "7"})
	e.slack.failNext("chat.postMessage", failure{status: http.StatusTooManyRequests, retryAfter: "2"})
	a := e.offline("")
	mustHandle(t, a, outFor(turnIn, bus.KindReply, "patience", 1, true))
	if got := e.naps.all(); len(got) != 2 || got[0] != 7*time.Second || got[1] != 2*time.Second {
		t.Errorf("waited %v, want [7s 2s]", got)
	}
	posts := e.slack.callsOf("chat.postMessage")
	if len(posts) != 3 || posts[2].form.Get("text") != "patience" {
		t.Errorf("posts = %d, want 3 (two rate limited, one shown)", len(posts))
	}
}

func TestRateLimitedStreamingSkipsEditsUntilRetryAfter(t *testing.T) {
	e := newEnv(t)
	a := e.offline("")
	mustHandle(t, a, outFor(turnIn, bus.KindDelta, "one", 1, false))
	e.clock.Add(2 * time.Second)
	e.slack.failNext("chat.update", failure{status: http.StatusTooManyRequests, retryAfter: "30"})
	mustHandle(t, a, outFor(turnIn, bus.KindDelta, "one two", 2, false)) // 429: skipped
	e.clock.Add(10 * time.Second)
	mustHandle(t, a, outFor(turnIn, bus.KindDelta, "one two three", 3, false)) // still blocked
	wantCounts(t, e.slack, map[string]int{"chat.update": 1})
	if got := e.naps.all(); len(got) != 0 {
		t.Errorf("streaming waited %v, want no wait", got)
	}
	mustHandle(t, a, outFor(turnIn, bus.KindReply, "one two three four", 4, true))
	if got := e.slack.shownText("1800000000.000001"); got != "one two three four" {
		t.Errorf("message shows %q", got)
	}
}

func TestPerChannelPostLimiter(t *testing.T) {
	e := newEnv(t)
	a, err := New(e.config(), Options{Conn: e.nc})
	if err != nil {
		t.Fatal(err)
	}
	l1, l2 := a.limiter("C1"), a.limiter("C2")
	if l1 != a.limiter("C1") || l1 == l2 {
		t.Fatal("want one limiter per channel")
	}
	now := time.Unix(1000, 0)
	for i := range postBurst {
		if d := l1.ReserveN(now, 1).DelayFrom(now); d != 0 {
			t.Errorf("post %d of a burst delayed %s", i, d)
		}
	}
	if d := l1.ReserveN(now, 1).DelayFrom(now); d != time.Second {
		t.Errorf("post after the burst delayed %s, want 1s", d)
	}
	if d := l2.ReserveN(now, 1).DelayFrom(now); d != 0 {
		t.Errorf("another channel's post delayed %s", d)
	}
}

func TestOutboundErrorsPermanentOrRetried(t *testing.T) {
	for _, tt := range []struct {
		fail      failure
		permanent bool
	}{
		{failure{slackErr: "channel_not_found"}, true},
		{failure{slackErr: "not_in_channel"}, true},
		{failure{slackErr: "is_archived"}, true},
		{failure{slackErr: "invalid_auth"}, false},
		{failure{status: http.StatusInternalServerError}, false},
	} {
		t.Run(tt.fail.slackErr+http.StatusText(tt.fail.status), func(t *testing.T) {
			e := newEnv(t)
			e.slack.failNext("chat.postMessage", tt.fail)
			a := e.offline("")
			err := a.out.handle(t.Context(), outFor(turnIn, bus.KindReply, "x", 1, true))
			if err == nil {
				t.Fatal("handle succeeded")
			}
			if got := errors.Is(err, bridge.ErrPermanent); got != tt.permanent {
				t.Errorf("handle = %v; permanent %v, want %v", err, got, tt.permanent)
			}
			if tt.permanent {
				return
			}
			mustHandle(t, a, outFor(turnIn, bus.KindReply, "x", 1, true)) // the kit's retry
			wantCounts(t, e.slack, map[string]int{"chat.postMessage": 2})
		})
	}
}

// TestRedeliveredFinalIsNotShownTwice: a final the daemon re-publishes
// with the same id after a crash (stored again once the stream's
// de-duplication window is over) is posted once, also after the adapter
// restarted with the same slack.db; the copies are acknowledged and
// counted.
func TestRedeliveredFinalIsNotShownTwice(t *testing.T) {
	e := newEnv(t)
	mx := &dupMetrics{}
	newAdapter := func() *Adapter {
		a := e.adapter(e.config())
		a.opts.Metrics = mx
		return a
	}
	r := e.start(newAdapter())
	final := outFor(turnIn, bus.KindReply, "once", 1, true)
	e.publishOut(final)
	e.slack.waitFor(t, "the final posted", func() bool { return len(e.slack.msgs) >= 1 })
	e.publishCopy(final)
	other := outFor(bus.Inbound{ID: "T1:C1:11.1", Channel: "slack", ChatID: "C1", ThreadID: "11.1"}, bus.KindReply, "other", 1, true)
	e.publishOut(other)
	e.slack.waitFor(t, "the other final posted", func() bool { return len(e.slack.msgs) >= 2 })
	e.waitAcked()
	wantCounts(t, e.slack, map[string]int{"chat.postMessage": 2})
	if mx.n.Load() != 1 {
		t.Errorf("duplicates counted %d, want 1", mx.n.Load())
	}
	r.stop(t)

	// After a restart too.
	e.start(newAdapter())
	e.publishCopy(final)
	third := outFor(bus.Inbound{ID: "T1:C1:12.1", Channel: "slack", ChatID: "C1", ThreadID: "12.1"}, bus.KindReply, "third", 1, true)
	e.publishOut(third)
	e.slack.waitFor(t, "the third final posted", func() bool { return len(e.slack.msgs) >= 3 })
	e.waitAcked()
	wantCounts(t, e.slack, map[string]int{"chat.postMessage": 3})
	if mx.n.Load() != 2 {
		t.Errorf("duplicates counted %d, want 2", mx.n.Load())
	}
}

// dupMetrics counts suppressed outbound duplicates.
type dupMetrics struct {
	channels.NopMetrics
	n atomic.Int64
}

func (m *dupMetrics) OutboundDuplicate(channel string) {
	if channel == ChannelName {
		m.n.Add(1)
	}
}

// publishCopy publishes o through JetStream without a Nats-Msg-Id: the
// copy of a re-published final that the stream stores after its
// de-duplication window.
func (e *env) publishCopy(o bus.Outbound) {
	e.t.Helper()
	o.V, o.Channel = 1, ChannelName
	data, err := json.Marshal(o)
	if err != nil {
		e.t.Fatal(err)
	}
	if _, err := e.js.Publish(e.t.Context(), e.subj.Out(o.Channel, o.ChatID), data); err != nil {
		e.t.Fatal(err)
	}
}

// waitAcked polls the durable consumer until nothing is pending or
// unacknowledged.
func (e *env) waitAcked() {
	e.t.Helper()
	deadline := time.Now().Add(waitTimeout)
	for {
		cons, err := e.js.Consumer(e.t.Context(), "CHAT_OUT", "bridge_slack")
		if err != nil {
			e.t.Fatal(err)
		}
		info, err := cons.Info(e.t.Context())
		if err != nil {
			e.t.Fatal(err)
		}
		if info.NumAckPending == 0 && info.NumPending == 0 {
			return
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("consumer: %d ack pending, %d pending", info.NumAckPending, info.NumPending)
		}
		tick := time.NewTimer(5 * time.Millisecond)
		<-tick.C
	}
}

func TestErrorsAndNotices(t *testing.T) {
	e := newEnv(t)
	a := e.offline("")
	mustHandle(t, a, outFor(turnIn, bus.KindError, "The model is unavailable.", 1, true))
	next := turnIn
	next.ID = "T1:C1:10.9"
	mustHandle(t, a, outFor(next, bus.KindNotice, "Stopped.", 1, true))
	posts := e.slack.callsOf("chat.postMessage")
	if len(posts) != 2 || posts[0].form.Get("text") != ":warning: The model is unavailable." || posts[1].form.Get("text") != "Stopped." {
		t.Errorf("posts = %v", posts)
	}
}

func TestProactiveMessageWithAttachments(t *testing.T) {
	e := newEnv(t)
	a := e.offline("")
	out := bus.Outbound{V: 1, ID: "p1", Channel: "slack", ChatID: "C1", ThreadID: "77.1", Kind: bus.KindReply, Final: true,
		Text: "Here is the report.", Attachments: []bus.Attachment{
			{Kind: bus.AttachFile, Name: "report.csv", MIME: "text/csv", Data: base64.StdEncoding.EncodeToString([]byte("a,b\n1,2\n"))},
			{Kind: bus.AttachImage, Name: "chart", URL: "https://example.com/chart.png"},
		}}
	e.slack.failNext("files.completeUploadExternal", failure{slackErr: "internal_error"})
	if err := a.out.handle(t.Context(), out); err == nil {
		t.Fatal("handle succeeded although the upload failed")
	}
	mustHandle(t, a, out) // the kit's retry
	posts := e.slack.callsOf("chat.postMessage")
	if len(posts) != 1 || posts[0].form.Get("text") != "Here is the report.\n\n<https://example.com/chart.png|chart>" || posts[0].form.Get("thread_ts") != "77.1" {
		t.Errorf("posts = %v, want the text with the link, once, in thread 77.1", posts)
	}
	done := e.slack.callsOf("files.completeUploadExternal")
	if len(done) != 2 || done[1].form.Get("channel_id") != "C1" || done[1].form.Get("thread_ts") != "77.1" {
		t.Errorf("completeUploadExternal calls = %v", done)
	}
	e.slack.mu.Lock()
	defer e.slack.mu.Unlock()
	if len(e.slack.uploads) != 2 {
		t.Errorf("%d uploads, want 2 (the failed attempt and its retry)", len(e.slack.uploads))
	}
	for _, data := range e.slack.uploads {
		if !strings.Contains(string(data), "a,b\n1,2\n") {
			t.Errorf("upload body lacks the file content: %q", data)
		}
	}
}

func TestProactiveMessageMarksItsThreadAnswered(t *testing.T) {
	e := newEnv(t)
	a := e.offline("")
	mustHandle(t, a, bus.Outbound{V: 1, ID: "p2", Channel: "slack", ChatID: "C5", ThreadID: "88.1", Kind: bus.KindReply, Text: "ping", Final: true})
	if !a.store.has(bucketThreads, threadKey("C5", "88.1")) {
		t.Error("a thread the bot posted in is not remembered")
	}
}

func TestOutboundThroughTheBus(t *testing.T) {
	e := newEnv(t)
	e.slack.failNext("chat.postMessage", failure{status: http.StatusBadGateway}) // retried by the kit
	e.answer(func(in bus.Inbound) []bus.Outbound {
		return []bus.Outbound{
			outFor(in, bus.KindTyping, "", 1, false),
			outFor(in, bus.KindDelta, "The answer", 2, false),
			outFor(in, bus.KindReply, "The answer is **42**.", 3, true),
		}
	})
	e.start(e.adapter(e.config()))
	e.send("a", mention("U1", "C1", "99.1", "", "<@UBOT> question"))
	e.slack.waitFor(t, "the final text", func() bool {
		for _, m := range e.slack.msgs {
			if m.Get("text") == "The answer is *42*." && m.Get("thread_ts") == "99.1" {
				return true
			}
		}
		return false
	})
}

package telegram

import (
	"encoding/base64"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode"

	"github.com/switchboard-chat/switchboard/bus"
	"github.com/switchboard-chat/switchboard/bus/bridge"
	"github.com/switchboard-chat/switchboard/channels/markdown"
)

var updateGolden = flag.Bool("update", false, "rewrite testdata/*.golden files")

// out builds an outbound envelope for chat 7 answering inbound "in1".
func out(id, kind, text string, seq int, final bool) bus.Outbound {
	return bus.Outbound{V: 1, ID: id, Channel: Name, ChatID: "7", InReplyTo: "in1", Kind: kind, Text: text, Seq: seq, Final: final}
}

// handle calls the outbound handler directly, failing on an error.
func handle(t *testing.T, a *Adapter, o bus.Outbound) {
	t.Helper()
	if err := a.handleOutbound(t.Context(), o); err != nil {
		t.Fatalf("handleOutbound(%s %s) = %v", o.Kind, o.ID, err)
	}
}

type sentText struct{ method, text, mode, msgID string }

func texts(reqs []fakeReq) []sentText {
	var out []sentText
	for _, r := range reqs {
		if r.method == "sendMessage" || r.method == "editMessageText" {
			out = append(out, sentText{r.method, r.params.Get("text"), r.params.Get("parse_mode"), r.params.Get("message_id")})
		}
	}
	return out
}

func TestStreamingThenFinal(t *testing.T) {
	e := newEnv(t)
	a := e.newAdapter(t, e.config(), Deps{})
	handle(t, a, out("o1", bus.KindTyping, "", 1, false))
	handle(t, a, out("o2", bus.KindDelta, "Hel", 2, false))
	handle(t, a, out("o3", bus.KindDelta, "Hello **wor", 3, false))
	handle(t, a, out("o4", bus.KindDelta, "Hello **wor", 4, false)) // same text: no edit
	handle(t, a, out("o5", bus.KindDelta, "stale", 3, false))       // not newer: ignored
	handle(t, a, out("o6", bus.KindDelta, "Hello **world**, and", 6, false))
	handle(t, a, out("o7", bus.KindReply, "Hello **world**, and <you>", 7, true))
	handle(t, a, out("o8", bus.KindTyping, "", 8, false)) // after the final: ignored
	handle(t, a, out("o9", bus.KindDelta, "late", 9, false))
	handle(t, a, out("o7", bus.KindReply, "Hello **world**, and <you>", 7, true)) // redelivered final

	got := texts(e.bot.all(""))
	want := []sentText{
		{"sendMessage", "Hel", "", ""},
		{"editMessageText", "Hello **wor", "", "1001"},
		{"editMessageText", "Hello world, and", "", "1001"},
		{"editMessageText", "Hello <b>world</b>, and &lt;you&gt;", "HTML", "1001"},
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("requests:\n got %v\nwant %v", got, want)
	}
	if n := len(e.bot.all("sendChatAction")); n != 1 {
		t.Errorf("sendChatAction called %d times, want once", n)
	}
	if a.typing.len() != 0 {
		t.Errorf("typing still active for %d turns after the final", a.typing.len())
	}
	if p := e.bot.all("sendMessage")[0].params; p.Get("disable_web_page_preview") != "true" || p.Has("reply_to_message_id") {
		t.Errorf("streamed message params = %v", p)
	}
}

func TestFinalWithSameTextIsNotAnError(t *testing.T) {
	e := newEnv(t)
	a := e.newAdapter(t, e.config(), Deps{})
	handle(t, a, out("o1", bus.KindDelta, "plain words", 1, false))
	handle(t, a, out("o2", bus.KindReply, "plain words", 2, true)) // "message is not modified"
	if n := len(e.bot.all("editMessageText")); n != 1 {
		t.Errorf("editMessageText called %d times", n)
	}
}

func TestShortReplyWithoutStreaming(t *testing.T) {
	e := newEnv(t)
	a := e.newAdapter(t, e.config(), Deps{})
	o := out("o1", bus.KindReply, "# Title\n\n- one\n- two", 1, true)
	o.ChatID = "-100500"
	o.Meta = map[string]string{"message_id": "77"}
	handle(t, a, o)
	sent := e.bot.all("sendMessage")
	if len(sent) != 1 {
		t.Fatalf("sendMessage called %d times", len(sent))
	}
	p := sent[0].params
	if p.Get("parse_mode") != "HTML" || p.Get("text") != "<b>Title</b>\n\n• one\n• two" ||
		p.Get("reply_to_message_id") != "77" || p.Get("allow_sending_without_reply") != "true" {
		t.Errorf("sendMessage params = %v", p)
	}
}

func TestNoticeAndError(t *testing.T) {
	e := newEnv(t)
	a := e.newAdapter(t, e.config(), Deps{})
	handle(t, a, out("o1", bus.KindDelta, "partial answ", 1, false))
	stop := out("o2", bus.KindNotice, "Stopped. Use /new <topic> to start over.", 2, true)
	handle(t, a, stop)
	o := out("e1", bus.KindError, "The model is unavailable, try again later.", 1, true)
	o.InReplyTo = "in2"
	handle(t, a, o)
	got := texts(e.bot.all(""))
	want := []sentText{
		{"sendMessage", "partial answ", "", ""},
		{"sendMessage", "Stopped. Use /new <topic> to start over.", "", ""},
		{"sendMessage", "⚠️ The model is unavailable, try again later.", "", ""},
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("requests:\n got %v\nwant %v", got, want)
	}
}

func TestEmptyFinalClosesTheTurn(t *testing.T) {
	e := newEnv(t)
	a := e.newAdapter(t, e.config(), Deps{})
	handle(t, a, out("o1", bus.KindTyping, "", 1, false))
	handle(t, a, out("o2", bus.KindNotice, "", 2, true))
	handle(t, a, out("o3", "weird", "x", 3, true)) // unknown kind: only ends the turn
	if n := len(e.bot.all("sendMessage")); n != 0 {
		t.Errorf("sent %d messages for an empty final", n)
	}
	if a.typing.len() != 0 {
		t.Error("typing still active after an empty final")
	}
}

func TestHTMLRejectedFallsBackToPlain(t *testing.T) {
	e := newEnv(t)
	a := e.newAdapter(t, e.config(), Deps{})
	e.bot.fail("sendMessage", 1, fakeFailure{status: 400, description: "Bad Request: can't parse entities: Unsupported start tag \"x\" at byte offset 0"})
	md := "Use **bold** and [a link](https://example.com)."
	handle(t, a, out("o1", bus.KindReply, md, 1, true))
	sent := e.bot.all("sendMessage")
	if len(sent) != 2 {
		t.Fatalf("sendMessage called %d times, want the HTML try and the plain one", len(sent))
	}
	if sent[0].params.Get("parse_mode") != "HTML" || sent[1].params.Has("parse_mode") || sent[1].params.Get("text") != markdown.Plain(md) {
		t.Errorf("second try = %v, want plain text %q", sent[1].params, markdown.Plain(md))
	}
}

func TestRateLimitedSendIsRetried(t *testing.T) {
	e := newEnv(t)
	a := e.newAdapter(t, e.config(), Deps{})
	e.bot.fail("sendMessage", 2, fakeFailure{status: 429, description: "Too Many Requests: retry after 2", retryAfter: 2})
	handle(t, a, out("o1", bus.KindReply, "eventually", 1, true))
	sent := e.bot.all("sendMessage")
	if len(sent) != 3 || sent[2].params.Get("text") != "eventually" {
		t.Errorf("sendMessage calls = %d, want 2 refused and 1 delivered", len(sent))
	}
}

func TestPermanentFailures(t *testing.T) {
	e := newEnv(t)
	a := e.newAdapter(t, e.config(), Deps{})
	e.bot.fail("sendMessage", 1, fakeFailure{status: 403, description: "Forbidden: bot was blocked by the user"})
	err := a.handleOutbound(t.Context(), out("o1", bus.KindReply, "hi", 1, true))
	if !errors.Is(err, bridge.ErrPermanent) {
		t.Errorf("blocked: handleOutbound = %v, want a permanent error", err)
	}
	o := out("o2", bus.KindReply, "hi", 1, true)
	o.ChatID = "not-a-number"
	if err := a.handleOutbound(t.Context(), o); !errors.Is(err, bridge.ErrPermanent) {
		t.Errorf("bad chat id: handleOutbound = %v, want a permanent error", err)
	}
	o = out("o3", bus.KindReply, "hi", 1, true)
	o.ThreadID = "topic"
	if err := a.handleOutbound(t.Context(), o); !errors.Is(err, bridge.ErrPermanent) {
		t.Errorf("bad thread id: handleOutbound = %v, want a permanent error", err)
	}
}

// A transient failure in the middle of a long reply: the retry sends only
// what is missing.
func TestRetryResumesAReply(t *testing.T) {
	e := newEnv(t)
	a := e.newAdapter(t, e.config(), Deps{})
	long := strings.Repeat("word ", 900) + "\n\n" + strings.Repeat("more ", 900)
	pieces := markdown.Split(long, MaxMessageLen, func(s string) int { return markdown.UTF16Len(markdown.Plain(s)) })
	if len(pieces) < 3 {
		t.Fatalf("test text splits into %d pieces, want at least 3", len(pieces))
	}
	handle(t, a, out("d1", bus.KindDelta, "word word", 1, false))
	// The first piece replaces the streamed message (an edit); the second
	// piece's send fails once.
	e.bot.fail("sendMessage", 1, fakeFailure{status: 502, description: "Bad Gateway"})
	o := out("o1", bus.KindReply, long, 2, true)
	err := a.handleOutbound(t.Context(), o)
	if err == nil || errors.Is(err, bridge.ErrPermanent) {
		t.Fatalf("502: handleOutbound = %v, want a transient error", err)
	}
	handle(t, a, o)
	if edits := e.bot.all("editMessageText"); len(edits) != 1 {
		t.Errorf("editMessageText called %d times, want the first piece once", len(edits))
	}
	sends := e.bot.all("sendMessage")
	if len(sends) != 1+1+len(pieces)-1 {
		t.Fatalf("sendMessage called %d times, want stream + failed try + %d pieces", len(sends), len(pieces)-1)
	}
	if sends[1].params.Get("text") != sends[2].params.Get("text") {
		t.Error("the retry did not resume at the piece that failed")
	}
}

func TestSplitLongReplies(t *testing.T) {
	e := newEnv(t)
	a := e.newAdapter(t, e.config(), Deps{})
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range 6 {
		md := randomMarkdown(rng, 6000+rng.IntN(9000))
		o := out(fmt.Sprintf("o%d", i), bus.KindReply, md, 1, true)
		o.InReplyTo = fmt.Sprintf("in%d", i)
		before := len(e.bot.all("sendMessage"))
		handle(t, a, o)
		sent := e.bot.all("sendMessage")[before:]
		if len(sent) < 2 {
			t.Errorf("text %d (%d bytes) went out in %d message(s)", i, len(md), len(sent))
		}
		var got strings.Builder
		for _, r := range sent {
			if r.params.Get("parse_mode") != "HTML" {
				t.Fatalf("text %d: a piece fell back to plain text (the fake rejected the HTML)", i)
			}
			vis, perr := htmlVisible(r.params.Get("text"))
			if perr != "" {
				t.Fatalf("text %d: invalid HTML: %s", i, perr)
			}
			if n := markdown.UTF16Len(vis); n > MaxMessageLen {
				t.Errorf("text %d: a piece has %d UTF-16 units", i, n)
			}
			got.WriteString(vis)
		}
		whole, _ := htmlVisible(markdown.TelegramHTML(md))
		if noSpace(got.String()) != noSpace(whole) {
			t.Errorf("text %d: the pieces do not add up to the text", i)
		}
	}
}

// randomMarkdown writes paragraphs of words (ASCII, accented, CJK, emoji,
// markup characters), very long words and fenced code blocks.
func randomMarkdown(rng *rand.Rand, n int) string {
	words := []string{"alpha", "beta", "résumé", "日本語", "😀", "👍🏽", "a<b", "x&y", "**bold**", "`code`", "_it_", "🇩🇪"}
	var b strings.Builder
	for b.Len() < n {
		switch rng.IntN(5) {
		case 0:
			b.WriteString("```go\n")
			for range 5 + rng.IntN(120) {
				fmt.Fprintf(&b, "fmt.Println(%q) // <%d>\n", words[rng.IntN(len(words))], rng.IntN(100))
			}
			b.WriteString("```\n\n")
		case 1:
			b.WriteString(strings.Repeat("x", 50+rng.IntN(5000)) + "\n\n")
		default:
			for range 20 + rng.IntN(300) {
				b.WriteString(words[rng.IntN(len(words))])
				if rng.IntN(12) == 0 {
					b.WriteString("\n")
				} else {
					b.WriteString(" ")
				}
			}
			b.WriteString("\n\n")
		}
	}
	return b.String()
}

func noSpace(s string) string {
	return strings.Map(func(r rune) rune {
		if unicode.IsSpace(r) {
			return -1
		}
		return r
	}, s)
}

// TestGoldenHTML renders the replies in testdata/*.md as the adapter
// sends them and compares with testdata/*.golden (go test -update
// rewrites them).
func TestGoldenHTML(t *testing.T) {
	files, err := filepath.Glob("testdata/*.md")
	if err != nil || len(files) == 0 {
		t.Fatalf("no golden inputs: %v", err)
	}
	e := newEnv(t)
	a := e.newAdapter(t, e.config(), Deps{})
	for i, f := range files {
		md, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		before := len(e.bot.all("sendMessage"))
		o := out(fmt.Sprintf("g%d", i), bus.KindReply, string(md), 1, true)
		o.InReplyTo = f
		handle(t, a, o)
		var got strings.Builder
		for j, r := range e.bot.all("sendMessage")[before:] {
			if r.params.Get("parse_mode") != "HTML" {
				t.Errorf("%s: piece %d sent as plain text: the fake rejected the HTML", f, j)
			}
			fmt.Fprintf(&got, "----- message %d -----\n%s\n", j+1, r.params.Get("text"))
		}
		golden := strings.TrimSuffix(f, ".md") + ".golden"
		if *updateGolden {
			if err := os.WriteFile(golden, []byte(got.String()), 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		want, err := os.ReadFile(golden)
		if err != nil {
			t.Fatalf("%v (run go test -update to create it)", err)
		}
		if got.String() != string(want) {
			t.Errorf("%s: rendered\n%s\nwant\n%s", f, got.String(), want)
		}
	}
}

func TestOutboundAttachments(t *testing.T) {
	e := newEnv(t)
	a := e.newAdapter(t, e.config(), Deps{})
	png := []byte("\x89PNG fake image")
	o := out("o1", bus.KindReply, "Here is the chart.", 1, true)
	o.Attachments = []bus.Attachment{
		{Kind: bus.AttachImage, Name: "chart.png", MIME: "image/png", Data: base64.StdEncoding.EncodeToString(png)},
		{Kind: bus.AttachFile, Name: "data.csv", MIME: "text/csv", Data: base64.StdEncoding.EncodeToString([]byte("a,b\n1,2\n"))},
		{Kind: bus.AttachImage, URL: "https://example.com/cat.jpg"},
		{Kind: bus.AttachFile, Name: "nothing"},
	}
	handle(t, a, o)
	photos, docs := e.bot.all("sendPhoto"), e.bot.all("sendDocument")
	if len(photos) != 2 || len(docs) != 1 {
		t.Fatalf("sendPhoto %d, sendDocument %d; want 2 and 1", len(photos), len(docs))
	}
	if f := photos[0].files["photo"]; string(f.data) != string(png) || f.name != "chart.png" || photos[0].params.Get("chat_id") != "7" {
		t.Errorf("uploaded photo = %+v %v", f, photos[0].params)
	}
	if photos[1].params.Get("photo") != "https://example.com/cat.jpg" {
		t.Errorf("photo by URL params = %v", photos[1].params)
	}
	if f := docs[0].files["document"]; string(f.data) != "a,b\n1,2\n" || f.name != "data.csv" {
		t.Errorf("uploaded document = %+v", f)
	}
	// Text first, then the files.
	all := e.bot.all("")
	if all[0].method != "sendMessage" {
		t.Errorf("first request %s, want the text", all[0].method)
	}

	// A photo Telegram refuses goes out as a document.
	e.bot.fail("sendPhoto", 1, fakeFailure{status: 400, description: "Bad Request: PHOTO_INVALID_DIMENSIONS"})
	o2 := out("o2", bus.KindReply, "", 1, true)
	o2.InReplyTo = "in2"
	o2.Attachments = o.Attachments[:1]
	handle(t, a, o2)
	if docs := e.bot.all("sendDocument"); len(docs) != 2 || string(docs[1].files["document"].data) != string(png) {
		t.Errorf("refused photo not resent as a document: %d documents", len(docs))
	}
}

func TestGroupMigration(t *testing.T) {
	e := newEnv(t)
	a := e.newAdapter(t, e.config(), Deps{})
	e.bot.fail("sendMessage", 1, fakeFailure{status: 400, description: "Bad Request: group chat was upgraded to a supergroup chat", migrateTo: -1009999})
	o := out("o1", bus.KindReply, "hello group", 1, true)
	o.ChatID = "-55"
	handle(t, a, o)
	o2 := out("o2", bus.KindReply, "again", 1, true)
	o2.ChatID, o2.InReplyTo = "-55", "in2"
	handle(t, a, o2)
	sent := e.bot.all("sendMessage")
	if len(sent) != 3 || sent[1].params.Get("chat_id") != "-1009999" || sent[2].params.Get("chat_id") != "-1009999" {
		t.Errorf("chat ids: %v", sent)
	}
}

func TestTypingKeptAliveUntilFinal(t *testing.T) {
	e := newEnv(t)
	a := e.newAdapter(t, e.config(), Deps{})
	a.tune.typingEvery = 5 * time.Millisecond
	run(t, a)
	o := out("o1", bus.KindTyping, "", 1, false)
	o.ThreadID = "9"
	o.ChatID = "-300"
	e.publishOut(t, o)
	actions := e.bot.waitN(t, "sendChatAction", 3)
	for _, r := range actions {
		if r.params.Get("action") != "typing" || r.params.Get("chat_id") != "-300" || r.params.Get("message_thread_id") != "9" {
			t.Errorf("sendChatAction params = %v", r.params)
		}
	}
	f := out("o2", bus.KindReply, "done", 2, true)
	f.ThreadID, f.ChatID = "9", "-300"
	e.publishOut(t, f)
	e.bot.waitN(t, "sendMessage", 1)
	e.bot.waitUntil(t, "typing to stop", func() bool { return a.typing.len() == 0 })
}

func TestTypingStopsAfterTypingMax(t *testing.T) {
	e := newEnv(t)
	a := e.newAdapter(t, e.config(), Deps{})
	now := time.Now()
	a.typing.start(turnKey{chat: "7", inReplyTo: "x"}, target{chat: 7}, now)
	if got := a.typing.due(now.Add(time.Minute)); len(got) != 1 {
		t.Fatalf("due = %v", got)
	}
	if got := a.typing.due(now.Add(a.tune.typingMax + time.Second)); len(got) != 0 || a.typing.len() != 0 {
		t.Errorf("a turn past typingMax is still typing: %v", got)
	}
}

// TestEndToEnd runs the adapter against a stand-in for the agent runtime:
// a direct message and a group message go through the bus and come back
// rendered.
func TestEndToEnd(t *testing.T) {
	e := newEnv(t)
	rs := e.startRuntime(t, func(in bus.Inbound) []bus.Outbound {
		return []bus.Outbound{
			{ID: in.ID + ".1", Kind: bus.KindTyping, Seq: 1},
			{ID: in.ID + ".2", Kind: bus.KindReply, Text: "You said: *" + in.Text + "*", Seq: 2, Final: true},
		}
	})
	run(t, e.newAdapter(t, e.config(), Deps{}))
	e.bot.addUpdate(1, privateMsg(3, user(7, "Ann", ""), "hi <there>"))
	e.bot.addUpdate(2, groupMsg(4, -42, user(8, "Bob", ""), "@MyBot hello", entity("mention", 0, 6)))
	rs.waitSeen(t, 2)
	sent := e.bot.waitN(t, "sendMessage", 2)
	byChat := map[string]fakeReq{}
	for _, r := range sent {
		byChat[r.params.Get("chat_id")] = r
	}
	if dm := byChat["7"].params; dm.Get("text") != "You said: <i>hi &lt;there&gt;</i>" || dm.Get("parse_mode") != "HTML" || dm.Has("reply_to_message_id") {
		t.Errorf("direct reply = %v", dm)
	}
	if g := byChat["-42"].params; g.Get("text") != "You said: <i>hello</i>" || g.Get("reply_to_message_id") != "4" {
		t.Errorf("group reply = %v", g)
	}
}

func TestPreview(t *testing.T) {
	if got := preview("**partial** `code"); got != "partial `code" {
		t.Errorf("preview = %q", got)
	}
	long := strings.Repeat("😀 word ", 1000) // 8000 UTF-16 units
	got := preview(long)
	if n := markdown.UTF16Len(got); n > MaxMessageLen || n < MaxMessageLen-400 || !strings.HasSuffix(got, "…") {
		t.Errorf("preview of a long text: %d units, ends %q", n, got[len(got)-10:])
	}
}

// countingMetrics records the adapter's measurements.
type countingMetrics struct {
	mu    sync.Mutex
	sends map[string]int
	waits int
	dups  map[string]int
}

func (c *countingMetrics) PlatformSend(channel, status string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.sends == nil {
		c.sends = map[string]int{}
	}
	c.sends[channel+"/"+status]++
}

func (c *countingMetrics) RateLimitWait(string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.waits++
}

func (c *countingMetrics) OutboundDuplicate(channel string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.dups == nil {
		c.dups = map[string]int{}
	}
	c.dups[channel]++
}

func (c *countingMetrics) duplicates(channel string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.dups[channel]
}

func TestSendsAndRateLimitWaitsAreMeasured(t *testing.T) {
	e := newEnv(t)
	mx := &countingMetrics{}
	a := e.newAdapter(t, e.config(), Deps{Metrics: mx})
	e.bot.fail("sendMessage", 2, fakeFailure{status: 429, description: "Too Many Requests: retry after 2", retryAfter: 2})
	handle(t, a, out("o1", bus.KindReply, "eventually", 1, true))
	mx.mu.Lock()
	defer mx.mu.Unlock()
	if mx.sends["telegram/retry"] != 2 || mx.sends["telegram/ok"] < 1 || mx.waits != 2 {
		t.Fatalf("measured sends %v, waits %d", mx.sends, mx.waits)
	}
}

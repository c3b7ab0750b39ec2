package telegram

import (
	"context"
	"encoding/base64"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf16"

	tgbotapi "github.com/go-telegram-bot-api/telegram-bot-api/v5"
	"github.com/google/go-cmp/cmp"

	"github.com/switchboard-chat/switchboard/bus"
)

// u16 returns the UTF-16 length of s, as Telegram counts entity offsets.
func u16(s string) int { return len(utf16.Encode([]rune(s))) }

// addressingAdapter is an adapter that knows itself as @MyBot (id 4242),
// for tests of the addressing rules alone.
func addressingAdapter(trigger string) *Adapter {
	return &Adapter{cfg: Config{GroupTrigger: trigger}, self: tgbotapi.User{ID: fakeBotID, UserName: fakeBotUser}, selfName: "@mybot"}
}

func TestAddress(t *testing.T) {
	ent := func(typ, text, part string) tgbotapi.MessageEntity {
		i := strings.Index(text, part)
		return tgbotapi.MessageEntity{Type: typ, Offset: u16(text[:i]), Length: u16(part)}
	}
	tests := []struct {
		name     string
		text     string
		entities func(text string) []tgbotapi.MessageEntity
		want     addressing
	}{
		{"no entities", "hello", nil, addressing{text: "hello"}},
		{"mention first", "@MyBot what is up?", func(s string) []tgbotapi.MessageEntity { return []tgbotapi.MessageEntity{ent("mention", s, "@MyBot")} },
			addressing{mentioned: true, text: "what is up?"}},
		{"mention lower case, comma", "@mybot, help me", func(s string) []tgbotapi.MessageEntity { return []tgbotapi.MessageEntity{ent("mention", s, "@mybot")} },
			addressing{mentioned: true, text: "help me"}},
		{"mention in the middle", "hey @MyBot can you", func(s string) []tgbotapi.MessageEntity { return []tgbotapi.MessageEntity{ent("mention", s, "@MyBot")} },
			addressing{mentioned: true, text: "hey can you"}},
		{"other bot with a longer name", "@MyBot_2 hi", func(s string) []tgbotapi.MessageEntity {
			return []tgbotapi.MessageEntity{ent("mention", s, "@MyBot_2")}
		},
			addressing{text: "@MyBot_2 hi"}},
		{"name only in the text, no entity", "@MyBot hi", nil, addressing{text: "@MyBot hi"}},
		{"after emoji (UTF-16 offsets)", "🙂🎉 @MyBot résumé 😀", func(s string) []tgbotapi.MessageEntity { return []tgbotapi.MessageEntity{ent("mention", s, "@MyBot")} },
			addressing{mentioned: true, text: "🙂🎉 résumé 😀"}},
		{"text mention", "Switchy please", func(s string) []tgbotapi.MessageEntity {
			e := ent("text_mention", s, "Switchy")
			e.User = &tgbotapi.User{ID: fakeBotID}
			return []tgbotapi.MessageEntity{e}
		}, addressing{mentioned: true, text: "please"}},
		{"text mention of someone else", "Ann please", func(s string) []tgbotapi.MessageEntity {
			e := ent("text_mention", s, "Ann")
			e.User = &tgbotapi.User{ID: 7}
			return []tgbotapi.MessageEntity{e}
		}, addressing{text: "Ann please"}},
		{"command for the bot", "/steer@MyBot be brief", func(s string) []tgbotapi.MessageEntity {
			return []tgbotapi.MessageEntity{ent("bot_command", s, "/steer@MyBot")}
		},
			addressing{command: "steer", text: "/steer be brief"}},
		{"bare known command", "/help", func(s string) []tgbotapi.MessageEntity {
			return []tgbotapi.MessageEntity{ent("bot_command", s, "/help")}
		},
			addressing{command: "help", text: "/help"}},
		{"bare unknown command", "/weather", func(s string) []tgbotapi.MessageEntity {
			return []tgbotapi.MessageEntity{ent("bot_command", s, "/weather")}
		},
			addressing{text: "/weather"}},
		{"command for another bot", "/help@OtherBot", func(s string) []tgbotapi.MessageEntity {
			return []tgbotapi.MessageEntity{ent("bot_command", s, "/help@OtherBot")}
		},
			addressing{otherBot: true, text: "/help@OtherBot"}},
		{"only the mention", "@MyBot", func(s string) []tgbotapi.MessageEntity { return []tgbotapi.MessageEntity{ent("mention", s, "@MyBot")} },
			addressing{mentioned: true, text: "@MyBot"}},
		{"entity out of range", "hi", func(string) []tgbotapi.MessageEntity {
			return []tgbotapi.MessageEntity{{Type: "mention", Offset: 1, Length: 40}, {Type: "mention", Offset: -1, Length: 1}}
		}, addressing{text: "hi"}},
	}
	a := addressingAdapter(TriggerMentionOrReply)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var ents []tgbotapi.MessageEntity
			if tt.entities != nil {
				ents = tt.entities(tt.text)
			}
			got := a.address(tt.text, ents)
			if diff := cmp.Diff(tt.want, got, cmp.AllowUnexported(addressing{})); diff != "" {
				t.Errorf("address(%q) (-want +got):\n%s", tt.text, diff)
			}
		})
	}
}

func TestTriggered(t *testing.T) {
	cases := []struct {
		ad                           addressing
		mentionOrReply, mention, all bool
	}{
		{addressing{}, false, false, true},
		{addressing{mentioned: true}, true, true, true},
		{addressing{reply: true}, true, false, true},
		{addressing{command: "new"}, true, true, true},
		{addressing{otherBot: true}, false, false, false},
	}
	for _, c := range cases {
		for trigger, want := range map[string]bool{TriggerMentionOrReply: c.mentionOrReply, TriggerMention: c.mention, TriggerAll: c.all} {
			if got := addressingAdapter(trigger).triggered(c.ad); got != want {
				t.Errorf("%s: triggered(%+v) = %v, want %v", trigger, c.ad, got, want)
			}
		}
	}
}

func TestGroupMessages(t *testing.T) {
	e := newEnv(t)
	run(t, e.newAdapter(t, e.config(), Deps{}))
	ann := user(7, "Ann", "ann")
	ann["last_name"] = "Lee"
	const group = -1001234
	botUser := map[string]any{"id": fakeBotID, "is_bot": true, "first_name": "Switchy", "username": fakeBotUser}

	e.bot.addUpdate(1, groupMsg(11, group, ann, "@MyBot_2 not for us", entity("mention", 0, 8)))
	e.bot.addUpdate(2, groupMsg(12, group, ann, "just chatting"))
	e.bot.addUpdate(3, groupMsg(13, group, ann, "/help@OtherBot", entity("bot_command", 0, 14)))
	e.bot.addUpdate(4, groupMsg(14, group, ann, "@MyBot summarise please", entity("mention", 0, 6)))
	reply := groupMsg(15, group, ann, "and then?")
	reply["message"].(map[string]any)["reply_to_message"] = map[string]any{"message_id": 1001, "date": 1, "from": botUser,
		"chat": map[string]any{"id": group, "type": "supergroup"}, "text": "earlier answer"}
	e.bot.addUpdate(5, reply)
	e.bot.addUpdate(6, groupMsg(16, group, ann, "/new@MyBot", entity("bot_command", 0, 10)))
	e.bot.addUpdate(7, groupMsg(17, group, map[string]any{"id": 99, "is_bot": true, "first_name": "OtherBot"}, "@MyBot loop", entity("mention", 0, 6)))

	getUpdatesWithOffset(t, e, 8)
	ins := e.waitPublished(t, 3)
	if len(ins) != 3 {
		t.Fatalf("published %d messages, want 3: %+v", len(ins), ins)
	}
	for i, want := range []struct{ text, msg string }{{"summarise please", "14"}, {"and then?", "15"}, {"/new", "16"}} {
		in := ins[i]
		if in.Text != want.text || !in.IsGroup || !in.Mentioned || in.ChatID != "-1001234" || in.UserID != "7" ||
			in.UserName != "Ann Lee" || in.ThreadID != "" || in.Meta["message_id"] != want.msg {
			t.Errorf("message %d = %+v, want text %q in group -1001234 by Ann Lee, mentioned", i, in, want.text)
		}
	}
}

func TestGroupTriggerAll(t *testing.T) {
	e := newEnv(t)
	cfg := e.config()
	cfg.GroupTrigger = TriggerAll
	cfg.AllowUsers = UserList{"7"}
	run(t, e.newAdapter(t, cfg, Deps{}))
	e.bot.addUpdate(1, groupMsg(11, -5, user(7, "Ann", ""), "just chatting"))
	e.bot.addUpdate(2, groupMsg(12, -5, user(7, "Ann", ""), "/help@OtherBot", entity("bot_command", 0, 14)))
	e.bot.addUpdate(3, groupMsg(13, -5, user(66, "Stranger", ""), "chatting too"))
	e.bot.addUpdate(4, groupMsg(14, -5, user(66, "Stranger", ""), "@MyBot hi", entity("mention", 0, 6)))
	getUpdatesWithOffset(t, e, 5)
	ins := e.waitPublished(t, 1)
	if len(ins) != 1 || ins[0].Text != "just chatting" || ins[0].Mentioned {
		t.Errorf("published %+v, want only the plain message, not mentioned", ins)
	}
	// A user not on the list is told only when addressing the bot.
	sent := e.bot.all("sendMessage")
	if len(sent) != 1 || !strings.Contains(sent[0].params.Get("text"), "Your Telegram user id is 66") || sent[0].params.Get("reply_to_message_id") != "14" {
		t.Errorf("denials = %v, want one, replying to the mention", sent)
	}
}

func TestForumTopic(t *testing.T) {
	e := newEnv(t)
	run(t, e.newAdapter(t, e.config(), Deps{}))
	const group = -100777
	msg := groupMsg(50, group, user(7, "Ann", ""), "@MyBot in a topic", entity("mention", 0, 6))
	m := msg["message"].(map[string]any)
	m["message_thread_id"] = 42
	m["is_topic_message"] = true
	// Messages in a topic "reply" to the topic's first message; that one
	// was created by the bot here, which must not count as a reply.
	m["reply_to_message"] = map[string]any{"message_id": 42, "date": 1, "chat": map[string]any{"id": group, "type": "supergroup"},
		"from": map[string]any{"id": fakeBotID, "is_bot": true, "first_name": "Switchy"}}
	e.bot.addUpdate(1, msg)
	plain := groupMsg(51, group, user(7, "Ann", ""), "no mention in the topic")
	pm := plain["message"].(map[string]any)
	pm["message_thread_id"], pm["is_topic_message"] = 42, true
	pm["reply_to_message"] = m["reply_to_message"]
	e.bot.addUpdate(2, plain)
	getUpdatesWithOffset(t, e, 3)
	ins := e.waitPublished(t, 1)
	if len(ins) != 1 || ins[0].ThreadID != "42" || ins[0].Text != "in a topic" {
		t.Fatalf("published %+v, want one message in thread 42", ins)
	}
	e.publishOut(t, bus.Outbound{ID: "o1", ChatID: ins[0].ChatID, ThreadID: "42", InReplyTo: ins[0].ID,
		Kind: bus.KindReply, Text: "answer", Seq: 1, Final: true, Meta: ins[0].Meta})
	sent := e.bot.waitN(t, "sendMessage", 1)[0]
	if sent.params.Get("message_thread_id") != "42" || sent.params.Get("chat_id") != "-100777" || sent.params.Get("reply_to_message_id") != "50" {
		t.Errorf("reply params = %v, want topic 42, replying to message 50", sent.params)
	}
}

func TestAllowList(t *testing.T) {
	e := newEnv(t)
	cfg := e.config()
	cfg.AllowUsers = UserList{"7", "@Bob"}
	run(t, e.newAdapter(t, cfg, Deps{}))
	e.bot.addUpdate(1, privateMsg(1, user(7, "Ann", ""), "by id"))
	e.bot.addUpdate(2, privateMsg(2, user(8, "Bob", "bob"), "by username"))
	e.bot.addUpdate(3, privateMsg(3, user(9, "Eve", "eve"), "let me in"))
	e.bot.addUpdate(4, privateMsg(4, user(9, "Eve", "eve"), "please"))
	e.bot.addUpdate(5, privateMsg(5, user(10, "Mal", ""), "/start"))
	getUpdatesWithOffset(t, e, 6)
	sent := e.bot.waitN(t, "sendMessage", 2)
	ins := e.waitPublished(t, 2)
	if len(ins) != 2 || ins[0].Text != "by id" || ins[1].Text != "by username" {
		t.Errorf("published %+v, want Ann's and Bob's messages only", ins)
	}
	if len(sent) != 2 {
		t.Fatalf("sent %d denials, want one per denied user", len(sent))
	}
	for i, id := range []string{"9", "10"} {
		text := sent[i].params.Get("text")
		if sent[i].params.Get("chat_id") != id || !strings.Contains(text, "Your Telegram user id is "+id) ||
			!strings.Contains(text, "channels.telegram.allow_users") {
			t.Errorf("denial %d = %v", i, sent[i].params)
		}
	}
}

func TestDeniedOnlyOncePerInterval(t *testing.T) {
	m := newMemo(2)
	t0 := time.Unix(1700000000, 0)
	sec := func(n int) time.Time { return t0.Add(time.Duration(n) * time.Second) }
	every := 10 * time.Second
	if !m.add(1, sec(0), every) || m.add(1, sec(5), every) || !m.add(1, sec(10), every) {
		t.Error("memo: want once per interval")
	}
	m.add(2, sec(10), every)
	m.add(3, sec(10), every) // evicts 1, the least recent
	if !m.add(1, sec(11), every) {
		t.Error("memo: an evicted key must count as new")
	}
	if len(m.m) != 2 {
		t.Errorf("memo holds %d keys, want at most 2", len(m.m))
	}
}

func TestStartCommand(t *testing.T) {
	e := newEnv(t)
	run(t, e.newAdapter(t, e.config(), Deps{}))
	e.bot.addUpdate(1, privateMsg(1, user(7, "Ann", ""), "/start"))
	msg := privateMsg(2, user(7, "Ann", ""), "/start")
	msg["message"].(map[string]any)["entities"] = []map[string]any{entity("bot_command", 0, 6)}
	e.bot.addUpdate(2, msg)
	getUpdatesWithOffset(t, e, 3)
	sent := e.bot.waitN(t, "sendMessage", 1)
	text := sent[0].params.Get("text")
	if !strings.Contains(text, "Hello Ann!") || !strings.Contains(text, "/new — ") || !strings.Contains(text, "/status — ") {
		t.Errorf("welcome = %q", text)
	}
	// The first "/start" has no entity (a client that sent it as text):
	// it is an ordinary message for the runtime.
	ins := e.waitPublished(t, 1)
	if len(ins) != 1 || ins[0].Text != "/start" || ins[0].ID != "4242:1" {
		t.Errorf("published %+v", ins)
	}
}

// fakeTranscriber records its calls.
type fakeTranscriber struct {
	mu    sync.Mutex
	names []string
	text  string
	err   error
}

func (f *fakeTranscriber) Transcribe(_ context.Context, name string, audio []byte) (string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.names = append(f.names, name+":"+string(audio))
	return f.text, f.err
}

func mediaMsg(msgID int, field string, value any, caption string) map[string]any {
	u := privateMsg(msgID, user(7, "Ann", ""), "")
	m := u["message"].(map[string]any)
	delete(m, "text")
	m[field] = value
	if caption != "" {
		m["caption"] = caption
	}
	return u
}

func TestPhotoBecomesImageAttachment(t *testing.T) {
	e := newEnv(t)
	cfg := e.config()
	cfg.MaxImageBytes = 2048
	run(t, e.newAdapter(t, cfg, Deps{}))
	small, big := []byte("small-jpeg"), []byte(strings.Repeat("B", 4096))
	e.bot.addFile("p-small", small)
	e.bot.addFile("p-big", big)
	e.bot.addFile("p-big-unknown", big)
	// Sizes come smallest first. The largest is over the cap (known from
	// file_size); the next one's size is unknown and too large when
	// downloaded; the smallest fits.
	e.bot.addUpdate(1, mediaMsg(1, "photo", []map[string]any{
		{"file_id": "p-small", "file_unique_id": "a", "width": 90, "height": 90, "file_size": len(small)},
		{"file_id": "p-big-unknown", "file_unique_id": "b", "width": 320, "height": 320},
		{"file_id": "p-big", "file_unique_id": "c", "width": 800, "height": 800, "file_size": len(big)},
	}, "what is this?"))
	e.bot.addUpdate(2, mediaMsg(2, "photo", []map[string]any{
		{"file_id": "p-big", "file_unique_id": "c", "width": 800, "height": 800, "file_size": len(big)},
	}, ""))
	getUpdatesWithOffset(t, e, 3)
	ins := e.waitPublished(t, 2)
	in := ins[0]
	if in.Text != "what is this?" || len(in.Attachments) != 1 {
		t.Fatalf("photo message = %+v", in)
	}
	att := in.Attachments[0]
	if data, _ := base64.StdEncoding.DecodeString(att.Data); att.Kind != bus.AttachImage || att.MIME != "image/jpeg" ||
		string(data) != string(small) || att.Size != int64(len(small)) {
		t.Errorf("attachment = %+v", att)
	}
	if len(ins[1].Attachments) != 0 || !strings.Contains(ins[1].Text, "photo that could not be attached: it is too large") {
		t.Errorf("oversized photo message = %+v", ins[1])
	}
}

func TestDocumentSavedInInbox(t *testing.T) {
	e := newEnv(t)
	cfg := e.config()
	cfg.MaxFileBytes = 4096
	run(t, e.newAdapter(t, cfg, Deps{}))
	e.bot.addFile("doc-1", []byte("%PDF report"))
	e.bot.addFile("doc-2", []byte(strings.Repeat("x", 5000)))
	e.bot.addUpdate(1, mediaMsg(31, "document", map[string]any{"file_id": "doc-1", "file_unique_id": "d1",
		"file_name": "../Q3 report.pdf", "mime_type": "application/pdf", "file_size": 11}, "summarise"))
	e.bot.addUpdate(2, mediaMsg(32, "document", map[string]any{"file_id": "doc-2", "file_unique_id": "d2",
		"file_name": "big.bin", "file_size": 5000}, ""))
	getUpdatesWithOffset(t, e, 3)
	ins := e.waitPublished(t, 2)
	const saved = "inbox/telegram/7/31-Q3_report.pdf"
	if !strings.HasPrefix(ins[0].Text, "summarise\n") || !strings.Contains(ins[0].Text, "saved in the workspace as "+saved+" (application/pdf, 11 bytes)") {
		t.Errorf("document text = %q", ins[0].Text)
	}
	data, err := e.root.ReadFile(saved)
	if err != nil || string(data) != "%PDF report" {
		t.Errorf("saved file = %q, %v", data, err)
	}
	if !strings.Contains(ins[1].Text, `"big.bin"`) || !strings.Contains(ins[1].Text, "not downloaded: it is too large") {
		t.Errorf("oversized document text = %q", ins[1].Text)
	}
	if n := len(e.bot.all("getFile")); n != 1 {
		t.Errorf("getFile called %d times, want once (the oversized file is known from file_size)", n)
	}
}

func TestVoiceNotes(t *testing.T) {
	voice := func(id string) map[string]any {
		return map[string]any{"file_id": id, "file_unique_id": "u" + id, "duration": 3, "mime_type": "audio/ogg", "file_size": 5}
	}
	t.Run("transcribed", func(t *testing.T) {
		e := newEnv(t)
		tr := &fakeTranscriber{text: " turn on the lights "}
		run(t, e.newAdapter(t, e.config(), Deps{Transcriber: tr}))
		e.bot.addFile("v1", []byte("OggS1"))
		e.bot.addUpdate(1, mediaMsg(41, "voice", voice("v1"), ""))
		ins := e.waitPublished(t, 1)
		if ins[0].Text != "[voice message, transcribed] turn on the lights" {
			t.Errorf("text = %q", ins[0].Text)
		}
		tr.mu.Lock()
		defer tr.mu.Unlock()
		if len(tr.names) != 1 || tr.names[0] != "voice.ogg:OggS1" {
			t.Errorf("transcriber calls = %v", tr.names)
		}
	})
	t.Run("no transcriber", func(t *testing.T) {
		e := newEnv(t)
		run(t, e.newAdapter(t, e.config(), Deps{}))
		e.bot.addFile("v2", []byte("OggS2"))
		e.bot.addUpdate(1, mediaMsg(42, "voice", voice("v2"), ""))
		ins := e.waitPublished(t, 1)
		if !strings.Contains(ins[0].Text, "voice message, saved in the workspace as inbox/telegram/7/42-voice.ogg (audio/ogg, 5 bytes)") {
			t.Errorf("text = %q", ins[0].Text)
		}
	})
	t.Run("transcription fails", func(t *testing.T) {
		e := newEnv(t)
		tr := &fakeTranscriber{err: errors.New("model not found")}
		run(t, e.newAdapter(t, e.config(), Deps{Transcriber: tr}))
		e.bot.addFile("v3", []byte("OggS3"))
		e.bot.addUpdate(1, mediaMsg(43, "voice", voice("v3"), ""))
		ins := e.waitPublished(t, 1)
		if !strings.Contains(ins[0].Text, "inbox/telegram/7/43-voice.ogg") || !strings.Contains(ins[0].Text, "could not be transcribed") {
			t.Errorf("text = %q", ins[0].Text)
		}
	})
}

func TestOtherMessageKinds(t *testing.T) {
	e := newEnv(t)
	run(t, e.newAdapter(t, e.config(), Deps{}))
	e.bot.addUpdate(1, mediaMsg(1, "sticker", map[string]any{"file_id": "s", "file_unique_id": "s", "width": 1, "height": 1,
		"is_animated": false, "emoji": "👍"}, ""))
	e.bot.addUpdate(2, mediaMsg(2, "location", map[string]any{"latitude": 52.52, "longitude": 13.405}, ""))
	e.bot.addUpdate(3, mediaMsg(3, "dice", map[string]any{"emoji": "🎲", "value": 3}, "")) // nothing to pass on
	e.bot.addUpdate(4, map[string]any{"edited_message": privateMsg(4, user(7, "Ann", ""), "edited")["message"]})
	e.bot.addUpdate(5, map[string]any{"channel_post": map[string]any{"message_id": 5, "date": 1, "text": "post",
		"chat": map[string]any{"id": -100, "type": "channel"}}})
	getUpdatesWithOffset(t, e, 6)
	ins := e.waitPublished(t, 2)
	if len(ins) != 2 || ins[0].Text != "[sticker 👍]" || ins[1].Text != "[location: 52.520000, 13.405000]" {
		t.Errorf("published %+v", ins)
	}
}

func TestSafeNameAndClamp(t *testing.T) {
	for in, want := range map[string]string{
		"report.pdf":                      "report.pdf",
		"../../etc/passwd":                "passwd",
		`..\..\win.ini`:                   "win.ini",
		".hidden":                         "hidden",
		"résumé 2024.docx":                "r_sum__2024.docx",
		"":                                "file",
		"..":                              "file",
		strings.Repeat("a", 300):          strings.Repeat("a", 120),
		strings.Repeat("b", 200) + ".tar": strings.Repeat("b", 116) + ".tar",
	} {
		if got := safeName(in); got != want {
			t.Errorf("safeName(%q) = %q, want %q", in, got, want)
		}
	}
	s := strings.Repeat("é", 100) // 200 bytes
	got := clampText(s, 50)
	if len(got) > 50 || !strings.HasSuffix(got, "[… cut: too long]") || !strings.HasPrefix(got, "é") {
		t.Errorf("clampText = %q (%d bytes)", got, len(got))
	}
	if clampText("short", 50) != "short" {
		t.Error("clampText changed a short text")
	}
}

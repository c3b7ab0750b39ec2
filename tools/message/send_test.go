package message_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"

	bolt "go.etcd.io/bbolt"
	"go.uber.org/goleak"

	"github.com/switchboard-chat/switchboard/bus"
	"github.com/switchboard-chat/switchboard/tools"
	"github.com/switchboard-chat/switchboard/tools/message"
	"github.com/switchboard-chat/switchboard/workspace"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

type published struct {
	subject, msgID string
	out            bus.Outbound
}

type fakePub struct {
	mu   sync.Mutex
	msgs []published
	err  error
}

func (p *fakePub) Publish(_ context.Context, subject string, data []byte, msgID string) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.err != nil {
		return p.err
	}
	var out bus.Outbound
	if err := json.Unmarshal(data, &out); err != nil {
		return err
	}
	p.msgs = append(p.msgs, published{subject, msgID, out})
	return nil
}

func (p *fakePub) all() []published {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]published(nil), p.msgs...)
}

type env struct {
	dir   string
	db    *bolt.DB
	chats *message.Chats
	pub   *fakePub
	reg   *tools.Registry
}

func openDB(t *testing.T, path string) *bolt.DB {
	t.Helper()
	db, err := bolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	return db
}

func newEnv(t *testing.T, dbPath string, cfg tools.SendMessageConfig) *env {
	t.Helper()
	dir := t.TempDir()
	ws, err := workspace.Open(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ws.Close() })
	if dbPath == "" {
		dbPath = filepath.Join(t.TempDir(), "tools.db")
	}
	db := openDB(t, dbPath)
	t.Cleanup(func() { _ = db.Close() })
	chats, err := message.NewChats(db)
	if err != nil {
		t.Fatal(err)
	}
	pub := &fakePub{}
	if cfg.MaxFileBytes == 0 {
		cfg.MaxFileBytes = 1024
	}
	reg, err := tools.NewRegistry(message.New(ws, chats, pub, bus.Subjects{Prefix: "chat"}, cfg), chats.Recorder())
	if err != nil {
		t.Fatal(err)
	}
	return &env{dir: dir, db: db, chats: chats, pub: pub, reg: reg}
}

func sess(channel, chat, user string) tools.Session {
	return tools.Session{Key: channel + "/" + chat, Speaker: bus.Speaker{Channel: channel, ChatID: chat, UserID: user}}
}

// turn simulates a finished turn in s: the post-turn recorder runs.
func (e *env) turn(t *testing.T, s tools.Session) {
	t.Helper()
	post := e.reg.PostTurn()
	if len(post) != 1 || post[0].Name() != "record_chat" {
		t.Fatalf("post-turn tools = %v", post)
	}
	if r := e.reg.RunPostTurn(t.Context(), post[0], tools.Call{Args: json.RawMessage(`{"reply":"hi"}`), Session: s}); r.IsError {
		t.Fatalf("record_chat: %+v", r)
	}
}

func (e *env) send(t *testing.T, s tools.Session, args string) tools.Result {
	t.Helper()
	return e.reg.Run(t.Context(), "send_message", tools.Call{Args: json.RawMessage(args), Session: s})
}

var (
	aliceDM  = sess("telegram", "100", "alice")
	aliceDM2 = sess("telegram", "101", "alice")
	bobDM    = sess("telegram", "200", "bob")
	group    = sess("telegram", "-900", "alice")
)

func TestSendToCurrentChat(t *testing.T) {
	e := newEnv(t, "", tools.SendMessageConfig{})
	threaded := tools.Session{Key: "slack/C1/17.5", Speaker: bus.Speaker{Channel: "slack", ChatID: "C1", UserID: "U1"}}
	r := e.send(t, threaded, `{"text":"**hello**"}`)
	if r.IsError || !strings.Contains(r.Text, "sent to the current chat; do not repeat it") {
		t.Fatalf("send: %+v", r)
	}
	msgs := e.pub.all()
	if len(msgs) != 1 {
		t.Fatalf("published %d messages", len(msgs))
	}
	m := msgs[0]
	if m.subject != "chat.out.slack.C1" || m.msgID != m.out.ID || !strings.HasPrefix(m.out.ID, "msg_") {
		t.Errorf("subject %s, msg id %s, id %s", m.subject, m.msgID, m.out.ID)
	}
	want := bus.Outbound{V: 1, ID: m.out.ID, Channel: "slack", ChatID: "C1", ThreadID: "17.5", Kind: bus.KindReply, Text: "**hello**", Final: true}
	if got, _ := json.Marshal(m.out); string(got) != string(must(json.Marshal(want))) {
		t.Errorf("outbound = %s, want %s", got, must(json.Marshal(want)))
	}
}

func must(b []byte, err error) []byte {
	if err != nil {
		panic(err)
	}
	return b
}

func TestSendFile(t *testing.T) {
	e := newEnv(t, "", tools.SendMessageConfig{MaxFileBytes: 100})
	png := []byte("\x89PNG\r\n\x1a\n0000")
	if err := os.WriteFile(filepath.Join(e.dir, "chart.png"), png, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(e.dir, "big.txt"), []byte(strings.Repeat("x", 101)), 0o600); err != nil {
		t.Fatal(err)
	}
	outside := filepath.Join(t.TempDir(), "secret.txt")
	if err := os.WriteFile(outside, []byte("secret"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, filepath.Join(e.dir, "link.txt")); err != nil {
		t.Fatal(err)
	}
	r := e.send(t, aliceDM, `{"file":"chart.png"}`)
	if r.IsError || !strings.Contains(r.Text, "message with chart.png sent") {
		t.Fatalf("send file: %+v", r)
	}
	att := e.pub.all()[0].out.Attachments
	if len(att) != 1 || att[0].Kind != bus.AttachImage || att[0].MIME != "image/png" || att[0].Name != "chart.png" || att[0].Size != int64(len(png)) {
		t.Fatalf("attachment = %+v", att)
	}
	if data, _ := base64.StdEncoding.DecodeString(att[0].Data); string(data) != string(png) {
		t.Error("attachment data differs")
	}
	for args, want := range map[string]string{
		`{"file":"big.txt"}`:            "more than the 100 bytes",
		`{"file":"../x"}`:               "outside the workspace",
		`{"file":"` + outside + `"}`:    "outside the workspace",
		`{"file":"link.txt"}`:           "leads outside the workspace",
		`{"file":"missing.txt"}`:        "no such file",
		`{"file":".", "text":"folder"}`: "not a regular file",
	} {
		if r := e.send(t, aliceDM, args); !r.IsError || !strings.Contains(r.Text, want) {
			t.Errorf("%s: %+v, want %q", args, r, want)
		}
	}
	if n := len(e.pub.all()); n != 1 {
		t.Errorf("%d messages published, want only the good one", n)
	}
	off := newEnv(t, "", tools.SendMessageConfig{MaxFileBytes: -1})
	if r := off.send(t, aliceDM, `{"file":"AGENT.md"}`); !r.Denied {
		t.Errorf("files turned off: %+v", r)
	}
}

func TestSendOtherChats(t *testing.T) {
	e := newEnv(t, "", tools.SendMessageConfig{})
	e.turn(t, aliceDM)
	e.turn(t, aliceDM2)
	e.turn(t, bobDM)
	e.turn(t, group)
	e.turn(t, sess("telegram", "-900", "bob")) // a second person in the group
	groupFlagged := sess("telegram", "-901", "alice")
	groupFlagged.IsGroup = true
	e.turn(t, groupFlagged)
	e.turn(t, sess("slack", "D1", "alice"))

	// Alice reaches her other private chat.
	r := e.send(t, aliceDM, `{"text":"hi there","channel":"telegram","chat_id":"101"}`)
	if r.IsError || r.Text != "message sent to telegram:101" {
		t.Fatalf("own chat: %+v", r)
	}
	if m := e.pub.all()[0]; m.subject != "chat.out.telegram.101" || m.out.ChatID != "101" {
		t.Errorf("published %+v", m)
	}
	// Never another user's chat, a shared group, a flagged group, another
	// channel or an unknown chat.
	for _, tt := range []struct{ args, want string }{
		{`{"text":"x","channel":"telegram","chat_id":"200"}`, "not one of your chats"},
		{`{"text":"x","channel":"telegram","chat_id":"-900"}`, "not one of your chats"},
		{`{"text":"x","channel":"telegram","chat_id":"-901"}`, "not one of your chats"},
		{`{"text":"x","channel":"telegram","chat_id":"555"}`, "not one of your chats"},
		{`{"text":"x","channel":"telegram","chat_id":"101","thread_id":"7"}`, "not one of your chats"},
		{`{"text":"x","channel":"slack","chat_id":"D1"}`, "only to chats on the current channel"},
	} {
		r := e.send(t, aliceDM, tt.args)
		if !r.IsError || !r.Denied || !strings.Contains(r.Text, tt.want) {
			t.Errorf("%s: %+v, want a denial %q", tt.args, r, tt.want)
		}
	}
	if r := e.send(t, bobDM, `{"text":"x","channel":"telegram","chat_id":"100"}`); !r.Denied {
		t.Errorf("bob reached alice's chat: %+v", r)
	}
	// From the group, alice may still reach her private chat.
	if r := e.send(t, group, `{"text":"psst","channel":"telegram","chat_id":"100"}`); r.IsError {
		t.Errorf("from the group to her own chat: %+v", r)
	}
	if n := len(e.pub.all()); n != 2 {
		t.Errorf("%d messages published, want 2", n)
	}

	r = e.send(t, aliceDM, `{"list_chats":true}`)
	want := "current chat: channel \"telegram\", chat_id \"100\"\nother chats of this user:\n- channel \"telegram\", chat_id \"101\""
	if r.Text != want {
		t.Errorf("list_chats:\n%s\nwant:\n%s", r.Text, want)
	}
	if r := e.send(t, bobDM, `{"list_chats":true}`); !strings.Contains(r.Text, "no other chats") {
		t.Errorf("bob's list: %s", r.Text)
	}
}

func TestChatsPersist(t *testing.T) {
	path := filepath.Join(t.TempDir(), "tools.db")
	func() {
		db := openDB(t, path)
		defer db.Close()
		c, err := message.NewChats(db)
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range []tools.Session{aliceDM, aliceDM2, group, sess("telegram", "-900", "bob")} {
			if err := c.Record(s); err != nil {
				t.Fatal(err)
			}
		}
	}()
	db := openDB(t, path)
	defer db.Close()
	c, err := message.NewChats(db)
	if err != nil {
		t.Fatal(err)
	}
	got := c.Owned("telegram", "alice")
	if len(got) != 2 || got[0].ChatID != "100" || got[1].ChatID != "101" {
		t.Errorf("Owned after reopening = %v", got)
	}
	if c.Owns(message.Chat{Channel: "telegram", ChatID: "-900"}, "alice") {
		t.Error("a chat with two users is owned")
	}
	if err := c.Record(tools.Session{}); err != nil {
		t.Errorf("Record(empty session) = %v", err)
	}
}

func TestSendErrors(t *testing.T) {
	e := newEnv(t, "", tools.SendMessageConfig{})
	for _, tt := range []struct{ args, want string }{
		{`{}`, "give text, file, or both"},
		{`{"text":"  "}`, "give text, file, or both"},
		{`{"text":"x","channel":"telegram"}`, "give both channel and chat_id"},
		{`{"text":"x","thread_id":"9"}`, "thread_id needs channel and chat_id"},
		{`{"list_chats":true,"text":"x"}`, "list_chats takes no other arguments"},
		{`{"text":"x","to":"bob"}`, `unknown field "to"`},
		{`{"text":"` + strings.Repeat("a", message.MaxTextBytes+1) + `"}`, "at most 65536 bytes"},
	} {
		r := e.send(t, aliceDM, tt.args)
		if !r.IsError || !strings.Contains(r.Text, tt.want) {
			t.Errorf("%.60s: %+v, want %q", tt.args, r, tt.want)
		}
	}
	if r := e.send(t, tools.Session{}, `{"text":"x"}`); !r.IsError || !strings.Contains(r.Text, "needs a chat session") {
		t.Errorf("no session: %+v", r)
	}
	e.pub.err = errors.New("bus down")
	if r := e.send(t, aliceDM, `{"text":"x"}`); !r.IsError || !strings.Contains(r.Text, "message not sent: bus down") {
		t.Errorf("publish failure: %+v", r)
	}
}

// TestChatsBeyondTheCache records more chats than the records' cache holds:
// a chat recorded long ago (its record evicted from the cache) is still
// owned, and a second user seen in it afterwards still makes it shared —
// the stored record, not a fresh one, is what the new user is added to.
func TestChatsBeyondTheCache(t *testing.T) {
	db := openDB(t, filepath.Join(t.TempDir(), "tools.db"))
	defer db.Close()
	db.NoSync = true // thousands of records; durability is not what is tested
	c, err := message.NewChats(db)
	if err != nil {
		t.Fatal(err)
	}
	first := sess("telegram", "1", "alice")
	if err := c.Record(first); err != nil {
		t.Fatal(err)
	}
	for i := range 4200 {
		if err := c.Record(sess("telegram", strconv.Itoa(1000+i), "user"+strconv.Itoa(i))); err != nil {
			t.Fatal(err)
		}
	}
	chat := message.Chat{Channel: "telegram", ChatID: "1"}
	if !c.Owns(chat, "alice") {
		t.Fatal("alice's chat, recorded before 4,200 others (the cache holds 4,096), is not hers any more")
	}
	if err := c.Record(sess("telegram", "1", "mallory")); err != nil {
		t.Fatal(err)
	}
	if c.Owns(chat, "alice") || c.Owns(chat, "mallory") {
		t.Error("a chat two users were seen in is owned by one of them")
	}
	if got := c.Owned("telegram", "user4199"); len(got) != 1 || got[0].ChatID != "5199" {
		t.Errorf("Owned(user4199) = %v", got)
	}
}

// TestChatsConcurrentUsers records two users of one chat from concurrent
// sessions, many times over: the chat always ends up shared (neither
// write loses the other's user), whatever the interleaving.
func TestChatsConcurrentUsers(t *testing.T) {
	db := openDB(t, filepath.Join(t.TempDir(), "tools.db"))
	defer db.Close()
	db.NoSync = true
	c, err := message.NewChats(db)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 50 {
		id := strconv.Itoa(5000 + i)
		var wg sync.WaitGroup
		for _, u := range []string{"alice", "mallory"} {
			wg.Go(func() {
				if err := c.Record(sess("telegram", id, u)); err != nil {
					t.Error(err)
				}
			})
		}
		wg.Wait()
		chat := message.Chat{Channel: "telegram", ChatID: id}
		if c.Owns(chat, "alice") || c.Owns(chat, "mallory") {
			t.Fatalf("chat %s, where alice and mallory both wrote at once, is owned by one of them", id)
		}
	}
}

package main

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/switchboard-chat/switchboard/access"
	"github.com/switchboard-chat/switchboard/bus"
	"github.com/switchboard-chat/switchboard/channels/telegram"
	"github.com/switchboard-chat/switchboard/llm/llmtest"
)

// pairBot is a Bot API for the pairing test: updates are queued by the
// test, getUpdates serves them from the offset asked, sendMessage is
// recorded.
type pairBot struct {
	srv *httptest.Server

	mu      sync.Mutex
	updates []map[string]any
	sent    []sentMsg // sendMessage calls: chat_id, text
	changed chan struct{}
}

type sentMsg struct{ chat, text string }

func newPairBot(t *testing.T) *pairBot {
	b := &pairBot{changed: make(chan struct{})}
	b.srv = httptest.NewServer(http.HandlerFunc(b.serve))
	t.Cleanup(b.srv.Close)
	return b
}

// bump wakes the long polls and the waiting test. Called with mu held.
func (b *pairBot) bump() {
	close(b.changed)
	b.changed = make(chan struct{})
}

func (b *pairBot) serve(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	method, ok := strings.CutPrefix(r.URL.Path, "/bot42:good/")
	if !ok {
		w.WriteHeader(http.StatusUnauthorized)
		_ = json.NewEncoder(w).Encode(map[string]any{"ok": false, "error_code": 401, "description": "Unauthorized"})
		return
	}
	_ = r.ParseForm()
	var result any = true
	switch method {
	case "getMe":
		result = map[string]any{"id": 42, "is_bot": true, "first_name": "Bot", "username": "good_bot"}
	case "getUpdates":
		offset, _ := strconv.Atoi(r.Form.Get("offset"))
		var ups []map[string]any
		for range 2 {
			b.mu.Lock()
			for _, u := range b.updates {
				if u["update_id"].(int) >= offset {
					ups = append(ups, u)
				}
			}
			ch := b.changed
			b.mu.Unlock()
			if len(ups) > 0 {
				break
			}
			select { // a short long poll
			case <-r.Context().Done():
				return
			case <-ch:
			case <-time.After(200 * time.Millisecond):
			}
		}
		result = ups
		if ups == nil {
			result = []any{}
		}
	case "sendMessage":
		b.mu.Lock()
		b.sent = append(b.sent, sentMsg{r.Form.Get("chat_id"), r.Form.Get("text")})
		n := len(b.sent)
		b.bump()
		b.mu.Unlock()
		chat, _ := strconv.ParseInt(r.Form.Get("chat_id"), 10, 64)
		result = map[string]any{"message_id": 1000 + n, "date": time.Now().Unix(), "chat": map[string]any{"id": chat, "type": "private"}, "text": r.Form.Get("text")}
	}
	_ = json.NewEncoder(w).Encode(map[string]any{"ok": true, "result": result})
}

// say queues a message of user in chat (a private chat when chat is the
// user's id, a group otherwise).
func (b *pairBot) say(user int64, chat int64, text string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	id := len(b.updates) + 1
	typ := "private"
	msg := map[string]any{"message_id": id, "date": time.Now().Unix(), "text": text,
		"from": map[string]any{"id": user, "is_bot": false, "first_name": "User" + strconv.FormatInt(user, 10)}}
	if chat != user {
		typ = "group"
		if strings.HasPrefix(text, "@good_bot") {
			msg["entities"] = []map[string]any{{"type": "mention", "offset": 0, "length": len("@good_bot")}}
		}
	}
	if strings.HasPrefix(text, "/") {
		word, _, _ := strings.Cut(text, " ")
		msg["entities"] = []map[string]any{{"type": "bot_command", "offset": 0, "length": len(word)}}
	}
	msg["chat"] = map[string]any{"id": chat, "type": typ}
	b.updates = append(b.updates, map[string]any{"update_id": id, "message": msg})
	b.bump()
}

// waitSent waits for a sendMessage to chat whose text contains want and
// returns its text.
func (b *pairBot) waitSent(t *testing.T, chat int64, want string) string {
	t.Helper()
	return b.waitSentAfter(t, chat, want, 0)
}

// waitSentAfter is waitSent ignoring the first skip messages to chat.
func (b *pairBot) waitSentAfter(t *testing.T, chat int64, want string, skip int) string {
	t.Helper()
	deadline := time.After(wait)
	for {
		b.mu.Lock()
		n := 0
		for _, s := range b.sent {
			if s.chat != strconv.FormatInt(chat, 10) {
				continue
			}
			if n++; n > skip && strings.Contains(s.text, want) {
				b.mu.Unlock()
				return s.text
			}
		}
		ch := b.changed
		sent := b.sent
		b.mu.Unlock()
		select {
		case <-ch:
		case <-deadline:
			t.Fatalf("no message to chat %d containing %q; sent: %+v", chat, want, sent)
		}
	}
}

// sentTo returns the texts sent to chat.
func (b *pairBot) sentTo(chat int64) []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []string
	for _, s := range b.sent {
		if s.chat == strconv.FormatInt(chat, 10) {
			out = append(out, s.text)
		}
	}
	return out
}

var pairCode = regexp.MustCompile(`pairing code is ([A-Z2-9]{8}) `)

// TestPairingTelegramEndToEnd drives the daemon with the real Telegram
// adapter against a fake Bot API and a scripted model: an unknown user in
// a direct chat gets one message with a code and nothing of theirs reaches
// the bus or the model; /pair approve from a non-owner is refused, from an
// owner a wrong code is refused and the right one admits the user;
// `switchboard pairing approve` on the command line while the daemon runs
// admits another; their next messages are answered; `pairing revoke` puts
// a user back to pairing; an unknown user in a group gets the group's
// refusal, no code.
func TestPairingTelegramEndToEnd(t *testing.T) {
	const (
		owner, friend, ann, bob, eve int64 = 1, 8, 7, 9, 5
		group                        int64 = -100
	)
	model := llmtest.NewServer(t, llmtest.WithResponder(func(req *llmtest.Request) llmtest.Reply {
		return llmtest.TextReply("echo: " + req.LastUserText())
	}))
	bot := newPairBot(t)
	cfg := testConfig(t, model.URL())
	tc := telegram.DefaultConfig()
	tc.Token, tc.APIEndpoint, tc.PollTimeout = "42:good", bot.srv.URL+"/bot%s/%s", time.Second
	tc.AllowUsers = telegram.UserList{strconv.FormatInt(friend, 10)}
	cfg.Channels.Telegram = &tc
	cfg.Access.Owners = []string{"telegram:1"}
	cfgFile := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(cfgFile, []byte("data_dir: "+cfg.DataDir+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	d := startDaemon(t, cfg)
	var (
		mu      sync.Mutex
		inbound []bus.Inbound
	)
	sub, err := d.nc.Subscribe(d.subjects().Prefix+".in.telegram.>", func(m *nats.Msg) {
		var in bus.Inbound
		_ = json.Unmarshal(m.Data, &in)
		mu.Lock()
		inbound = append(inbound, in)
		mu.Unlock()
	})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	verb := func(args ...string) string {
		t.Helper()
		var out strings.Builder
		if code := run(t.Context(), append(args, "--config", cfgFile), strings.NewReader(""), &out, &out); code != 0 {
			t.Fatalf("switchboard %v: exit %d\n%s", args, code, out.String())
		}
		return out.String()
	}

	bot.say(ann, ann, "hello, my secret is 1234")
	reply := bot.waitSent(t, ann, "pairing code is")
	m := pairCode.FindStringSubmatch(reply)
	if m == nil {
		t.Fatalf("pairing reply without a code: %q", reply)
	}
	annCode := m[1]
	bot.say(ann, ann, "are you there?")
	bot.say(bob, bob, "hi from bob")
	m = pairCode.FindStringSubmatch(bot.waitSent(t, bob, "pairing code is"))
	bobCode := m[1]
	if bobCode == annCode {
		t.Fatal("two users got the same code")
	}
	if out := verb("pairing", "list"); !strings.Contains(out, "telegram:7") || !strings.Contains(out, "telegram:9") || strings.Contains(out, annCode) {
		t.Fatalf("pairing list:\n%s", out)
	}

	bot.say(friend, friend, "/pair approve "+annCode)
	bot.waitSent(t, friend, "Only the owners listed in access.owners may approve")
	wrong := "ZZZZ2222"
	bot.say(owner, owner, "/pair approve "+wrong)
	bot.waitSent(t, owner, "Not approved: this pairing code is unknown")
	bot.say(owner, owner, "/pair approve "+strings.ToLower(annCode))
	bot.waitSent(t, owner, "Approved telegram:7")
	if out := verb("pairing", "approve", bobCode); !strings.Contains(out, "Approved telegram:9") {
		t.Fatalf("pairing approve: %s", out)
	}

	bot.say(ann, ann, "now?")
	bot.waitSent(t, ann, "echo: now?")
	bot.say(bob, bob, "me too")
	bot.waitSent(t, bob, "echo: me too")
	if got := bot.sentTo(ann); len(got) != 2 {
		t.Fatalf("ann got %d messages, want the code once and one answer: %q", len(got), got)
	}

	// Revoked: back to pairing, with a new code.
	verb("pairing", "revoke", "telegram:9")
	before := len(bot.sentTo(bob))
	bot.say(bob, bob, "still here")
	m = pairCode.FindStringSubmatch(bot.waitSentAfter(t, bob, "pairing code is ", before))
	if m == nil || m[1] == bobCode {
		t.Fatalf("after revoke: %q", bot.sentTo(bob))
	}
	// Groups keep their rules: an unknown member gets the group's refusal.
	bot.say(eve, group, "@good_bot hello from the group")
	if text := bot.waitSent(t, group, "allow list"); strings.Contains(text, "pairing code") {
		t.Fatalf("group refusal carries a code: %q", text)
	}
	bot.say(owner, owner, "ping")
	bot.waitSent(t, owner, "echo: ping")

	// Nothing of the refused messages reached the bus or the model.
	secret := []string{"my secret", "are you there?", "hi from bob", "still here", "hello from the group", "/pair approve"}
	mu.Lock()
	for _, in := range inbound {
		for _, s := range secret[:5] {
			if strings.Contains(in.Text, s) {
				t.Errorf("refused message published on the bus: %+v", in)
			}
		}
	}
	mu.Unlock()
	for _, req := range model.Requests() {
		for _, msg := range req.Body.Messages {
			for _, s := range secret {
				if strings.Contains(llmtest.MessageText(msg), s) {
					t.Errorf("the model saw %q: %q", s, llmtest.MessageText(msg))
				}
			}
		}
	}
	if out := verb("pairing", "list"); !strings.Contains(out, "Approved (1") || !strings.Contains(out, "telegram:7") {
		t.Fatalf("pairing list at the end:\n%s", out)
	}
	if _, err := os.Stat(filepath.Join(cfg.DataDir, access.FileName)); err != nil {
		t.Errorf("the approved list is not in data_dir: %v", err)
	}
}

package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/switchboard-chat/switchboard/bus"
	"github.com/switchboard-chat/switchboard/llm/llmtest"
)

// TestE2EReloadAllowUsers: the real Telegram adapter over a fake Bot API;
// a reload that edits channels.telegram.allow_users lets the added user's
// next message through and refuses the removed one's (told why), without
// a restart, and nothing of a refused message reaches the bus or the model.
func TestE2EReloadAllowUsers(t *testing.T) {
	const ann, friend int64 = 7, 8
	model := llmtest.NewServer(t, llmtest.WithResponder(func(req *llmtest.Request) llmtest.Reply {
		return llmtest.TextReply("echo: " + req.LastUserText())
	}))
	bot := newPairBot(t)
	dir := t.TempDir()
	path := filepath.Join(dir, "config.yaml")
	write := func(allow string) {
		t.Helper()
		yaml := `
data_dir: "` + filepath.Join(dir, "data") + `"
bus: {listen: "127.0.0.1:0"}
admin: {listen: "127.0.0.1:0"}
llm: {base_url: "` + model.URL() + `", api_key: k, model: m, max_retries: 0}
agent: {workspace: "` + filepath.Join(dir, "ws") + `"}
access: {dm_policy: {telegram: allowlist}}
channels:
  telegram: {token: "42:good", api_endpoint: "` + bot.srv.URL + `/bot%s/%s", poll_timeout: 1s, allow_users: [` + allow + `]}
`
		if err := os.WriteFile(path, []byte(yaml), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write(`"8"`)
	cfg, _, err := LoadConfig(path)
	if err != nil {
		t.Fatal(err)
	}
	d := startDaemon(t, cfg)
	var (
		mu      sync.Mutex
		inbound []string
	)
	sub, err := d.nc.Subscribe(d.subjects().Prefix+".in.telegram.>", func(m *nats.Msg) {
		var in bus.Inbound
		_ = json.Unmarshal(m.Data, &in)
		mu.Lock()
		inbound = append(inbound, in.Text)
		mu.Unlock()
	})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = sub.Unsubscribe() }()

	bot.say(friend, friend, "hi before")
	bot.waitSent(t, friend, "echo: hi before")
	bot.say(ann, ann, "ann before the reload")
	bot.waitSent(t, ann, "allow list")

	write(`"7"`) // ann added, friend removed
	code, stdout, stderr := runVerb(t, "reload", "--config", path, "--admin", "http://"+d.s.Admin.Addr())
	if code != 0 || !strings.Contains(stdout, "channels.telegram.allow_users: applied") || strings.Contains(stdout, "kept until restart") {
		t.Fatalf("reload: exit %d\n%s%s", code, stdout, stderr)
	}
	bot.say(ann, ann, "ann after the reload")
	bot.waitSent(t, ann, "echo: ann after the reload")
	bot.say(friend, friend, "friend after removal")
	if text := bot.waitSent(t, friend, "allow list"); !strings.Contains(text, "Your Telegram user id is 8") {
		t.Fatalf("the removed user is not told why: %q", text)
	}

	refused := []string{"ann before the reload", "friend after removal"}
	mu.Lock()
	for _, text := range inbound {
		for _, r := range refused {
			if strings.Contains(text, r) {
				t.Errorf("a refused message was published: %q", text)
			}
		}
	}
	mu.Unlock()
	for _, req := range model.Requests() {
		for _, msg := range req.Body.Messages {
			for _, r := range refused {
				if strings.Contains(llmtest.MessageText(msg), r) {
					t.Errorf("the model saw %q", r)
				}
			}
		}
	}
}

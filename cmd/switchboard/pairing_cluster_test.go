package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/switchboard-chat/switchboard/access"
	"github.com/switchboard-chat/switchboard/llm/llmtest"
)

// TestPairingOnJetStream: with memory.store jetstream the daemon keeps the
// pairing state in the cluster's access bucket, not in data_dir, and
// `switchboard pairing list|approve` reach it on the bus as the operator:
// the code a Telegram user got is listed and approved from the command
// line, and their next message is answered.
func TestPairingOnJetStream(t *testing.T) {
	const ann int64 = 7
	model := llmtest.NewServer(t, llmtest.WithResponder(func(req *llmtest.Request) llmtest.Reply {
		return llmtest.TextReply("echo: " + req.LastUserText())
	}))
	bot := newPairBot(t)
	dir := t.TempDir()
	yaml := `
data_dir: "` + filepath.Join(dir, "data") + `"
bus: {listen: "127.0.0.1:0"}
admin: {listen: ""}
memory: {store: jetstream}
llm: {base_url: "` + model.URL() + `", api_key: k, model: m, max_retries: 0}
agent: {workspace: "` + filepath.Join(dir, "ws") + `"}
channels:
  telegram: {token: "42:good", api_endpoint: "` + bot.srv.URL + `/bot%s/%s", poll_timeout: 1s, allow_users: ["8"]}
`
	d, cfg := startDaemonYAML(t, dir, yaml)
	url := d.operatorURL(t, cfg)

	bot.say(ann, ann, "hello")
	code := pairCode.FindStringSubmatch(bot.waitSent(t, ann, "pairing code is"))[1]
	if c, out, errOut := runVerb(t, "pairing", "list", "--config", cfg.File, "--url", url); c != 0 || !strings.Contains(out, "telegram:7") {
		t.Fatalf("pairing list against the bus: exit %d\n%s%s", c, out, errOut)
	}
	if c, out, errOut := runVerb(t, "pairing", "approve", code, "--config", cfg.File, "--url", url); c != 0 || !strings.Contains(out, "Approved telegram:7") {
		t.Fatalf("pairing approve against the bus: exit %d\n%s%s", c, out, errOut)
	}
	bot.say(ann, ann, "approved now?")
	bot.waitSent(t, ann, "echo: approved now?")
	if _, err := os.Stat(filepath.Join(cfg.DataDir, access.FileName)); err == nil {
		t.Error("data_dir/access.db written with memory.store jetstream: the state is per instance")
	}
}

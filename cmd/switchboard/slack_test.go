package main

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/switchboard-chat/switchboard/bus"
	"github.com/switchboard-chat/switchboard/bus/bustest"
	slackch "github.com/switchboard-chat/switchboard/channels/slack"
	"github.com/switchboard-chat/switchboard/workspace"
)

func TestNewSlackOffWithoutTokens(t *testing.T) {
	cfg := defaultConfig()
	for name, c := range map[string]*slackch.Config{"default section": cfg.Channels.Slack, "no section": nil} {
		cfg.Channels.Slack = c
		ch, err := newSlack(cfg, channelDeps{})
		if ch != nil || err != nil {
			t.Errorf("%s: newSlack = %v, %v; want nil, nil (off)", name, ch, err)
		}
	}
}

func TestNewSlackErrors(t *testing.T) {
	cfg := defaultConfig()
	cfg.Channels.Slack = &slackch.Config{BotToken: "xoxb-1", AppToken: "xapp-1"}
	ch, err := newSlack(cfg, channelDeps{}) // no NATS connection
	if ch != nil || err == nil || !strings.Contains(err.Error(), "Conn") {
		t.Errorf("newSlack without a connection = %v, %v; want a nil channel and an error", ch, err)
	}
	cfg.Channels.Slack = &slackch.Config{BotToken: "xoxb-1"}
	if _, err := newSlack(cfg, channelDeps{}); err == nil || !strings.Contains(err.Error(), "channels.slack.app_token") {
		t.Errorf("newSlack without an app token = %v", err)
	}
}

func TestShippedConfigSlackFromEnvironment(t *testing.T) {
	data, err := os.ReadFile(shippedConfig)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := ParseConfig(data, envMap(map[string]string{
		"SLACK_BOT_TOKEN":   "xoxb-123",
		"SLACK_APP_TOKEN":   "xapp-456",
		"SLACK_ALLOW_USERS": "U0123ABCD, U0456EFGH",
	}))
	if err != nil {
		t.Fatal(err)
	}
	want := slackch.DefaultConfig()
	want.BotToken, want.AppToken = "xoxb-123", "xapp-456"
	want.AllowUsers = slackch.IDList{"U0123ABCD", "U0456EFGH"}
	if diff := cmp.Diff(&want, cfg.Channels.Slack); diff != "" {
		t.Errorf("channels.slack (-want +got):\n%s", diff)
	}

	// A bot token alone is not enough in socket mode.
	_, err = ParseConfig(data, envMap(map[string]string{"SLACK_BOT_TOKEN": "xoxb-123"}))
	if err == nil || !strings.Contains(err.Error(), "channels.slack.app_token: required in socket mode") {
		t.Errorf("ParseConfig with only SLACK_BOT_TOKEN = %v", err)
	}
}

func TestSlackConfigErrorsNameTheirKeys(t *testing.T) {
	_, err := ParseConfig([]byte("channels:\n  slack:\n    bot_token: xoxb-1\n    mode: rtm\n    group_trigger: always\n    allow_users: [\"@ann\"]\n    signing_secrett: x\n"), noEnv)
	if err == nil {
		t.Fatal("ParseConfig accepted an invalid slack section")
	}
	for _, want := range []string{
		"channels.slack.signing_secrett (line 7): unknown key (did you mean signing_secret?)",
		`channels.slack.mode: must be socket or http, got "rtm"`,
		`channels.slack.group_trigger: must be mention_or_thread, mention or all, got "always"`,
		`channels.slack.allow_users[0]: must be a Slack user id`,
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q:\n%v", want, err)
		}
	}
}

func TestNewSlackRunsAgainstSlack(t *testing.T) {
	// A Web API that rejects the token: Run returns the error at once,
	// having reported the failure.
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]any{"ok": false, "error": "invalid_auth"})
	}))
	defer srv.Close()
	s := bustest.StartServer(t)
	nc := bustest.Connect(t, s)
	ws, err := workspace.Open(t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer ws.Close()
	cfg := defaultConfig()
	cfg.DataDir = t.TempDir()
	cfg.Channels.Slack = &slackch.Config{BotToken: "xoxb-1", AppToken: "xapp-1", APIURL: srv.URL + "/api"}
	var (
		mu       sync.Mutex
		statuses = map[string]error{}
	)
	ch, err := newSlack(cfg, channelDeps{Conn: nc, Subjects: bus.Subjects{Prefix: "chat"}, Workspace: ws, DataDir: cfg.DataDir,
		Status: func(c string, err error) { mu.Lock(); statuses[c] = err; mu.Unlock() }})
	if err != nil || ch == nil || ch.Name() != "slack" {
		t.Fatalf("newSlack = %v, %v", ch, err)
	}
	err = ch.Run(t.Context())
	if err == nil || !strings.Contains(err.Error(), "channels.slack.bot_token rejected") {
		t.Errorf("Run = %v, want the token rejected", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if statuses[compSlack] == nil {
		t.Errorf("statuses = %v, want the slack component failing", statuses)
	}
	if _, err := os.Stat(cfg.DataDir + "/slack.db"); err != nil {
		t.Errorf("slack.db not in data_dir: %v", err)
	}
}

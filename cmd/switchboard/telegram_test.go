package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/switchboard-chat/switchboard/bus"
	"github.com/switchboard-chat/switchboard/bus/bustest"
	"github.com/switchboard-chat/switchboard/channels/telegram"
	"github.com/switchboard-chat/switchboard/workspace"
)

func TestNewTelegramOffWithoutToken(t *testing.T) {
	cfg := defaultConfig()
	var logs bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logs, nil))
	ch, err := newTelegram(cfg, channelDeps{Log: log})
	if ch != nil || err != nil {
		t.Errorf("default section: newTelegram = %v, %v; want nil, nil (off)", ch, err)
	}
	if !strings.Contains(logs.String(), "Telegram channel is off") || !strings.Contains(logs.String(), "TELEGRAM_BOT_TOKEN") {
		t.Errorf("log = %q, want a line saying the channel is off and how to turn it on", logs.String())
	}
	cfg.Channels.Telegram = nil
	if ch, err := newTelegram(cfg, channelDeps{}); ch != nil || err != nil {
		t.Errorf("no section: newTelegram = %v, %v; want nil, nil", ch, err)
	}
}

func TestNewTelegramErrors(t *testing.T) {
	cfg := defaultConfig()
	tc := telegram.DefaultConfig()
	tc.Token = "123:abc"
	cfg.Channels.Telegram = &tc
	ch, err := newTelegram(cfg, channelDeps{}) // no NATS connection
	if ch != nil || err == nil || !strings.Contains(err.Error(), "Conn") {
		t.Errorf("newTelegram without a connection = %v, %v; want a nil channel and an error", ch, err)
	}
}

func TestShippedConfigTelegramFromEnvironment(t *testing.T) {
	data, err := os.ReadFile(shippedConfig)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := ParseConfig(data, envMap(map[string]string{
		"TELEGRAM_BOT_TOKEN":   "123456:AAE-token",
		"TELEGRAM_ALLOW_USERS": "123456789, @ann",
	}))
	if err != nil {
		t.Fatal(err)
	}
	want := telegram.DefaultConfig()
	want.Token = "123456:AAE-token"
	want.AllowUsers = telegram.UserList{"123456789", "@ann"}
	if diff := cmp.Diff(&want, cfg.Channels.Telegram); diff != "" {
		t.Errorf("channels.telegram (-want +got):\n%s", diff)
	}
	// A malformed token is an error that does not show it.
	_, err = ParseConfig(data, envMap(map[string]string{"TELEGRAM_BOT_TOKEN": "oops secret"}))
	if err == nil || !strings.Contains(err.Error(), "channels.telegram.token") || strings.Contains(err.Error(), "secret") {
		t.Errorf("ParseConfig with a malformed TELEGRAM_BOT_TOKEN = %v", err)
	}
}

func TestTelegramConfigErrorsNameTheirKeys(t *testing.T) {
	_, err := ParseConfig([]byte("channels:\n  telegram:\n    token: x\n    mode: push\n    group_trigger: always\n"+
		"    allow_users: [\"ann\"]\n    poll_timeot: 5s\nllm:\n  transcription_modle: whisper-1\n"), noEnv)
	if err == nil {
		t.Fatal("ParseConfig accepted an invalid telegram section")
	}
	for _, want := range []string{
		"channels.telegram.poll_timeot (line 7): unknown key (did you mean poll_timeout?)",
		"llm.transcription_modle (line 9): unknown key (did you mean transcription_model?)",
		"channels.telegram.token: must look like",
		`channels.telegram.mode: must be polling or webhook, got "push"`,
		`channels.telegram.group_trigger: must be mention_or_reply, mention or all, got "always"`,
		`channels.telegram.allow_users[0]: must be a numeric user id`,
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q:\n%v", want, err)
		}
	}
}

// botAPI is a minimal Bot API: getMe with the token "42:good" (401
// otherwise), true for the set-up calls, and an empty long poll.
func botAPI(t *testing.T) *httptest.Server {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		method, ok := strings.CutPrefix(r.URL.Path, "/bot42:good/")
		if !ok {
			w.WriteHeader(http.StatusUnauthorized)
			_ = json.NewEncoder(w).Encode(map[string]any{"ok": false, "error_code": 401, "description": "Unauthorized"})
			return
		}
		var result any = true
		switch method {
		case "getMe":
			result = map[string]any{"id": 42, "is_bot": true, "first_name": "Bot", "username": "good_bot"}
		case "getUpdates":
			select {
			case <-r.Context().Done():
				return
			case <-time.After(50 * time.Millisecond): // a short long poll
			}
			result = []any{}
		}
		_ = json.NewEncoder(w).Encode(map[string]any{"ok": true, "result": result})
	}))
	t.Cleanup(srv.Close)
	return srv
}

func TestNewTelegramRunsAgainstTelegram(t *testing.T) {
	srv := botAPI(t)
	s := bustest.StartServer(t)
	nc := bustest.Connect(t, s)
	bustest.Streams(t, nc)
	ws, err := workspace.Open(t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer ws.Close()
	var (
		mu       sync.Mutex
		statuses []error
		changed  = make(chan struct{}, 100)
	)
	deps := func(dir string) channelDeps {
		return channelDeps{Conn: nc, Subjects: bus.Subjects{Prefix: "chat"}, Workspace: ws, DataDir: dir,
			Status: func(c string, err error) {
				if c != compTelegram {
					t.Errorf("status for component %q", c)
				}
				mu.Lock()
				statuses = append(statuses, err)
				mu.Unlock()
				select { // a StatusFunc must not block
				case changed <- struct{}{}:
				default:
				}
			}}
	}
	cfg := defaultConfig()
	tc := telegram.DefaultConfig()
	tc.Token, tc.APIEndpoint, tc.PollTimeout = "42:bad", srv.URL+"/bot%s/%s", time.Second
	cfg.Channels.Telegram = &tc

	// A rejected token: Run returns at once, having reported it.
	ch, err := newTelegram(cfg, deps(t.TempDir()))
	if err != nil || ch == nil || ch.Name() != "telegram" {
		t.Fatalf("newTelegram = %v, %v", ch, err)
	}
	if err := ch.Run(t.Context()); !errors.Is(err, telegram.ErrUnauthorized) {
		t.Errorf("Run with a bad token = %v, want ErrUnauthorized", err)
	}

	// A good token: the channel polls, reports healthy, keeps its offset
	// in data_dir/telegram.db, and stops on cancel.
	tc.Token = "42:good"
	cfg.LLM.TranscriptionModel = "whisper-1"
	dir := t.TempDir()
	ch, err = newTelegram(cfg, deps(dir))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- ch.Run(ctx) }()
	timeout := time.After(10 * time.Second)
	for healthy := false; !healthy; {
		select {
		case <-changed:
			mu.Lock()
			healthy = statuses[len(statuses)-1] == nil
			mu.Unlock()
		case <-timeout:
			t.Fatal("the channel did not report healthy")
		}
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Run = %v after cancel, want nil", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "telegram.db")); err != nil {
		t.Errorf("telegram.db not in data_dir: %v", err)
	}
}

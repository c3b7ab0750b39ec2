package main

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/switchboard-chat/switchboard/llm/llmtest"
)

// fakeTelegram answers getMe for token, 401 for any other.
func fakeTelegram(t *testing.T, token string) string {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/bot"+token+"/getMe" {
			w.WriteHeader(http.StatusUnauthorized)
			_, _ = w.Write([]byte(`{"ok":false,"error_code":401,"description":"Unauthorized"}`))
			return
		}
		_, _ = w.Write([]byte(`{"ok":true,"result":{"id":42,"is_bot":true,"first_name":"B","username":"init_bot"}}`))
	}))
	t.Cleanup(srv.Close)
	return srv.URL + "/bot%s/%s"
}

func probeReply() llmtest.Reply {
	return llmtest.Reply{ToolCalls: []llmtest.ToolCall{{Name: "ping", Arguments: `{}`}}}
}

// TestInitVerbWritesALoadableConfig: `switchboard init --yes` writes a
// file the daemon's loader accepts, with the answers in it and every
// other key at its default, and the workspace where that file puts it.
func TestInitVerbWritesALoadableConfig(t *testing.T) {
	for _, v := range []string{"OPENAI_BASE_URL", "OPENAI_API_KEY", "OPENAI_MODEL", "TELEGRAM_BOT_TOKEN", "SLACK_BOT_TOKEN", "SLACK_APP_TOKEN"} {
		t.Setenv(v, "")
	}
	model := llmtest.NewServer(t, llmtest.WithModels("local-model"))
	model.Enqueue(probeReply())
	const token = "123456:AAE-init_token"
	tg := fakeTelegram(t, token)
	dir := t.TempDir()
	path := filepath.Join(dir, "config.yaml")
	var out bytes.Buffer
	args := []string{"init", "--yes", "--config", path, "--data-dir", filepath.Join(dir, "state"), "--base-url", model.URL(), "--api-key", "sk-$dollar${X}",
		"--telegram-token", token, "--telegram-api-endpoint", tg, "--telegram-allow", "@ann,42"}
	if code := run(t.Context(), args, strings.NewReader(""), &out, &out); code != 0 {
		t.Fatalf("init exit %d:\n%s", code, out.String())
	}
	cfg, _, err := LoadConfig(path)
	if err != nil {
		t.Fatalf("the written config does not load: %v", err)
	}
	want := defaultConfig()
	if cfg.LLM.BaseURL != model.URL() || cfg.LLM.Model != "local-model" || cfg.LLM.APIKey != "sk-$dollar${X}" || cfg.LLM.MaxTokens != want.LLM.MaxTokens {
		t.Errorf("llm section %+v", cfg.LLM)
	}
	if cfg.DataDir != filepath.Join(dir, "state") || cfg.Agent.Workspace != filepath.Join(dir, "state", "workspace") || cfg.Bus.Listen != want.Bus.Listen {
		t.Errorf("data_dir %q, workspace %q, bus.listen %q", cfg.DataDir, cfg.Agent.Workspace, cfg.Bus.Listen)
	}
	if tgc := cfg.Channels.Telegram; tgc == nil || tgc.Token != token || strings.Join(tgc.AllowUsers, " ") != "@ann 42" || cfg.Channels.Slack.Enabled() {
		t.Errorf("channels %+v / %+v", cfg.Channels.Telegram, cfg.Channels.Slack)
	}
	if _, err := os.Stat(filepath.Join(cfg.Agent.Workspace, "AGENT.md")); err != nil {
		t.Errorf("workspace: %v", err)
	}
	if code := run(t.Context(), args, strings.NewReader(""), &out, &out); code != 1 || !strings.Contains(out.String(), "exists; pass --force") {
		t.Errorf("init over the file: exit %d\n%s", code, out.String())
	}
}

// TestInitInTmux: the interactive `switchboard init` at a real terminal:
// the questions come one by one, the key is not echoed, the models the
// endpoint lists are shown, a refused Telegram token asks again, and the
// file written loads.
func TestInitInTmux(t *testing.T) {
	model := llmtest.NewServer(t, llmtest.WithModels("alpha", "beta"))
	model.Enqueue(probeReply())
	const token = "123456:AAE-tmux_token"
	tg := fakeTelegram(t, token)
	dir := t.TempDir()
	env := []string{"HOME=" + dir, "TERM=xterm-256color", "OPENAI_API_KEY=", "OPENAI_BASE_URL=", "OPENAI_MODEL=", "TELEGRAM_BOT_TOKEN=", "SLACK_BOT_TOKEN=", "SLACK_APP_TOKEN="}
	p := startTmux(t, dir, env, buildBinary(t), "init", "--telegram-api-endpoint", tg)
	p.waitFor("Model endpoint (OpenAI-compatible base URL) [https://api.openai.com/v1]:")
	p.text(model.URL())
	p.keys("Enter")
	p.waitFor("API key (empty for none) []:")
	p.text("sk-typed-secret")
	p.keys("Enter")
	p.waitFor("The endpoint lists 2 models: alpha, beta")
	p.waitFor("Model [alpha]:")
	p.text("beta")
	p.keys("Enter")
	p.waitFor("model beta streams and makes tool calls (ping)")
	p.waitFor("Enable Telegram? [y/N]:")
	p.text("y")
	p.keys("Enter")
	p.waitFor("Telegram bot token (from @BotFather) []:")
	p.text("123456:AAE-wrong")
	p.keys("Enter")
	p.waitFor("Let's try again.")
	p.text(token)
	p.keys("Enter")
	p.waitFor("bot @init_bot")
	p.waitFor("Telegram users allowed")
	p.text("@ann")
	p.keys("Enter")
	p.waitFor("Enable Slack? [y/N]:")
	p.keys("Enter")
	p.waitFor("[exited 0]")
	if s := p.screen(); strings.Contains(s, "sk-typed-secret") || strings.Contains(s, "AAE-tmux_token") {
		t.Fatalf("a secret was echoed:\n%s", s)
	}
	cfg, _, err := LoadConfig(filepath.Join(dir, "config.yaml"))
	if err != nil {
		t.Fatalf("the written config does not load: %v", err)
	}
	if cfg.LLM.Model != "beta" || cfg.LLM.APIKey != "sk-typed-secret" || cfg.Channels.Telegram.Token != token || strings.Join(cfg.Channels.Telegram.AllowUsers, ",") != "@ann" {
		t.Fatalf("config: llm %+v, telegram %+v", cfg.LLM, cfg.Channels.Telegram)
	}
	if _, err := os.Stat(filepath.Join(dir, "data", "workspace", "AGENT.md")); err != nil {
		t.Fatalf("workspace: %v", err)
	}
}

// TestInitCtrlCInTmux: Ctrl-C at the (not echoed) key question ends the
// wizard at once with nothing written, and the terminal echoes again.
func TestInitCtrlCInTmux(t *testing.T) {
	dir := t.TempDir()
	env := []string{"HOME=" + dir, "TERM=xterm-256color", "OPENAI_API_KEY=", "OPENAI_BASE_URL="}
	p := startTmux(t, dir, env, buildBinary(t), "init")
	p.waitFor("Model endpoint (OpenAI-compatible base URL) [https://api.openai.com/v1]:")
	p.keys("Enter")
	p.waitFor("API key (empty for none) []:")
	p.keys("C-c")
	p.waitFor("nothing written")
	p.waitFor("[exited 1]")
	p.text("echoed again")
	p.waitFor("echoed again")
	if _, err := os.Stat(filepath.Join(dir, "config.yaml")); err == nil {
		t.Fatal("config.yaml written after Ctrl-C")
	}
}

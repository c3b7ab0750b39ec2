package main

import (
	"strings"
	"testing"

	"github.com/switchboard-chat/switchboard/llm"
	"github.com/switchboard-chat/switchboard/llm/llmtest"
)

func TestCheckLLMCall(t *testing.T) {
	srv := llmtest.NewServer(t)
	cfg := llm.DefaultConfig()
	cfg.BaseURL, cfg.APIKey, cfg.Model = srv.URL(), "k", "m"
	for _, tc := range []struct {
		reply  llmtest.Reply
		status string
		want   string
	}{
		{llmtest.ToolCallReply("ping", `{}`), statusOK, "makes tool calls"},
		{llmtest.TextReply("pong"), statusWarn, "did not call"},
		{llmtest.ErrorReply(401, "invalid_api_key", "bad key"), statusFail, "HTTP 401"},
		{llmtest.Reply{Text: "x", Truncate: true}, statusFail, "streaming request failed"},
	} {
		srv.Enqueue(tc.reply)
		r := checkLLMCall(t.Context(), cfg)
		if r.status != tc.status || !strings.Contains(r.detail, tc.want) {
			t.Errorf("%+v: got %s %q", tc.reply, r.status, r.detail)
		}
	}
	req := srv.Requests()[0]
	if !req.Body.Stream || len(req.Body.Tools) != 1 {
		t.Fatalf("check request: stream %v, tools %d", req.Body.Stream, len(req.Body.Tools))
	}
	cfg.APIKey, cfg.BaseURL = "", llm.DefaultBaseURL
	if r := checkLLMCall(t.Context(), cfg); r.status != statusSkip {
		t.Fatalf("unconfigured: %+v", r)
	}
}

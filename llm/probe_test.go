package llm_test

import (
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/switchboard-chat/switchboard/internal/health"
	"github.com/switchboard-chat/switchboard/llm"
	"github.com/switchboard-chat/switchboard/llm/llmtest"
)

func TestProbeCall(t *testing.T) {
	srv := llmtest.NewServer(t)
	cfg := llm.DefaultConfig()
	cfg.BaseURL, cfg.APIKey, cfg.Model = srv.URL(), "k", "m"
	for _, tc := range []struct {
		reply  llmtest.Reply
		status health.Status
		want   string
	}{
		{llmtest.ToolCallReply("ping", `{}`), health.OK, "makes tool calls"},
		{llmtest.TextReply("pong"), health.Warn, "did not call"},
		{llmtest.ErrorReply(401, "invalid_api_key", "bad key"), health.Fail, "HTTP 401"},
		{llmtest.Reply{Text: "x", Truncate: true}, health.Fail, "streaming request failed"},
	} {
		srv.Enqueue(tc.reply)
		r := llm.ProbeCall(t.Context(), cfg)
		if r.Status != tc.status || !strings.Contains(r.Detail, tc.want) {
			t.Errorf("%+v: got %s %q", tc.reply, r.Status, r.Detail)
		}
	}
	req := srv.Requests()[0]
	if !req.Body.Stream || len(req.Body.Tools) != 1 {
		t.Fatalf("check request: stream %v, tools %d", req.Body.Stream, len(req.Body.Tools))
	}
	cfg.APIKey, cfg.BaseURL = "", llm.DefaultBaseURL
	if r := llm.ProbeCall(t.Context(), cfg); r.Status != health.Skip {
		t.Fatalf("unconfigured: %+v", r)
	}
}

// TestProbeSkipsCall: the streaming request is only tried once the
// endpoint check passed.
func TestProbeSkipsCall(t *testing.T) {
	cfg := llm.DefaultConfig()
	cfg.APIKey, cfg.BaseURL = "", llm.DefaultBaseURL
	rs := llm.Probe(t.Context(), cfg, "config.yaml")
	if len(rs) != 2 || rs[0].Name != "LLM" || rs[0].Status != health.Warn || !strings.HasSuffix(rs[0].Detail, "or edit llm.* in config.yaml") {
		t.Fatalf("Probe(unconfigured) = %+v", rs)
	}
	if rs[1].Name != "LLM call" || rs[1].Status != health.Skip || rs[1].Detail != "not tried: the endpoint check did not pass" {
		t.Fatalf("Probe(unconfigured) call = %+v", rs[1])
	}
}

func TestBodyHint(t *testing.T) {
	if got := llm.BodyHint(nil); got != "" {
		t.Errorf("bodyHint(nil) = %q", got)
	}
	long := strings.Repeat("é", 150)
	got := llm.BodyHint([]byte(long))
	if !strings.HasSuffix(got, "...") || len(got) > 2+200+3 || !utf8.ValidString(got) {
		t.Errorf("bodyHint(long) = %q, want valid UTF-8 of at most 200 bytes and an ellipsis", got)
	}
	if got := llm.BodyHint([]byte("  a\n\tb ")); got != ": a b" {
		t.Errorf("bodyHint(spaces) = %q, want \": a b\"", got)
	}
}

// TestProbeCallsModelMissingFromList: a model the endpoint does not list
// is a warning, and the real tool-call request is still made (servers list
// aliases incompletely; the request tells whether the model answers).
func TestProbeCallsModelMissingFromList(t *testing.T) {
	srv := llmtest.NewServer(t, llmtest.WithModels("other-model"))
	cfg := llm.DefaultConfig()
	cfg.BaseURL, cfg.APIKey, cfg.Model = srv.URL(), "k", "unlisted-model"
	srv.Enqueue(llmtest.ToolCallReply("ping", `{}`))
	rs := llm.Probe(t.Context(), cfg, "config.yaml")
	if len(rs) != 2 || rs[0].Status != health.Warn || !strings.Contains(rs[0].Detail, `model "unlisted-model" is not among the 1 it lists`) {
		t.Fatalf("Probe = %+v", rs)
	}
	if rs[1].Name != "LLM call" || rs[1].Status != health.OK || !strings.Contains(rs[1].Detail, "makes tool calls") {
		t.Fatalf("Probe call with an unlisted model = %+v, want the request made", rs[1])
	}
	if n := len(srv.Requests()); n != 1 {
		t.Fatalf("%d chat requests, want 1", n)
	}
}

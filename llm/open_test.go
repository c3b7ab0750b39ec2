package llm_test

import (
	"testing"
	"time"

	"github.com/switchboard-chat/switchboard/llm"
	"github.com/switchboard-chat/switchboard/llm/llmtest"
)

// TestOpenFallbacks: llm.Open builds the failover of llm.fallbacks, each
// endpoint the primary's settings with its own URL and model; a failing
// primary hands the request to the first fallback.
func TestOpenFallbacks(t *testing.T) {
	primary, backup := llmtest.NewServer(t), llmtest.NewServer(t)
	cfg := llm.DefaultConfig()
	cfg.BaseURL = primary.URL()
	cfg.Model = "main-model"
	cfg.MaxRetries = 0
	cfg.Fallbacks = []llm.Endpoint{{BaseURL: backup.URL(), Model: "backup-model"}}
	m, err := llm.Open(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := m.(*llm.Failover); !ok || m.Model() != "main-model" {
		t.Fatalf("Open = %T (model %q), want a *llm.Failover led by main-model", m, m.Model())
	}
	primary.Enqueue(llmtest.ErrorReply(503, "unavailable", "down"))
	backup.Enqueue(llmtest.TextReply("from the backup"))
	resp, err := m.Stream(t.Context(), userReq("hi"), nil)
	if err != nil || resp.Text != "from the backup" {
		t.Fatalf("Stream = %+v, %v", resp, err)
	}
	reqs := backup.WaitRequests(t, 1, 10*time.Second)
	if got := reqs[0].Body.Model; got != "backup-model" {
		t.Errorf("the fallback was asked for model %q, want backup-model", got)
	}

	// Without fallbacks it is the plain client; a broken fallback is
	// named by its index.
	cfg.Fallbacks = nil
	if m, err := llm.Open(cfg, nil); err != nil {
		t.Fatal(err)
	} else if _, ok := m.(*llm.Client); !ok {
		t.Errorf("Open without fallbacks = %T, want *llm.Client", m)
	}
	cfg.Fallbacks = []llm.Endpoint{{BaseURL: "::not a url"}}
	if _, err := llm.Open(cfg, nil); err == nil {
		t.Error("a fallback with a broken base_url was accepted")
	}
}

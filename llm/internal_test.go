package llm

import (
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	openai "github.com/sashabaranov/go-openai"
)

func TestParseRetryAfter(t *testing.T) {
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	tests := []struct {
		in   string
		want time.Duration
	}{
		{"", 0},
		{"3", 3 * time.Second},
		{" 120 ", 2 * time.Minute},
		{"1.5", 1500 * time.Millisecond},
		{"0", 0},
		{"-4", 0},
		{"soon", 0},
		{now.Add(90 * time.Second).Format(http.TimeFormat), 90 * time.Second},
		{now.Add(-time.Minute).Format(http.TimeFormat), 0},
		{"Sun, 01 Mar 2026 12:00:30 GMT", 30 * time.Second},
	}
	for _, tt := range tests {
		if got := parseRetryAfter(tt.in, now); got != tt.want {
			t.Errorf("parseRetryAfter(%q) = %s, want %s", tt.in, got, tt.want)
		}
	}
}

// TestBackoffPolicy checks the documented waits: 30/45/60 s for rate
// limits, 2/4/6 s otherwise, each with at most 10 % jitter.
func TestBackoffPolicy(t *testing.T) {
	cfg := DefaultConfig()
	for _, tc := range []struct {
		attempt int
		limited bool
		want    time.Duration
	}{
		{1, true, 30 * time.Second}, {2, true, 45 * time.Second}, {3, true, 60 * time.Second}, {9, true, 60 * time.Second},
		{1, false, 2 * time.Second}, {2, false, 4 * time.Second}, {3, false, 6 * time.Second}, {0, false, 2 * time.Second},
	} {
		for range 20 {
			if d := cfg.Backoff(tc.attempt, tc.limited); d < tc.want || d > tc.want+tc.want/10 {
				t.Fatalf("Backoff(%d, %v) = %s, want %s + ≤10%%", tc.attempt, tc.limited, d, tc.want)
			}
		}
	}
	cfg.RetryBackoff, cfg.RateLimitBackoff = 0, 0
	if d := cfg.Backoff(3, true); d != 0 {
		t.Fatalf("zero policy waits %s", d)
	}
}

func TestIsOverflow(t *testing.T) {
	yes := []string{
		"context_length_exceeded",
		"exceed_context_size_error",
		"This model's maximum context length is 8192 tokens.",
		"the request exceeds the available context size, try increasing it",
		"prompt is too long: 210000 tokens > 200000 maximum",
	}
	for _, s := range yes {
		if !isOverflow("", s) {
			t.Errorf("isOverflow(%q) = false", s)
		}
	}
	for _, s := range []string{"", "rate_limit_exceeded", "invalid temperature", "model not found"} {
		if isOverflow(s) {
			t.Errorf("isOverflow(%q) = true", s)
		}
	}
}

func TestTruncate(t *testing.T) {
	long := strings.Repeat("é", maxErrorMessage)
	got := truncate(long)
	if len(got) > maxErrorMessage+len("…") || !utf8.ValidString(got) || !strings.HasSuffix(got, "…") {
		t.Errorf("truncate = %d bytes, valid %v", len(got), utf8.ValidString(got))
	}
	if truncate("short") != "short" {
		t.Error("truncate changed a short string")
	}
}

func TestAPIErrorFallbacks(t *testing.T) {
	if apiError(errors.New("dial tcp: refused"), 0, 0) != nil {
		t.Error("a network error became an APIError")
	}
	ae := apiError(errors.New("error, reading response body: unexpected EOF"), 502, time.Second)
	if ae == nil || ae.Status != 502 || ae.RetryAfter != time.Second || !strings.Contains(ae.Message, "unexpected EOF") {
		t.Errorf("unreadable error body: %+v", ae)
	}
	mid := apiError(&openai.APIError{Message: "x", Code: 500.0}, 200, time.Second)
	if mid.Status != 0 || mid.RetryAfter != 0 || mid.Code != "500" {
		t.Errorf("mid-stream error: %+v", mid)
	}
	if s := (&APIError{Status: 500, Message: "m"}).Error(); s != "llm: status 500: m" {
		t.Errorf("Error() = %q", s)
	}
}

func intp(i int) *int { return &i }

func TestAssemblerNameAndOrder(t *testing.T) {
	a := newAssembler()
	add := func(tcs ...openai.ToolCall) {
		a.add(&openai.ChatCompletionStreamResponse{Choices: []openai.ChatCompletionStreamChoice{{Delta: openai.ChatCompletionStreamChoiceDelta{ToolCalls: tcs}}}})
	}
	add(openai.ToolCall{Index: intp(2), ID: "c", Function: openai.FunctionCall{Name: "ca"}})
	add(openai.ToolCall{Index: intp(0), ID: "a", Function: openai.FunctionCall{Name: "li"}})
	add(openai.ToolCall{Index: intp(0), Function: openai.FunctionCall{Name: "st", Arguments: "{}"}})
	add(openai.ToolCall{Index: intp(2), Function: openai.FunctionCall{Name: "call", Arguments: "[]"}})
	add(openai.ToolCall{Function: openai.FunctionCall{Arguments: "!"}}) // no index: continues the latest call
	add(openai.ToolCall{ID: "d", Function: openai.FunctionCall{Name: "d"}})
	// A choice other than 0 is ignored.
	a.add(&openai.ChatCompletionStreamResponse{Choices: []openai.ChatCompletionStreamChoice{{Index: 1, Delta: openai.ChatCompletionStreamChoiceDelta{Content: "ignored"}}}})
	r := a.response()
	want := []ToolCall{{ID: "a", Name: "list", Arguments: "{}"}, {ID: "c", Name: "call", Arguments: "[]!"}, {ID: "d", Name: "d"}}
	if len(r.ToolCalls) != len(want) || r.Text != "" {
		t.Fatalf("calls = %+v text %q", r.ToolCalls, r.Text)
	}
	for i := range want {
		if r.ToolCalls[i] != want[i] {
			t.Errorf("call %d = %+v, want %+v", i, r.ToolCalls[i], want[i])
		}
	}
}

// The reasoning-model rules are worked out once per model and settings:
// the same answers as asking go-openai's validator every time, and a
// remembered answer costs no allocation.
func TestReasoningRulesRemembered(t *testing.T) {
	var rules reasoningRules
	for _, k := range []reasoningKey{
		{model: "gpt-4o", maxTokens: 100, temperature: 0.7, tools: true},
		{model: "gpt-5", maxTokens: 100, temperature: 0.7, tools: true},
		{model: "o3-mini", maxTokens: 0, temperature: 1},
		{model: "local-llama", maxTokens: 4096, temperature: 0.2},
	} {
		want := checkReasoning(k)
		for range 2 {
			got, err := rules.of(k)
			if got != want.reasoning || (err == nil) != (want.err == nil) {
				t.Errorf("%+v: %v, %v; the validator says %v, %v", k, got, err, want.reasoning, want.err)
			}
		}
		if n := testing.AllocsPerRun(20, func() { _, _ = rules.of(k) }); n != 0 {
			t.Errorf("%+v: %v allocations for a remembered rule", k, n)
		}
	}
	if r, _ := rules.of(reasoningKey{model: "gpt-5", maxTokens: 10, temperature: 0.5}); !r {
		t.Error("gpt-5 is not a reasoning model")
	}
	if r, _ := rules.of(reasoningKey{model: "gpt-4o", maxTokens: 10, temperature: 0.5}); r {
		t.Error("gpt-4o is a reasoning model")
	}
}

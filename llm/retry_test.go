package llm_test

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/switchboard-chat/switchboard/llm"
	"github.com/switchboard-chat/switchboard/llm/llmtest"
)

func TestRetryAfter(t *testing.T) {
	s, c, sl := setup(t, nil)
	s.Enqueue(llmtest.RateLimitReply("7"), llmtest.RateLimitReply(""), llmtest.TextReply("ok"))
	resp, err := c.Stream(t.Context(), userReq("x"), nil)
	if err != nil || resp.Text != "ok" {
		t.Fatalf("got %+v, %v; want ok", resp, err)
	}
	// The first wait honours Retry-After; the second (no header) backs off.
	if diff := cmp.Diff([]time.Duration{7 * time.Second, testBackoff(2, false)}, sl.got()); diff != "" {
		t.Errorf("waits (-want +got):\n%s", diff)
	}
	if n := s.RequestCount(); n != 3 {
		t.Errorf("requests = %d, want 3", n)
	}
}

func TestRetryAfterTooLong(t *testing.T) {
	s, c, sl := setup(t, nil)
	s.Enqueue(llmtest.RateLimitReply("120"), llmtest.TextReply("never"))
	_, err := c.Stream(t.Context(), userReq("x"), nil)
	var ae *llm.APIError
	if !errors.As(err, &ae) || ae.Status != 429 || ae.RetryAfter != 120*time.Second || ae.Code != "rate_limit_exceeded" {
		t.Fatalf("err = %v, want a 429 APIError with RetryAfter 2m", err)
	}
	if s.RequestCount() != 1 || len(sl.got()) != 0 {
		t.Errorf("requests %d, waits %v; want 1 and none", s.RequestCount(), sl.got())
	}
}

func TestRetryServerErrorThenSuccess(t *testing.T) {
	s, c, sl := setup(t, nil)
	s.Enqueue(llmtest.ErrorReply(500, "", "boom"), llmtest.Reply{Status: 502, ErrorBody: "<html>bad gateway</html>"}, llmtest.TextReply("ok"))
	resp, err := c.Stream(t.Context(), userReq("x"), nil)
	if err != nil || resp.Text != "ok" {
		t.Fatalf("got %+v, %v; want ok", resp, err)
	}
	if diff := cmp.Diff([]time.Duration{testBackoff(1, false), testBackoff(2, false)}, sl.got()); diff != "" {
		t.Errorf("waits (-want +got):\n%s", diff)
	}
}

func TestRetriesExhausted(t *testing.T) {
	s, c, sl := setup(t, func(c *llm.Config) { c.MaxRetries = 2 })
	for range 3 {
		s.Enqueue(llmtest.ErrorReply(503, "overloaded", "try later"))
	}
	s.Enqueue(llmtest.TextReply("too late"))
	_, err := c.Stream(t.Context(), userReq("x"), nil)
	var ae *llm.APIError
	if !errors.As(err, &ae) || ae.Status != 503 || ae.Code != "overloaded" || ae.Message != "try later" {
		t.Fatalf("err = %v, want the last 503 APIError", err)
	}
	if !strings.Contains(err.Error(), "after 3 attempts") {
		t.Errorf("err = %q, want it to count the attempts", err)
	}
	if s.RequestCount() != 3 || len(sl.got()) != 2 {
		t.Errorf("requests %d, waits %v; want 3 and 2", s.RequestCount(), sl.got())
	}
}

func TestNoRetryForClientErrors(t *testing.T) {
	tests := []struct {
		name  string
		reply llmtest.Reply
		code  string
		msg   string
	}{
		{"openai envelope", llmtest.ErrorReply(400, "invalid_value", "bad temperature"), "invalid_value", "bad temperature"},
		{"auth", llmtest.ErrorReply(401, "invalid_api_key", "Incorrect API key"), "invalid_api_key", "Incorrect API key"},
		{"vllm top-level", llmtest.Reply{Status: 400, ErrorBody: `{"object":"error","message":"model xyz does not exist","type":"NotFoundError","code":404}`}, "NotFoundError", "model xyz does not exist"},
		{"ollama string", llmtest.Reply{Status: 404, ErrorBody: `{"error":"model \"llama9\" not found, try pulling it first"}`}, "", `model "llama9" not found, try pulling it first`},
		{"plain text", llmtest.Reply{Status: 403, ErrorBody: "forbidden\n"}, "", "forbidden"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, c, _ := setup(t, nil)
			s.Enqueue(tt.reply, llmtest.TextReply("never"))
			_, err := c.Stream(t.Context(), userReq("x"), nil)
			var ae *llm.APIError
			if !errors.As(err, &ae) || ae.Status != tt.reply.Status || ae.Code != tt.code || ae.Message != tt.msg {
				t.Fatalf("err = %#v, want status %d code %q message %q", err, tt.reply.Status, tt.code, tt.msg)
			}
			if errors.Is(err, llm.ErrContextOverflow) {
				t.Errorf("err %v reported as context overflow", err)
			}
			if s.RequestCount() != 1 {
				t.Errorf("requests = %d, want 1 (no retry)", s.RequestCount())
			}
		})
	}
}

func TestContextOverflow(t *testing.T) {
	tests := []struct {
		name  string
		reply llmtest.Reply
	}{
		{"openai", llmtest.ContextOverflowReply()},
		{"llama.cpp 400", llmtest.Reply{Status: 400, ErrorBody: `{"error":{"code":400,"message":"the request exceeds the available context size, try increasing it","type":"exceed_context_size_error","n_prompt_tokens":5000,"n_ctx":4096}}`}},
		{"llama.cpp 500", llmtest.Reply{Status: 500, ErrorBody: `{"error":{"code":500,"message":"context full","type":"exceed_context_size_error"}}`}},
		{"vllm", llmtest.Reply{Status: 400, ErrorBody: `{"object":"error","message":"This model's maximum context length is 4096 tokens. However, you requested 5000 tokens.","type":"BadRequestError","param":null,"code":400}`}},
		{"mid-stream", llmtest.Reply{MidStreamError: "This model's maximum context length is 8192 tokens"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, c, _ := setup(t, nil)
			s.Enqueue(tt.reply, llmtest.TextReply("never"))
			_, err := c.Stream(t.Context(), userReq("x"), nil)
			var ae *llm.APIError
			if !errors.Is(err, llm.ErrContextOverflow) || !errors.As(err, &ae) || ae.Status != tt.reply.Status {
				t.Fatalf("err = %v, want ErrContextOverflow in an APIError with status %d", err, tt.reply.Status)
			}
			if s.RequestCount() != 1 {
				t.Errorf("requests = %d, want 1 (never retried)", s.RequestCount())
			}
		})
	}
}

func TestMidStreamError(t *testing.T) {
	s, c, _ := setup(t, nil)
	s.Enqueue(llmtest.Reply{MidStreamError: "upstream model crashed"}, llmtest.TextReply("never"))
	_, err := c.Stream(t.Context(), userReq("x"), nil)
	var ae *llm.APIError
	if !errors.As(err, &ae) || ae.Status != 0 || ae.Message != "upstream model crashed" || ae.Code != "server_error" {
		t.Fatalf("err = %#v, want a status-0 APIError", err)
	}
	if s.RequestCount() != 1 {
		t.Errorf("requests = %d, want 1", s.RequestCount())
	}
}

// TestRetryAfterDeltas: a stream cut, stalled or reset after it streamed
// text is retried like one that failed before its first byte; the consumer
// is told to drop what it got (a Restart delta) and the answer is the
// retried stream's alone.
func TestRetryAfterDeltas(t *testing.T) {
	tests := []struct {
		name  string
		reply llmtest.Reply
		idle  time.Duration
	}{
		{"truncated", llmtest.Reply{Text: "partial ans", Reasoning: "hmm", Truncate: true}, 10 * time.Second},
		{"idle", llmtest.Reply{Text: "partial ans", Reasoning: "hmm", Stall: true}, 200 * time.Millisecond},
		{"connection reset", llmtest.Reply{Text: "partial ans", Reasoning: "hmm", Reset: true}, 10 * time.Second},
		{"cut mid tool call", llmtest.Reply{Text: "partial ans", ToolCalls: []llmtest.ToolCall{{Name: "f", Arguments: `{"a":`}}, Truncate: true}, 10 * time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, c, sl := setup(t, func(c *llm.Config) { c.IdleTimeout = tt.idle })
			s.Enqueue(tt.reply, llmtest.Reply{Text: "partial answer, whole", Reasoning: "thought"})
			var got []llm.Delta
			resp, err := c.Stream(t.Context(), userReq("x"), func(d llm.Delta) { got = append(got, d) })
			if err != nil {
				t.Fatalf("Stream: %v", err)
			}
			if resp.Text != "partial answer, whole" || resp.Reasoning != "thought" || len(resp.ToolCalls) != 0 {
				t.Errorf("response = %+v; want the retried stream's answer alone", resp)
			}
			if s.RequestCount() != 2 || len(sl.got()) != 1 {
				t.Errorf("requests %d waits %v; want 2 requests, one backoff", s.RequestCount(), sl.got())
			}
			// What the consumer assembles after the last restart is the answer.
			var text, reasoning strings.Builder
			restarts := 0
			for _, d := range got {
				if d.Restart {
					restarts++
					text.Reset()
					reasoning.Reset()
					if d.Text != "" || d.Reasoning != "" {
						t.Errorf("restart delta carries text: %+v", d)
					}
					continue
				}
				text.WriteString(d.Text)
				reasoning.WriteString(d.Reasoning)
			}
			if restarts != 1 || text.String() != resp.Text || reasoning.String() != resp.Reasoning {
				t.Errorf("%d restarts, assembled %q / %q; want 1 and the answer", restarts, text.String(), reasoning.String())
			}
		})
	}
	t.Run("exhausted", func(t *testing.T) {
		s, c, _ := setup(t, func(c *llm.Config) { c.MaxRetries = 2 })
		cut := llmtest.Reply{Text: "partial", Truncate: true}
		s.Enqueue(cut, cut, cut, llmtest.TextReply("never"))
		var d deltas
		restarts := 0
		resp, err := c.Stream(t.Context(), userReq("x"), func(x llm.Delta) {
			if x.Restart {
				restarts++
				return
			}
			d.on(x)
		})
		if !errors.Is(err, llm.ErrTruncated) || !strings.Contains(err.Error(), "giving up after 3 attempts") {
			t.Fatalf("err = %v, want ErrTruncated after 3 attempts", err)
		}
		if s.RequestCount() != 3 || restarts != 2 {
			t.Errorf("requests %d restarts %d; want 3 and 2", s.RequestCount(), restarts)
		}
		// The last attempt's partial text is returned (a /stop keeps it).
		if resp == nil || resp.Text != "partial" {
			t.Errorf("partial response = %+v", resp)
		}
	})
	t.Run("mid-stream error event is not retried", func(t *testing.T) {
		s, c, _ := setup(t, nil)
		s.Enqueue(llmtest.Reply{Text: "partial answer", MidStreamError: "boom"}, llmtest.TextReply("never"))
		var d deltas
		resp, err := c.Stream(t.Context(), userReq("x"), d.on)
		var ae *llm.APIError
		if !errors.As(err, &ae) || s.RequestCount() != 1 {
			t.Fatalf("err = %v after %d requests; want the APIError, no retry", err, s.RequestCount())
		}
		if resp == nil || resp.Text != "partial answer" {
			t.Errorf("partial response = %+v", resp)
		}
	})
}

// TestConnectionResetRetried: a connection reset before any response is a
// network error and retried.
func TestConnectionResetRetried(t *testing.T) {
	s, c, sl := setup(t, nil)
	s.Enqueue(llmtest.Reply{Reset: true}, llmtest.TextReply("ok"))
	resp, err := c.Stream(t.Context(), userReq("x"), nil)
	if err != nil || resp.Text != "ok" || len(sl.got()) != 1 {
		t.Fatalf("got %+v, %v, waits %v; want ok after one retry", resp, err, sl.got())
	}
}

func TestTruncatedRetriedWhenNothingEmitted(t *testing.T) {
	tests := []struct {
		name    string
		first   llmtest.Reply
		onDelta bool
	}{
		{"empty stream", llmtest.Reply{Truncate: true}, true},
		{"tool call chunks only", llmtest.Reply{ToolCalls: []llmtest.ToolCall{{Name: "f", Arguments: "{"}}, Truncate: true}, true},
		{"text without a callback", llmtest.Reply{Text: "lost", Truncate: true}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, c, sl := setup(t, nil)
			s.Enqueue(tt.first, llmtest.TextReply("ok"))
			var d deltas
			on := d.on
			if !tt.onDelta {
				on = nil
			}
			resp, err := c.Stream(t.Context(), userReq("x"), on)
			if err != nil || resp.Text != "ok" || len(resp.ToolCalls) != 0 {
				t.Fatalf("got %+v, %v; want a clean retry", resp, err)
			}
			if s.RequestCount() != 2 || len(sl.got()) != 1 {
				t.Errorf("requests %d waits %v; want 2 and 1", s.RequestCount(), sl.got())
			}
		})
	}
	t.Run("exhausted", func(t *testing.T) {
		s, c, _ := setup(t, func(c *llm.Config) { c.MaxRetries = 1 })
		s.Enqueue(llmtest.Reply{Truncate: true}, llmtest.Reply{Truncate: true})
		_, err := c.Stream(t.Context(), userReq("x"), nil)
		if !errors.Is(err, llm.ErrTruncated) {
			t.Fatalf("err = %v, want ErrTruncated", err)
		}
	})
}

func TestIdleWatchdog(t *testing.T) {
	never := make(chan struct{})
	t.Run("no retry", func(t *testing.T) {
		s, c, _ := setup(t, func(c *llm.Config) { c.IdleTimeout = 30 * time.Millisecond; c.MaxRetries = 0 })
		s.Enqueue(llmtest.Reply{Block: never})
		_, err := c.Stream(t.Context(), userReq("x"), nil)
		if !errors.Is(err, llm.ErrIdle) {
			t.Fatalf("err = %v, want ErrIdle", err)
		}
	})
	t.Run("retried", func(t *testing.T) {
		// The idle timeout also bounds the second, successful attempt: keep
		// it well above a local round trip on a loaded machine.
		s, c, sl := setup(t, func(c *llm.Config) { c.IdleTimeout = 300 * time.Millisecond })
		s.Enqueue(llmtest.Reply{Block: never}, llmtest.TextReply("ok"))
		resp, err := c.Stream(t.Context(), userReq("x"), nil)
		if err != nil || resp.Text != "ok" || len(sl.got()) != 1 {
			t.Fatalf("got %+v, %v, waits %v; want ok after one retry", resp, err, sl.got())
		}
	})
	t.Run("slow chunks are not idle", func(t *testing.T) {
		s, c, _ := setup(t, func(c *llm.Config) { c.IdleTimeout = 2 * time.Second; c.MaxRetries = 0 })
		s.Enqueue(llmtest.Reply{Text: "abcdef", ChunkSize: 1, ChunkDelay: time.Millisecond})
		resp, err := c.Stream(t.Context(), userReq("x"), nil)
		if err != nil || resp.Text != "abcdef" {
			t.Fatalf("got %+v, %v", resp, err)
		}
	})
}

func TestRequestTimeoutPerAttempt(t *testing.T) {
	// The timeout also bounds the second, successful attempt: keep it well
	// above a local round trip on a loaded machine.
	s, c, sl := setup(t, func(c *llm.Config) { c.RequestTimeout = 300 * time.Millisecond; c.MaxRetries = 1 })
	s.Enqueue(llmtest.Reply{Block: make(chan struct{})}, llmtest.TextReply("ok"))
	resp, err := c.Stream(t.Context(), userReq("x"), nil)
	if err != nil || resp.Text != "ok" || len(sl.got()) != 1 {
		t.Fatalf("got %+v, %v, waits %v; want ok after one retry", resp, err, sl.got())
	}
}

func TestCancelMidStream(t *testing.T) {
	s, c, _ := setup(t, func(c *llm.Config) { c.IdleTimeout = time.Hour; c.RequestTimeout = time.Hour })
	s.Enqueue(llmtest.Reply{Text: "first words", Stall: true})
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	resp, err := c.Stream(ctx, userReq("x"), func(llm.Delta) { cancel() })
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled", err)
	}
	if resp == nil || resp.Text != "first words" {
		t.Errorf("partial = %+v", resp)
	}
}

func TestCancelDuringBackoff(t *testing.T) {
	s := llmtest.NewServer(t)
	s.Enqueue(llmtest.ErrorReply(500, "", "boom"))
	cfg := llm.DefaultConfig()
	cfg.BaseURL = s.URL()
	c, err := llm.New(cfg, nil, llm.WithHTTPClient(s.HTTPClient()), llm.WithBackoff(func(int, bool) time.Duration { return time.Hour }))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	errc := make(chan error, 1)
	go func() {
		_, err := c.Stream(ctx, userReq("x"), nil)
		errc <- err
	}()
	s.WaitRequests(t, 1, wait)
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled", err)
	}
}

// failingTransport fails every request with a network error.
type failingTransport struct {
	mu sync.Mutex
	n  int
}

func (f *failingTransport) RoundTrip(*http.Request) (*http.Response, error) {
	f.mu.Lock()
	f.n++
	f.mu.Unlock()
	return nil, errors.New("connection reset by peer")
}

func TestNetworkErrorsRetried(t *testing.T) {
	ft := &failingTransport{}
	cfg := llm.DefaultConfig()
	cfg.BaseURL = "http://127.0.0.1:1/v1"
	cfg.MaxRetries = 2
	sl := &sleeps{}
	c, err := llm.New(cfg, nil, llm.WithHTTPClient(&http.Client{Transport: ft}), llm.WithSleep(sl.sleep), llm.WithBackoff(testBackoff))
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.Stream(t.Context(), userReq("x"), nil)
	if err == nil || !strings.Contains(err.Error(), "connection reset by peer") {
		t.Fatalf("err = %v, want the network error", err)
	}
	var ae *llm.APIError
	if errors.As(err, &ae) {
		t.Errorf("network error reported as APIError %v", ae)
	}
	if ft.n != 3 || len(sl.got()) != 2 {
		t.Errorf("attempts %d waits %v; want 3 and 2", ft.n, sl.got())
	}
}

func TestNotConfigured(t *testing.T) {
	ft := &failingTransport{}
	cfg := llm.DefaultConfig() // OpenAI's URL and no key
	c, err := llm.New(cfg, nil, llm.WithHTTPClient(&http.Client{Transport: ft}))
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.Stream(t.Context(), userReq("x"), nil)
	if !errors.Is(err, llm.ErrNotConfigured) || ft.n != 0 {
		t.Fatalf("err = %v after %d requests, want ErrNotConfigured without I/O", err, ft.n)
	}
}

// recordHandler keeps slog records.
type recordHandler struct {
	mu   sync.Mutex
	recs []slog.Record
}

func (h *recordHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h *recordHandler) Handle(_ context.Context, r slog.Record) error {
	h.mu.Lock()
	h.recs = append(h.recs, r.Clone())
	h.mu.Unlock()
	return nil
}
func (h *recordHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *recordHandler) WithGroup(string) slog.Handler      { return h }

func TestRetriesLoggedAtWarn(t *testing.T) {
	s := llmtest.NewServer(t)
	s.Enqueue(llmtest.ErrorReply(500, "", "boom"), llmtest.TextReply("ok"))
	cfg := llm.DefaultConfig()
	cfg.BaseURL = s.URL()
	rh := &recordHandler{}
	sl := &sleeps{}
	c, err := llm.New(cfg, slog.New(rh), llm.WithHTTPClient(s.HTTPClient()), llm.WithSleep(sl.sleep))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Stream(t.Context(), userReq("x"), nil); err != nil {
		t.Fatal(err)
	}
	rh.mu.Lock()
	defer rh.mu.Unlock()
	if len(rh.recs) != 1 || rh.recs[0].Level != slog.LevelWarn || !strings.Contains(rh.recs[0].Message, "retrying") {
		t.Fatalf("log records = %v, want one Warn about the retry", rh.recs)
	}
	// The default policy was used for the wait: 2 s plus at most 10 % jitter.
	if w := sl.got(); len(w) != 1 || w[0] < 2*time.Second || w[0] > 2200*time.Millisecond {
		t.Errorf("waits = %v, want one default backoff in [2s, 2.2s]", w)
	}
}

func TestKeepAlivesFeedTheWatchdog(t *testing.T) {
	// The reply starts after 4 idle periods (and after more keep-alive
	// comments than go-openai's default limit of 300 empty lines); comments
	// every 1/150 of an idle period keep the stream alive.
	s, c, _ := setup(t, func(c *llm.Config) { c.IdleTimeout = 150 * time.Millisecond; c.MaxRetries = 0 })
	s.Enqueue(llmtest.Reply{Text: "worth the wait", Delay: 600 * time.Millisecond, KeepAlive: time.Millisecond})
	resp, err := c.Stream(t.Context(), userReq("x"), nil)
	if err != nil || resp.Text != "worth the wait" {
		t.Fatalf("got %+v, %v; want the late reply", resp, err)
	}
}

package llmtest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/google/go-cmp/cmp"
	openai "github.com/sashabaranov/go-openai"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const wait = 10 * time.Second

// chatBody is a minimal valid streaming request body.
const chatBody = `{"model":"m1","stream":true,"stream_options":{"include_usage":true},` +
	`"messages":[{"role":"user","content":"hello"}],` +
	`"tools":[{"type":"function","function":{"name":"list_dir","parameters":{"type":"object"}}}]}`

// post sends body to the server's chat endpoint and returns the response.
func post(t *testing.T, s *Server, body string) *http.Response {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, s.URL()+"/chat/completions", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := s.HTTPClient().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	return resp
}

// events reads an SSE body and returns the payloads of its data events.
func events(t *testing.T, r io.Reader) []string {
	t.Helper()
	body, err := io.ReadAll(r)
	if err != nil {
		t.Fatalf("read stream: %v", err)
	}
	var out []string
	for ev := range strings.SplitSeq(string(body), "\n\n") {
		if ev == "" {
			continue
		}
		payload, ok := strings.CutPrefix(ev, "data: ")
		if !ok || strings.Contains(payload, "\n") {
			t.Fatalf("malformed SSE event %q", ev)
		}
		out = append(out, payload)
	}
	return out
}

// newOpenAI returns a go-openai client for s.
func newOpenAI(s *Server) *openai.Client {
	cfg := openai.DefaultConfig("")
	cfg.BaseURL = s.URL()
	cfg.HTTPClient = s.HTTPClient()
	return openai.NewClientWithConfig(cfg)
}

// collect reads a whole go-openai stream and assembles it.
type collected struct {
	text, reasoning, finish string
	calls                   map[int]*openai.ToolCall
	usage                   *openai.Usage
	chunks                  int
}

func streamAll(t *testing.T, c *openai.Client, req openai.ChatCompletionRequest) (collected, error) {
	t.Helper()
	got := collected{calls: map[int]*openai.ToolCall{}}
	st, err := c.CreateChatCompletionStream(t.Context(), req)
	if err != nil {
		return got, err
	}
	defer st.Close()
	for {
		ch, err := st.Recv()
		if errors.Is(err, io.EOF) {
			return got, nil
		}
		if err != nil {
			return got, err
		}
		got.chunks++
		if ch.Usage != nil {
			got.usage = ch.Usage
		}
		for _, c := range ch.Choices {
			got.text += c.Delta.Content
			got.reasoning += c.Delta.ReasoningContent
			if c.FinishReason != "" {
				got.finish = string(c.FinishReason)
			}
			for _, tc := range c.Delta.ToolCalls {
				acc := got.calls[*tc.Index]
				if acc == nil {
					acc = &openai.ToolCall{ID: tc.ID, Type: tc.Type}
					got.calls[*tc.Index] = acc
				}
				acc.Function.Name += tc.Function.Name
				acc.Function.Arguments += tc.Function.Arguments
			}
		}
	}
}

func userReq(text string) openai.ChatCompletionRequest {
	return openai.ChatCompletionRequest{
		Model:         "m1",
		Messages:      []openai.ChatCompletionMessage{{Role: "user", Content: text}},
		StreamOptions: &openai.StreamOptions{IncludeUsage: true},
	}
}

func TestWireFormat(t *testing.T) {
	s := NewServer(t)
	s.Enqueue(Reply{Text: "héllo wörld", Reasoning: "think", ChunkSize: 4,
		ToolCalls: []ToolCall{{ID: "call_a", Name: "list_dir", Arguments: `{"path":"."}`}},
		Usage:     &Usage{PromptTokens: 7, CompletionTokens: 3}})
	resp := post(t, s, chatBody)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status = %d, want 200", resp.StatusCode)
	}
	if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Errorf("Content-Type = %q, want text/event-stream", ct)
	}
	evs := events(t, resp.Body)
	if evs[len(evs)-1] != "[DONE]" {
		t.Fatalf("last event = %q, want [DONE]", evs[len(evs)-1])
	}
	type chunk struct {
		ID      string `json:"id"`
		Object  string `json:"object"`
		Created int64  `json:"created"`
		Model   string `json:"model"`
		Choices []struct {
			Index        int             `json:"index"`
			Delta        json.RawMessage `json:"delta"`
			Logprobs     *struct{}       `json:"logprobs"`
			FinishReason *string         `json:"finish_reason"`
		} `json:"choices"`
		Usage *struct {
			Prompt     int `json:"prompt_tokens"`
			Completion int `json:"completion_tokens"`
			Total      int `json:"total_tokens"`
		} `json:"usage"`
	}
	var chunks []chunk
	for _, ev := range evs[:len(evs)-1] {
		var c chunk
		dec := json.NewDecoder(strings.NewReader(ev))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&c); err != nil {
			t.Fatalf("chunk %q: %v", ev, err)
		}
		if c.Object != "chat.completion.chunk" || c.Model != "m1" || c.Created == 0 || !strings.HasPrefix(c.ID, "chatcmpl-") {
			t.Errorf("chunk header wrong: %q", ev)
		}
		if len(chunks) > 0 && c.ID != chunks[0].ID {
			t.Errorf("chunk id %q differs from the first %q", c.ID, chunks[0].ID)
		}
		chunks = append(chunks, c)
	}
	if !strings.Contains(string(chunks[0].Choices[0].Delta), `"role":"assistant"`) {
		t.Errorf("first delta %s lacks the role", chunks[0].Choices[0].Delta)
	}
	usage := chunks[len(chunks)-1]
	if len(usage.Choices) != 0 || usage.Usage == nil || usage.Usage.Prompt != 7 || usage.Usage.Completion != 3 || usage.Usage.Total != 10 {
		t.Errorf("usage chunk = %+v, want empty choices and 7/3/10", usage)
	}
	fin := chunks[len(chunks)-2]
	if fr := fin.Choices[0].FinishReason; fr == nil || *fr != "tool_calls" || string(fin.Choices[0].Delta) != "{}" {
		t.Errorf("finish chunk = %+v, want empty delta and tool_calls", fin)
	}
	for _, c := range chunks[:len(chunks)-2] {
		if c.Choices[0].FinishReason != nil {
			t.Errorf("non-final chunk has finish_reason %q", *c.Choices[0].FinishReason)
		}
	}
}

func TestGoOpenAIReassembles(t *testing.T) {
	tests := []struct {
		name  string
		reply Reply
	}{
		{"whole", Reply{Text: "Hello, world", Reasoning: "hmm"}},
		{"chunked", Reply{Text: "Hello, wörld — ünïcödé ✓", Reasoning: "step by step", ChunkSize: 3}},
		{"tools", Reply{Text: "calling", ChunkSize: 2, ToolCalls: []ToolCall{
			{Name: "get_weather", Arguments: `{"city": "Paris"}`},
			{ID: "call_x", Name: "get_time", Arguments: `{}`},
		}}},
		{"interleaved", Reply{ChunkSize: 1, InterleaveToolCalls: true, ToolCalls: []ToolCall{
			{Name: "a", Arguments: `{"x":"long value here"}`},
			{Name: "b", Arguments: `{"y":1}`},
			{Name: "c", Arguments: ``},
		}}},
		{"empty", Reply{Empty: true}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := NewServer(t)
			s.Enqueue(tt.reply)
			got, err := streamAll(t, newOpenAI(s), userReq("hi"))
			if err != nil {
				t.Fatal(err)
			}
			if got.text != tt.reply.Text || got.reasoning != tt.reply.Reasoning {
				t.Errorf("text, reasoning = %q, %q; want %q, %q", got.text, got.reasoning, tt.reply.Text, tt.reply.Reasoning)
			}
			wantFinish := "stop"
			if len(tt.reply.ToolCalls) > 0 {
				wantFinish = "tool_calls"
			}
			if got.finish != wantFinish {
				t.Errorf("finish = %q, want %q", got.finish, wantFinish)
			}
			if len(got.calls) != len(tt.reply.ToolCalls) {
				t.Fatalf("got %d tool calls, want %d", len(got.calls), len(tt.reply.ToolCalls))
			}
			ids := map[string]bool{}
			for i, want := range tt.reply.ToolCalls {
				c := got.calls[i]
				if c.Function.Name != want.Name || c.Function.Arguments != want.Arguments || c.Type != openai.ToolTypeFunction {
					t.Errorf("call %d = %+v, want %+v", i, c, want)
				}
				if want.ID != "" && c.ID != want.ID || !strings.HasPrefix(c.ID, "call_") || ids[c.ID] {
					t.Errorf("call %d id = %q (want %q or a fresh call_ id)", i, c.ID, want.ID)
				}
				ids[c.ID] = true
			}
			if got.usage == nil || got.usage.TotalTokens == 0 {
				t.Errorf("usage = %+v, want an estimate", got.usage)
			}
			if tt.reply.ChunkSize > 0 && tt.reply.Text != "" && got.chunks < len(tt.reply.Text)/4 {
				t.Errorf("got %d chunks, want the text split", got.chunks)
			}
		})
	}
}

func TestNoUsageUnlessAsked(t *testing.T) {
	s := NewServer(t)
	s.Enqueue(TextReply("x"))
	req := userReq("hi")
	req.StreamOptions = nil
	got, err := streamAll(t, newOpenAI(s), req)
	if err != nil || got.usage != nil {
		t.Fatalf("got usage %+v, err %v; want no usage chunk", got.usage, err)
	}
}

func TestFailureReplies(t *testing.T) {
	t.Run("rate limit", func(t *testing.T) {
		s := NewServer(t)
		s.Enqueue(RateLimitReply("7"))
		resp := post(t, s, chatBody)
		if resp.StatusCode != 429 || resp.Header.Get("Retry-After") != "7" {
			t.Fatalf("status %d Retry-After %q, want 429 and 7", resp.StatusCode, resp.Header.Get("Retry-After"))
		}
		_, err := streamAll(t, newOpenAI(s), userReq("x")) // script exhausted now
		var ae *openai.APIError
		if !errors.As(err, &ae) || ae.HTTPStatusCode != 500 || ae.Code != "script_exhausted" {
			t.Fatalf("err = %v, want 500 script_exhausted", err)
		}
	})
	t.Run("context overflow", func(t *testing.T) {
		s := NewServer(t)
		s.Enqueue(ContextOverflowReply())
		_, err := streamAll(t, newOpenAI(s), userReq("x"))
		var ae *openai.APIError
		if !errors.As(err, &ae) || ae.HTTPStatusCode != 400 || ae.Code != "context_length_exceeded" || ae.Type != "invalid_request_error" {
			t.Fatalf("err = %#v, want 400 context_length_exceeded", err)
		}
	})
	t.Run("raw error body", func(t *testing.T) {
		s := NewServer(t)
		s.Enqueue(Reply{Status: 400, ErrorBody: `{"object":"error","message":"maximum context length is 4096 tokens","code":400}`})
		_, err := streamAll(t, newOpenAI(s), userReq("x"))
		var re *openai.RequestError
		if !errors.As(err, &re) || re.HTTPStatusCode != 400 || !bytes.Contains(re.Body, []byte("maximum context length")) {
			t.Fatalf("err = %v, want a RequestError with the raw body", err)
		}
	})
	t.Run("default body", func(t *testing.T) {
		s := NewServer(t)
		s.Enqueue(Reply{Status: 503})
		_, err := streamAll(t, newOpenAI(s), userReq("x"))
		var ae *openai.APIError
		if !errors.As(err, &ae) || ae.HTTPStatusCode != 503 || ae.Message != "Service Unavailable" {
			t.Fatalf("err = %v, want 503 Service Unavailable", err)
		}
	})
	t.Run("mid-stream error", func(t *testing.T) {
		s := NewServer(t)
		s.Enqueue(Reply{Text: "partial", MidStreamError: "model crashed"})
		got, err := streamAll(t, newOpenAI(s), userReq("x"))
		var ae *openai.APIError
		if !errors.As(err, &ae) || ae.HTTPStatusCode != 0 || ae.Message != "model crashed" || got.text != "partial" {
			t.Fatalf("text %q err %v, want partial and a mid-stream APIError", got.text, err)
		}
	})
	t.Run("truncate", func(t *testing.T) {
		s := NewServer(t)
		s.Enqueue(Reply{Text: "cut", Truncate: true})
		resp := post(t, s, chatBody)
		evs := events(t, resp.Body)
		if len(evs) != 1 || strings.Contains(evs[0], `"finish_reason":"`) {
			t.Fatalf("events = %q, want one content chunk without finish or [DONE]", evs)
		}
	})
	t.Run("raw chunks", func(t *testing.T) {
		s := NewServer(t)
		s.Enqueue(Reply{RawChunks: []string{`{"choices":[{"index":0,"delta":{"content":"raw"},"finish_reason":"stop"}]}`}})
		resp := post(t, s, chatBody)
		evs := events(t, resp.Body)
		want := []string{`{"choices":[{"index":0,"delta":{"content":"raw"},"finish_reason":"stop"}]}`, "[DONE]"}
		if diff := cmp.Diff(want, evs); diff != "" {
			t.Fatalf("events (-want +got):\n%s", diff)
		}
	})
}

func TestRejectsBadRequests(t *testing.T) {
	s := NewServer(t)
	s.SetResponder(EchoResponder)
	tests := []struct {
		name, method, path, body string
		status                   int
		msg                      string
	}{
		{"not streaming", "POST", "/v1/chat/completions", `{"model":"m","messages":[{"role":"user","content":"x"}]}`, 400, "only streaming"},
		{"bad json", "POST", "/v1/chat/completions", `{"model":`, 400, "not a valid chat completion request"},
		{"no model", "POST", "/v1/chat/completions", `{"stream":true,"messages":[{"role":"user","content":"x"}]}`, 400, "model: must not be empty"},
		{"no messages", "POST", "/v1/chat/completions", `{"model":"m","stream":true,"messages":[]}`, 400, "messages: must not be empty"},
		{"wrong method", "GET", "/v1/chat/completions", ``, 405, "use POST"},
		{"unknown path", "POST", "/v1/completions", `{}`, 404, "unknown path"},
		{"models wrong method", "POST", "/v1/models", `{}`, 405, "use GET"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req := httptest.NewRequestWithContext(t.Context(), tt.method, tt.path, strings.NewReader(tt.body))
			rec := httptest.NewRecorder()
			s.ServeHTTP(rec, req)
			var env struct {
				Error struct {
					Message string `json:"message"`
					Type    string `json:"type"`
				} `json:"error"`
			}
			if err := json.Unmarshal(rec.Body.Bytes(), &env); err != nil {
				t.Fatalf("body %q is not an error envelope: %v", rec.Body, err)
			}
			if rec.Code != tt.status || !strings.Contains(env.Error.Message, tt.msg) || env.Error.Type == "" {
				t.Errorf("got %d %q, want %d containing %q", rec.Code, rec.Body, tt.status, tt.msg)
			}
		})
	}
	if n := s.RequestCount(); n != 0 {
		t.Errorf("RequestCount = %d, want 0 (rejected requests are not counted)", n)
	}
	big := httptest.NewRequestWithContext(t.Context(), "POST", "/v1/chat/completions", strings.NewReader("x"))
	big.ContentLength = maxBody + 1
	rec := httptest.NewRecorder()
	s.ServeHTTP(rec, big)
	if rec.Code != http.StatusRequestEntityTooLarge {
		t.Errorf("oversized body: status %d, want 413", rec.Code)
	}
}

func TestModels(t *testing.T) {
	s := NewServer(t, WithModels("a", "b"))
	resp, err := s.HTTPClient().Get(s.URL() + "/models")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var list openai.ModelsList
	if err := json.NewDecoder(resp.Body).Decode(&list); err != nil {
		t.Fatal(err)
	}
	if len(list.Models) != 2 || list.Models[0].ID != "a" || list.Models[1].ID != "b" {
		t.Fatalf("models = %+v, want a, b", list.Models)
	}
}

func TestScriptThenResponderAndRecording(t *testing.T) {
	s := NewServer(t)
	s.Enqueue(TextReply("one"), TextReply("two"))
	c := newOpenAI(s)
	for _, want := range []string{"one", "two"} {
		got, err := streamAll(t, c, userReq("q"))
		if err != nil || got.text != want {
			t.Fatalf("got %q, %v; want %q", got.text, err, want)
		}
	}
	if s.Pending() != 0 {
		t.Fatalf("Pending = %d, want 0", s.Pending())
	}
	s.SetResponder(EchoResponder)
	got, err := streamAll(t, c, userReq("ping"))
	if err != nil || got.text != "echo: ping" {
		t.Fatalf("got %q, %v; want echo: ping", got.text, err)
	}
	reqs := s.WaitRequests(t, 3, wait)
	if len(reqs) != 3 || s.RequestCount() != 3 {
		t.Fatalf("recorded %d requests, want 3", len(reqs))
	}
	for i, r := range reqs {
		if r.Seq != i+1 || r.Body.Model != "m1" || !r.Body.Stream || !json.Valid(r.Raw) || r.Header.Get("Content-Type") != "application/json" {
			t.Errorf("request %d = seq %d model %q stream %v", i, r.Seq, r.Body.Model, r.Body.Stream)
		}
	}
	if reqs[2].LastUserText() != "ping" {
		t.Errorf("LastUserText = %q", reqs[2].LastUserText())
	}
}

func TestRecordLimit(t *testing.T) {
	for _, limit := range []int{0, 2} {
		s := NewServer(t, WithRecordLimit(limit), WithResponder(EchoResponder))
		c := newOpenAI(s)
		for _, q := range []string{"a", "b", "c"} {
			if _, err := streamAll(t, c, userReq(q)); err != nil {
				t.Fatal(err)
			}
		}
		reqs := s.WaitRequests(t, 3, wait)
		if len(reqs) != limit || s.RequestCount() != 3 {
			t.Fatalf("limit %d: kept %d of %d", limit, len(reqs), s.RequestCount())
		}
		if limit == 2 && (reqs[0].LastUserText() != "b" || reqs[1].LastUserText() != "c") {
			t.Errorf("kept %q, %q; want the most recent b, c", reqs[0].LastUserText(), reqs[1].LastUserText())
		}
	}
}

func TestWaitRequestsTimesOut(t *testing.T) {
	s := NewServer(t)
	ft := &fatalT{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		s.WaitRequests(ft, 1, time.Millisecond)
	}()
	<-done
	if !strings.Contains(ft.msg, "got 0 requests") {
		t.Fatalf("WaitRequests failure message = %q", ft.msg)
	}
}

// fatalT records a Fatalf instead of failing the test.
type fatalT struct {
	testing.TB
	msg string
}

func (f *fatalT) Helper()                           {}
func (f *fatalT) Fatalf(format string, args ...any) { f.msg = fmt.Sprintf(format, args...) }

func TestBlockHoldsUntilReleased(t *testing.T) {
	s := NewServer(t)
	release := make(chan struct{})
	s.Enqueue(Reply{Block: release, Text: "after"})
	c := newOpenAI(s)
	type result struct {
		got collected
		err error
	}
	res := make(chan result, 1)
	go func() {
		got, err := streamAll(t, c, userReq("x"))
		res <- result{got, err}
	}()
	s.WaitRequests(t, 1, wait)
	select {
	case r := <-res:
		t.Fatalf("request finished while blocked: %+v", r)
	default:
	}
	close(release)
	r := <-res
	if r.err != nil || r.got.text != "after" {
		t.Fatalf("got %q, %v; want after", r.got.text, r.err)
	}
}

func TestHeldRequestsEndOnCancelAndClose(t *testing.T) {
	for _, tt := range []struct {
		name  string
		reply Reply
	}{
		{"block", Reply{Block: make(chan struct{})}},
		{"stall", Reply{Text: "x", Stall: true}},
		{"delay", Reply{Delay: time.Hour}},
		{"chunk delay", Reply{Text: "abcdef", ChunkSize: 1, ChunkDelay: time.Hour}},
	} {
		t.Run(tt.name+"/cancel", func(t *testing.T) {
			s := NewServer(t)
			s.Enqueue(tt.reply)
			ctx, cancel := context.WithCancel(t.Context())
			errc := make(chan error, 1)
			go func() {
				st, err := newOpenAI(s).CreateChatCompletionStream(ctx, userReq("x"))
				if err == nil {
					defer st.Close()
					for err == nil {
						_, err = st.Recv()
					}
				}
				errc <- err
			}()
			s.WaitRequests(t, 1, wait)
			cancel()
			if err := <-errc; err == nil {
				t.Fatal("stream ended without error after cancel")
			}
			s.Close() // must not hang: the handler returned
		})
		t.Run(tt.name+"/close", func(t *testing.T) {
			s := NewServer(t)
			s.Enqueue(tt.reply)
			errc := make(chan error, 1)
			go func() {
				_, err := streamAll(t, newOpenAI(s), userReq("x"))
				errc <- err
			}()
			s.WaitRequests(t, 1, wait)
			s.Close()
			<-errc // any outcome; it must end
			resp, err := http.Post(s.srv.URL+"/v1/chat/completions", "application/json", strings.NewReader(chatBody))
			if err == nil {
				resp.Body.Close()
				t.Fatalf("request after Close got %d, want a refused connection", resp.StatusCode)
			}
		})
	}
}

func TestClosedHandlerRefuses(t *testing.T) {
	h := NewHandler(WithResponder(EchoResponder))
	h.Close()
	h.Close() // idempotent
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequestWithContext(t.Context(), "POST", "/v1/chat/completions", strings.NewReader(chatBody)))
	if rec.Code != http.StatusServiceUnavailable {
		t.Fatalf("status = %d, want 503", rec.Code)
	}
}

func TestResponders(t *testing.T) {
	msgs := func(ms ...openai.ChatCompletionMessage) *Request {
		return &Request{Body: openai.ChatCompletionRequest{Messages: ms,
			Tools: []openai.Tool{{Type: "function", Function: &openai.FunctionDefinition{Name: "list_dir"}}}}}
	}
	user := openai.ChatCompletionMessage{Role: "user", Content: "what is here?"}
	multi := openai.ChatCompletionMessage{Role: "user", MultiContent: []openai.ChatMessagePart{
		{Type: "text", Text: "look"}, {Type: "image_url", ImageURL: &openai.ChatMessageImageURL{URL: "data:x"}}, {Type: "text", Text: "here"}}}

	if got := EchoResponder(msgs(user)); got.Text != "echo: what is here?" {
		t.Errorf("echo = %q", got.Text)
	}
	if got := EchoResponder(msgs(multi)); got.Text != "echo: look\nhere" {
		t.Errorf("echo multi = %q", got.Text)
	}
	if got := EchoResponder(&Request{}); got.Text != "echo: (no text)" {
		t.Errorf("echo empty = %q", got.Text)
	}
}

func TestTextPieces(t *testing.T) {
	tests := []struct {
		s    string
		size int
		want []string
	}{
		{"", 3, nil},
		{"abc", 0, []string{"abc"}},
		{"abcdefg", 3, []string{"abc", "def", "g"}},
		{"héllo", 2, []string{"h", "é", "ll", "o"}},
		{"✓✓", 1, []string{"✓", "✓"}},
		{"a✓b", 3, []string{"a", "✓", "b"}},
	}
	for _, tt := range tests {
		var got []string
		for p := range textPieces(tt.s, tt.size) {
			if !utf8.ValidString(p) {
				t.Errorf("textPieces(%q, %d) split a rune: %q", tt.s, tt.size, p)
			}
			got = append(got, p)
		}
		if diff := cmp.Diff(tt.want, got); diff != "" {
			t.Errorf("textPieces(%q, %d) (-want +got):\n%s", tt.s, tt.size, diff)
		}
	}
	var args []string
	for p := range argPieces(`{"é":1}`, 2) {
		args = append(args, p)
	}
	if strings.Join(args, "") != `{"é":1}` || len(args) != 4 {
		t.Errorf("argPieces = %q", args)
	}
}

func TestAppendID(t *testing.T) {
	a := string(appendID(nil, 0xdeadbeef, 1, 0))
	b := string(appendID(nil, 0xdeadbeef, 1, 1))
	if len(a) != 24 || a == b || !strings.HasPrefix(a, "deadbeef") {
		t.Fatalf("ids %q, %q", a, b)
	}
}

// discardWriter is a minimal flushable ResponseWriter for benchmarks.
type discardWriter struct{ h http.Header }

func (d *discardWriter) Header() http.Header         { return d.h }
func (d *discardWriter) Write(b []byte) (int, error) { return len(b), nil }
func (d *discardWriter) WriteHeader(int)             {}
func (d *discardWriter) Flush()                      {}

func BenchmarkHandlerText(b *testing.B) {
	h := NewHandler(WithResponder(EchoResponder), WithRecordLimit(0))
	body := []byte(chatBody)
	w := &discardWriter{h: http.Header{}}
	b.ReportAllocs()
	for b.Loop() {
		req := httptest.NewRequest("POST", "/v1/chat/completions", bytes.NewReader(body))
		clear(w.h)
		h.ServeHTTP(w, req)
	}
}

func BenchmarkHandlerToolCallChunked(b *testing.B) {
	h := NewHandler(WithResponder(func(*Request) Reply {
		return Reply{Text: strings.Repeat("word ", 40), ChunkSize: 16,
			ToolCalls: []ToolCall{{Name: "list_dir", Arguments: `{"path":"some/long/path/here"}`}}}
	}), WithRecordLimit(0))
	body := []byte(chatBody)
	w := &discardWriter{h: http.Header{}}
	b.ReportAllocs()
	for b.Loop() {
		req := httptest.NewRequest("POST", "/v1/chat/completions", bytes.NewReader(body))
		clear(w.h)
		h.ServeHTTP(w, req)
	}
}

func BenchmarkServerRoundTrip(b *testing.B) {
	s := NewServer(b, WithResponder(EchoResponder), WithRecordLimit(0))
	cfg := openai.DefaultConfig("")
	cfg.BaseURL = s.URL()
	cfg.HTTPClient = s.HTTPClient()
	c := openai.NewClientWithConfig(cfg)
	req := userReq("hello")
	b.ReportAllocs()
	for b.Loop() {
		st, err := c.CreateChatCompletionStream(b.Context(), req)
		if err != nil {
			b.Fatal(err)
		}
		for {
			if _, err := st.Recv(); err != nil {
				if !errors.Is(err, io.EOF) {
					b.Fatal(err)
				}
				break
			}
		}
		st.Close()
	}
}

func TestKeepAliveComments(t *testing.T) {
	s := NewServer(t)
	s.Enqueue(Reply{Text: "late", Delay: 30 * time.Millisecond, KeepAlive: time.Millisecond})
	resp := post(t, s, chatBody)
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("status %d, Content-Type %q", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	before, after, ok := strings.Cut(string(body), "data: ")
	if !ok || !strings.HasPrefix(before, ": keep-alive\n\n") || strings.ReplaceAll(before, ": keep-alive\n\n", "") != "" {
		t.Fatalf("body starts %q, want keep-alive comments before the first event", before)
	}
	if !strings.Contains(after, `"content":"late"`) || !strings.HasSuffix(after, "data: [DONE]\n\n") {
		t.Errorf("stream after keep-alives = %q", after)
	}
}

func TestResetReplies(t *testing.T) {
	s := NewServer(t)
	// Mid-stream: the content arrives, then the body read fails.
	s.Enqueue(Reply{Text: "partial", Reset: true}, Reply{Reset: true})
	resp := post(t, s, chatBody)
	body, err := io.ReadAll(resp.Body)
	if err == nil || !strings.Contains(string(body), `"content":"partial"`) || strings.Contains(string(body), "[DONE]") {
		t.Fatalf("mid-stream reset: body %q, err %v; want the content, then a read error", body, err)
	}
	// Before any response: the request itself fails.
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, s.URL()+"/chat/completions", strings.NewReader(chatBody))
	if err != nil {
		t.Fatal(err)
	}
	if r, err := s.HTTPClient().Do(req); err == nil {
		r.Body.Close()
		t.Fatalf("reset before the response: got status %d, want a transport error", r.StatusCode)
	}
}

func TestValidate(t *testing.T) {
	call := func(id, args string) openai.ToolCall {
		return openai.ToolCall{ID: id, Type: openai.ToolTypeFunction, Function: openai.FunctionCall{Name: "f", Arguments: args}}
	}
	user := openai.ChatCompletionMessage{Role: "user", Content: "hi"}
	asst := func(cs ...openai.ToolCall) openai.ChatCompletionMessage {
		return openai.ChatCompletionMessage{Role: "assistant", ToolCalls: cs}
	}
	tool := func(id, text string) openai.ChatCompletionMessage {
		return openai.ChatCompletionMessage{Role: "tool", ToolCallID: id, Content: text}
	}
	tests := []struct {
		name string
		msgs []openai.ChatCompletionMessage
		want string // "" valid
	}{
		{"plain", []openai.ChatCompletionMessage{user}, ""},
		{"answered in any order", []openai.ChatCompletionMessage{user, asst(call("a", "{}"), call("b", `{"x":1}`)), tool("b", "r"), tool("a", "r"), user}, ""},
		{"empty", nil, "must not be empty"},
		{"orphan result", []openai.ChatCompletionMessage{user, tool("a", "r")}, "must be a response"},
		{"unanswered", []openai.ChatCompletionMessage{user, asst(call("a", "{}"), call("b", "{}")), tool("a", "r"), user}, "1 unanswered"},
		{"last unanswered", []openai.ChatCompletionMessage{user, asst(call("a", "{}"))}, "1 unanswered"},
		{"wrong id", []openai.ChatCompletionMessage{user, asst(call("a", "{}")), tool("z", "r")}, "answers no pending"},
		{"answered twice", []openai.ChatCompletionMessage{user, asst(call("a", "{}")), tool("a", "r"), tool("a", "r")}, "answers no pending"},
		{"empty result", []openai.ChatCompletionMessage{user, asst(call("a", "{}")), tool("a", " ")}, "no content"},
		{"cut arguments", []openai.ChatCompletionMessage{user, asst(call("a", `{"x":`)), tool("a", "r")}, "not a JSON object"},
		{"duplicate id", []openai.ChatCompletionMessage{user, asst(call("a", "{}")), tool("a", "r"), asst(call("a", "{}")), tool("a", "r")}, "duplicate tool call id"},
	}
	for _, tt := range tests {
		err := Validate(&openai.ChatCompletionRequest{Model: "m", Messages: tt.msgs})
		if tt.want == "" && err != nil || tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)) {
			t.Errorf("%s: Validate = %v, want %q", tt.name, err, tt.want)
		}
	}
}

func TestStrictRefusesInvalidRequests(t *testing.T) {
	s := NewServer(t, WithStrict())
	s.Enqueue(TextReply("ok"))
	bad := `{"model":"m1","stream":true,"messages":[{"role":"user","content":"hi"},{"role":"tool","tool_call_id":"x","content":"r"}]}`
	if resp := post(t, s, bad); resp.StatusCode != http.StatusBadRequest {
		t.Fatalf("invalid request: status %d, want 400", resp.StatusCode)
	}
	if v := s.Violations(); len(v) != 1 || !strings.HasPrefix(v[0], "request 1: ") {
		t.Fatalf("violations = %q", v)
	}
	// The script was not consumed by the refused request.
	if resp := post(t, s, chatBody); resp.StatusCode != http.StatusOK || s.Pending() != 0 || s.RequestCount() != 2 {
		t.Fatalf("valid request: status %d, pending %d, count %d", resp.StatusCode, s.Pending(), s.RequestCount())
	}
}

// TestLeanDecodeMatchesFull checks that a handler recording nothing gives
// its responder the request go-openai's decoding gives, but for the tool
// schemas, which stay raw JSON.
func TestLeanDecodeMatchesFull(t *testing.T) {
	temp := float32(0.25)
	src := openai.ChatCompletionRequest{
		Model: "m", MaxCompletionTokens: 77, Temperature: temp, Stream: true, StreamOptions: &openai.StreamOptions{IncludeUsage: true},
		Messages: []openai.ChatCompletionMessage{
			{Role: "system", Content: "sys <b> \u2028"},
			{Role: "user", MultiContent: []openai.ChatMessagePart{{Type: "text", Text: "look"}, {Type: "image_url", ImageURL: &openai.ChatMessageImageURL{URL: "data:x"}}}},
			{Role: "assistant", ReasoningContent: "hm", ToolCalls: []openai.ToolCall{{ID: "c1", Type: "function", Function: openai.FunctionCall{Name: "f", Arguments: `{"a":1}`}}}},
			{Role: "tool", Content: "result \"quoted\"", ToolCallID: "c1"},
			{Role: "assistant", Content: "done", Name: "bot"},
		},
		Tools: []openai.Tool{
			{Type: "function", Function: &openai.FunctionDefinition{Name: "f", Description: "d", Parameters: json.RawMessage(`{"type":"object","properties":{"a":{"type":"integer"}}}`)}},
			{Type: "function", Function: &openai.FunctionDefinition{Name: "g", Parameters: json.RawMessage(`{}`)}},
		},
	}
	raw, err := json.Marshal(src)
	if err != nil {
		t.Fatal(err)
	}
	raw = append(raw[:len(raw)-1], `,"messages_extra":null,"content":"ignored"}`...) // unknown fields are ignored alike
	var full, lean openai.ChatCompletionRequest
	if err := json.Unmarshal(raw, &full); err != nil {
		t.Fatal(err)
	}
	if err := decodeLean(raw, &lean); err != nil {
		t.Fatal(err)
	}
	for i := range lean.Tools {
		p, ok := lean.Tools[i].Function.Parameters.(json.RawMessage)
		if !ok {
			t.Fatalf("lean tool %d parameters are %T, want json.RawMessage", i, lean.Tools[i].Function.Parameters)
		}
		var v any
		if err := json.Unmarshal(p, &v); err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(full.Tools[i].Function.Parameters, v); diff != "" {
			t.Errorf("tool %d schema (-full +lean):\n%s", i, diff)
		}
		lean.Tools[i].Function.Parameters = full.Tools[i].Function.Parameters
	}
	if diff := cmp.Diff(full, lean); diff != "" {
		t.Errorf("lean decoding differs (-full +lean):\n%s", diff)
	}
	for _, raw := range []string{
		"{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"bad \xff utf8, \u00e9 raw \u65e5\"}]}",
		`{"model":"m","messages":[{"role":"user","content":"esc \u00e9 \ud83d\ude00 \/ \n"},{"role":"user","content":null}]}`,
		// After a request whose messages carry every field, a reused
		// shadow must not leak them into one that carries none.
		`{"model":"m","messages":[{"role":"user"},{"role":"assistant"},{"role":"tool"},{"role":"user"},{"role":"x"}],"tools":[{"type":"function"}]}`,
	} {
		var full, lean openai.ChatCompletionRequest
		if err := json.Unmarshal([]byte(raw), &full); err != nil {
			t.Fatal(err)
		}
		if err := decodeLean([]byte(raw), &lean); err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(full, lean); diff != "" {
			t.Errorf("lean decoding of %q differs (-full +lean):\n%s", raw, diff)
		}
	}
	var bad openai.ChatCompletionRequest
	if decodeLean([]byte(`{"model":"m","messages":[{"role":"user","content":5}]}`), &bad) == nil {
		t.Error("a number as content was accepted")
	}
}

// listDirResponder calls list_dir when the request offers it, else echoes.
func listDirResponder(req *Request) Reply {
	if req.HasTool("list_dir") {
		return ToolCallReply("list_dir", `{"path":"."}`)
	}
	return EchoResponder(req)
}

// TestLeanHandlerServesResponders drives a handler that records nothing
// with the demo responder over HTTP: it sees the last message and the
// offered tools as a recording handler does.
func TestLeanHandlerServesResponders(t *testing.T) {
	for _, limit := range []int{0, 1} {
		s := NewServer(t, WithRecordLimit(limit), WithResponder(listDirResponder))
		for range 3 { // buffers are reused across requests
			resp := post(t, s, chatBody)
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if !strings.Contains(string(body), `"name":"list_dir"`) {
				t.Fatalf("limit %d: reply = %s, want a list_dir call", limit, body)
			}
		}
	}
}

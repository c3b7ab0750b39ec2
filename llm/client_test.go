package llm_test

import (
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"go.uber.org/goleak"

	"github.com/switchboard-chat/switchboard/llm"
	"github.com/switchboard-chat/switchboard/llm/llmtest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const wait = 10 * time.Second

// sleeps records the waits between attempts instead of sleeping.
type sleeps struct {
	mu sync.Mutex
	d  []time.Duration
}

func (s *sleeps) sleep(ctx context.Context, d time.Duration) error {
	s.mu.Lock()
	s.d = append(s.d, d)
	s.mu.Unlock()
	return ctx.Err()
}

func (s *sleeps) got() []time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]time.Duration(nil), s.d...)
}

// testBackoff makes retry n wait n milliseconds (recorded, not slept).
func testBackoff(n int, _ bool) time.Duration { return time.Duration(n) * time.Millisecond }

// setup starts a scripted server and a client for it. mut adjusts the
// config (defaults: 3 retries, 10 s idle timeout).
func setup(t *testing.T, mut func(*llm.Config), opts ...llm.Option) (*llmtest.Server, *llm.Client, *sleeps) {
	t.Helper()
	s := llmtest.NewServer(t)
	cfg := llm.DefaultConfig()
	cfg.BaseURL = s.URL()
	cfg.IdleTimeout = 10 * time.Second
	cfg.MaxRetries = 3
	if mut != nil {
		mut(&cfg)
	}
	sl := &sleeps{}
	opts = append([]llm.Option{llm.WithHTTPClient(s.HTTPClient()), llm.WithSleep(sl.sleep), llm.WithBackoff(testBackoff)}, opts...)
	c, err := llm.New(cfg, nil, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.CloseIdleConnections)
	return s, c, sl
}

func userReq(text string) llm.Request {
	return llm.Request{Messages: []llm.Message{{Role: llm.RoleSystem, Content: "sys"}, {Role: llm.RoleUser, Content: text}}}
}

// deltas collects what onDelta receives.
type deltas struct {
	text, reasoning []string
}

func (d *deltas) on(x llm.Delta) {
	if x.Text == "" && x.Reasoning == "" {
		panic("onDelta called with an empty delta")
	}
	if x.Text != "" {
		d.text = append(d.text, x.Text)
	}
	if x.Reasoning != "" {
		d.reasoning = append(d.reasoning, x.Reasoning)
	}
}

func TestStreamText(t *testing.T) {
	s, c, _ := setup(t, nil)
	s.Enqueue(llmtest.Reply{Text: "Hello, wörld! How are you today?", ChunkSize: 5, Usage: &llmtest.Usage{PromptTokens: 11, CompletionTokens: 7}})
	var d deltas
	resp, err := c.Stream(t.Context(), userReq("hi"), d.on)
	if err != nil {
		t.Fatal(err)
	}
	want := &llm.Response{Text: "Hello, wörld! How are you today?", FinishReason: llm.FinishStop,
		Usage: llm.Usage{PromptTokens: 11, CompletionTokens: 7, TotalTokens: 18}}
	if diff := cmp.Diff(want, resp); diff != "" {
		t.Errorf("response (-want +got):\n%s", diff)
	}
	if len(d.text) < 6 || strings.Join(d.text, "") != want.Text {
		t.Errorf("text deltas = %q, want the text in order, in pieces", d.text)
	}
	if c.Model() != "gpt-4o-mini" {
		t.Errorf("Model() = %q", c.Model())
	}
}

func TestStreamReasoning(t *testing.T) {
	s, c, _ := setup(t, nil)
	s.Enqueue(llmtest.Reply{Reasoning: "Let me think about it.", Text: "42", ChunkSize: 4})
	var d deltas
	resp, err := c.Stream(t.Context(), userReq("q"), d.on)
	if err != nil {
		t.Fatal(err)
	}
	if resp.Reasoning != "Let me think about it." || resp.Text != "42" {
		t.Errorf("reasoning, text = %q, %q", resp.Reasoning, resp.Text)
	}
	if strings.Join(d.reasoning, "") != resp.Reasoning || len(d.reasoning) < 2 || strings.Join(d.text, "") != "42" {
		t.Errorf("deltas = %+v", d)
	}
	if resp.Usage.TotalTokens == 0 {
		t.Errorf("usage = %+v, want the server's estimate", resp.Usage)
	}
}

func TestStreamToolCalls(t *testing.T) {
	for _, interleave := range []bool{false, true} {
		t.Run(fmt.Sprintf("interleave=%v", interleave), func(t *testing.T) {
			s, c, _ := setup(t, nil)
			s.Enqueue(llmtest.Reply{Text: "Checking.", ChunkSize: 3, InterleaveToolCalls: interleave, ToolCalls: []llmtest.ToolCall{
				{ID: "call_w", Name: "get_weather", Arguments: `{"city": "Paris", "unit": "celsius"}`},
				{ID: "call_t", Name: "get_time", Arguments: `{}`},
				{Name: "list_dir", Arguments: ``},
			}})
			resp, err := c.Stream(t.Context(), userReq("weather?"), nil)
			if err != nil {
				t.Fatal(err)
			}
			if resp.Text != "Checking." || resp.FinishReason != llm.FinishToolCalls || len(resp.ToolCalls) != 3 {
				t.Fatalf("response = %+v", resp)
			}
			want := []llm.ToolCall{
				{ID: "call_w", Name: "get_weather", Arguments: `{"city": "Paris", "unit": "celsius"}`},
				{ID: "call_t", Name: "get_time", Arguments: `{}`},
				{ID: resp.ToolCalls[2].ID, Name: "list_dir", Arguments: ``},
			}
			if diff := cmp.Diff(want, resp.ToolCalls); diff != "" {
				t.Errorf("tool calls (-want +got):\n%s", diff)
			}
			if !strings.HasPrefix(resp.ToolCalls[2].ID, "call_") {
				t.Errorf("server-generated id = %q", resp.ToolCalls[2].ID)
			}
		})
	}
}

var generatedID = regexp.MustCompile(`^call_[0-9a-f]{24}$`)

func TestToolCallQuirks(t *testing.T) {
	const head = `{"id":"x","object":"chat.completion.chunk","created":1,"model":"m","choices":[`
	chunk := func(delta, finish string) string {
		if finish != "null" {
			finish = `"` + finish + `"`
		}
		return head + `{"index":0,"delta":` + delta + `,"finish_reason":` + finish + `}]}`
	}
	usage := head + `],"usage":{"prompt_tokens":3,"completion_tokens":4,"total_tokens":7}}`
	tests := []struct {
		name       string
		chunks     []string
		want       []llm.ToolCall // "" id: must be generated
		wantFinish string
		wantUsage  int
	}{
		{
			name: "ollama: same index, new ids, finish stop",
			chunks: []string{
				chunk(`{"role":"assistant","tool_calls":[{"index":0,"id":"a","type":"function","function":{"name":"f","arguments":"{\"x\":1}"}}]}`, "null"),
				chunk(`{"tool_calls":[{"index":0,"id":"b","type":"function","function":{"name":"g","arguments":"{}"}}]}`, "null"),
				chunk(`{}`, "stop"),
			},
			want:       []llm.ToolCall{{ID: "a", Name: "f", Arguments: `{"x":1}`}, {ID: "b", Name: "g", Arguments: `{}`}},
			wantFinish: llm.FinishToolCalls,
		},
		{
			name: "no index",
			chunks: []string{
				chunk(`{"tool_calls":[{"id":"a","type":"function","function":{"name":"f","arguments":"{\"p\":"}}]}`, "null"),
				chunk(`{"tool_calls":[{"function":{"arguments":"\"v\"}"}}]}`, "null"),
				chunk(`{"tool_calls":[{"id":"b","type":"function","function":{"name":"g","arguments":""}}]}`, "null"),
				chunk(`{"tool_calls":[{"function":{"arguments":"{}"}}]}`, "tool_calls"),
			},
			want:       []llm.ToolCall{{ID: "a", Name: "f", Arguments: `{"p":"v"}`}, {ID: "b", Name: "g", Arguments: `{}`}},
			wantFinish: llm.FinishToolCalls,
		},
		{
			name: "missing ids, usage after finish",
			chunks: []string{
				chunk(`{"tool_calls":[{"index":1,"type":"function","function":{"name":"second","arguments":"{"}}]}`, "null"),
				chunk(`{"tool_calls":[{"index":0,"type":"function","function":{"name":"first","arguments":""}}]}`, "null"),
				chunk(`{"tool_calls":[{"index":1,"function":{"arguments":"}"}}]}`, "null"),
				chunk(`{}`, "tool_calls"),
				usage,
			},
			want:       []llm.ToolCall{{Name: "first", Arguments: ``}, {Name: "second", Arguments: `{}`}},
			wantFinish: llm.FinishToolCalls,
			wantUsage:  7,
		},
		{
			name: "name repeated on every fragment, finish length kept",
			chunks: []string{
				chunk(`{"tool_calls":[{"index":0,"id":"a","type":"function","function":{"name":"write_file","arguments":"{\"pa"}}]}`, "null"),
				chunk(`{"tool_calls":[{"index":0,"id":"a","function":{"name":"write_file","arguments":"th\":"}}]}`, "null"),
				chunk(`{}`, "length"),
			},
			want:       []llm.ToolCall{{ID: "a", Name: "write_file", Arguments: `{"path":`}},
			wantFinish: llm.FinishLength,
		},
		{
			name: "finish without tool calls chunk, text only",
			chunks: []string{
				chunk(`{"role":"assistant","content":""}`, "null"),
				chunk(`{"content":"hi"}`, "null"),
				chunk(`{}`, "stop"),
				usage,
			},
			wantFinish: llm.FinishStop,
			wantUsage:  7,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, c, _ := setup(t, nil)
			s.Enqueue(llmtest.Reply{RawChunks: tt.chunks})
			resp, err := c.Stream(t.Context(), userReq("x"), nil)
			if err != nil {
				t.Fatal(err)
			}
			if resp.FinishReason != tt.wantFinish || resp.Usage.TotalTokens != tt.wantUsage {
				t.Errorf("finish %q usage %d, want %q %d", resp.FinishReason, resp.Usage.TotalTokens, tt.wantFinish, tt.wantUsage)
			}
			if len(resp.ToolCalls) != len(tt.want) {
				t.Fatalf("tool calls = %+v, want %+v", resp.ToolCalls, tt.want)
			}
			for i, w := range tt.want {
				g := resp.ToolCalls[i]
				if w.ID == "" {
					if !generatedID.MatchString(g.ID) {
						t.Errorf("call %d id = %q, want a generated call_ + 24 hex id", i, g.ID)
					}
					w.ID = g.ID
				}
				if g != w {
					t.Errorf("call %d = %+v, want %+v", i, g, w)
				}
			}
		})
	}
}

// rawMessages decodes the messages of a recorded request as generic JSON.
func rawMessages(t *testing.T, raw []byte) (map[string]any, []map[string]any) {
	t.Helper()
	var body map[string]any
	if err := json.Unmarshal(raw, &body); err != nil {
		t.Fatal(err)
	}
	var msgs []map[string]any
	for _, m := range body["messages"].([]any) {
		msgs = append(msgs, m.(map[string]any))
	}
	return body, msgs
}

func TestWireRequest(t *testing.T) {
	s, c, _ := setup(t, func(c *llm.Config) { c.MaxTokens = 1234 })
	s.SetResponder(llmtest.EchoResponder)
	req := llm.Request{
		Messages: []llm.Message{
			{Role: llm.RoleSystem, Content: "be brief"},
			{Role: llm.RoleUser, Content: "what is this?", Images: []llm.ImagePart{{URL: "data:image/png;base64,AAAA"}}},
			{Role: llm.RoleAssistant, Reasoning: "need to look", ToolCalls: []llm.ToolCall{
				{ID: "c1", Name: "list_dir", Arguments: ""}, {ID: "c2", Name: "read_file", Arguments: `{"path":"a"}`}}},
			{Role: llm.RoleTool, ToolID: "c1", Content: ""},
			{Role: llm.RoleTool, ToolID: "c2", Content: "file body"},
			{Role: llm.RoleAssistant, Content: ""},
			{Role: llm.RoleUser, Content: "thanks"},
		},
		Tools: []llm.Tool{
			{Name: "list_dir", Description: "list a folder", Parameters: json.RawMessage(`{"type":"object","properties":{"path":{"type":"string"}}}`)},
			{Name: "now", Description: "the time"},
		},
	}
	if _, err := c.Stream(t.Context(), req, nil); err != nil {
		t.Fatal(err)
	}
	raw := s.Requests()[0].Raw
	body, msgs := rawMessages(t, raw)
	if !strings.Contains(string(raw), `"temperature":1e-45`) {
		t.Errorf("raw request lacks the tiny temperature: %s", raw)
	}
	if body["max_tokens"] != 1234.0 || body["model"] != "gpt-4o-mini" || body["stream"] != true {
		t.Errorf("max_tokens %v model %v stream %v", body["max_tokens"], body["model"], body["stream"])
	}
	if so, _ := body["stream_options"].(map[string]any); so["include_usage"] != true {
		t.Errorf("stream_options = %v, want include_usage", body["stream_options"])
	}
	for i, m := range msgs {
		_, hasContent := m["content"]
		_, hasCalls := m["tool_calls"]
		if !hasContent && !hasCalls {
			t.Errorf("message %d goes out without content: %v", i, m)
		}
		if m["content"] == "" {
			t.Errorf("message %d has empty content: %v", i, m)
		}
	}
	parts := msgs[1]["content"].([]any)
	if len(parts) != 2 || parts[0].(map[string]any)["text"] != "what is this?" ||
		parts[1].(map[string]any)["image_url"].(map[string]any)["url"] != "data:image/png;base64,AAAA" {
		t.Errorf("user multi-content = %v", parts)
	}
	calls := msgs[2]["tool_calls"].([]any)
	fn := calls[0].(map[string]any)["function"].(map[string]any)
	if msgs[2]["reasoning_content"] != "need to look" || fn["arguments"] != "{}" || fn["name"] != "list_dir" ||
		calls[0].(map[string]any)["type"] != "function" || calls[0].(map[string]any)["id"] != "c1" {
		t.Errorf("assistant message = %v", msgs[2])
	}
	if msgs[3]["content"] != llm.EmptyContent || msgs[3]["tool_call_id"] != "c1" || msgs[4]["content"] != "file body" {
		t.Errorf("tool messages = %v, %v", msgs[3], msgs[4])
	}
	if msgs[5]["content"] != llm.EmptyContent {
		t.Errorf("empty assistant message = %v", msgs[5])
	}
	tools := body["tools"].([]any)
	f0 := tools[0].(map[string]any)["function"].(map[string]any)
	f1 := tools[1].(map[string]any)["function"].(map[string]any)
	if tools[0].(map[string]any)["type"] != "function" || f0["name"] != "list_dir" || f0["parameters"].(map[string]any)["properties"] == nil ||
		f1["parameters"].(map[string]any)["type"] != "object" {
		t.Errorf("tools = %v", tools)
	}
}

func TestWireOverrides(t *testing.T) {
	s, c, _ := setup(t, func(c *llm.Config) { c.Temperature = 0.3 })
	s.SetResponder(llmtest.EchoResponder)
	temp := float32(0)
	if _, err := c.Stream(t.Context(), llm.Request{Model: "other", MaxTokens: 99, Temperature: &temp,
		Messages: []llm.Message{{Role: llm.RoleUser, Content: "x"}}}, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Stream(t.Context(), userReq("y"), nil); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Stream(t.Context(), llm.Request{Model: "o3-mini", Messages: []llm.Message{{Role: llm.RoleUser, Content: "z"}}}, nil); err != nil {
		t.Fatal(err)
	}
	reqs := s.Requests()
	b0, _ := rawMessages(t, reqs[0].Raw)
	if b0["model"] != "other" || b0["max_tokens"] != 99.0 || !strings.Contains(string(reqs[0].Raw), `"temperature":1e-45`) {
		t.Errorf("overridden request = %s", reqs[0].Raw)
	}
	//lint:ignore SA1019 OpenAI-compatible servers (Ollama, vLLM, llama.cpp) read max_tokens; max_completion_tokens is OpenAI's newer name
	if reqs[1].Body.Temperature != 0.3 || reqs[1].Body.MaxTokens != 4096 {
		//lint:ignore SA1019 OpenAI-compatible servers (Ollama, vLLM, llama.cpp) read max_tokens; max_completion_tokens is OpenAI's newer name
		t.Errorf("configured temperature/max_tokens = %v/%v", reqs[1].Body.Temperature, reqs[1].Body.MaxTokens)
	}
	b2, _ := rawMessages(t, reqs[2].Raw)
	if _, ok := b2["temperature"]; ok || b2["max_completion_tokens"] != 4096.0 || b2["max_tokens"] != nil {
		t.Errorf("reasoning model request = %s, want max_completion_tokens and no temperature", reqs[2].Raw)
	}
}

func TestInvalidRequests(t *testing.T) {
	s, c, _ := setup(t, nil)
	s.SetResponder(llmtest.EchoResponder)
	neg := float32(-1)
	user := llm.Message{Role: llm.RoleUser, Content: "x"}
	tests := []struct {
		name string
		req  llm.Request
		want string
	}{
		{"no messages", llm.Request{}, "messages: must not be empty"},
		{"unknown role", llm.Request{Messages: []llm.Message{{Role: "bot", Content: "x"}}}, "messages[0]: role: unknown role"},
		{"tool without id", llm.Request{Messages: []llm.Message{user, {Role: llm.RoleTool, Content: "x"}}}, "messages[1]: tool_call_id"},
		{"images on assistant", llm.Request{Messages: []llm.Message{{Role: llm.RoleAssistant, Images: []llm.ImagePart{{URL: "x"}}}}}, "messages[0]: images"},
		{"empty image url", llm.Request{Messages: []llm.Message{{Role: llm.RoleUser, Images: []llm.ImagePart{{}}}}}, "images[0].url"},
		{"tool calls on user", llm.Request{Messages: []llm.Message{{Role: llm.RoleUser, Content: "x", ToolCalls: []llm.ToolCall{{ID: "a", Name: "f"}}}}}, "messages[0]: tool_calls"},
		{"call without id", llm.Request{Messages: []llm.Message{{Role: llm.RoleAssistant, ToolCalls: []llm.ToolCall{{Name: "f"}}}}}, "tool_calls[0].id"},
		{"call without name", llm.Request{Messages: []llm.Message{{Role: llm.RoleAssistant, ToolCalls: []llm.ToolCall{{ID: "a"}}}}}, "tool_calls[0].name"},
		{"tool without name", llm.Request{Messages: []llm.Message{user}, Tools: []llm.Tool{{}}}, "tools[0]: name"},
		{"bad schema", llm.Request{Messages: []llm.Message{user}, Tools: []llm.Tool{{Name: "f", Parameters: json.RawMessage(`{`)}}}, "tools[0]: parameters"},
		{"duplicate tool", llm.Request{Messages: []llm.Message{user}, Tools: []llm.Tool{{Name: "f"}, {Name: "f"}}}, "tools[1].name: duplicate"},
		{"negative max tokens", llm.Request{Messages: []llm.Message{user}, MaxTokens: -1}, "max_tokens"},
		{"bad temperature", llm.Request{Messages: []llm.Message{user}, Temperature: &neg}, "temperature"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := c.Stream(t.Context(), tt.req, nil)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err = %v, want it to mention %q", err, tt.want)
			}
		})
	}
	if n := s.RequestCount(); n != 0 {
		t.Errorf("%d invalid requests reached the server", n)
	}
}

func TestNewValidates(t *testing.T) {
	tests := []struct {
		name string
		mut  func(*llm.Config)
		want string
	}{
		{"bad url", func(c *llm.Config) { c.BaseURL = "localhost:11434" }, "llm.base_url"},
		{"no model", func(c *llm.Config) { c.Model = "" }, "llm.model"},
		{"max tokens", func(c *llm.Config) { c.MaxTokens = 0 }, "llm.max_tokens"},
		{"temperature", func(c *llm.Config) { c.Temperature = 3 }, "llm.temperature"},
		{"request timeout", func(c *llm.Config) { c.RequestTimeout = 0 }, "llm.request_timeout"},
		{"idle timeout", func(c *llm.Config) { c.IdleTimeout = -1 }, "llm.idle_timeout"},
		{"retries", func(c *llm.Config) { c.MaxRetries = -1 }, "llm.max_retries"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := llm.DefaultConfig()
			tt.mut(&cfg)
			if _, err := llm.New(cfg, nil); err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("New = %v, want an error naming %s", err, tt.want)
			}
		})
	}
	cfg := llm.DefaultConfig()
	cfg.BaseURL = ""
	c, err := llm.New(cfg, nil)
	if err != nil {
		t.Fatalf("New with empty base_url: %v", err)
	}
	c.CloseIdleConnections()
}

func TestConcurrentStreams(t *testing.T) {
	s, c, _ := setup(t, nil)
	s.SetResponder(func(r *llmtest.Request) llmtest.Reply {
		return llmtest.Reply{Text: "echo: " + r.LastUserText(), ChunkSize: 2}
	})
	const n = 16
	errs := make(chan error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			q := fmt.Sprintf("question %d", i)
			var sb strings.Builder
			resp, err := c.Stream(t.Context(), userReq(q), func(d llm.Delta) { sb.WriteString(d.Text) })
			switch {
			case err != nil:
				errs <- err
			case resp.Text != "echo: "+q || sb.String() != resp.Text:
				errs <- fmt.Errorf("stream %d got %q / %q", i, resp.Text, sb.String())
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

func BenchmarkStream(b *testing.B) {
	s := llmtest.NewServer(b, llmtest.WithResponder(llmtest.EchoResponder), llmtest.WithRecordLimit(0))
	cfg := llm.DefaultConfig()
	cfg.BaseURL = s.URL()
	c, err := llm.New(cfg, nil, llm.WithHTTPClient(s.HTTPClient()))
	if err != nil {
		b.Fatal(err)
	}
	req := userReq("hello")
	b.ReportAllocs()
	for b.Loop() {
		if _, err := c.Stream(b.Context(), req, func(llm.Delta) {}); err != nil {
			b.Fatal(err)
		}
	}
}

// benchRequest is a long chat as the agent sends it: a system prompt,
// 40 history messages (user, assistant with a tool call, tool result,
// assistant answer) and the new user message, offering 11 tools.
func benchRequest() llm.Request {
	msgs := []llm.Message{{Role: llm.RoleSystem, Content: strings.Repeat("You are a helpful assistant. Follow the rules. ", 60)}}
	for i := range 10 {
		id := fmt.Sprintf("call_%d", i)
		msgs = append(msgs,
			llm.Message{Role: llm.RoleUser, Content: fmt.Sprintf("please look at file %d and tell me what is in it", i)},
			llm.Message{Role: llm.RoleAssistant, ToolCalls: []llm.ToolCall{{ID: id, Name: "read_file", Arguments: fmt.Sprintf(`{"path":"notes/%d.md"}`, i)}}},
			llm.Message{Role: llm.RoleTool, ToolID: id, Content: strings.Repeat("line of the file with some text\n", 20)},
			llm.Message{Role: llm.RoleAssistant, Content: fmt.Sprintf("File %d holds twenty lines of notes about the project.", i)},
		)
	}
	msgs = append(msgs, llm.Message{Role: llm.RoleUser, Content: "hello"})
	var tools []llm.Tool
	for i := range 11 {
		tools = append(tools, llm.Tool{
			Name:        fmt.Sprintf("tool_%d", i),
			Description: "Does one thing with a file of the workspace; the path is relative to the workspace root.",
			Parameters: json.RawMessage(`{"type":"object","properties":{"path":{"type":"string","description":"File path relative to the workspace."},` +
				`"limit":{"type":"integer","description":"Maximum number of lines to return."}},"required":["path"]}`),
		})
	}
	return llm.Request{Messages: msgs, Tools: tools}
}

// BenchmarkStreamLongContext builds and sends benchRequest to the scripted
// model (which records nothing) and reads the streamed answer: the
// per-call cost of the client and of the scripted model together.
// "tools" encodes the tools on every call, "toolset" offers them prepared.
//
//	go test ./llm -run '^$' -bench StreamLongContext -benchmem
func BenchmarkStreamLongContext(b *testing.B) {
	s := llmtest.NewServer(b, llmtest.WithResponder(llmtest.EchoResponder), llmtest.WithRecordLimit(0))
	cfg := llm.DefaultConfig()
	cfg.BaseURL = s.URL()
	c, err := llm.New(cfg, nil) // the client's own transport, as the daemon's
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(c.CloseIdleConnections)
	run := func(b *testing.B, req llm.Request) {
		b.ReportAllocs()
		for b.Loop() {
			resp, err := c.Stream(b.Context(), req, func(llm.Delta) {})
			if err != nil {
				b.Fatal(err)
			}
			if resp.Text != "echo: hello" {
				b.Fatalf("answer %q", resp.Text)
			}
		}
	}
	b.Run("tools", func(b *testing.B) { run(b, benchRequest()) })
	b.Run("toolset", func(b *testing.B) {
		req := benchRequest()
		ts, err := llm.NewToolSet(req.Tools)
		if err != nil {
			b.Fatal(err)
		}
		req.Tools, req.ToolSet = nil, ts
		run(b, req)
	})
}

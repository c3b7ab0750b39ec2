package openai

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/nats-io/nats.go/jetstream"
	goopenai "github.com/sashabaranov/go-openai"

	"github.com/switchboard-chat/switchboard/bus"
)

func userMsg(text string) goopenai.ChatCompletionMessage {
	return goopenai.ChatCompletionMessage{Role: goopenai.ChatMessageRoleUser, Content: text}
}

func chatReq(msgs ...goopenai.ChatCompletionMessage) goopenai.ChatCompletionRequest {
	return goopenai.ChatCompletionRequest{Model: DefaultModel, Messages: msgs}
}

// apiErr asserts that err is an OpenAI error with status and code.
func apiErr(t *testing.T, err error, status int, code string) *goopenai.APIError {
	t.Helper()
	var ae *goopenai.APIError
	if !errors.As(err, &ae) {
		t.Fatalf("error = %v (%T), want an OpenAI API error with status %d", err, err, status)
	}
	if ae.HTTPStatusCode != status {
		t.Errorf("status = %d, want %d (%s)", ae.HTTPStatusCode, status, ae.Message)
	}
	if got, _ := ae.Code.(string); got != code {
		t.Errorf("code = %v, want %q (%s)", ae.Code, code, ae.Message)
	}
	if ae.Message == "" || ae.Type == "" {
		t.Errorf("error %+v lacks a message or a type", ae)
	}
	return ae
}

// rawPost posts body with key and returns the status and the decoded
// error body.
func rawPost(t *testing.T, url, key, body string, hdr map[string]string) (int, http.Header, map[string]map[string]any) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, url+"/v1/chat/completions", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	req.Header.Set("Content-Type", "application/json")
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	var out map[string]map[string]any
	_ = json.Unmarshal(data, &out)
	return resp.StatusCode, resp.Header, out
}

func TestChatCompletion(t *testing.T) {
	e := newEnv(t)
	r := e.start(t, e.config())
	resp, err := r.client(keyAnn).CreateChatCompletion(t.Context(), chatReq(userMsg("hello")))
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Choices) != 1 || resp.Choices[0].Message.Content != "echo: hello" || resp.Choices[0].Message.Role != "assistant" ||
		resp.Choices[0].FinishReason != goopenai.FinishReasonStop || resp.Object != "chat.completion" || resp.Model != DefaultModel {
		t.Fatalf("response = %+v", resp)
	}
	in := e.agent.Inbounds()[0]
	if in.UserID != "ann" || in.Channel != Name || !strings.HasPrefix(in.ChatID, "ann:once-") || resp.ID != "chatcmpl-"+in.ID {
		t.Errorf("inbound = %+v, completion id %s", in, resp.ID)
	}
}

func TestStreamingChunksAddUpToTheFinal(t *testing.T) {
	e := newEnv(t)
	r := e.start(t, e.config())
	final := "Hello world, this is the whole answer."
	release := make(chan struct{})
	e.agent.Set(func(in bus.Inbound) []bus.Outbound {
		go func() {
			e.agent.Publish(t, reply(in, bus.KindTyping, ""))
			e.agent.Event(t, in, bus.EventToolCall, map[string]any{"name": "read_file"})
			e.agent.Publish(t, reply(in, bus.KindDelta, "Hello"))
			e.agent.Publish(t, reply(in, bus.KindDelta, "Hello world,"))
			<-release
			e.agent.Event(t, in, bus.EventUsage, map[string]int{"prompt_tokens": 7, "completion_tokens": 5, "total_tokens": 12})
			e.agent.Publish(t, reply(in, bus.KindReply, final))
		}()
		return nil
	})
	req := chatReq(userMsg("hi"))
	req.Stream = true
	req.StreamOptions = &goopenai.StreamOptions{IncludeUsage: true}
	stream, err := r.client(keyAnn).CreateChatCompletionStream(t.Context(), req)
	if err != nil {
		t.Fatal(err)
	}
	defer stream.Close()
	var text strings.Builder
	var chunks []goopenai.ChatCompletionStreamResponse
	for {
		c, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		chunks = append(chunks, c)
		for _, ch := range c.Choices {
			text.WriteString(ch.Delta.Content)
		}
		if text.String() == "Hello world," {
			close(release) // the deltas were streamed before the final existed
		}
	}
	if text.String() != final {
		t.Fatalf("streamed content %q, want the final %q", text.String(), final)
	}
	first, last := chunks[0], chunks[len(chunks)-1]
	if first.Object != "chat.completion.chunk" || first.Choices[0].Delta.Role != "assistant" {
		t.Errorf("first chunk = %+v, want the role", first)
	}
	if len(last.Choices) != 0 || last.Usage == nil {
		t.Errorf("last chunk = %+v, want the usage chunk", last)
	}
	stop := chunks[len(chunks)-2]
	if len(stop.Choices) != 1 || stop.Choices[0].FinishReason != goopenai.FinishReasonStop {
		t.Errorf("chunk before the usage = %+v, want finish_reason stop", stop)
	}
	for _, c := range chunks[:len(chunks)-2] {
		if c.Choices[0].FinishReason != "" {
			t.Errorf("finish_reason on a middle chunk: %+v", c)
		}
	}
}

// TestStreamWireFormat reads the raw stream: progress is in SSE comments,
// never in content; the stream ends with data: [DONE].
func TestStreamWireFormat(t *testing.T) {
	e := newEnv(t)
	r := e.start(t, e.config())
	e.agent.Set(func(in bus.Inbound) []bus.Outbound {
		e.agent.Event(t, in, bus.EventToolCall, map[string]any{"name": "write_file"})
		// The event travels on its own subscription: answer once it is
		// through, seen in the stream as a comment.
		return nil
	})
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, r.url+"/v1/chat/completions",
		strings.NewReader(`{"model":"switchboard","stream":true,"messages":[{"role":"user","content":"go"}]}`))
	req.Header.Set("Authorization", "Bearer "+keyAnn)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/event-stream") {
		t.Fatalf("Content-Type = %q", ct)
	}
	buf := make([]byte, 64<<10)
	var body strings.Builder
	answered := false
	for {
		n, err := resp.Body.Read(buf)
		body.Write(buf[:n])
		if !answered && strings.Contains(body.String(), ": tool write_file\n\n") {
			answered = true
			in := e.agent.Inbounds()[0]
			e.agent.Publish(t, reply(in, bus.KindReply, "done"))
		}
		if err != nil {
			break
		}
	}
	s := body.String()
	if !answered || !strings.HasSuffix(s, "data: [DONE]\n\n") || !strings.Contains(s, `"content":"done"`) || strings.Contains(s, `"content":"tool`) {
		t.Fatalf("stream:\n%s", s)
	}
	if strings.Contains(s, `"usage"`) {
		t.Errorf("a usage chunk without stream_options.include_usage:\n%s", s)
	}
}

func TestErrors(t *testing.T) {
	e := newEnv(t)
	cfg := e.config()
	cfg.MaxBodyBytes = 2048
	r := e.start(t, cfg)
	ann := r.client(keyAnn)
	ctx := t.Context()

	t.Run("WrongKey401", func(t *testing.T) {
		_, err := r.client("sk-wrong-0123456789abcdef").CreateChatCompletion(ctx, chatReq(userMsg("hi")))
		apiErr(t, err, http.StatusUnauthorized, "invalid_api_key")
		_, err = r.client("sk-wrong-0123456789abcdef").ListModels(ctx)
		apiErr(t, err, http.StatusUnauthorized, "invalid_api_key")
	})
	t.Run("MissingKey401", func(t *testing.T) {
		status, _, body := rawPost(t, r.url, "", `{"model":"switchboard","messages":[{"role":"user","content":"hi"}]}`, nil)
		if status != http.StatusUnauthorized || !strings.Contains(fmt.Sprint(body["error"]["message"]), "didn't provide an API key") {
			t.Errorf("without a key: %d %v", status, body)
		}
		for _, k := range []string{"message", "type", "param", "code"} {
			if _, ok := body["error"][k]; !ok {
				t.Errorf("error body lacks %q: %v", k, body)
			}
		}
	})
	t.Run("MissingMessages400", func(t *testing.T) {
		_, err := ann.CreateChatCompletion(ctx, goopenai.ChatCompletionRequest{Model: DefaultModel})
		ae := apiErr(t, err, http.StatusBadRequest, "missing_required_parameter")
		if ae.Param == nil || *ae.Param != "messages" {
			t.Errorf("param = %v", ae.Param)
		}
	})
	t.Run("NoUserMessage400", func(t *testing.T) {
		_, err := ann.CreateChatCompletion(ctx, chatReq(goopenai.ChatCompletionMessage{Role: "system", Content: "be brief"}))
		apiErr(t, err, http.StatusBadRequest, "invalid_value")
	})
	t.Run("UnknownRole400", func(t *testing.T) {
		_, err := ann.CreateChatCompletion(ctx, chatReq(goopenai.ChatCompletionMessage{Role: "wizard", Content: "x"}, userMsg("hi")))
		ae := apiErr(t, err, http.StatusBadRequest, "invalid_value")
		if ae.Param == nil || *ae.Param != "messages[0].role" {
			t.Errorf("param = %v", ae.Param)
		}
	})
	t.Run("NotJSON400", func(t *testing.T) {
		if status, _, body := rawPost(t, r.url, keyAnn, `{"model":`, nil); status != http.StatusBadRequest || body["error"]["type"] != typeInvalidRequest {
			t.Errorf("broken JSON: %d %v", status, body)
		}
	})
	t.Run("BodyTooLarge413", func(t *testing.T) {
		_, err := ann.CreateChatCompletion(ctx, chatReq(userMsg(strings.Repeat("x", 4096))))
		apiErr(t, err, http.StatusRequestEntityTooLarge, "request_too_large")
	})
	t.Run("UnknownModel404", func(t *testing.T) {
		req := chatReq(userMsg("hi"))
		req.Model = "gpt-9"
		_, err := ann.CreateChatCompletion(ctx, req)
		apiErr(t, err, http.StatusNotFound, "model_not_found")
		_, err = ann.GetModel(ctx, "gpt-9")
		apiErr(t, err, http.StatusNotFound, "model_not_found")
	})
	t.Run("AgentError500", func(t *testing.T) {
		e.agent.Set(func(in bus.Inbound) []bus.Outbound {
			return []bus.Outbound{reply(in, bus.KindError, "Sorry, the model request failed (boom).")}
		})
		_, err := ann.CreateChatCompletion(ctx, chatReq(userMsg("hi")))
		ae := apiErr(t, err, http.StatusInternalServerError, "agent_error")
		if !strings.Contains(ae.Message, "boom") {
			t.Errorf("message = %q, want the agent's", ae.Message)
		}
	})
	if len(e.agent.Inbounds()) != 1 {
		t.Errorf("%d inbound envelopes published, want 1 (only the valid request reaches the bus)", len(e.agent.Inbounds()))
	}
}

func TestModels(t *testing.T) {
	e := newEnv(t)
	cfg := e.config()
	cfg.Models = []string{"switchboard", "switchboard-work"}
	r := e.start(t, cfg)
	list, err := r.client(keyAnn).ListModels(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if len(list.Models) != 2 || list.Models[0].ID != "switchboard" || list.Models[1].ID != "switchboard-work" || list.Models[0].Object != "model" {
		t.Fatalf("models = %+v", list)
	}
	m, err := r.client(keyAnn).GetModel(t.Context(), "switchboard-work")
	if err != nil || m.ID != "switchboard-work" {
		t.Fatalf("model = %+v, %v", m, err)
	}
}

func TestNoModelConfigured503(t *testing.T) {
	e := newEnv(t)
	r := e.start(t, e.config(), func(d *Deps) { d.NoModel = true })
	_, err := r.client(keyAnn).CreateChatCompletion(t.Context(), chatReq(userMsg("hi")))
	ae := apiErr(t, err, http.StatusServiceUnavailable, "model_not_configured")
	if !strings.Contains(ae.Message, "llm section") {
		t.Errorf("message = %q, want how to configure", ae.Message)
	}
}

func TestRateLimitPerKey429(t *testing.T) {
	e := newEnv(t)
	cfg := e.config()
	cfg.RateLimit = 2
	r := e.start(t, cfg)
	for range 2 {
		if _, err := r.client(keyAnn).CreateChatCompletion(t.Context(), chatReq(userMsg("hi"))); err != nil {
			t.Fatal(err)
		}
	}
	_, err := r.client(keyAnn).CreateChatCompletion(t.Context(), chatReq(userMsg("hi")))
	apiErr(t, err, http.StatusTooManyRequests, "rate_limit_exceeded")
	status, hdr, _ := rawPost(t, r.url, keyAnn, `{"model":"switchboard","messages":[{"role":"user","content":"hi"}]}`, nil)
	if status != http.StatusTooManyRequests || hdr.Get("Retry-After") == "" {
		t.Errorf("over the limit: %d, Retry-After %q", status, hdr.Get("Retry-After"))
	}
	// Another key has its own budget.
	if _, err := r.client(keyBob).CreateChatCompletion(t.Context(), chatReq(userMsg("hi"))); err != nil {
		t.Errorf("bob over ann's limit: %v", err)
	}
}

// TestQueueFull429: when the daemon's inbound queue for the session is
// full (the agent is not taking messages), the request is refused with
// 429 and nothing waits for an answer that cannot come.
func TestQueueFull429(t *testing.T) {
	e := newEnv(t)
	r := e.start(t, e.config())
	e.agent.Set(func(bus.Inbound) []bus.Outbound { return nil })
	chat := chatID("ann", "busy")
	var wg sync.WaitGroup
	for i := range 1000 {
		in := bus.Inbound{V: 1, ID: fmt.Sprintf("f%d", i), Channel: Name, ChatID: chat, UserID: "ann", Text: "queued"}
		data, _ := json.Marshal(in)
		wg.Add(1)
		f, err := e.js.PublishAsync(e.subj.In(Name, chat), data, jetstream.WithMsgID(in.DedupKey()))
		if err != nil {
			t.Fatal(err)
		}
		go func() {
			defer wg.Done()
			select {
			case <-f.Ok():
			case err := <-f.Err():
				t.Errorf("fill: %v", err)
			}
		}()
	}
	wg.Wait()
	req := chatReq(userMsg("one more"))
	req.User = "busy"
	_, err := r.client(keyAnn).CreateChatCompletion(t.Context(), req)
	apiErr(t, err, http.StatusTooManyRequests, "queue_full")
	// Another session of the same user is not affected.
	e.agent.Set(func(in bus.Inbound) []bus.Outbound { return []bus.Outbound{reply(in, bus.KindReply, "ok")} })
	req.User = "other"
	if _, err := r.client(keyAnn).CreateChatCompletion(t.Context(), req); err != nil {
		t.Errorf("another session: %v", err)
	}
}

func TestCORS(t *testing.T) {
	e := newEnv(t)
	preflight := func(url, origin string) *http.Response {
		req, _ := http.NewRequestWithContext(t.Context(), http.MethodOptions, url+"/v1/chat/completions", nil)
		req.Header.Set("Origin", origin)
		req.Header.Set("Access-Control-Request-Method", "POST")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp
	}
	off := e.start(t, e.config())
	if resp := preflight(off.url, "https://evil.example"); resp.Header.Get("Access-Control-Allow-Origin") != "" {
		t.Errorf("CORS header without cors_origins: %v", resp.Header)
	}
	_ = off.stop(t)
	cfg := e.config()
	cfg.CORSOrigins = []string{"https://chat.example.com"}
	on := e.start(t, cfg)
	if resp := preflight(on.url, "https://chat.example.com"); resp.StatusCode != http.StatusNoContent ||
		resp.Header.Get("Access-Control-Allow-Origin") != "https://chat.example.com" || !strings.Contains(resp.Header.Get("Access-Control-Allow-Headers"), "Authorization") {
		t.Errorf("preflight from an allowed origin: %d %v", resp.StatusCode, resp.Header)
	}
	if resp := preflight(on.url, "https://evil.example"); resp.Header.Get("Access-Control-Allow-Origin") != "" {
		t.Errorf("CORS header for another origin: %v", resp.Header)
	}
}

func TestKeysNeverLogged(t *testing.T) {
	e := newEnv(t)
	r := e.start(t, e.config())
	_, _ = r.client("sk-wrong-0123456789abcdef").CreateChatCompletion(t.Context(), chatReq(userMsg("hi")))
	if _, err := r.client(keyAnn).CreateChatCompletion(t.Context(), chatReq(userMsg("hi"))); err != nil {
		t.Fatal(err)
	}
	_ = r.stop(t)
	logs := e.logs.String()
	for _, k := range []string{keyAnn, keyBob, "sk-wrong-0123456789abcdef", "0123456789abcdef"} {
		if strings.Contains(logs, k) {
			t.Errorf("the log shows a key %q:\n%s", k, logs)
		}
	}
	if !strings.Contains(logs, "unknown API key refused") {
		t.Errorf("the refused key is not logged at all:\n%s", logs)
	}
	if s := fmt.Sprintf("%v %+v %#v", Key{Key: keyAnn, User: "ann"}, Key{Key: keyAnn}, Key{Key: keyAnn}); strings.Contains(s, keyAnn) {
		t.Errorf("Key formats its secret: %s", s)
	}
}

// TestAnsweredByAnotherMessage: the agent answers several messages of a
// session with one turn; the request whose message was folded in gets the
// answer of the message that carries it.
func TestAnsweredByAnotherMessage(t *testing.T) {
	e := newEnv(t)
	r := e.start(t, e.config())
	var mu sync.Mutex
	var first *bus.Inbound
	e.agent.Set(func(in bus.Inbound) []bus.Outbound {
		mu.Lock()
		defer mu.Unlock()
		if first == nil {
			first = &in
			return nil
		}
		folded := reply(*first, bus.KindNotice, "")
		folded.Meta = map[string]string{metaAnsweredBy: in.ID}
		return []bus.Outbound{folded, reply(in, bus.KindReply, "both answered")}
	})
	req := chatReq(userMsg("one"))
	req.User = "s"
	got := make(chan string, 1)
	go func() {
		resp, err := r.client(keyAnn).CreateChatCompletion(t.Context(), req)
		if err != nil {
			got <- err.Error()
			return
		}
		got <- resp.Choices[0].Message.Content
	}()
	e.agent.WaitInbound(t, "one", func(in bus.Inbound) bool { return in.Text == "one" })
	req.Messages = []goopenai.ChatCompletionMessage{userMsg("two")}
	resp, err := r.client(keyAnn).CreateChatCompletion(t.Context(), req)
	if err != nil || resp.Choices[0].Message.Content != "both answered" {
		t.Fatalf("second request: %+v, %v", resp, err)
	}
	if s := <-got; s != "both answered" {
		t.Fatalf("first request got %q, want the answer that covers it", s)
	}
}

func TestConfigValidate(t *testing.T) {
	cfg := DefaultConfig()
	if err := cfg.Validate(); err != nil || cfg.Enabled() {
		t.Fatalf("defaults: %v, enabled %v; want valid and off", err, cfg.Enabled())
	}
	cfg.Listen = "nowhere"
	cfg.Keys = []Key{{Key: "short", User: "a:b"}, {Key: "", User: "ann"}, {Key: keyAnn, User: "x"}, {Key: keyAnn, User: "y"}}
	cfg.Models = nil
	cfg.MaxBodyBytes = 1
	cfg.RequestTimeout = 0
	cfg.RateLimit = 0
	cfg.CORSOrigins = []string{"https://x.example/path"}
	err := cfg.Validate()
	for _, want := range []string{
		`channels.openai.listen: must be host:port`,
		`channels.openai.keys[0].key: must be 16 to 512 bytes, got 5`,
		`channels.openai.keys[0].user: must be 1 to 64`,
		`channels.openai.keys[1].key: required (is its environment variable set?)`,
		`channels.openai.keys[3].key: the same key as channels.openai.keys[2]`,
		`channels.openai.models: must list at least one model id`,
		`channels.openai.max_body_bytes: must be between`,
		`channels.openai.request_timeout: must be between 1s`,
		`channels.openai.rate_limit: must be between 1`,
		`channels.openai.cors_origins[0]: must be an origin`,
	} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Validate lacks %q:\n%v", want, err)
		}
	}
	if err != nil && strings.Contains(err.Error(), keyAnn) {
		t.Errorf("Validate shows a key: %v", err)
	}
	if a, _ := bindAddr(":8088"); a != "127.0.0.1:8088" {
		t.Errorf("a listen without a host binds %s, want loopback", a)
	}
}

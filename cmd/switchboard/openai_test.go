package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	goopenai "github.com/sashabaranov/go-openai"

	openaich "github.com/switchboard-chat/switchboard/channels/openai"
	"github.com/switchboard-chat/switchboard/internal/polltest"
	"github.com/switchboard-chat/switchboard/llm/llmtest"
)

const openAIKey = "sk-e2e-0123456789abcdef"

// openAIDaemon starts a daemon with the OpenAI API on a free loopback
// port and returns the API's base URL.
func openAIDaemon(t *testing.T, model *llmtest.Server, edit func(*openaich.Config)) (*daemon, string) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	cfg := testConfig(t, model.URL())
	oc := openaich.DefaultConfig()
	oc.Listen = addr
	oc.Keys = []openaich.Key{{Key: openAIKey, User: "ann"}}
	if edit != nil {
		edit(&oc)
	}
	cfg.Channels.OpenAI = &oc
	d := startDaemon(t, cfg)
	base := "http://" + addr + "/v1"
	// The channel starts beside the daemon: wait until it answers.
	var lastErr error
	polltest.Until(t, wait, 10*time.Millisecond, func() bool {
		resp, err := http.Get(base + "/models")
		if lastErr = err; err == nil {
			resp.Body.Close()
		}
		return err == nil
	}, func() string { return fmt.Sprintf("the OpenAI API never listened on %s: %v", addr, lastErr) })
	return d, base
}

func goClient(base string, hdr map[string]string) *goopenai.Client {
	cfg := goopenai.DefaultConfig(openAIKey)
	cfg.BaseURL = base
	if hdr != nil {
		cfg.HTTPClient = &http.Client{Transport: hdrTransport(hdr)}
	}
	return goopenai.NewClientWithConfig(cfg)
}

type hdrTransport map[string]string

func (h hdrTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	for k, v := range h {
		r.Header.Set(k, v)
	}
	return http.DefaultTransport.RoundTrip(r)
}

func ask(t *testing.T, c *goopenai.Client, text string) string {
	t.Helper()
	resp, err := c.CreateChatCompletion(t.Context(), goopenai.ChatCompletionRequest{Model: "switchboard",
		Messages: []goopenai.ChatCompletionMessage{{Role: "user", Content: text}}})
	if err != nil {
		t.Fatalf("ask %q: %v", text, err)
	}
	return resp.Choices[0].Message.Content
}

// TestOpenAISessionsIsolated: with the real agent, a session's stored
// history is its context, and another session (or a stateless request)
// sees none of it.
func TestOpenAISessionsIsolated(t *testing.T) {
	model := llmtest.NewServer(t, llmtest.WithResponder(llmtest.EchoResponder))
	_, base := openAIDaemon(t, model, nil)
	a := goClient(base, map[string]string{"X-Switchboard-Session": "a"})
	b := goClient(base, map[string]string{"X-Switchboard-Session": "b"})
	ask(t, a, "secret of session a: plum")
	ask(t, b, "hello from b")
	ask(t, a, "second in a")
	ask(t, goClient(base, nil), "stateless")
	reqs := model.Requests()
	has := func(i int, s string) bool {
		for _, m := range reqs[i].Body.Messages {
			if strings.Contains(llmtest.MessageText(m), s) {
				return true
			}
		}
		return false
	}
	if len(reqs) != 4 {
		t.Fatalf("%d model requests, want 4", len(reqs))
	}
	if has(1, "plum") || has(3, "plum") {
		t.Errorf("session a's history reached another session's model request")
	}
	if !has(2, "plum") || has(2, "hello from b") {
		t.Errorf("session a's second turn: its own history missing, or b's present")
	}
}

// TestOpenAIIdempotentRetryOneTurn: a retry with the same Idempotency-Key
// gets the same answer from one model turn.
func TestOpenAIIdempotentRetryOneTurn(t *testing.T) {
	model := llmtest.NewServer(t, llmtest.WithResponder(llmtest.EchoResponder))
	_, base := openAIDaemon(t, model, nil)
	c := goClient(base, map[string]string{"Idempotency-Key": "once"})
	first, again := ask(t, c, "only once"), ask(t, c, "only once")
	if first != again || len(model.Requests()) != 1 {
		t.Fatalf("answers %q, %q from %d model requests; want one turn", first, again, len(model.Requests()))
	}
}

// TestOpenAIToolTurn: a turn whose model calls a tool runs it in the
// daemon and answers with the final text.
func TestOpenAIToolTurn(t *testing.T) {
	model := llmtest.NewServer(t)
	model.Enqueue(llmtest.ToolCallReply("write_file", `{"path":"api.txt","content":"via the API"}`), llmtest.TextReply("Saved."))
	d, base := openAIDaemon(t, model, nil)
	if got := ask(t, goClient(base, nil), "save it"); got != "Saved." {
		t.Fatalf("answer %q", got)
	}
	if data, err := os.ReadFile(filepath.Join(d.cfg.Agent.Workspace, "api.txt")); err != nil || string(data) != "via the API" {
		t.Fatalf("the tool did not run: %q, %v", data, err)
	}
}

// TestOpenAIDisconnectCancelsTurn: a streaming client that goes away
// mid-turn stops it: the model request is cancelled, and the session
// answers the next request.
func TestOpenAIDisconnectCancelsTurn(t *testing.T) {
	model := llmtest.NewServer(t)
	block := make(chan struct{})
	t.Cleanup(func() { close(block) })
	model.Enqueue(llmtest.Reply{Text: "never", Block: block}, llmtest.TextReply("next answer"))
	_, base := openAIDaemon(t, model, nil)
	c := goClient(base, map[string]string{"X-Switchboard-Session": "s"})
	ctx, cancel := context.WithCancel(t.Context())
	stream, err := c.CreateChatCompletionStream(ctx, goopenai.ChatCompletionRequest{Model: "switchboard", Stream: true,
		Messages: []goopenai.ChatCompletionMessage{{Role: "user", Content: "a long task"}}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := stream.Recv(); err != nil {
		t.Fatal(err)
	}
	model.WaitRequests(t, 1, wait)
	cancel()
	stream.Close()
	// The stopped turn frees the session: the next request is answered
	// (it would wait behind the blocked one otherwise).
	if got := ask(t, c, "next"); got != "next answer" {
		t.Fatalf("next answer %q", got)
	}
	if reqs := model.Requests(); len(reqs) != 2 {
		t.Fatalf("%d model requests, want 2", len(reqs))
	}
}

// TestOpenAINodeSDK runs the official openai npm package against the API
// (channels/openai/testdata/node). It needs node and `npm ci` in that
// folder; CI sets SWITCHBOARD_REQUIRE_NODE_SDK=1 so that a missing one
// fails instead of skipping.
func TestOpenAINodeSDK(t *testing.T) {
	dir := filepath.Join("..", "..", "channels", "openai", "testdata", "node")
	missing := ""
	if _, err := exec.LookPath("node"); err != nil {
		missing = "node is not installed"
	} else if _, err := os.Stat(filepath.Join(dir, "node_modules", "openai")); err != nil {
		missing = "the openai npm package is not installed (run: cd channels/openai/testdata/node && npm ci)"
	}
	if missing != "" {
		if os.Getenv("SWITCHBOARD_REQUIRE_NODE_SDK") != "" {
			t.Fatalf("SWITCHBOARD_REQUIRE_NODE_SDK is set but %s", missing)
		}
		t.Skip(missing)
	}
	model := llmtest.NewServer(t, llmtest.WithResponder(func(req *llmtest.Request) llmtest.Reply {
		last, _ := req.LastMessage()
		text := req.LastUserText()
		switch {
		case strings.HasPrefix(text, "tool:") && last.Role == "user":
			return llmtest.ToolCallReply("write_file", `{"path":"node-note.txt","content":"from node"}`)
		case strings.HasPrefix(text, "tool:"):
			return llmtest.TextReply("Saved the note.")
		case strings.HasPrefix(text, "stream:"):
			return llmtest.Reply{Text: "one two three four five six seven eight nine ten", ChunkSize: 4, ChunkDelay: 30 * time.Millisecond}
		}
		return llmtest.TextReply("echo: " + text)
	}))
	d, base := openAIDaemon(t, model, func(c *openaich.Config) { c.MaxBodyBytes = 64 << 10 })
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "node", "--test", "--test-concurrency=1", "test/")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "SWITCHBOARD_OPENAI_URL="+base, "SWITCHBOARD_OPENAI_KEY="+openAIKey)
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		t.Fatal(err)
	}
	if err != nil {
		t.Fatalf("node --test failed:\n%s", out)
	}
	if !strings.Contains(string(out), "# pass 6") {
		t.Fatalf("node --test did not pass 6 tests:\n%s", out)
	}
	turns := 0
	for _, r := range model.Requests() {
		if r.LastUserText() == "retry me" {
			turns++
		}
	}
	if turns != 1 {
		t.Errorf("the retried request reached the model %d times, want once", turns)
	}
	if data, err := os.ReadFile(filepath.Join(d.cfg.Agent.Workspace, "node-note.txt")); err != nil || string(data) != "from node" {
		t.Errorf("the tool of the Node client's turn did not run: %q, %v", data, err)
	}
}

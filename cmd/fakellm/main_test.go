package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"net"
	"net/http"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/switchboard-chat/switchboard/llm"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// lineWriter passes each written line to a channel.
type lineWriter struct {
	mu    sync.Mutex
	buf   bytes.Buffer
	lines chan string
}

func (w *lineWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf.Write(p)
	for {
		line, err := w.buf.ReadString('\n')
		if err != nil {
			w.buf.WriteString(line) // keep the partial line
			return len(p), nil
		}
		w.lines <- strings.TrimSuffix(line, "\n")
	}
}

var banner = regexp.MustCompile(`^fakellm: OpenAI-compatible scripted model on (http://127\.0\.0\.1:\d+/v1) \(mode (\w+)\)$`)

// start runs the server with args and returns its base URL; the server is
// stopped, and run's result checked, at cleanup.
func start(t *testing.T, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	w := &lineWriter{lines: make(chan string, 16)}
	done := make(chan error, 1)
	go func() { done <- run(ctx, append([]string{"--listen", "127.0.0.1:0"}, args...), w) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("run returned %v after cancel, want nil", err)
		}
	})
	select {
	case line := <-w.lines:
		m := banner.FindStringSubmatch(line)
		if m == nil {
			t.Fatalf("banner = %q", line)
		}
		return m[1]
	case err := <-done:
		t.Fatalf("run ended early: %v", err)
	case <-time.After(10 * time.Second):
		t.Fatal("no banner within 10s")
	}
	return ""
}

func client(t *testing.T, url string) *llm.Client {
	t.Helper()
	cfg := llm.DefaultConfig()
	cfg.BaseURL = url
	cfg.MaxRetries = 0
	hc := &http.Client{Transport: http.DefaultTransport.(*http.Transport).Clone()}
	t.Cleanup(hc.CloseIdleConnections)
	c, err := llm.New(cfg, nil, llm.WithHTTPClient(hc))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestEchoStreams(t *testing.T) {
	url := start(t, "--mode", "echo", "--chunk", "3", "--latency", "1ms")
	var pieces []string
	resp, err := client(t, url).Stream(t.Context(), llm.Request{
		Messages: []llm.Message{{Role: llm.RoleUser, Content: "hello there"}},
	}, func(d llm.Delta) { pieces = append(pieces, d.Text) })
	if err != nil {
		t.Fatal(err)
	}
	if resp.Text != "echo: hello there" || resp.FinishReason != llm.FinishStop || len(pieces) < 5 || resp.Usage.TotalTokens == 0 {
		t.Fatalf("response %+v in %d pieces", resp, len(pieces))
	}
}

func TestDemoCallsListDir(t *testing.T) {
	url := start(t) // demo is the default mode
	resp, err := client(t, url).Stream(t.Context(), llm.Request{
		Messages: []llm.Message{{Role: llm.RoleUser, Content: "what is in my workspace?"}},
		Tools:    []llm.Tool{{Name: "list_dir", Description: "list", Parameters: json.RawMessage(`{"type":"object"}`)}},
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.ToolCalls) != 1 || resp.ToolCalls[0].Name != "list_dir" || resp.ToolCalls[0].Arguments != `{"path":"."}` {
		t.Fatalf("response %+v, want a list_dir call", resp)
	}
}

func TestDemoAnswersHelloWithText(t *testing.T) {
	url := start(t)
	resp, err := client(t, url).Stream(t.Context(), llm.Request{
		Messages: []llm.Message{{Role: llm.RoleUser, Content: "hello"}},
		Tools:    []llm.Tool{{Name: "list_dir", Description: "list", Parameters: json.RawMessage(`{"type":"object"}`)}},
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.ToolCalls) != 0 || resp.Text == "" {
		t.Fatalf("response %+v, want text and no tool call", resp)
	}
}

func TestBadFlags(t *testing.T) {
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"--mode", "chaos"}, "--mode"},
		{[]string{"--latency", "-1s"}, "--latency"},
		{[]string{"--chunk", "-2"}, "--chunk"},
		{[]string{"extra"}, "unexpected arguments"},
		{[]string{"--listen", "999.1.1.1:99999"}, "--listen"},
		{[]string{"--nope"}, "flag provided but not defined"},
	}
	for _, tt := range tests {
		var out bytes.Buffer
		err := run(t.Context(), tt.args, &out)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("run(%q) = %v, want an error about %s", tt.args, err, tt.want)
		}
	}
	if err := run(t.Context(), []string{"-h"}, &bytes.Buffer{}); !errors.Is(err, flag.ErrHelp) {
		t.Errorf("run(-h) = %v, want flag.ErrHelp", err)
	}
}

func TestListenConflict(t *testing.T) {
	var lc net.ListenConfig
	ln, err := lc.Listen(t.Context(), "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	err = run(t.Context(), []string{"--listen", ln.Addr().String()}, &bytes.Buffer{})
	if err == nil || !strings.Contains(err.Error(), "--listen") {
		t.Fatalf("run on a taken port = %v, want a --listen error", err)
	}
}

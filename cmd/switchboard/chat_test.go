package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/switchboard-chat/switchboard/bus"
	"github.com/switchboard-chat/switchboard/bus/natsbus"
	"github.com/switchboard-chat/switchboard/llm/llmtest"
)

// TestChatVerb runs `switchboard chat` against an in-process daemon: input
// lines become inbound envelopes, streamed deltas print as they come (each
// part once), tool calls are shown, and commands work.
func TestChatVerb(t *testing.T) {
	model := llmtest.NewServer(t)
	model.Enqueue(
		llmtest.Reply{ToolCalls: []llmtest.ToolCall{{ID: "c1", Name: "list_dir", Arguments: `{}`}}},
		llmtest.Reply{Text: "Your workspace holds four files.", ChunkSize: 5, ChunkDelay: 25 * time.Millisecond},
	)
	cfg := testConfig(t, model.URL())
	cfg.Bus.Listen = freePort(t)
	startDaemon(t, cfg)

	file := filepath.Join(t.TempDir(), "chat.yaml")
	if err := os.WriteFile(file, []byte(fmt.Sprintf("data_dir: %q\nbus:\n  listen: %q\nadmin:\n  listen: \"\"\n", cfg.DataDir, cfg.Bus.Listen)), 0o600); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	stdin := strings.NewReader("what is in my workspace?\n/status\n")
	if code := run(t.Context(), []string{"chat", "--config", file, "--chat", "t1"}, stdin, &out, &out); code != 0 {
		t.Fatalf("exit %d:\n%s", code, out.String())
	}
	got := out.String()
	for _, want := range []string{
		`Connected to nats://` + cfg.Bus.Listen + ` as chat "t1"`,
		`[tool] list_dir {}`,
		"Your workspace holds four files.\n",
		"[notice] Session: console/t1",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("output lacks %q:\n%s", want, got)
		}
	}
	if strings.Count(got, "four files") != 1 {
		t.Errorf("streamed text printed more than once:\n%s", got)
	}
	if n := len(model.Requests()); n != 2 {
		t.Errorf("%d model requests", n)
	}
}

func TestChatVerbErrors(t *testing.T) {
	file := filepath.Join(t.TempDir(), "chat.yaml")
	if err := os.WriteFile(file, []byte("bus:\n  listen: \"\"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if code := run(t.Context(), []string{"chat", "--config", file}, strings.NewReader(""), &out, &out); code != 1 || !strings.Contains(out.String(), "in-process only") {
		t.Fatalf("in-process bus: exit %d: %s", code, out.String())
	}
	out.Reset()
	dataDir := t.TempDir()
	if err := os.WriteFile(file, []byte(fmt.Sprintf("data_dir: %q\nbus:\n  listen: %q\n", dataDir, freePort(t))), 0o600); err != nil {
		t.Fatal(err)
	}
	if code := run(t.Context(), []string{"chat", "--config", file}, strings.NewReader("hi\n"), &out, &out); code != 1 ||
		!strings.Contains(out.String(), "bus-operator.token does not exist: the daemon creates it when it first starts") {
		t.Fatalf("daemon never started: exit %d: %s", code, out.String())
	}
	out.Reset()
	if _, _, err := natsbus.OperatorToken(dataDir); err != nil {
		t.Fatal(err)
	}
	if code := run(t.Context(), []string{"chat", "--config", file}, strings.NewReader("hi\n"), &out, &out); code != 1 || !strings.Contains(out.String(), "is `switchboard serve` running?") {
		t.Fatalf("no daemon: exit %d: %s", code, out.String())
	}
}

// TestDemoVerb runs the self-contained demo with a scripted model and
// checks the tool round trip is shown.
func TestDemoVerb(t *testing.T) {
	var out bytes.Buffer
	if code := run(t.Context(), []string{"demo"}, strings.NewReader(""), &out, &out); code != 0 {
		t.Fatalf("exit %d:\n%s", code, out.String())
	}
	for _, want := range []string{"Switchboard DEMO", "[tool] list_dir", "I looked at your workspace", "AGENT.md"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("demo output lacks %q:\n%s", want, out.String())
		}
	}
}

// TestChatShowsARepublishedFinalOnce: the daemon publishes a final again
// with the same id (a crash after its publish, before its ack); JetStream
// drops the copy from the stream, but `switchboard chat` subscribes with
// core NATS and receives both. It prints the answer once.
func TestChatShowsARepublishedFinalOnce(t *testing.T) {
	model := llmtest.NewServer(t)
	model.Enqueue(llmtest.Reply{Text: "The answer is forty-two."})
	cfg := testConfig(t, model.URL())
	cfg.Bus.Listen = freePort(t)
	d := startDaemon(t, cfg)
	outs := d.collectOut(t, "t1")

	file := filepath.Join(t.TempDir(), "chat.yaml")
	if err := os.WriteFile(file, []byte(fmt.Sprintf("data_dir: %q\nbus:\n  listen: %q\nadmin:\n  listen: \"\"\n", cfg.DataDir, cfg.Bus.Listen)), 0o600); err != nil {
		t.Fatal(err)
	}
	stdin, input := io.Pipe()
	out := newWatchedBuffer()
	code := make(chan int, 1)
	go func() { code <- run(t.Context(), []string{"chat", "--config", file, "--chat", "t1"}, stdin, out, out) }()
	out.waitLine(t, `as chat "t1"`)
	if _, err := io.WriteString(input, "what is the answer?\n"); err != nil {
		t.Fatal(err)
	}
	final := outs.WaitOutbound(t, wait, func(o bus.Outbound) bool { return o.Final && o.Kind == bus.KindReply })
	out.waitLine(t, "The answer is forty-two.")

	// The daemon's re-publication: same envelope, same Nats-Msg-Id.
	data, err := json.Marshal(final)
	if err != nil {
		t.Fatal(err)
	}
	js, err := jetstream.New(d.nc)
	if err != nil {
		t.Fatal(err)
	}
	ack, err := js.Publish(t.Context(), d.subjects().Out("console", "t1"), data, jetstream.WithMsgID(final.ID))
	if err != nil || !ack.Duplicate {
		t.Fatalf("re-publish: %+v, %v; want a duplicate for the stream", ack, err)
	}
	// A later answer, so the copy was certainly received before the exit.
	if _, err := io.WriteString(input, "/status\n"); err != nil {
		t.Fatal(err)
	}
	_ = input.Close()
	select {
	case c := <-code:
		if c != 0 {
			t.Fatalf("exit %d:\n%s", c, out.String())
		}
	case <-time.After(wait):
		t.Fatalf("chat did not exit:\n%s", out.String())
	}
	got := out.String()
	if !strings.Contains(got, "[notice] Session: console/t1") {
		t.Fatalf("no /status answer:\n%s", got)
	}
	if n := strings.Count(got, "The answer is forty-two."); n != 1 {
		t.Fatalf("the answer is printed %d times, want once:\n%s", n, got)
	}
}

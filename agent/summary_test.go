package agent

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/switchboard-chat/switchboard/bus"
	"github.com/switchboard-chat/switchboard/llm"
	"github.com/switchboard-chat/switchboard/llm/llmtest"
	"github.com/switchboard-chat/switchboard/memory"
)

// funcSummarizer adapts a function to Summarizer.
type funcSummarizer func(ctx context.Context, session, previous string, dropped []memory.Message) (string, error)

func (f funcSummarizer) Summarize(ctx context.Context, session, previous string, dropped []memory.Message) (string, error) {
	return f(ctx, session, previous, dropped)
}

// A summariser that hangs never delays a reply, and the context stays
// within its bound (the digest) meanwhile.
func TestSummaryNeverBlocksReplies(t *testing.T) {
	release := make(chan struct{})
	var calls sync.WaitGroup
	calls.Add(1)
	var once sync.Once
	sm := funcSummarizer(func(ctx context.Context, _, _ string, _ []memory.Message) (string, error) {
		once.Do(calls.Done)
		select {
		case <-release:
			return "- model summary of the early turns", nil
		case <-ctx.Done():
			return "", ctx.Err()
		}
	})
	h := newHarness(t, func(hc *harnessConfig) { hc.cfg.MaxContextTurns = 4; hc.summarizer = sm })
	for i := range 5 {
		h.model.Enqueue(llmtest.TextReply(fmt.Sprintf("answer %d", i)))
		h.ask(fmt.Sprintf("m%d", i), fmt.Sprintf("question %d", i))
	}
	calls.Wait() // the summariser is running (and hanging), replies went on
	sys := h.request(4).Body.Messages[0].Content
	if !strings.Contains(sys, "question 0") {
		t.Fatalf("digest not in the prompt while the summariser hangs:\n%s", sys)
	}
	close(release)
	// The model summary replaces the digest in the store.
	select {
	case sum := <-h.summaries:
		if !strings.HasPrefix(sum, "- model summary of the early turns") {
			t.Fatalf("stored summary = %q", sum)
		}
	case <-time.After(wait):
		t.Fatal("the model summary was never stored")
	}
	h.model.Enqueue(llmtest.TextReply("answer 5"))
	h.ask("m5", "question 5")
	if sys := h.request(5).Body.Messages[0].Content; !strings.Contains(sys, "model summary of the early turns") {
		t.Fatalf("model summary not placed in the prompt:\n%s", sys)
	}
}

func TestSummaryFailureKeepsDigest(t *testing.T) {
	sm := funcSummarizer(func(context.Context, string, string, []memory.Message) (string, error) {
		return "", errors.New("model down")
	})
	h := newHarness(t, func(hc *harnessConfig) { hc.cfg.MaxContextTurns = 4; hc.summarizer = sm })
	for i := range 6 {
		h.model.Enqueue(llmtest.TextReply(fmt.Sprintf("answer %d", i)))
		h.ask(fmt.Sprintf("m%d", i), fmt.Sprintf("question %d", i))
	}
	if sys := h.request(5).Body.Messages[0].Content; !strings.Contains(sys, "question 0") {
		t.Fatalf("digest lost after a summariser failure:\n%s", sys)
	}
}

func TestCompactCommand(t *testing.T) {
	sm := funcSummarizer(func(_ context.Context, _, prev string, dropped []memory.Message) (string, error) {
		return fmt.Sprintf("- %d messages summarised", len(dropped)), nil
	})
	h := newHarness(t, func(hc *harnessConfig) { hc.summarizer = sm })
	for i := range 4 {
		h.model.Enqueue(llmtest.TextReply(fmt.Sprintf("answer %d", i)))
		h.ask(fmt.Sprintf("m%d", i), fmt.Sprintf("question %d", i))
	}
	got := h.ask("c", "/compact")
	if !strings.Contains(got.Text, "Compacted 2 earlier turn(s)") {
		t.Fatalf("/compact = %+v", got)
	}
	h.model.Enqueue(llmtest.TextReply("answer 4"))
	h.ask("m4", "question 4")
	msgs := h.request(4).Body.Messages
	if len(msgs) != 6 || !strings.Contains(msgs[0].Content, "- 4 messages summarised") || llmtest.MessageText(msgs[1]) != "question 2" {
		t.Fatalf("after /compact: %d messages, first user %q", len(msgs), llmtest.MessageText(msgs[1]))
	}
	snap, _ := h.store.Load(t.Context(), "console/c1", 100)
	if snap.Summary != "- 4 messages summarised" {
		t.Fatalf("stored summary = %q", snap.Summary)
	}
}

func TestModelSummarizer(t *testing.T) {
	srv := llmtest.NewServer(t)
	srv.Enqueue(llmtest.TextReply("<think>hm</think>- user likes tea\n- decided: meet Monday"))
	cfg := llm.DefaultConfig()
	cfg.BaseURL, cfg.APIKey, cfg.MaxRetries = srv.URL(), "k", 0
	client, err := llm.New(cfg, nil, llm.WithHTTPClient(srv.HTTPClient()))
	if err != nil {
		t.Fatal(err)
	}
	defer client.CloseIdleConnections()
	sum, err := ModelSummarizer{Model: client}.Summarize(t.Context(), "s", "- earlier", []memory.Message{
		userMsg("I like tea"), {Role: memory.RoleAssistant, Blocks: []memory.Block{{Type: memory.BlockText, Text: "Noted."}}},
	})
	if err != nil || sum != "- user likes tea\n- decided: meet Monday" {
		t.Fatalf("summary %q, %v", sum, err)
	}
	req := srv.Requests()[0]
	//lint:ignore SA1019 OpenAI-compatible servers (Ollama, vLLM, llama.cpp) read max_tokens; max_completion_tokens is OpenAI's newer name
	if req.Body.MaxTokens != summaryMaxTokens || req.Body.Temperature > 0.001 || len(req.Body.Tools) != 0 {
		//lint:ignore SA1019 OpenAI-compatible servers (Ollama, vLLM, llama.cpp) read max_tokens; max_completion_tokens is OpenAI's newer name
		t.Fatalf("summary request: max_tokens %d temperature %v tools %d", req.Body.MaxTokens, req.Body.Temperature, len(req.Body.Tools))
	}
	if u := llmtest.MessageText(req.Body.Messages[1]); !strings.Contains(u, "- earlier") || !strings.Contains(u, "I like tea") {
		t.Fatalf("summary input = %q", u)
	}
}

// fakeMemory records notes.
type fakeMemory struct {
	notes chan string
}

func (f fakeMemory) View(bus.Speaker) (memory.View, error) { return memory.View{}, nil }
func (f fakeMemory) NoteSummary(s bus.Speaker, _ time.Time, heading, text string) error {
	f.notes <- s.UserID + "|" + heading + "|" + text
	return nil
}

// A conversation that goes quiet is summarised into the daily notes, and
// trimmed context lands there too.
func TestDailyNotes(t *testing.T) {
	mem := fakeMemory{notes: make(chan string, 8)}
	sm := funcSummarizer(func(_ context.Context, _, _ string, dropped []memory.Message) (string, error) {
		return fmt.Sprintf("- %d messages", len(dropped)), nil
	})
	h := newHarness(t, func(hc *harnessConfig) {
		hc.cfg.SessionIdle = time.Second
		hc.cfg.MaxContextTurns = 3
		hc.summarizer = sm
		hc.memory = mem
	})
	for i := range 4 {
		h.model.Enqueue(llmtest.TextReply(fmt.Sprintf("answer %d", i)))
		h.ask(fmt.Sprintf("m%d", i), fmt.Sprintf("question %d", i))
	}
	got := map[string]string{}
	for len(got) < 2 {
		select {
		case n := <-mem.notes:
			parts := strings.SplitN(n, "|", 3)
			got[parts[1]] = parts[0] + "|" + parts[2]
		case <-time.After(wait):
			t.Fatalf("daily notes written: %v", got)
		}
	}
	if !strings.Contains(got["Trimmed from the conversation"], "question 0") {
		t.Fatalf("trimmed note = %q", got["Trimmed from the conversation"])
	}
	if got["Conversation"] != "u1|- 8 messages" {
		t.Fatalf("conversation note = %q", got["Conversation"])
	}
}

package agent

import (
	"strings"
	"sync/atomic"
	"testing"

	"github.com/switchboard-chat/switchboard/agent/agenttest"
	"github.com/switchboard-chat/switchboard/bus"
	"github.com/switchboard-chat/switchboard/llm"
	"github.com/switchboard-chat/switchboard/llm/llmtest"
	"github.com/switchboard-chat/switchboard/memory/memtest"
	"github.com/switchboard-chat/switchboard/workspace"
)

// TestSessionKeepsItsAgent: Resolve picks the agent of a new session once;
// the session keeps it when Resolve later answers otherwise (a reload),
// new sessions follow the new answer, and an unknown name is main.
func TestSessionKeepsItsAgent(t *testing.T) {
	codeModel := llmtest.NewServer(t, llmtest.WithResponder(func(*llmtest.Request) llmtest.Reply { return llmtest.TextReply("code here") }))
	lc := llm.DefaultConfig()
	lc.BaseURL, lc.APIKey, lc.Model, lc.MaxRetries = codeModel.URL(), "k", "code-model", 0
	client, err := llm.New(lc, nil, llm.WithHTTPClient(codeModel.HTTPClient()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(client.CloseIdleConnections)
	var choice atomic.Value
	choice.Store("code")
	h := newHarness(t, func(hc *harnessConfig) {
		hc.modelOption = []llmtest.Option{llmtest.WithResponder(func(*llmtest.Request) llmtest.Reply { return llmtest.TextReply("main here") })}
		hc.agents = Agents{
			Profiles: []Profile{{Name: "code", Config: hc.cfg, Settings: ModelSettings{ModelName: "code-model", ContextWindow: 128000, MaxOutputTokens: 1000},
				Model: client, Prompts: staticPrompts{dir: "/code", files: []workspace.PromptFile{{Name: "AGENT.md", Content: "You are CODE."}}}}},
			Resolve: func(bus.Speaker) string { return choice.Load().(string) },
		}
	})
	ask := func(chat, id, text string) string {
		t.Helper()
		h.bus.Send(bus.Inbound{ID: id, Channel: "console", ChatID: chat, UserID: "u1", Text: text})
		return h.final(id).Text
	}
	if got := ask("c1", "m1", "hi"); got != "code here" {
		t.Fatalf("c1 answered %q, want the code agent", got)
	}
	choice.Store("nobody") // unknown: main, for new sessions only
	if got := ask("c1", "m2", "again"); got != "code here" {
		t.Errorf("c1's second message answered %q: the session changed agent", got)
	}
	if got := ask("c2", "m3", "hi"); got != "main here" {
		t.Errorf("c2 answered %q, want main (unknown agent name)", got)
	}
	if got := ask("c1", "m4", "/status"); !strings.Contains(got, "Agent: code") || !strings.Contains(got, "Model: code-model") {
		t.Errorf("/status of c1: %q", got)
	}
	for _, r := range codeModel.Requests() {
		if sys := llmtest.MessageText(r.Body.Messages[0]); !strings.Contains(sys, "You are CODE.") || r.Body.Model != "code-model" {
			t.Errorf("code request: model %q, system %.100q", r.Body.Model, sys)
		}
	}
	if n := len(codeModel.Requests()); n != 2 {
		t.Errorf("code model got %d requests, want 2", n)
	}
}

// TestAgentsRefused: profiles without a name, named main, twice, or
// without a model or prompts are refused by NewManager.
func TestAgentsRefused(t *testing.T) {
	cfg := DefaultConfig()
	lc := llm.DefaultConfig()
	lc.APIKey = "k"
	model, err := llm.New(lc, nil)
	if err != nil {
		t.Fatal(err)
	}
	b, prompts := agenttest.NewBus(), staticPrompts{}
	p := Profile{Name: "x", Config: cfg, Model: model, Prompts: prompts}
	for _, ps := range [][]Profile{
		{{Name: "", Config: cfg, Model: model, Prompts: prompts}},
		{{Name: MainAgent, Config: cfg, Model: model, Prompts: prompts}},
		{p, p},
		{{Name: "y", Config: cfg}},
		{{Name: "z", Model: model, Prompts: prompts}}, // zero Config: invalid limits
	} {
		_, err := NewManager(cfg, Options{}, Deps{Source: b, Publisher: b, Store: memtest.NewMemStore(), Main: Profile{Model: model, Prompts: prompts}, Agents: Agents{Profiles: ps}})
		if err == nil {
			t.Errorf("profiles %+v accepted", ps)
		}
	}
	if _, err := NewManager(cfg, Options{}, Deps{Source: b, Publisher: b, Store: memtest.NewMemStore(), Main: Profile{Model: model, Prompts: prompts}, Agents: Agents{Profiles: []Profile{p}}}); err != nil {
		t.Errorf("a valid profile refused: %v", err)
	}
}

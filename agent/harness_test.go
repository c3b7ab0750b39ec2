package agent

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/switchboard-chat/switchboard/agent/agenttest"
	"github.com/switchboard-chat/switchboard/bus"
	"github.com/switchboard-chat/switchboard/llm"
	"github.com/switchboard-chat/switchboard/llm/llmtest"
	"github.com/switchboard-chat/switchboard/memory"
	"github.com/switchboard-chat/switchboard/memory/memtest"
	"github.com/switchboard-chat/switchboard/tools"
	"github.com/switchboard-chat/switchboard/workspace"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const wait = 10 * time.Second

// harness runs a Manager over the in-memory bus, the scripted model (real
// HTTP and SSE through the llm client), an in-memory store and test tools.
type harness struct {
	t     *testing.T
	model *llmtest.Server
	bus   *agenttest.Bus
	store *memtest.MemStore
	// mem is the store the manager uses (store unless harnessConfig.store
	// replaced it).
	mem memory.Store
	// summaries receives every summary the background summariser stores.
	summaries chan string
	// stop stops the manager (as a shutdown does) and waits for it.
	stop func()
	// mgr is the manager under test.
	mgr *Manager
}

// notifyStore reports SetSummary calls.
type notifyStore struct {
	*memtest.MemStore
	ch chan string
}

func (n notifyStore) SetSummary(ctx context.Context, session, summary string) error {
	err := n.MemStore.SetSummary(ctx, session, summary)
	select {
	case n.ch <- summary:
	default:
	}
	return err
}

type harnessConfig struct {
	cfg         Config
	opt         Options
	llm         llm.Config
	tools       []tools.Tool
	prompts     PromptFiles
	summarizer  Summarizer
	memory      Memory
	noTools     bool
	modelOption []llmtest.Option
	// store and publisher, when set, replace the in-memory store and the
	// bus as publisher; bus, when set, is the in-memory bus to use.
	store     memory.Store
	publisher Publisher
	bus       *agenttest.Bus
	observer  Observer
	agents    Agents
}

func newHarness(t *testing.T, mods ...func(*harnessConfig)) *harness {
	t.Helper()
	hc := harnessConfig{cfg: DefaultConfig(), llm: llm.DefaultConfig()}
	hc.cfg.DeltaInterval = 10 * time.Millisecond
	hc.opt = Options{ModelName: "test-model", ContextWindow: 128000, MaxOutputTokens: 1000, Heartbeat: time.Hour}
	hc.llm.APIKey, hc.llm.Model, hc.llm.MaxRetries = "k", "test-model", 0
	hc.llm.RetryBackoff, hc.llm.RateLimitBackoff = time.Millisecond, time.Millisecond
	hc.prompts = staticPrompts{dir: "/ws", files: []workspace.PromptFile{{Name: "AGENT.md", Content: "You are a test agent."}}}
	for _, m := range mods {
		m(&hc)
	}
	h := &harness{t: t, model: llmtest.NewServer(t, hc.modelOption...), bus: hc.bus, store: memtest.NewMemStore(),
		summaries: make(chan string, 16)}
	if h.bus == nil {
		h.bus = agenttest.NewBus()
	}
	var store memory.Store = notifyStore{h.store, h.summaries}
	if hc.store != nil {
		store = hc.store
	}
	h.mem = store
	var pub Publisher = h.bus
	if hc.publisher != nil {
		pub = hc.publisher
	}
	hc.llm.BaseURL = h.model.URL()
	client, err := llm.New(hc.llm, nil, llm.WithHTTPClient(h.model.HTTPClient()))
	if err != nil {
		t.Fatal(err)
	}
	var tb Toolbox
	if !hc.noTools {
		reg, err := tools.NewRegistry(hc.tools...)
		if err != nil {
			t.Fatal(err)
		}
		tb = reg
	}
	hc.opt.Subjects = h.bus.Subjects()
	mgr, err := NewManager(hc.cfg, hc.opt, Deps{Source: h.bus, Publisher: pub, Store: store,
		Main: Profile{Model: client, Tools: tb, Prompts: hc.prompts, Summarizer: hc.summarizer, Memory: hc.memory}, Observer: hc.observer, Agents: hc.agents})
	if err != nil {
		t.Fatal(err)
	}
	h.mgr = mgr
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- mgr.Run(ctx) }()
	var once sync.Once
	h.stop = func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("manager: %v", err)
			}
			client.CloseIdleConnections()
		})
	}
	t.Cleanup(h.stop)
	return h
}

func (h *harness) send(id, text string) *agenttest.Delivery {
	return h.bus.Send(bus.Inbound{ID: id, Channel: "console", ChatID: "c1", UserID: "u1", UserName: "Ann", Text: text})
}

func (h *harness) final(id string) bus.Outbound {
	h.t.Helper()
	return h.bus.WaitFinal(h.t, wait, id)
}

// ask sends text and waits for its final answer.
func (h *harness) ask(id, text string) bus.Outbound {
	h.t.Helper()
	h.send(id, text)
	return h.final(id)
}

// request returns the n-th recorded model request (0-based).
func (h *harness) request(n int) llmtest.Request {
	h.t.Helper()
	reqs := h.model.Requests()
	if n >= len(reqs) {
		h.t.Fatalf("only %d model requests, want #%d", len(reqs), n)
	}
	return reqs[n]
}

// lastMessage returns the last message of request n.
func (h *harness) lastMessage(n int) (role, content string) {
	h.t.Helper()
	msgs := h.request(n).Body.Messages
	m := msgs[len(msgs)-1]
	return m.Role, llmtest.MessageText(m)
}

// history returns the stored context of the test session.
func (h *harness) history() []string {
	h.t.Helper()
	snap, err := h.mem.Load(context.Background(), "console/c1", 100)
	if err != nil {
		h.t.Fatal(err)
	}
	var out []string
	for _, m := range snap.Messages {
		var parts []string
		for _, b := range m.Blocks {
			switch b.Type {
			case "tool_use":
				parts = append(parts, "use:"+b.ToolName)
			case "tool_result":
				parts = append(parts, "result:"+b.Text)
			case "text":
				parts = append(parts, b.Text)
			}
		}
		out = append(out, m.Role+"|"+strings.Join(parts, "|"))
	}
	return out
}

// checkRequestsValid asserts every recorded request satisfies the OpenAI
// pairing rules.
func (h *harness) checkRequestsValid() {
	h.t.Helper()
	for i, r := range h.model.Requests() {
		var msgs []llm.Message
		for _, m := range r.Body.Messages {
			lm := llm.Message{Role: m.Role, Content: llmtest.MessageText(m), ToolID: m.ToolCallID}
			for _, c := range m.ToolCalls {
				lm.ToolCalls = append(lm.ToolCalls, llm.ToolCall{ID: c.ID, Name: c.Function.Name, Arguments: c.Function.Arguments})
			}
			msgs = append(msgs, lm)
		}
		if err := validForOpenAI(msgs); err != nil {
			h.t.Fatalf("request %d violates tool pairing: %v", i, err)
		}
	}
}

// testTool is a configurable tool that counts its runs.
type testTool struct {
	name     string
	schema   string
	parallel bool
	stage    string
	runs     atomic.Int64
	run      func(ctx context.Context, c tools.Call) (tools.Result, error)
}

func (f *testTool) Name() string        { return f.name }
func (f *testTool) Description() string { return "test tool " + f.name }
func (f *testTool) Schema() json.RawMessage {
	if f.schema == "" {
		return json.RawMessage(`{"type":"object","properties":{}}`)
	}
	return json.RawMessage(f.schema)
}
func (f *testTool) Permission() string { return tools.PermRead }
func (f *testTool) ParallelSafe() bool { return f.parallel }
func (f *testTool) Run(ctx context.Context, c tools.Call) (tools.Result, error) {
	f.runs.Add(1)
	if f.run == nil {
		return tools.Result{Text: "ok " + string(c.Args)}, nil
	}
	return f.run(ctx, c)
}

type stagedTool struct{ *testTool }

func (s stagedTool) Stage() string { return s.stage }

func withTools(ts ...tools.Tool) func(*harnessConfig) {
	return func(hc *harnessConfig) { hc.tools = append(hc.tools, ts...) }
}

func call(id, name, args string) llmtest.ToolCall {
	return llmtest.ToolCall{ID: id, Name: name, Arguments: args}
}

func calling(cs ...llmtest.ToolCall) llmtest.Reply { return llmtest.Reply{ToolCalls: cs} }

package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/switchboard-chat/switchboard/bus"
	"github.com/switchboard-chat/switchboard/bus/bustest"
	"github.com/switchboard-chat/switchboard/llm/llmtest"
)

// agentsConfig is a configuration with two agents (main and work), each
// with its own model server and AGENT.md marker; work has no write_file
// and answers Slack and the console chats named w*.
func agentsConfig(t *testing.T, mainURL, workURL string, extra ...string) Config {
	t.Helper()
	dir := t.TempDir()
	for name, marker := range map[string]string{"ws-main": "MARKER-MAIN", "ws-work": "MARKER-WORK"} {
		if err := os.MkdirAll(filepath.Join(dir, name), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name, "AGENT.md"), []byte("You are the agent "+marker+".\n"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	yaml := `
data_dir: "${DIR}/data"
bus: {listen: "127.0.0.1:0"}
admin: {listen: "127.0.0.1:0"}
llm: {base_url: "${MAIN}", api_key: k, model: main-model, max_retries: 0}
agent: {workspace: "${DIR}/ws-main", delta_interval: 20ms}
agents:
  work:
    workspace: "${DIR}/ws-work"
    llm: {base_url: "${WORK}", model: work-model}
    tools: {disabled: [write_file]}
bindings:
  - {agent: work, channel: slack}
  - {agent: work, channel: console, chat_id: "w*"}
` + strings.Join(extra, "\n")
	env := map[string]string{"DIR": dir, "MAIN": mainURL, "WORK": workURL}
	cfg, err := ParseConfig([]byte(yaml), func(k string) (string, bool) { v, ok := env[k]; return v, ok })
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// agentModel remembers on "remember", searches memory on "recall" and
// otherwise answers "ok".
func agentModel(req *llmtest.Request) llmtest.Reply {
	last := req.Body.Messages[len(req.Body.Messages)-1]
	switch text := req.LastUserText(); {
	case last.Role == "tool":
		return llmtest.TextReply("tool said: " + llmtest.MessageText(last))
	case strings.Contains(text, "remember"):
		return llmtest.Reply{ToolCalls: []llmtest.ToolCall{{ID: "w1", Name: "memory_write", Arguments: `{"text":"The vault code is OKAPI-77","kind":"core"}`}}}
	case strings.Contains(text, "recall"):
		return llmtest.Reply{ToolCalls: []llmtest.ToolCall{{ID: "s1", Name: "memory_search", Arguments: `{"query":"vault code","max_results":50}`}}}
	}
	return llmtest.TextReply("ok")
}

// TestE2EAgentsBoundByChannelAndChat (issue 20): bindings pick the agent
// of each session — by channel (slack) and by chat (console w*), main for
// the rest; each agent's requests carry its own AGENT.md, model id and
// tools only, its memory is invisible to the other, and its events and
// /status name it.
func TestE2EAgentsBoundByChannelAndChat(t *testing.T) {
	mainModel := llmtest.NewServer(t, llmtest.WithResponder(agentModel))
	workModel := llmtest.NewServer(t, llmtest.WithResponder(agentModel))
	d := startDaemon(t, agentsConfig(t, mainModel.URL(), workModel.URL()))
	events := bustest.Collect(t, d.nc, d.subjects().Event("console", "w1"))
	send := func(channel, chat, id, text string) bus.Outbound {
		t.Helper()
		out := bustest.Collect(t, d.nc, d.subjects().Out(channel, chat))
		bustest.PublishInbound(t, d.nc, d.subjects(), bus.Inbound{V: 1, ID: id, Channel: channel, ChatID: chat, UserID: "u1", UserName: "Ann", Text: text})
		return out.WaitOutbound(t, wait, finalFor(id))
	}
	send("console", "m1", "a1", "hello main")
	send("console", "w1", "a2", "hello work")
	send("slack", "C1", "a3", "hello slack")
	if got := send("console", "w1", "a4", "please remember this").Text; !strings.Contains(got, "tool said") {
		t.Fatalf("memory_write turn answered %q", got)
	}
	// The same user, in main's chat: work's memory is not there.
	if got := send("console", "m1", "a5", "recall please").Text; strings.Contains(got, "OKAPI") {
		t.Errorf("main's memory_search found work's memory: %q", got)
	}
	// In another of work's console chats (same agent, same user) it is.
	if got := send("console", "w2", "a6", "recall please").Text; !strings.Contains(got, "OKAPI") {
		t.Errorf("work's memory_search did not find work's memory (the check above proves nothing): %q", got)
	}
	if got := send("console", "w1", "a7", "/status").Text; !strings.Contains(got, "Agent: work") {
		t.Errorf("/status in w1: %q, want it to name the agent work", got)
	}
	if got := send("console", "m1", "a8", "/status").Text; !strings.Contains(got, "Agent: main") {
		t.Errorf("/status in m1: %q, want it to name the agent main", got)
	}

	check := func(name string, reqs []llmtest.Request, marker, other, model string, writeFile bool, users ...string) {
		t.Helper()
		seen := map[string]bool{}
		for _, r := range reqs {
			system := llmtest.MessageText(r.Body.Messages[0])
			if !strings.Contains(system, marker) || strings.Contains(system, other) {
				t.Errorf("%s: system prompt without %s or with %s: %.200q", name, marker, other, system)
			}
			if strings.Contains(system, "OKAPI") && name == "main" {
				t.Errorf("main's system prompt holds work's memory: %.300q", system)
			}
			if r.Body.Model != model {
				t.Errorf("%s: model %q, want %q", name, r.Body.Model, model)
			}
			if r.HasTool("write_file") != writeFile || !r.HasTool("memory_search") {
				t.Errorf("%s: write_file offered %t (want %t), memory_search %t", name, r.HasTool("write_file"), writeFile, r.HasTool("memory_search"))
			}
			seen[r.LastUserText()] = true
		}
		for _, u := range users {
			found := false
			for text := range seen {
				found = found || strings.Contains(text, u)
			}
			if !found {
				t.Errorf("%s's model never got %q (got %v)", name, u, seen)
			}
		}
	}
	check("main", mainModel.Requests(), "MARKER-MAIN", "MARKER-WORK", "main-model", true, "hello main", "recall please")
	check("work", workModel.Requests(), "MARKER-WORK", "MARKER-MAIN", "work-model", false, "hello work", "hello slack", "please remember this", "recall please")
	for _, r := range mainModel.Requests() {
		if strings.Contains(r.LastUserText(), "work") || strings.Contains(r.LastUserText(), "slack") {
			t.Errorf("main's model got a message of a work session: %q", r.LastUserText())
		}
	}

	metrics := scrape(t, d)
	for _, m := range []string{`switchboard_turns_total{agent="work",stop_reason="completed"}`, `switchboard_turns_total{agent="main",stop_reason="completed"}`} {
		if metricValue(metrics, m) < 2 {
			t.Errorf("%s below 2:\n%s", m, grepLines(metrics, "turns_total"))
		}
	}
	ev := events.WaitFor(t, wait, func(m *nats.Msg) bool { return true })
	var e bus.Event
	if err := json.Unmarshal(ev.Data, &e); err != nil || e.Agent != "work" {
		t.Errorf("event of w1: agent %q (err %v), want work", e.Agent, err)
	}
}

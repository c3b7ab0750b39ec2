package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/switchboard-chat/switchboard/bus"
	"github.com/switchboard-chat/switchboard/bus/bustest"
	"github.com/switchboard-chat/switchboard/llm/llmtest"
)

// reloadModel is the scripted model of the reload tests: "hold" reads
// AGENT.md with a tool, and the request that asks for it waits until the
// test releases it (the turn is in flight meanwhile); the tool's result is
// answered "done"; anything else "ok". It records each request by the
// text it answers.
type reloadModel struct {
	mu      sync.Mutex
	held    chan struct{} // a "hold" request arrived
	release chan struct{} // let it go
	reqs    map[string][]llmtest.Request
}

func newReloadModel() *reloadModel { return &reloadModel{reqs: map[string][]llmtest.Request{}} }

// arm returns the channels of the next "hold" request: it signals held
// when it arrives and waits for release to be closed.
func (m *reloadModel) arm() (held <-chan struct{}, release chan struct{}) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.held, m.release = make(chan struct{}, 1), make(chan struct{})
	return m.held, m.release
}

func (m *reloadModel) respond(req *llmtest.Request) llmtest.Reply {
	text := req.LastUserText()
	m.mu.Lock()
	m.reqs[text] = append(m.reqs[text], *req)
	held, release := m.held, m.release
	m.mu.Unlock()
	last := req.Body.Messages[len(req.Body.Messages)-1]
	switch {
	case last.Role == "tool":
		return llmtest.TextReply("done")
	case text == "hold":
		held <- struct{}{}
		<-release
		return llmtest.Reply{ToolCalls: []llmtest.ToolCall{{ID: "r1", Name: "read_file", Arguments: `{"path":"AGENT.md"}`}}}
	}
	return llmtest.TextReply("ok")
}

// requests are the requests made for the user text.
func (m *reloadModel) requests(text string) []llmtest.Request {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]llmtest.Request(nil), m.reqs[text]...)
}

// TestE2EReloadRebuildsAgents (issue 20): a reload rebuilds what changed,
// through the bus with the real daemon: a new model id (main's and an
// agent's) reaches the next request of a running session while a turn in
// flight finishes with the old one; a new workspace's AGENT.md and a tools
// change reach the next request (the agent drained and its tools.db and
// memory files reopened, with a turn in flight); an agent added is bound at
// once, one removed hands its session to main; an agent whose new settings
// fail to open keeps answering with its old ones and the reload says why.
func TestE2EReloadRebuildsAgents(t *testing.T) {
	model := newReloadModel()
	srv := llmtest.NewServer(t, llmtest.WithResponder(model.respond))
	dir := t.TempDir()
	for name, marker := range map[string]string{"ws-main": "MARKER-MAIN", "ws-work": "MARKER-WORK-1", "ws-work2": "MARKER-WORK-2"} {
		if err := os.MkdirAll(filepath.Join(dir, name), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name, "AGENT.md"), []byte("You are "+marker+".\n"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "afile"), []byte("not a folder"), 0o600); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "config.yaml")
	write := func(mainModel, agents, bindings string) {
		t.Helper()
		yaml := `
data_dir: "` + filepath.Join(dir, "data") + `"
bus: {listen: "127.0.0.1:0"}
admin: {listen: "127.0.0.1:0"}
shutdown_timeout: 20s
llm: {base_url: "` + srv.URL() + `", api_key: k, model: ` + mainModel + `, max_retries: 0}
agent: {workspace: "` + filepath.Join(dir, "ws-main") + `"}
agents:
` + strings.ReplaceAll(agents, "${DIR}", dir) + `
bindings:
` + bindings
		if err := os.WriteFile(path, []byte(yaml), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	work := func(model, ws, tools string) string {
		return "  work:\n    workspace: \"${DIR}/" + ws + "\"\n    llm: {model: " + model + "}\n    tools: {disabled: [" + tools + "]}\n"
	}
	workBinding := "  - {agent: work, channel: console, chat_id: \"w*\"}\n"
	write("main-1", work("work-1", "ws-work", "write_file"), workBinding)
	cfg, _, err := LoadConfig(path)
	if err != nil {
		t.Fatal(err)
	}
	d := startDaemon(t, cfg)
	admin := "http://" + d.s.Admin.Addr()
	n := 0
	send := func(chat, text string) string {
		t.Helper()
		n++
		id := fmt.Sprintf("r%d", n)
		out := bustest.Collect(t, d.nc, d.subjects().Out("console", chat))
		bustest.PublishInbound(t, d.nc, d.subjects(), bus.Inbound{V: 1, ID: id, Channel: "console", ChatID: chat, UserID: "u1", Text: text})
		return out.WaitOutbound(t, wait, finalFor(id)).Text
	}
	reload := func(want ...string) {
		t.Helper()
		code, stdout, stderr := runVerb(t, "reload", "--config", path, "--admin", admin)
		if code != 0 {
			t.Fatalf("reload: exit %d\n%s%s", code, stdout, stderr)
		}
		for _, w := range want {
			if !strings.Contains(stdout, w) {
				t.Errorf("reload output without %q:\n%s", w, stdout)
			}
		}
	}
	last := func(text string) llmtest.Request {
		t.Helper()
		reqs := model.requests(text)
		if len(reqs) == 0 {
			t.Fatalf("no request for %q", text)
		}
		return reqs[len(reqs)-1]
	}
	send("m1", "first")
	send("w1", "first")

	// Models: main's turn in flight during the reload finishes with the
	// old model, on both of its requests; the next turn of each running
	// session carries the new model id. Nothing waits for the held turn.
	hold := make(chan string, 1)
	held, release := model.arm()
	go func() {
		out := bustest.Collect(t, d.nc, d.subjects().Out("console", "m1"))
		bustest.PublishInbound(t, d.nc, d.subjects(), bus.Inbound{V: 1, ID: "hold-1", Channel: "console", ChatID: "m1", UserID: "u1", Text: "hold"})
		hold <- out.WaitOutbound(t, wait, finalFor("hold-1")).Text
	}()
	<-held
	write("main-2", work("work-2", "ws-work", "write_file"), workBinding)
	reload("agents.main: llm applied (next turn)", "agents.work: llm applied (next turn)")
	close(release)
	if got := <-hold; got != "done" {
		t.Fatalf("held turn: %q", got)
	}
	for _, r := range model.requests("hold") {
		if r.Body.Model != "main-1" {
			t.Errorf("the turn in flight used model %q, want main-1 (the one it started with)", r.Body.Model)
		}
	}
	send("m1", "after models m")
	send("w1", "after models w")
	if m := last("after models m").Body.Model; m != "main-2" {
		t.Errorf("main's running session after the reload: model %q, want main-2", m)
	}
	if m := last("after models w").Body.Model; m != "work-2" {
		t.Errorf("work's running session after the reload: model %q, want work-2", m)
	}

	// Workspace: the next request has the new AGENT.md.
	write("main-2", work("work-2", "ws-work2", "write_file"), workBinding)
	reload("agents.work: workspace applied (next turn)")
	send("w1", "after workspace")
	if sys := llmtest.MessageText(last("after workspace").Body.Messages[0]); !strings.Contains(sys, "MARKER-WORK-2") || strings.Contains(sys, "MARKER-WORK-1") {
		t.Errorf("work's prompt after the workspace change: %.200q", sys)
	}
	if r := last("after workspace"); r.HasTool("write_file") {
		t.Fatal("write_file offered before the tools change (the check below proves nothing)")
	}

	// Tools, with a turn of work in flight: the agent is drained (tools.db
	// and the memory files closed and reopened, no lock timeout), the turn
	// finishes with the old tools, the next request lists write_file.
	held, release = model.arm()
	go func() {
		out := bustest.Collect(t, d.nc, d.subjects().Out("console", "w1"))
		bustest.PublishInbound(t, d.nc, d.subjects(), bus.Inbound{V: 1, ID: "hold-2", Channel: "console", ChatID: "w1", UserID: "u1", Text: "hold"})
		hold <- out.WaitOutbound(t, wait, finalFor("hold-2")).Text
	}()
	<-held
	write("main-2", work("work-2", "ws-work2", ""), workBinding)
	reloaded := make(chan struct{})
	go func() {
		defer close(reloaded)
		reload("agents.work: tools applied (next turn)")
	}()
	close(release)
	if got := <-hold; got != "done" {
		t.Fatalf("held turn of work: %q", got)
	}
	<-reloaded
	for _, r := range model.requests("hold")[2:] {
		if r.HasTool("write_file") {
			t.Errorf("work's turn in flight got the new tool list")
		}
	}
	send("w1", "after tools")
	if r := last("after tools"); !r.HasTool("write_file") {
		t.Errorf("work's next request after the tools change does not offer write_file")
	}

	// Added and removed: pets answers a new session at once; work's
	// running session goes to main.
	pets := "  pets:\n    llm: {model: pets-1}\n"
	write("main-2", pets, "  - {agent: pets, channel: console, chat_id: \"p*\"}\n")
	reload("agents.pets: added (bindable now)", "agents.work: removed")
	send("p1", "hello pets")
	if m := last("hello pets").Body.Model; m != "pets-1" {
		t.Errorf("new session bound to the added agent: model %q, want pets-1", m)
	}
	send("w1", "after removal")
	if r := last("after removal"); r.Body.Model != "main-2" || !strings.Contains(llmtest.MessageText(r.Body.Messages[0]), "MARKER-MAIN") {
		t.Errorf("removed agent's session: model %q, want main's", r.Body.Model)
	}

	// A new workspace that cannot be created: pets keeps answering with its
	// old settings and the reload says why.
	write("main-2", "  pets:\n    workspace: \"${DIR}/afile/ws\"\n    llm: {model: pets-2}\n", "  - {agent: pets, channel: console, chat_id: \"p*\"}\n")
	reload("agents.pets: not applied: ", "workspace")
	send("p1", "after failure")
	if m := last("after failure").Body.Model; m != "pets-1" {
		t.Errorf("after a failed rebuild pets answers with model %q, want pets-1 (its running settings)", m)
	}
}

package main

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/switchboard-chat/switchboard/bus"
	"github.com/switchboard-chat/switchboard/bus/bustest"
	"github.com/switchboard-chat/switchboard/llm/llmtest"
)

// waitLog waits until the daemon's log holds every one of want after the
// first skip bytes, and returns the log's length then.
func (p *process) waitLog(t *testing.T, skip int, want ...string) int {
	t.Helper()
	deadline := time.Now().Add(wait)
	for {
		logs := p.out.String()
		missing := ""
		for _, w := range want {
			if !strings.Contains(logs[min(skip, len(logs)):], w) {
				missing = w
				break
			}
		}
		if missing == "" {
			return len(logs)
		}
		select {
		case err := <-p.done:
			t.Fatalf("daemon exited (%v) before logging %q", err, missing)
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("the daemon did not log %q", missing)
		}
	}
}

// TestSIGHUPReloadsTheBinary (issue 20): the real binary with two agents
// (AGENT.md markers, their own model ids) and a binding; the bindings are
// edited in the file and SIGHUP applies them to a new session, logged;
// then a broken file and SIGHUP are refused with every problem logged, and
// the running bindings keep answering.
func TestSIGHUPReloadsTheBinary(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binary; skipped with -short")
	}
	bin := buildBinary(t)
	model := llmtest.NewServer(t, llmtest.WithResponder(func(req *llmtest.Request) llmtest.Reply {
		agent := "none"
		for _, m := range req.Body.Messages {
			if m.Role == "system" {
				switch text := llmtest.MessageText(m); {
				case strings.Contains(text, "MARKER-WORK"):
					agent = "work"
				case strings.Contains(text, "MARKER-MAIN"):
					agent = "main"
				}
			}
		}
		return llmtest.TextReply("agent " + agent + " model " + req.Body.Model)
	}))
	dir := t.TempDir()
	for name, marker := range map[string]string{"ws-main": "MARKER-MAIN", "ws-work": "MARKER-WORK"} {
		if err := os.MkdirAll(filepath.Join(dir, name), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name, "AGENT.md"), []byte("You are the agent "+marker+".\n"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	busAddr := freePort(t)
	path := filepath.Join(dir, "config.yaml")
	write := func(bindings, extra string) {
		t.Helper()
		yaml := `data_dir: "` + filepath.Join(dir, "data") + `"
bus: {listen: "` + busAddr + `"}
admin: {listen: ""}
llm: {base_url: "` + model.URL() + `", api_key: k, model: main-model, max_retries: 0}
agent: {workspace: "` + filepath.Join(dir, "ws-main") + `"}
agents:
  work:
    workspace: "` + filepath.Join(dir, "ws-work") + `"
    llm: {model: work-model}
bindings:
` + bindings + extra
		if err := os.WriteFile(path, []byte(yaml), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("  - {agent: work, channel: console, chat_id: w1}\n", "")
	p := startProcess(t, bin, path)
	nc := connectWhenUp(t, p, "nats://"+busAddr, filepath.Join(dir, "data"))
	defer nc.Close()
	subj := bus.Subjects{Prefix: "chat"}
	send := func(chat, id string) string {
		t.Helper()
		out := bustest.Collect(t, nc, subj.Out("console", chat))
		bustest.PublishInbound(t, nc, subj, bus.Inbound{V: 1, ID: id, Channel: "console", ChatID: chat, UserID: "u1", Text: "who answers?"})
		return out.WaitOutbound(t, wait, finalFor(id)).Text
	}
	if got := send("w1", "h1"); got != "agent work model work-model" {
		t.Fatalf("w1 before the reload: %q", got)
	}
	if got := send("w2", "h2"); got != "agent main model main-model" {
		t.Fatalf("w2 before the reload: %q", got)
	}

	write("  - {agent: work, channel: console, chat_id: \"w*\"}\n", "")
	mark := len(p.out.String())
	if err := p.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	mark = p.waitLog(t, mark, "SIGHUP: reloading the configuration", "configuration reload: bindings: applied")
	if got := send("w3", "h3"); got != "agent work model work-model" {
		t.Errorf("new session w3 after SIGHUP: %q, want the newly bound agent work", got)
	}

	write("  - {agent: nobody, channel: console}\n", "log: {levle: debug}\n")
	if err := p.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	p.waitLog(t, mark, "configuration reload refused; the running configuration stays", "no agent", "nobody", "levle")
	if got := send("w4", "h4"); got != "agent work model work-model" {
		t.Errorf("new session w4 after a refused reload: %q, want the running bindings (work)", got)
	}
	if got := send("x1", "h5"); got != "agent main model main-model" {
		t.Errorf("x1 after a refused reload: %q, want main (no binding matches)", got)
	}
	stopProcess(t, p)
}

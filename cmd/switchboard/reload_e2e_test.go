package main

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/switchboard-chat/switchboard/bus"
	"github.com/switchboard-chat/switchboard/bus/bustest"
	"github.com/switchboard-chat/switchboard/llm/llmtest"
)

// TestE2EReload (issue 20): `switchboard reload` (POST /reload on the
// admin listener, what SIGHUP does too) re-reads the file: a binding edit
// applies to a new session; a broken file is refused whole with every
// problem listed and the running configuration keeps answering; a change
// that cannot apply live is reported as kept until restart.
func TestE2EReload(t *testing.T) {
	mainModel := llmtest.NewServer(t, llmtest.WithResponder(func(*llmtest.Request) llmtest.Reply { return llmtest.TextReply("main here") }))
	workModel := llmtest.NewServer(t, llmtest.WithResponder(func(*llmtest.Request) llmtest.Reply { return llmtest.TextReply("work here") }))
	dir := t.TempDir()
	path := filepath.Join(dir, "config.yaml")
	write := func(bindings, extra string, maxSteps int) {
		t.Helper()
		yaml := `
data_dir: "` + filepath.Join(dir, "data") + `"
bus: {listen: "127.0.0.1:0"}
admin: {listen: "127.0.0.1:0"}
llm: {base_url: "` + mainModel.URL() + `", api_key: k, model: main-model, max_retries: 0}
agent: {workspace: "` + filepath.Join(dir, "ws") + `", max_steps: ` + strconv.Itoa(maxSteps) + `}
agents:
  work:
    llm: {base_url: "` + workModel.URL() + `", model: work-model}
bindings:
` + bindings + extra
		if err := os.WriteFile(path, []byte(yaml), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("  - {agent: work, channel: console, chat_id: w1}\n", "", 10)
	cfg, _, err := LoadConfig(path)
	if err != nil {
		t.Fatal(err)
	}
	d := startDaemon(t, cfg)
	admin := "http://" + d.s.Admin.Addr()
	send := func(chat, id string) string {
		t.Helper()
		out := bustest.Collect(t, d.nc, d.subjects().Out("console", chat))
		bustest.PublishInbound(t, d.nc, d.subjects(), bus.Inbound{V: 1, ID: id, Channel: "console", ChatID: chat, UserID: "u1", Text: "hi"})
		return out.WaitOutbound(t, wait, finalFor(id)).Text
	}
	if got := send("w1", "a1"); got != "work here" {
		t.Fatalf("w1 before the reload: %q", got)
	}
	if got := send("w2", "a2"); got != "main here" {
		t.Fatalf("w2 before the reload: %q", got)
	}

	// A binding edit applies to a new session (w3), not to the running w2.
	write("  - {agent: work, channel: console, chat_id: \"w*\"}\n", "", 10)
	code, stdout, stderr := runVerb(t, "reload", "--config", path, "--admin", admin)
	if code != 0 || !strings.Contains(stdout, "bindings: applied") {
		t.Fatalf("reload: exit %d\n%s%s", code, stdout, stderr)
	}
	if got := send("w3", "a3"); got != "work here" {
		t.Errorf("new session w3 after the reload: %q, want work's answer", got)
	}
	if got := send("w2", "a4"); got != "main here" {
		t.Errorf("running session w2 changed agent: %q", got)
	}

	// A broken file is refused whole, every problem listed; the running
	// configuration stays (w4 is still work's by the applied binding).
	write("  - {agent: nobody, channel: slack}\n", "log: {levle: debug}\n", 10)
	code, stdout, _ = runVerb(t, "reload", "--config", path, "--admin", admin)
	if code == 0 || !strings.Contains(stdout, "refused") || !strings.Contains(stdout, `bindings[0].agent: no agent "nobody"`) || !strings.Contains(stdout, "log.levle") {
		t.Fatalf("broken reload: exit %d\n%s", code, stdout)
	}
	if got := send("w4", "a5"); got != "work here" {
		t.Errorf("after a refused reload w4: %q, want the running bindings (work)", got)
	}

	// A change that cannot apply live is reported and kept; max_steps
	// (main's, inherited by work) applies.
	write("  - {agent: work, channel: console, chat_id: \"w*\"}\n", "shutdown_timeout: 45s\n", 7)
	code, stdout, stderr = runVerb(t, "reload", "--config", path, "--admin", admin)
	if code != 0 || !strings.Contains(stdout, "shutdown_timeout: changed, kept until restart") || !strings.Contains(stdout, "agents.main: agent applied (next turn)") {
		t.Fatalf("reload of non-live keys: exit %d\n%s%s", code, stdout, stderr)
	}
}

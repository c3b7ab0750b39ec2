package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/switchboard-chat/switchboard/bus"
	"github.com/switchboard-chat/switchboard/bus/bustest"
	"github.com/switchboard-chat/switchboard/llm/llmtest"
	"github.com/switchboard-chat/switchboard/memory/notes"
	"github.com/switchboard-chat/switchboard/tools"
)

// TestE2EBashSandboxKeepsSecrets runs the daemon with bash enabled and its
// defaults (sandbox bwrap, the workspace inside data_dir): Alice talks to
// the bot, then a model scripted to misuse bash in Bob's direct chat tries
// what issue 13 (finding 9) did — the daemon's environment through /proc,
// history.db next to the workspace, Alice's private memory and her chat's
// uploads. The tool's answer, which the model (and Bob) would see, holds
// none of it, while Bob's own folder works.
func TestE2EBashSandboxKeepsSecrets(t *testing.T) {
	if _, err := exec.LookPath("bwrap"); err != nil {
		t.Fatal("bwrap (bubblewrap) is not installed; the bash sandbox is the default: apt-get install bubblewrap")
	}
	attack := `echo "[env]"; tr '\0' '\n' </proc/$PPID/environ; tr '\0' '\n' </proc/1/environ; ` +
		`echo "[data_dir]"; ls -la ..; tr -c '[:print:]' '\n' <../history.db | grep ALICE; ` +
		`echo "[files]"; cat memory/users/console/u1/USER.md inbox/console/ca/photo.txt; grep -rs ALICE .; ` +
		`echo "[own]"; echo bob-note >> memory/users/console/u2/USER.md && cat memory/users/console/u2/USER.md; echo done`
	args, _ := json.Marshal(map[string]string{"command": attack})
	model := llmtest.NewServer(t)
	model.Enqueue(
		llmtest.TextReply("Noted, Alice."),
		llmtest.Reply{ToolCalls: []llmtest.ToolCall{{ID: "call_1", Name: "bash", Arguments: string(args)}}},
		llmtest.TextReply("Here is what I found."),
	)
	cfg := testConfig(t, model.URL())
	cfg.Agent.Workspace = filepath.Join(cfg.DataDir, "workspace") // the shipped layout
	cfg.Tools.Bash.Enabled = true
	cfg.Tools.Bash.AllowUsers = []string{"console:*"}
	alice, err := notes.UserFolder("console", "u1")
	if err != nil {
		t.Fatal(err)
	}
	for rel, content := range map[string]string{
		alice.Dir + "/USER.md":       "ALICE-MEMORY",
		"inbox/console/ca/photo.txt": "ALICE-UPLOAD",
	} {
		p := filepath.Join(cfg.Agent.Workspace, filepath.FromSlash(rel))
		if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	d := startDaemon(t, cfg)
	if runtime.GOOS == "linux" {
		if dumpable, err := tools.Dumpable(); err != nil || dumpable {
			t.Errorf("the daemon is dumpable after start (%v): its children could read its environment", err)
		}
	}

	outA := d.collectOut(t, "ca")
	bustest.PublishInbound(t, d.nc, d.subjects(), bus.Inbound{V: 1, ID: "a1", Channel: "console", ChatID: "ca", UserID: "u1",
		UserName: "Alice", Text: "My bank PIN is ALICE-HISTORY-4242."})
	outA.WaitOutbound(t, wait, finalFor("a1"))

	outB := d.collectOut(t, "cb")
	bustest.PublishInbound(t, d.nc, d.subjects(), bus.Inbound{V: 1, ID: "b1", Channel: "console", ChatID: "cb", UserID: "u2",
		UserName: "Bob", Text: "Show me everything."})
	outB.WaitOutbound(t, wait, finalFor("b1"))

	reqs := model.Requests()
	if len(reqs) != 3 {
		t.Fatalf("%d model requests, want 3", len(reqs))
	}
	msgs := reqs[2].Body.Messages
	result := msgs[len(msgs)-1]
	if result.Role != "tool" || result.ToolCallID != "call_1" {
		t.Fatalf("last message = %+v", result)
	}
	for _, leak := range []string{"ALICE-", "tools.db", "jetstream", "memory-index.db", "test-key"} {
		if strings.Contains(result.Content, leak) {
			t.Errorf("bash showed %q to Bob's model:\n%s", leak, result.Content)
		}
	}
	if !strings.Contains(result.Content, "bob-note\ndone") || !strings.Contains(result.Content, "PATH=") {
		t.Errorf("Bob's own folder or the probe did not work:\n%s", result.Content)
	}
	if b, err := os.ReadFile(filepath.Join(cfg.DataDir, "history.db")); err != nil || !strings.Contains(string(b), "ALICE-HISTORY-4242") {
		t.Fatalf("history.db does not hold Alice's message (%v): the probe proves nothing", err)
	}
}

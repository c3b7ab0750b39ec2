package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/switchboard-chat/switchboard/internal/polltest"
	"github.com/switchboard-chat/switchboard/llm/llmtest"
)

// tmuxPane is the real binary running in a tmux pane (a server of its
// own, on a socket of the test), driven by send-keys and read with
// capture-pane, as a user at a terminal would.
type tmuxPane struct {
	t      *testing.T
	socket string
}

var tmuxSockets atomic.Int64

// startTmux runs command (argv, quoted for the shell) with env in a new
// tmux session of 120x40. It skips the test when tmux is not installed,
// unless SWITCHBOARD_REQUIRE_TMUX=1 (CI), where that fails.
func startTmux(t *testing.T, dir string, env []string, argv ...string) *tmuxPane {
	t.Helper()
	if _, err := exec.LookPath("tmux"); err != nil {
		if os.Getenv("SWITCHBOARD_REQUIRE_TMUX") == "1" {
			t.Fatal("tmux is not installed and SWITCHBOARD_REQUIRE_TMUX=1")
		}
		t.Skip("tmux is not installed (SWITCHBOARD_REQUIRE_TMUX=1 makes this a failure)")
	}
	p := &tmuxPane{t: t, socket: fmt.Sprintf("sbtest-%d-%d", os.Getpid(), tmuxSockets.Add(1))}
	quoted := make([]string, 0, len(env)+len(argv)+1)
	quoted = append(quoted, "env")
	for _, a := range append(env, argv...) {
		quoted = append(quoted, "'"+strings.ReplaceAll(a, "'", `'\''`)+"'")
	}
	p.tmux("-f", "/dev/null", "new-session", "-d", "-s", "main", "-x", "120", "-y", "40", "-c", dir,
		"sh", "-c", "trap true INT; "+strings.Join(quoted, " ")+`; echo "[exited $?]"; read -r _`) // the shell outlives a Ctrl-C
	t.Cleanup(func() { _, _ = exec.Command("tmux", "-L", p.socket, "kill-server").CombinedOutput() })
	return p
}

func (p *tmuxPane) tmux(args ...string) string {
	p.t.Helper()
	out, err := exec.Command("tmux", append([]string{"-L", p.socket}, args...)...).CombinedOutput()
	if err != nil {
		p.t.Fatalf("tmux %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// keys sends tmux key names (Enter, Left, Up, C-c).
func (p *tmuxPane) keys(keys ...string) {
	p.t.Helper()
	p.tmux(append([]string{"send-keys", "-t", "main"}, keys...)...)
}

// text types text literally.
func (p *tmuxPane) text(s string) { p.t.Helper(); p.tmux("send-keys", "-t", "main", "-l", s) }

// paste pastes text as a terminal does, bracketed when the program asked
// for it.
func (p *tmuxPane) paste(s string) {
	p.t.Helper()
	p.tmux("set-buffer", "-b", "paste", s)
	p.tmux("paste-buffer", "-p", "-d", "-b", "paste", "-t", "main")
}

func (p *tmuxPane) screen() string { p.t.Helper(); return p.tmux("capture-pane", "-p", "-t", "main") }

// waitFor waits until the screen holds s; a screen announces no event.
func (p *tmuxPane) waitFor(s string) {
	p.t.Helper()
	var last string
	polltest.Until(p.t, wait, 50*time.Millisecond, func() bool { last = p.screen(); return strings.Contains(last, s) },
		func() string { return fmt.Sprintf("screen lacks %q after %s:\n%s", s, wait, last) })
}

// TestChatInTmux: `switchboard chat` at a real terminal against a daemon
// with the scripted model: the arrow keys edit the line (no escape
// sequence reaches the model), Up recalls the line sent before, a
// bracketed paste of four lines is one turn with its indentation kept,
// the prompt shows the turn's status, Ctrl-C stops a slow turn and the
// session goes on, /quit exits with 0.
func TestChatInTmux(t *testing.T) {
	model := llmtest.NewServer(t)
	block := "def f():\n    return 1\n\n  # the end"
	model.Enqueue(textReply("first answer"), textReply("second answer"), textReply("pasted answer"))
	cfg := testConfig(t, model.URL())
	cfg.Bus.Listen = freePort(t)
	startDaemon(t, cfg)
	dir := t.TempDir()
	file := filepath.Join(dir, "chat.yaml")
	if err := os.WriteFile(file, []byte(fmt.Sprintf("data_dir: %q\nbus:\n  listen: %q\nadmin:\n  listen: \"\"\n", cfg.DataDir, cfg.Bus.Listen)), 0o600); err != nil {
		t.Fatal(err)
	}
	env := []string{"HOME=" + dir, "XDG_STATE_HOME=" + filepath.Join(dir, "state"), "USER=ann", "TERM=xterm-256color", "NO_COLOR="}
	p := startTmux(t, dir, env, buildBinary(t), "chat", "--config", file, "--chat", "tmux")
	p.waitFor("Connected to")
	p.waitFor("\n>") // capture-pane cuts the blank after the prompt

	p.text("helo")
	p.keys("Left")
	p.text("l")
	p.keys("Enter")
	if got := lastUserText(t, model, 1); got != "hello" {
		t.Fatalf("the model got %q, want %q (the line as edited)", got, "hello")
	}
	p.waitFor("first answer")

	p.keys("Up", "Enter")
	if got := lastUserText(t, model, 2); got != "hello" {
		t.Fatalf("the model got %q, want the line recalled with Up", got)
	}
	p.waitFor("second answer")

	p.paste(block)
	p.keys("Enter")
	if got := lastUserText(t, model, 3); got != block {
		t.Fatalf("the model got %q, want the pasted block %q in one turn", got, block)
	}
	p.waitFor("pasted answer")

	held := make(chan struct{}) // the model never answers this turn
	t.Cleanup(func() { close(held) })
	model.Enqueue(llmtest.Reply{Block: held, Text: "never shown"})
	p.text("tell me a long story")
	p.keys("Enter")
	lastUserText(t, model, 4)
	p.waitFor("(thinking…)")
	p.keys("C-c")
	p.waitFor("stopping the turn")
	p.waitFor("Stopping the running request.")
	model.Enqueue(textReply("still here"))
	p.text("are you there?")
	p.keys("Enter")
	p.waitFor("still here")
	if n := model.RequestCount(); n != 5 {
		t.Fatalf("%d model requests, want 5 (one a turn)", n)
	}
	data, err := os.ReadFile(filepath.Join(dir, "state", "switchboard", "chat_history"))
	if err != nil || !strings.HasPrefix(string(data), "hello\ntell me a long story\n") {
		t.Fatalf("history file %q, %v", data, err)
	}

	p.text("/quit")
	p.keys("Enter")
	p.waitFor("[exited 0]")
}

func textReply(s string) llmtest.Reply { return llmtest.Reply{Text: s} }

// lastUserText waits for the n-th model request and returns its last user
// message.
func lastUserText(t *testing.T, model *llmtest.Server, n int) string {
	t.Helper()
	reqs := model.WaitRequests(t, n, wait)
	return reqs[n-1].LastUserText()
}

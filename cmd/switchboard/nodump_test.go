package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/switchboard-chat/switchboard/internal/polltest"
	"github.com/switchboard-chat/switchboard/internal/syncbuf"
	"github.com/switchboard-chat/switchboard/llm/llmtest"
)

// TestDaemonNotDumpable starts the real binary with a secret in its
// environment and reads /proc/<pid>/environ the way a bash command or an
// MCP server running as the daemon's user would. A process started the
// same way (sleep) is readable, which proves the probe works; the daemon
// is not, since it made itself non-dumpable. As root both run without
// capabilities (setpriv), as a daemon's dedicated user does: root with
// CAP_SYS_PTRACE may read any process, which is what the bash sandbox
// takes away.
func TestDaemonNotDumpable(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binary; skipped with -short")
	}
	var wrap []string
	if os.Geteuid() == 0 {
		setpriv, err := exec.LookPath("setpriv")
		if err != nil {
			t.Fatal("running as root, the test drops capabilities with setpriv (util-linux), which is not on PATH")
		}
		wrap = []string{setpriv, "--inh-caps=-all", "--bounding-set=-all", "--"}
	}
	command := func(args ...string) *exec.Cmd {
		argv := append(append([]string(nil), wrap...), args...)
		return exec.Command(argv[0], argv[1:]...)
	}
	const secret = "sk-nodump-secret-77"
	readEnviron := func(pid int) (string, error) {
		out, err := command("cat", "/proc/"+strconv.Itoa(pid)+"/environ").CombinedOutput()
		return string(out), err
	}

	// The control: an ordinary process started the same way.
	sleeper := command("sleep", "1000")
	sleeper.Env = append(os.Environ(), "SWITCHBOARD_TEST_SECRET="+secret)
	if err := sleeper.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sleeper.Process.Kill(); _ = sleeper.Wait() })
	// setpriv holds its capabilities until it has started sleep.
	var b []byte
	polltest.Until(t, wait, 5*time.Millisecond, func() bool {
		b, _ = os.ReadFile("/proc/" + strconv.Itoa(sleeper.Process.Pid) + "/cmdline")
		return strings.HasPrefix(string(b), "sleep\x00")
	}, func() string { return fmt.Sprintf("sleep did not start: %q", b) })
	if out, err := readEnviron(sleeper.Process.Pid); err != nil || !strings.Contains(out, secret) {
		t.Fatalf("cannot read a dumpable process's environment (%v: %s): the test proves nothing", err, out)
	}

	bin := buildBinary(t)
	model := llmtest.NewServer(t)
	dir := t.TempDir()
	busAddr := freePort(t)
	config := writeConfig(t, dir, busAddr, "", model.URL())
	p := &process{cmd: command(bin, "serve", "--config", config), out: &syncbuf.Buffer{}, done: make(chan error, 1)}
	p.cmd.Env = append(os.Environ(), "SWITCHBOARD_TEST_SECRET="+secret)
	w := p.out
	p.cmd.Stdout, p.cmd.Stderr = w, w
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.done <- p.cmd.Wait() }()
	t.Cleanup(func() {
		_ = p.cmd.Process.Kill()
		<-p.done
		if t.Failed() {
			t.Logf("daemon log:\n%s", w.String())
		}
	})
	nc := connectWhenUp(t, p, "nats://"+busAddr, filepath.Join(dir, "data"))
	nc.Close()
	out, err := readEnviron(p.cmd.Process.Pid)
	if strings.Contains(out, secret) || err == nil {
		t.Fatalf("a process of the daemon's user read its environment (%v):\n%s", err, out)
	}
	if !strings.Contains(out, "Permission denied") {
		t.Errorf("reading the daemon's environment failed for another reason: %s", out)
	}
}

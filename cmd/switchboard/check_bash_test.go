package main

import (
	"os/exec"
	"strings"
	"testing"

	"github.com/switchboard-chat/switchboard/tools"
)

// TestCheckBashSandbox: `switchboard check` warns about an unconfined bash
// and fails where the daemon would refuse to start it (no bwrap).
func TestCheckBashSandbox(t *testing.T) {
	base := checkEnv{}.yaml(t)
	code, out := runCheckFile(t, base+"tools:\n  bash:\n    enabled: true\n    sandbox: none\n")
	if code != 0 {
		t.Fatalf("exit code %d, want 0 (a warning); output:\n%s", code, out)
	}
	wantLine(t, out, "bash", "WARN", "tools.bash.sandbox is none: commands run unconfined")

	noBwrap := func(name string) (string, error) { return "", exec.ErrNotFound }
	r := checkBash(tools.BashConfig{Enabled: true, Sandbox: "bwrap"}, noBwrap)
	if r.status != statusFail || !strings.Contains(r.detail, "apt-get install bubblewrap") {
		t.Errorf("checkBash without bwrap = %+v", r)
	}
	found := func(string) (string, error) { return "/usr/bin/bwrap", nil }
	if r := checkBash(tools.BashConfig{Enabled: true, Sandbox: "bwrap"}, found); r.status != statusOK {
		t.Errorf("checkBash with bwrap = %+v", r)
	}
}

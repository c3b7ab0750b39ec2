package bash

import (
	"os/exec"
	"strings"
	"testing"

	"github.com/switchboard-chat/switchboard/internal/health"
	"github.com/switchboard-chat/switchboard/tools"
)

// TestCheck: `switchboard check` fails where the daemon would refuse to
// start the bash tool (no bwrap) and warns about an unconfined one.
func TestCheck(t *testing.T) {
	noBwrap := func(name string) (string, error) { return "", exec.ErrNotFound }
	r := Check(tools.BashConfig{Enabled: true, Sandbox: "bwrap"}, noBwrap)
	if r.Status != health.Fail || !strings.Contains(r.Detail, "apt-get install bubblewrap") {
		t.Errorf("Check without bwrap = %+v", r)
	}
	found := func(string) (string, error) { return "/usr/bin/bwrap", nil }
	if r := Check(tools.BashConfig{Enabled: true, Sandbox: "bwrap"}, found); r.Status != health.OK {
		t.Errorf("Check with bwrap = %+v", r)
	}
	if r := Check(tools.BashConfig{Enabled: true, Sandbox: SandboxNone}, found); r.Status != health.Warn || r.Name != "bash" || !strings.Contains(r.Detail, "tools.bash.sandbox is none: commands run unconfined") {
		t.Errorf("Check with sandbox none = %+v", r)
	}
}

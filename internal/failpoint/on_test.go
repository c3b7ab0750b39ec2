//go:build failpoints

package failpoint

import (
	"errors"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
)

func TestParse(t *testing.T) {
	got, err := parse("after-commit:3, mid-tool")
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[AfterCommit].at != 3 || got[MidTool].at != 1 {
		t.Fatalf("parse = %v", got)
	}
	if got, err := parse(""); err != nil || got != nil {
		t.Fatalf("parse(\"\") = %v, %v", got, err)
	}
	for _, bad := range []string{"after-comit", "after-commit:0", "after-commit:x", "received:-1", ","} {
		if _, err := parse(bad); err == nil {
			t.Errorf("parse(%q) accepted", bad)
		}
	}
}

// TestHitKillsAtTheChosenHit runs this test binary as a child that hits
// mid-tool five times with SWITCHBOARD_FAILPOINT=mid-tool:3: the child must
// die by SIGKILL at the third hit, after printing two "survived" lines.
func TestHitKillsAtTheChosenHit(t *testing.T) {
	if os.Getenv("FAILPOINT_CHILD") == "1" {
		for range 5 {
			Hit(Received) // not armed: never kills
			Hit(MidTool)
			os.Stdout.WriteString("survived\n")
		}
		return
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestHitKillsAtTheChosenHit$")
	cmd.Env = append(os.Environ(), "FAILPOINT_CHILD=1", EnvVar+"=mid-tool:3")
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var ee *exec.ExitError
	if !errors.As(err, &ee) {
		t.Fatalf("child: %v, want death by SIGKILL\n%s", err, stdout.String())
	}
	if ws, ok := ee.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
		t.Fatalf("child ended with %v, want SIGKILL", ee)
	}
	if n := strings.Count(stdout.String(), "survived"); n != 2 {
		t.Errorf("child survived %d hits, want 2:\n%s", n, stdout.String())
	}
	if !strings.Contains(stderr.String(), "failpoint: SIGKILL at mid-tool (hit 3)") {
		t.Errorf("stderr = %q", stderr.String())
	}
}

// TestUnknownPointExits: a typo in the variable stops the process at the
// first Hit instead of silently never crashing.
func TestUnknownPointExits(t *testing.T) {
	if os.Getenv("FAILPOINT_CHILD") == "1" {
		Hit(MidTool)
		return
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestUnknownPointExits$")
	cmd.Env = append(os.Environ(), "FAILPOINT_CHILD=1", EnvVar+"=mid-tol")
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 2 || !strings.Contains(string(out), `unknown point "mid-tol"`) {
		t.Fatalf("child: %v\n%s", err, out)
	}
}

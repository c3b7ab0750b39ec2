package main

import "testing"

// TestCheckBashSandbox: `switchboard check` warns about an unconfined bash
// (bash.Check, tested in package bash, also fails without bwrap).
func TestCheckBashSandbox(t *testing.T) {
	base := checkEnv{}.yaml(t)
	code, out := runCheckFile(t, base+"tools:\n  bash:\n    enabled: true\n    sandbox: none\n")
	if code != 0 {
		t.Fatalf("exit code %d, want 0 (a warning); output:\n%s", code, out)
	}
	wantLine(t, out, "bash", "WARN", "tools.bash.sandbox is none: commands run unconfined")
}

package workspace_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/switchboard-chat/switchboard/internal/health"
	"github.com/switchboard-chat/switchboard/workspace"
)

func TestCheck(t *testing.T) {
	dir := t.TempDir()
	for _, name := range []string{"AGENT.md", "USER.md"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte("# "+name), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "RULE.md"), nil, 0o600); err != nil { // empty is fine
		t.Fatal(err)
	}
	r := workspace.Check(dir)
	want := dir + " is writable; readable: AGENT.md, USER.md, RULE.md; not present: MEMORY.md"
	if r.Status != health.OK || r.Detail != want || r.Name != "workspace" {
		t.Fatalf("Check = %+v, want OK %q", r, want)
	}

	if err := os.Mkdir(filepath.Join(dir, "MEMORY.md"), 0o700); err != nil {
		t.Fatal(err)
	}
	r = workspace.Check(dir)
	if r.Status != health.Fail || !strings.Contains(r.Detail, filepath.Join(dir, "MEMORY.md")+" is not readable: ") {
		t.Fatalf("Check(MEMORY.md is a directory) = %+v", r)
	}

	missing := filepath.Join(t.TempDir(), "a", "ws")
	if r := workspace.Check(missing); r.Status != health.OK || r.Detail != missing+" does not exist yet; it will be created" {
		t.Fatalf("Check(missing) = %+v", r)
	}
	if _, err := os.Stat(filepath.Dir(missing)); !os.IsNotExist(err) {
		t.Fatalf("check created %s (stat: %v)", filepath.Dir(missing), err)
	}
}

package skills_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/switchboard-chat/switchboard/tools"
	"github.com/switchboard-chat/switchboard/workspace"
	"github.com/switchboard-chat/switchboard/workspace/skills"
)

// Finding 8: a SKILL.md planted as a symbolic link (or hard link) to a
// user's private memory must not publish it to every user through the
// skill catalog.
func TestSkillLinkIntoPrivateFolderRefused(t *testing.T) {
	dir := t.TempDir()
	ws, err := workspace.Open(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ws.Close() })
	secret := "---\nname: %s\ndescription: alice secret memory\n---\nalice secret memory\n"
	alice := filepath.Join(dir, "memory/users/telegram/alice")
	if err := os.MkdirAll(alice, 0o700); err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{"soft", "hard"} {
		if err := os.WriteFile(filepath.Join(alice, n+".md"), []byte(strings.Replace(secret, "%s", n, 1)), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.MkdirAll(filepath.Join(dir, "skills", n), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink("../../memory/users/telegram/alice/soft.md", filepath.Join(dir, "skills/soft/SKILL.md")); err != nil {
		t.Fatal(err)
	}
	if err := os.Link(filepath.Join(alice, "hard.md"), filepath.Join(dir, "skills/hard/SKILL.md")); err != nil {
		t.Fatal(err)
	}
	private := func(rel string) bool { return !strings.HasPrefix(rel, "memory/users/") }
	c := skills.New(ws, skills.Options{Allow: private, LookPath: func(string) (string, error) { return "", nil }}, nil)
	if p := c.PromptSection(); strings.Contains(p, "alice secret") {
		t.Errorf("the prompt section shows Alice's memory: %q", p)
	}
	for _, n := range []string{"soft", "hard"} {
		s, ok := c.Lookup(n)
		if ok && (s.Problem == "" || strings.Contains(s.Description, "secret")) {
			t.Errorf("skill %s = %+v, want it refused", n, s)
		}
		if r, _ := c.Fallback(t.Context(), n, tools.Call{}); strings.Contains(r.Text, "alice secret") {
			t.Errorf("calling skill %s returned Alice's memory: %q", n, r.Text)
		}
	}
}

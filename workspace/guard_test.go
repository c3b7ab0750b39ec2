package workspace_test

import (
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/switchboard-chat/switchboard/workspace"
)

// guardFixture is a workspace with Alice's private folder, a public folder
// and an allow that hides Alice's (and Carol's, not yet created) folder.
func guardFixture(t *testing.T) (*workspace.Workspace, string, workspace.Guard) {
	t.Helper()
	dir := t.TempDir()
	w := open(t, dir)
	mk := func(rel string) {
		if err := os.MkdirAll(filepath.Join(dir, rel), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	mk("memory/users/telegram/alice")
	mk("pub/sub")
	write(t, filepath.Join(dir, "memory/users/telegram/alice/MEMORY.md"), "alice secret\n")
	write(t, filepath.Join(dir, "pub/doc.txt"), "public\n")
	private := []string{"memory/users/telegram/alice", "memory/users/telegram/carol"}
	allow := func(rel string) bool {
		for _, p := range private {
			if rel == p || strings.HasPrefix(rel, p+"/") {
				return false
			}
		}
		return true
	}
	return w, dir, w.Guard(allow)
}

func symlink(t *testing.T, target, link string) {
	t.Helper()
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
}

func readAll(t *testing.T, f *os.File) string {
	t.Helper()
	defer f.Close()
	b, err := io.ReadAll(f)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestGuardSymlinksIntoPrivateFolder(t *testing.T) {
	_, dir, g := guardFixture(t)
	symlink(t, "../memory/users/telegram/alice", filepath.Join(dir, "pub/link"))
	symlink(t, "../memory/users/telegram/alice/MEMORY.md", filepath.Join(dir, "pub/file.md"))
	symlink(t, "../memory/users/telegram/carol", filepath.Join(dir, "pub/later")) // dangling
	symlink(t, "sub/../../memory/users/telegram/alice", filepath.Join(dir, "pub/dotdot"))
	symlink(t, "link", filepath.Join(dir, "pub/chain"))

	for _, rel := range []string{"pub/link", "pub/link/MEMORY.md", "pub/file.md", "pub/dotdot/MEMORY.md", "pub/chain/MEMORY.md", "memory/users/telegram/alice/MEMORY.md"} {
		if f, _, err := g.Open(rel); !errors.Is(err, workspace.ErrDenied) {
			if f != nil {
				f.Close()
			}
			t.Errorf("Open(%s) = %v, want ErrDenied", rel, err)
		}
		for _, flag := range []int{os.O_WRONLY | os.O_TRUNC, os.O_WRONLY | os.O_APPEND | os.O_CREATE} {
			if _, _, err := g.OpenFile(rel, flag, 0o600); !errors.Is(err, workspace.ErrDenied) {
				t.Errorf("OpenFile(%s, %#x) = %v, want ErrDenied", rel, flag, err)
			}
		}
		if g.Visible(rel) {
			t.Errorf("Visible(%s) = true", rel)
		}
	}
	// New files through links, including one to a folder that does not
	// exist yet.
	for _, rel := range []string{"pub/link/USER.md", "pub/later/MEMORY.md"} {
		if err := g.MkdirAll(filepath.Dir(rel), 0o700); !errors.Is(err, workspace.ErrDenied) {
			t.Errorf("MkdirAll(%s) = %v, want ErrDenied", filepath.Dir(rel), err)
		}
		if _, _, err := g.OpenFile(rel, os.O_WRONLY|os.O_CREATE, 0o600); !errors.Is(err, workspace.ErrDenied) {
			t.Errorf("create %s = %v, want ErrDenied", rel, err)
		}
	}
	if _, err := os.Lstat(filepath.Join(dir, "memory/users/telegram/carol")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("carol's folder was created through the dangling link: %v", err)
	}
	if _, err := os.Lstat(filepath.Join(dir, "memory/users/telegram/alice/USER.md")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("alice's USER.md was created through the link: %v", err)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "memory/users/telegram/alice/MEMORY.md")); string(b) != "alice secret\n" {
		t.Errorf("alice's MEMORY.md changed: %q", b)
	}
}

func TestGuardFollowsPublicLinks(t *testing.T) {
	_, dir, g := guardFixture(t)
	symlink(t, "doc.txt", filepath.Join(dir, "pub/alias.txt"))
	symlink(t, "..", filepath.Join(dir, "pub/sub/up"))
	real, err := g.Check("pub/sub/up/alias.txt")
	if err != nil || real != "pub/doc.txt" {
		t.Fatalf("Check = %q, %v; want pub/doc.txt", real, err)
	}
	f, real, err := g.Open("pub/alias.txt")
	if err != nil || real != "pub/doc.txt" {
		t.Fatalf("Open = %q, %v", real, err)
	}
	if got := readAll(t, f); got != "public\n" {
		t.Errorf("read %q", got)
	}
	if !g.Visible("pub/alias.txt") || !g.Visible("pub") || !g.Visible(".") {
		t.Error("public paths must be visible")
	}
	// Writing through a public link writes the target.
	f, _, err = g.OpenFile("pub/alias.txt", os.O_WRONLY|os.O_TRUNC, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString("new\n"); err != nil {
		t.Fatal(err)
	}
	f.Close()
	if b, _ := os.ReadFile(filepath.Join(dir, "pub/doc.txt")); string(b) != "new\n" {
		t.Errorf("doc.txt = %q", b)
	}
	// A new file and its folders.
	if err := g.MkdirAll("pub/sub/up/a/b", 0o700); err != nil {
		t.Fatal(err)
	}
	f, real, err = g.OpenFile("pub/sub/up/a/b/c.txt", os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil || real != "pub/a/b/c.txt" {
		t.Fatalf("create = %q, %v", real, err)
	}
	f.Close()
}

func TestGuardLinkErrors(t *testing.T) {
	outside := t.TempDir()
	_, dir, g := guardFixture(t)
	symlink(t, outside, filepath.Join(dir, "pub/abs"))
	symlink(t, "../../..", filepath.Join(dir, "pub/climb"))
	symlink(t, "loop2", filepath.Join(dir, "pub/loop1"))
	symlink(t, "loop1", filepath.Join(dir, "pub/loop2"))
	for _, rel := range []string{"pub/abs/x", "pub/climb/x", "../x"} {
		if _, err := g.Check(rel); !errors.Is(err, workspace.ErrOutside) {
			t.Errorf("Check(%s) = %v, want ErrOutside", rel, err)
		}
	}
	if _, err := g.Check("pub/loop1"); err == nil || !strings.Contains(err.Error(), "too many symbolic links") {
		t.Errorf("loop: %v", err)
	}
	// Listings still show such links by name.
	if !g.Visible("pub/abs") || !g.Visible("pub/loop1") {
		t.Error("unresolvable public links are listed by name")
	}
	if _, err := g.NoSymlinks().Check("pub/sub/../alias"); err != nil {
		t.Errorf("no link on the way: %v", err)
	}
	symlink(t, "doc.txt", filepath.Join(dir, "pub/alias.txt"))
	if _, _, err := g.NoSymlinks().Open("pub/alias.txt"); !errors.Is(err, workspace.ErrDenied) {
		t.Errorf("NoSymlinks through a link: %v, want ErrDenied", err)
	}
}

func TestGuardRefusesHardLinks(t *testing.T) {
	outside := filepath.Join(t.TempDir(), "secret.txt")
	write(t, outside, "outside secret\n")
	_, dir, g := guardFixture(t)
	if err := os.Link(outside, filepath.Join(dir, "pub/out.txt")); err != nil {
		t.Fatal(err)
	}
	if err := os.Link(filepath.Join(dir, "memory/users/telegram/alice/MEMORY.md"), filepath.Join(dir, "pub/alice.md")); err != nil {
		t.Fatal(err)
	}
	for _, rel := range []string{"pub/out.txt", "pub/alice.md"} {
		_, _, err := g.Open(rel)
		if !errors.Is(err, workspace.ErrHardLink) || !strings.Contains(err.Error(), "more than one hard link") {
			t.Errorf("Open(%s) = %v, want ErrHardLink", rel, err)
		}
		for _, flag := range []int{os.O_WRONLY | os.O_TRUNC, os.O_WRONLY | os.O_APPEND, os.O_RDWR | os.O_CREATE} {
			if _, _, err := g.OpenFile(rel, flag, 0o600); !errors.Is(err, workspace.ErrHardLink) {
				t.Errorf("OpenFile(%s, %#x) = %v, want ErrHardLink", rel, flag, err)
			}
		}
	}
	if b, _ := os.ReadFile(outside); string(b) != "outside secret\n" {
		t.Errorf("outside file changed: %q", b)
	}
	// Folders have several links; they are not refused.
	if f, _, err := g.Open("pub"); err != nil {
		t.Errorf("Open(pub) = %v", err)
	} else {
		f.Close()
	}
}

func TestGuardCatchesSwapAfterCheck(t *testing.T) {
	_, dir, g := guardFixture(t)
	alice := filepath.Join(dir, "memory/users/telegram/alice")
	swap := func(rel, target string) func(string) {
		return func(string) {
			p := filepath.Join(dir, rel)
			if err := os.RemoveAll(p); err != nil {
				t.Error(err)
			}
			if err := os.Symlink(target, p); err != nil {
				t.Error(err)
			}
		}
	}
	cases := []struct {
		name, swapped, target, open string
		flag                        int
	}{
		{"read a file swapped for a link", "pub/doc.txt", "../memory/users/telegram/alice/MEMORY.md", "pub/doc.txt", os.O_RDONLY},
		{"truncate a file swapped for a link", "pub/doc.txt", "../memory/users/telegram/alice/MEMORY.md", "pub/doc.txt", os.O_WRONLY | os.O_TRUNC},
		{"folder swapped under an existing file", "pub/sub", "../memory/users/telegram/alice", "pub/sub/MEMORY.md", os.O_WRONLY | os.O_TRUNC},
		{"folder swapped under a new file", "pub/sub", "../memory/users/telegram/alice", "pub/sub/USER.md", os.O_WRONLY | os.O_CREATE},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if err := os.RemoveAll(filepath.Join(dir, "pub")); err != nil {
				t.Fatal(err)
			}
			if err := os.MkdirAll(filepath.Join(dir, "pub/sub"), 0o700); err != nil {
				t.Fatal(err)
			}
			write(t, filepath.Join(dir, "pub/doc.txt"), "public\n")
			write(t, filepath.Join(dir, "pub/sub/MEMORY.md"), "public too\n")
			restore := workspace.SetTestHookResolved(swap(c.swapped, c.target))
			defer restore()
			f, _, err := g.OpenFile(c.open, c.flag, 0o600)
			if f != nil {
				f.Close()
			}
			if !errors.Is(err, workspace.ErrChanged) {
				t.Errorf("OpenFile(%s) after the swap = %v, want ErrChanged", c.open, err)
			}
			if b, _ := os.ReadFile(filepath.Join(alice, "MEMORY.md")); string(b) != "alice secret\n" {
				t.Errorf("alice's MEMORY.md = %q", b)
			}
			if _, err := os.Lstat(filepath.Join(alice, "USER.md")); !errors.Is(err, fs.ErrNotExist) {
				t.Errorf("a file was created in alice's folder: %v", err)
			}
		})
	}
}

func TestInboxVisible(t *testing.T) {
	dirOf := func(ch, chat string) string {
		d, err := workspace.InboxFolder(ch, chat)
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	if got := dirOf("telegram", "-100123"); got != "inbox/telegram/-100123" {
		t.Errorf("InboxFolder = %q", got)
	}
	if got := dirOf("slack", "a/../b"); got != "inbox/slack/a%2F%2E%2E%2Fb" {
		t.Errorf("InboxFolder escapes ids: %q", got)
	}
	cases := []struct {
		rel  string
		want bool
	}{
		{"notes.txt", true},
		{"inboxes/x", true},
		{"inbox", true},
		{"inbox/telegram", true},
		{"inbox/telegram/42", true},
		{"inbox/telegram/42/doc.pdf", true},
		{"inbox/telegram/42/sub/doc.pdf", true},
		{"inbox/telegram/43", false},
		{"inbox/telegram/43/doc.pdf", false},
		{"inbox/telegram/420/doc.pdf", false},
		{"inbox/telegram/doc.pdf", false},
		{"inbox/slack", false},
		{"inbox/slack/42/doc.pdf", false},
		{"inbox/legacy.pdf", false},
	}
	for _, c := range cases {
		if got := workspace.InboxVisible("telegram", "42", c.rel); got != c.want {
			t.Errorf("InboxVisible(telegram, 42, %s) = %v, want %v", c.rel, got, c.want)
		}
	}
	if workspace.InboxVisible("", "", "inbox/telegram") || !workspace.InboxVisible("", "", "inbox") {
		t.Error("a session without a chat sees only inbox/ itself")
	}
}

func TestSharedInput(t *testing.T) {
	for rel, want := range map[string]bool{
		"AGENT.md": true, "USER.md": true, "RULE.md": true, "MEMORY.md": true, "HEARTBEAT.md": true,
		"skills": true, "skills/deploy/SKILL.md": true, "memory": true, "memory/2025-01-01.md": true,
		"memory/users": true, "memory/chats": true, "memory/notes/x.md": true,
		"memory/users/telegram/42/MEMORY.md": false, "memory/chats/telegram/-1/users/7/MEMORY.md": false,
		".": false, "pub/AGENT.md": false, "inbox/telegram/1/a.txt": false, "AGENT.md.bak": false, "skillsx": false, "memoryx/a": false,
	} {
		if got := workspace.SharedInput(rel); got != want {
			t.Errorf("SharedInput(%q) = %t, want %t", rel, got, want)
		}
	}
}

// TestGuardWrites: a guard with a write policy reads what it refuses to
// write, and refuses the write whether the path is given directly,
// reached through a symbolic link, or still to be created (a file or a
// folder); the refusal is ErrReadOnly and changes nothing.
func TestGuardWrites(t *testing.T) {
	dir := t.TempDir()
	w := open(t, dir)
	if err := os.MkdirAll(filepath.Join(dir, "pub"), 0o700); err != nil {
		t.Fatal(err)
	}
	symlink(t, "../AGENT.md", filepath.Join(dir, "pub/agent.md"))
	symlink(t, "..", filepath.Join(dir, "pub/top"))
	before, err := os.ReadFile(filepath.Join(dir, "AGENT.md"))
	if err != nil {
		t.Fatal(err)
	}
	g := w.Guard(nil).Writes(func(rel string) bool { return !workspace.SharedInput(rel) })
	for _, rel := range []string{"AGENT.md", "pub/agent.md", "pub/top/AGENT.md"} {
		f, real, err := g.Open(rel)
		if err != nil || real != "AGENT.md" {
			t.Fatalf("Open(%s) = %q, %v", rel, real, err)
		}
		f.Close()
		for _, flag := range []int{os.O_WRONLY | os.O_TRUNC, os.O_RDWR, os.O_WRONLY | os.O_APPEND} {
			if f, _, err := g.OpenFile(rel, flag, 0o600); !errors.Is(err, workspace.ErrReadOnly) {
				if f != nil {
					f.Close()
				}
				t.Errorf("OpenFile(%s, %#x) = %v, want ErrReadOnly", rel, flag, err)
			}
		}
	}
	for _, rel := range []string{"HEARTBEAT.md", "pub/top/HEARTBEAT.md", "skills/x/SKILL.md"} {
		if _, _, err := g.OpenFile(rel, os.O_WRONLY|os.O_CREATE, 0o600); !errors.Is(err, workspace.ErrReadOnly) {
			t.Errorf("create %s = %v, want ErrReadOnly", rel, err)
		}
	}
	for _, rel := range []string{"skills/x", "pub/top/skills", "memory/2025"} {
		if err := g.MkdirAll(rel, 0o700); !errors.Is(err, workspace.ErrReadOnly) {
			t.Errorf("MkdirAll(%s) = %v, want ErrReadOnly", rel, err)
		}
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "AGENT.md")); string(b) != string(before) {
		t.Errorf("AGENT.md changed: %q", b)
	}
	for _, rel := range []string{"HEARTBEAT.md", "skills", "memory"} {
		if _, err := os.Lstat(filepath.Join(dir, rel)); err == nil {
			t.Errorf("%s was created", rel)
		}
	}
	// What the policy accepts is written; so is everything with no policy.
	if err := g.MkdirAll("memory/users/telegram/42", 0o700); err != nil {
		t.Fatal(err)
	}
	f, _, err := g.OpenFile("memory/users/telegram/42/MEMORY.md", os.O_WRONLY|os.O_CREATE, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	f.Close()
	if f, _, err = w.Guard(nil).OpenFile("pub/agent.md", os.O_WRONLY|os.O_APPEND, 0); err != nil {
		t.Fatalf("no write policy: %v", err)
	}
	f.Close()
}

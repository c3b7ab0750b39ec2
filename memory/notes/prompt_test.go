package notes_test

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/switchboard-chat/switchboard/memory/memcfg"
	"github.com/switchboard-chat/switchboard/memory/notes"
)

// BenchmarkPrompt is the memory of one private turn whose speaker has a
// MEMORY.md and a USER.md of their own, all unchanged (served from the
// cache; what remains is checking each file's stamp):
//
//	go test ./memory/notes -run '^$' -bench Prompt -benchmem
func BenchmarkPrompt(b *testing.B) {
	dir := b.TempDir()
	root, err := os.OpenRoot(dir)
	if err != nil {
		b.Fatal(err)
	}
	defer root.Close()
	n, err := notes.New(root, notes.Options{Scope: memcfg.ScopeUser})
	if err != nil {
		b.Fatal(err)
	}
	for rel, content := range map[string]string{"MEMORY.md": "shared\n", "memory/users/telegram/100/MEMORY.md": "alice\n", "memory/users/telegram/100/USER.md": "Name: Alice\n"} {
		if err := os.MkdirAll(filepath.Join(dir, filepath.Dir(filepath.FromSlash(rel))), 0o700); err != nil {
			b.Fatal(err)
		}
		if err := root.WriteFile(rel, []byte(content), 0o600); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportAllocs()
	for b.Loop() {
		p, err := n.Prompt(alicePrivate)
		if err != nil || p.User == "" || len(p.Memory) != 2 {
			b.Fatalf("prompt %+v, %v", p, err)
		}
	}
}

// TestPromptUserFileFollowsEdits checks the speaker's USER.md, found and
// checked against its cache with one stat: an edit made just before a
// turn is in that turn's memory, a removed file or a folder in its place
// is no profile (and no error), a new file is read.
func TestPromptUserFileFollowsEdits(t *testing.T) {
	n, dir := newNotes(t, memcfg.ScopeUser)
	rel := "memory/users/telegram/100/USER.md"
	user := func() string {
		t.Helper()
		p, err := n.Prompt(alicePrivate)
		if err != nil {
			t.Fatal(err)
		}
		return p.User
	}
	if u := user(); u != "" {
		t.Fatalf("no USER.md yet, got %q", u)
	}
	writeFile(t, dir, rel, "Name: Alice\n")
	if u := user(); u != "Name: Alice\n" {
		t.Fatalf("new USER.md: %q", u)
	}
	writeFile(t, dir, rel, "Name: Alicia\n") // same size: the stamp's time and inode tell
	future := time.Now().Add(time.Hour)
	if err := os.Chtimes(filepath.Join(dir, rel), future, future); err != nil {
		t.Fatal(err)
	}
	if u := user(); u != "Name: Alicia\n" {
		t.Fatalf("edited USER.md: %q", u)
	}
	if err := os.Remove(filepath.Join(dir, rel)); err != nil {
		t.Fatal(err)
	}
	if u := user(); u != "" {
		t.Fatalf("removed USER.md: %q", u)
	}
	if err := os.Mkdir(filepath.Join(dir, rel), 0o700); err != nil {
		t.Fatal(err)
	}
	if u := user(); u != "" {
		t.Fatalf("a folder named USER.md: %q", u)
	}
}

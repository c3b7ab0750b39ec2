package workspace_test

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/switchboard-chat/switchboard/workspace"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func open(t *testing.T, dir string) *workspace.Workspace {
	t.Helper()
	w, err := workspace.Open(dir, nil)
	if err != nil {
		t.Fatalf("Open(%s) = %v", dir, err)
	}
	t.Cleanup(func() { _ = w.Close() })
	return w
}

func write(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
}

func TestOpenCreatesDefaults(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "ws", "nested")
	w := open(t, dir)
	if w.Dir() != dir {
		t.Errorf("Dir() = %q, want %q", w.Dir(), dir)
	}
	for _, name := range workspace.PromptFiles {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil || len(b) == 0 {
			t.Errorf("default %s: %d bytes, %v", name, len(b), err)
		}
	}
	agent, _ := os.ReadFile(filepath.Join(dir, workspace.AgentFile))
	for _, want := range []string{"group", "USER.md", "MEMORY.md", "AGENT.md"} {
		if !strings.Contains(string(agent), want) {
			t.Errorf("default AGENT.md does not mention %q", want)
		}
	}
	rule, _ := os.ReadFile(filepath.Join(dir, workspace.RuleFile))
	for _, want := range []string{"workspace", "secret", "Confirm"} {
		if !strings.Contains(string(rule), want) {
			t.Errorf("default RULE.md does not mention %q", want)
		}
	}
	if w.Root() == nil {
		t.Fatal("Root() is nil")
	}
	if _, err := w.Root().Stat(workspace.AgentFile); err != nil {
		t.Errorf("Root().Stat(AGENT.md) = %v", err)
	}
}

func TestOpenNeverOverwrites(t *testing.T) {
	dir := t.TempDir()
	write(t, filepath.Join(dir, workspace.UserFile), "# User\nName: Ann\n")
	open(t, dir)
	b, _ := os.ReadFile(filepath.Join(dir, workspace.UserFile))
	if string(b) != "# User\nName: Ann\n" {
		t.Errorf("USER.md was overwritten: %q", b)
	}
	// A second Open of the same folder keeps edits too.
	write(t, filepath.Join(dir, workspace.AgentFile), "custom")
	open(t, dir)
	if b, _ := os.ReadFile(filepath.Join(dir, workspace.AgentFile)); string(b) != "custom" {
		t.Errorf("AGENT.md was overwritten: %q", b)
	}
}

func TestOpenErrors(t *testing.T) {
	if _, err := workspace.Open("", nil); err == nil {
		t.Error(`Open("") succeeded`)
	}
	file := filepath.Join(t.TempDir(), "file")
	write(t, file, "x")
	if _, err := workspace.Open(file, nil); err == nil {
		t.Error("Open of a regular file succeeded")
	}
}

func TestPromptFilesOrderAndSkips(t *testing.T) {
	dir := t.TempDir()
	w := open(t, dir)
	write(t, filepath.Join(dir, workspace.UserFile), "  \n\n")
	if err := os.Remove(filepath.Join(dir, workspace.RuleFile)); err != nil {
		t.Fatal(err)
	}
	files, err := w.PromptFiles()
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, f := range files {
		names = append(names, f.Name)
		if f.Content == "" || f.Truncated {
			t.Errorf("%s: content %q, truncated %v", f.Name, f.Content, f.Truncated)
		}
	}
	if got := strings.Join(names, ","); got != "AGENT.md,MEMORY.md" {
		t.Errorf("PromptFiles names = %s, want AGENT.md,MEMORY.md (empty USER.md and missing RULE.md skipped)", got)
	}
	write(t, filepath.Join(dir, workspace.RuleFile), "rules")
	files, _ = w.PromptFiles()
	if len(files) != 3 || files[1].Name != workspace.RuleFile || files[1].Content != "rules" {
		t.Errorf("after creating RULE.md: %+v", files)
	}
}

func TestPromptFilesCache(t *testing.T) {
	dir := t.TempDir()
	w := open(t, dir)
	if _, err := w.PromptFiles(); err != nil {
		t.Fatal(err)
	}
	if got := w.Reads(); got != 4 {
		t.Fatalf("Reads() after first call = %d, want 4", got)
	}
	for range 3 {
		if _, err := w.PromptFiles(); err != nil {
			t.Fatal(err)
		}
	}
	if got := w.Reads(); got != 4 {
		t.Errorf("Reads() after unchanged calls = %d, want 4 (no re-read)", got)
	}

	// Same size, new content, new mtime: picked up.
	path := filepath.Join(dir, workspace.AgentFile)
	old, _ := os.ReadFile(path)
	edited := strings.Replace(string(old), "You", "Yuo", 1)
	write(t, path, edited)
	mtime := time.Now().Add(time.Hour)
	if err := os.Chtimes(path, mtime, mtime); err != nil {
		t.Fatal(err)
	}
	files, err := w.PromptFiles()
	if err != nil {
		t.Fatal(err)
	}
	if files[0].Content != edited {
		t.Error("edited AGENT.md was not picked up")
	}
	if got := w.Reads(); got != 5 {
		t.Errorf("Reads() after one edit = %d, want 5", got)
	}

	// Replaced by rename (new inode) with the same size and mtime: picked up.
	tmp := filepath.Join(dir, "agent.tmp")
	renamed := strings.Replace(edited, "Yuo", "You", 1)
	write(t, tmp, renamed)
	if err := os.Chtimes(tmp, mtime, mtime); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
	files, _ = w.PromptFiles()
	if files[0].Content != renamed {
		t.Error("AGENT.md replaced by rename (same size and mtime) was not picked up")
	}

	// Deleted, then recreated.
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	files, _ = w.PromptFiles()
	if len(files) != 3 || files[0].Name != workspace.UserFile {
		t.Errorf("after deleting AGENT.md: %d files, first %s", len(files), files[0].Name)
	}
	write(t, path, "back")
	files, _ = w.PromptFiles()
	if files[0].Content != "back" {
		t.Errorf("recreated AGENT.md = %q", files[0].Content)
	}
}

func TestPromptFilesMemoryTail(t *testing.T) {
	tests := []struct {
		name      string
		lines     int
		width     int
		wantFirst string
		wantLines int
		truncated bool
	}{
		{"short", 10, 10, "line 0000", 10, false},
		{"exactly 200 lines", 200, 10, "line 0000", 200, false},
		{"over 200 lines", 500, 10, "line 0300", 200, true},
		{"over 25000 bytes", 150, 300, "line 0068", 82, true}, // 302-byte lines
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			w := open(t, dir)
			var b strings.Builder
			for i := range tt.lines {
				line := fmt.Sprintf("line %04d ", i)
				b.WriteString(line + strings.Repeat("x", tt.width-len(line)+1) + "\n")
			}
			write(t, filepath.Join(dir, workspace.MemoryFile), b.String())
			files, err := w.PromptFiles()
			if err != nil {
				t.Fatal(err)
			}
			mem := files[len(files)-1]
			if mem.Name != workspace.MemoryFile {
				t.Fatalf("last file = %s", mem.Name)
			}
			if mem.Truncated != tt.truncated {
				t.Errorf("Truncated = %v, want %v", mem.Truncated, tt.truncated)
			}
			if len(mem.Content) > workspace.MemoryMaxBytes {
				t.Errorf("content is %d bytes, more than %d", len(mem.Content), workspace.MemoryMaxBytes)
			}
			lines := strings.Split(strings.TrimSuffix(mem.Content, "\n"), "\n")
			if len(lines) != tt.wantLines || !strings.HasPrefix(lines[0], tt.wantFirst) {
				t.Errorf("got %d lines starting %q; want %d starting %q", len(lines), lines[0][:9], tt.wantLines, tt.wantFirst)
			}
			if !strings.HasPrefix(lines[len(lines)-1], fmt.Sprintf("line %04d", tt.lines-1)) {
				t.Errorf("last line %q is not the file's last line", lines[len(lines)-1])
			}
		})
	}
}

func TestPromptFilesMemoryOneLongLine(t *testing.T) {
	dir := t.TempDir()
	w := open(t, dir)
	// 30,000 bytes without a newline, made of 3-byte runes.
	write(t, filepath.Join(dir, workspace.MemoryFile), strings.Repeat("€", 10000))
	files, err := w.PromptFiles()
	if err != nil {
		t.Fatal(err)
	}
	mem := files[len(files)-1]
	if !mem.Truncated || mem.Content == "" || len(mem.Content) > workspace.MemoryMaxBytes || strings.ContainsRune(mem.Content, '\uFFFD') {
		t.Errorf("long line: truncated %v, %d bytes, valid runes %v", mem.Truncated, len(mem.Content), !strings.ContainsRune(mem.Content, '\uFFFD'))
	}
}

func TestPromptFilesNotRegular(t *testing.T) {
	dir := t.TempDir()
	w := open(t, dir)
	if err := os.Remove(filepath.Join(dir, workspace.RuleFile)); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(dir, workspace.RuleFile), 0o700); err != nil {
		t.Fatal(err)
	}
	if _, err := w.PromptFiles(); err == nil || !strings.Contains(err.Error(), "RULE.md") {
		t.Errorf("PromptFiles with RULE.md a folder = %v, want an error naming RULE.md", err)
	}
}

func TestPromptFilesSymlinkOutsideRefused(t *testing.T) {
	dir := t.TempDir()
	w := open(t, dir)
	outside := filepath.Join(t.TempDir(), "secret.md")
	write(t, outside, "outside-only-QX7")
	path := filepath.Join(dir, workspace.UserFile)
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, path); err != nil {
		t.Fatal(err)
	}
	files, err := w.PromptFiles()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		if strings.Contains(f.Content, "outside-only-QX7") {
			t.Errorf("PromptFiles followed a symlink out of the workspace: %s = %q", f.Name, f.Content)
		}
	}
}

// TestPromptFilesPlantedLinksLeftOut: the prompt files enter every user's
// prompt, so a MEMORY.md (or USER.md) replaced by a symbolic or hard link
// to a user's private memory file must not show that file to everyone.
func TestPromptFilesPlantedLinksLeftOut(t *testing.T) {
	for _, kind := range []string{"symlink", "hardlink"} {
		t.Run(kind, func(t *testing.T) {
			dir := t.TempDir()
			w := open(t, dir)
			if _, err := w.PromptFiles(); err != nil { // fill the cache first
				t.Fatal(err)
			}
			private := filepath.Join(dir, "memory", "users", "telegram", "alice", "MEMORY.md")
			if err := os.MkdirAll(filepath.Dir(private), 0o700); err != nil {
				t.Fatal(err)
			}
			write(t, private, "- Alice's PIN hint is blue whale")
			for _, name := range []string{workspace.MemoryFile, workspace.UserFile} {
				path := filepath.Join(dir, name)
				if err := os.Remove(path); err != nil {
					t.Fatal(err)
				}
				var err error
				if kind == "symlink" {
					err = os.Symlink("memory/users/telegram/alice/MEMORY.md", path)
				} else {
					err = os.Link(private, path)
				}
				if err != nil {
					t.Fatal(err)
				}
			}
			files, err := w.PromptFiles()
			if err != nil {
				t.Fatalf("PromptFiles with planted links = %v, want the links left out", err)
			}
			for _, f := range files {
				if strings.Contains(f.Content, "blue whale") {
					t.Fatalf("%s through a %s put Alice's private memory into the shared prompt", f.Name, kind)
				}
				if f.Name == workspace.MemoryFile || f.Name == workspace.UserFile {
					t.Errorf("%s (a %s) is in the prompt", f.Name, kind)
				}
			}
		})
	}
}

func TestPromptFilesConcurrent(t *testing.T) {
	dir := t.TempDir()
	w := open(t, dir)
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			for j := range 20 {
				if i == 0 { // atomic replace, as editors do
					tmp := filepath.Join(dir, "mem.tmp")
					write(t, tmp, fmt.Sprintf("note %d\n", j))
					if err := os.Rename(tmp, filepath.Join(dir, workspace.MemoryFile)); err != nil {
						t.Error(err)
					}
				}
				files, err := w.PromptFiles()
				if err != nil {
					t.Error(err)
					return
				}
				if len(files) != 4 {
					t.Errorf("got %d files", len(files))
				}
			}
		})
	}
	wg.Wait()
}

func TestRel(t *testing.T) {
	dir := t.TempDir()
	w := open(t, dir)
	ok := []struct{ in, want string }{
		{"", "."},
		{".", "."},
		{"a.txt", "a.txt"},
		{"./a/b/../c.txt", filepath.Join("a", "c.txt")},
		{"a/", "a"},
		{dir, "."},
		{filepath.Join(dir, "notes", "x.md"), filepath.Join("notes", "x.md")},
		{dir + "/sub/../y", "y"},
		{"..a", "..a"},
	}
	for _, tt := range ok {
		got, err := w.Rel(tt.in)
		if err != nil || got != tt.want {
			t.Errorf("Rel(%q) = %q, %v; want %q", tt.in, got, err, tt.want)
		}
	}
	bad := []string{"..", "../x", "a/../../x", "/etc/passwd", filepath.Dir(dir), dir + "/../other", dir + "x/y"}
	for _, in := range bad {
		if got, err := w.Rel(in); !errors.Is(err, workspace.ErrOutside) {
			t.Errorf("Rel(%q) = %q, %v; want ErrOutside", in, got, err)
		}
	}
	if _, err := w.Rel("a\x00b"); err == nil {
		t.Error("Rel accepted a NUL byte")
	}
}

func TestRelThroughSymlinkedDir(t *testing.T) {
	real := t.TempDir()
	link := filepath.Join(t.TempDir(), "ws")
	if err := os.Symlink(real, link); err != nil {
		t.Fatal(err)
	}
	w := open(t, link)
	for _, in := range []string{filepath.Join(link, "a"), filepath.Join(real, "a")} {
		if got, err := w.Rel(in); err != nil || got != "a" {
			t.Errorf("Rel(%q) = %q, %v; want a", in, got, err)
		}
	}
}

func TestCloseIdempotent(t *testing.T) {
	w, err := workspace.Open(t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if err := w.Close(); err != nil {
			t.Fatalf("Close() = %v", err)
		}
	}
	if _, err := w.PromptFiles(); err == nil {
		t.Error("PromptFiles after Close succeeded")
	}
}

func TestReadText(t *testing.T) {
	dir := t.TempDir()
	ws, err := workspace.Open(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer ws.Close()
	if err := os.WriteFile(filepath.Join(dir, "p.md"), []byte("prompt"), 0o600); err != nil {
		t.Fatal(err)
	}
	if got, err := ws.ReadText("p.md"); err != nil || got != "prompt" {
		t.Fatalf("ReadText = %q, %v", got, err)
	}
	if _, err := ws.ReadText("../outside"); !errors.Is(err, workspace.ErrOutside) {
		t.Fatalf("escape: %v", err)
	}
	if _, err := ws.ReadText("missing.md"); err == nil {
		t.Fatal("missing file read")
	}
}

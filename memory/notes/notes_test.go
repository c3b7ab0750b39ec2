package notes_test

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/switchboard-chat/switchboard/bus"
	"github.com/switchboard-chat/switchboard/memory/memcfg"
	"github.com/switchboard-chat/switchboard/memory/notes"
)

func newNotes(t *testing.T, scope string) (*notes.Notes, string) {
	t.Helper()
	dir := t.TempDir()
	root, err := os.OpenRoot(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = root.Close() })
	n, err := notes.New(root, notes.Options{Scope: scope})
	if err != nil {
		t.Fatal(err)
	}
	return n, dir
}

func writeFile(t *testing.T, dir, rel, content string) {
	t.Helper()
	p := filepath.Join(dir, filepath.FromSlash(rel))
	if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
}

func readFile(t *testing.T, dir, rel string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, filepath.FromSlash(rel)))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

var (
	alicePrivate = notes.Scope{Speaker: bus.Speaker{Channel: "telegram", ChatID: "100", UserID: "100"}}
	aliceInGroup = notes.Scope{Speaker: bus.Speaker{Channel: "telegram", ChatID: "-500", UserID: "100", IsGroup: true}}
	bobInGroup   = notes.Scope{Speaker: bus.Speaker{Channel: "telegram", ChatID: "-500", UserID: "200", IsGroup: true}}
	bobPrivate   = notes.Scope{Speaker: bus.Speaker{Channel: "telegram", ChatID: "200", UserID: "200"}}
)

func TestNewRejectsBadInput(t *testing.T) {
	if _, err := notes.New(nil, notes.Options{}); err == nil {
		t.Error("New(nil root) succeeded")
	}
	root, err := os.OpenRoot(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	if _, err := notes.New(root, notes.Options{Scope: "everyone"}); err == nil || !strings.Contains(err.Error(), "memory.scope") {
		t.Errorf("New(scope everyone) = %v, want an error naming memory.scope", err)
	}
}

func TestComponent(t *testing.T) {
	seen := map[string]string{}
	long := strings.Repeat("é", 100)
	for _, id := range []string{"42", "-100123", "..", ".", "a/b", `a\b`, "user@host", "U0ABC", "u0abc", long, long + "x", strings.Repeat("%", 200)} {
		c, err := notes.Component(id)
		if err != nil {
			t.Fatalf("Component(%q) = %v", id, err)
		}
		if c == "" || c == "." || c == ".." || strings.ContainsAny(c, `/\.`) || len(c) > 128 {
			t.Errorf("Component(%q) = %q: not one safe path component", id, c)
		}
		if prev, dup := seen[c]; dup {
			t.Errorf("Component(%q) = Component(%q) = %q", id, prev, c)
		}
		seen[c] = id
	}
	if c, _ := notes.Component("a.b"); c != "a%2Eb" {
		t.Errorf(`Component("a.b") = %q, want the %%XX file-name encoding a%%2Eb`, c)
	}
	if _, err := notes.Component(""); !errors.Is(err, notes.ErrScope) {
		t.Errorf(`Component("") = %v, want ErrScope`, err)
	}
}

func TestFoldersPerScope(t *testing.T) {
	user, _ := newNotes(t, memcfg.ScopeUser)
	shared, _ := newNotes(t, memcfg.ScopeShared)
	for _, tt := range []struct {
		name string
		n    *notes.Notes
		s    notes.Scope
		core string
	}{
		{"user private", user, alicePrivate, "memory/users/telegram/100/MEMORY.md"},
		{"user group", user, aliceInGroup, "memory/chats/telegram/-500/users/100/MEMORY.md"},
		{"user group notes", user, notes.Scope{GroupNotes: true, Speaker: bus.Speaker{Channel: "telegram", ChatID: "-500", IsGroup: true}}, "memory/chats/telegram/-500/MEMORY.md"},
		{"user odd ids", user, notes.Scope{Speaker: bus.Speaker{Channel: "slack", UserID: "../../etc", ChatID: "x"}}, "memory/users/slack/%2E%2E%2F%2E%2E%2Fetc/MEMORY.md"},
		{"shared private", shared, alicePrivate, "MEMORY.md"},
		{"shared group", shared, aliceInGroup, "MEMORY.md"},
	} {
		got, err := tt.n.CoreFile(tt.s)
		if err != nil || got != tt.core {
			t.Errorf("%s: CoreFile = %q, %v; want %q", tt.name, got, err, tt.core)
		}
	}
	for _, s := range []notes.Scope{{Speaker: bus.Speaker{UserID: "1"}}, {Speaker: bus.Speaker{Channel: "telegram"}}, {Speaker: bus.Speaker{Channel: "telegram", UserID: "1", IsGroup: true}}} {
		if _, err := user.CoreFile(s); !errors.Is(err, notes.ErrScope) {
			t.Errorf("CoreFile(%+v) = %v, want ErrScope", s, err)
		}
	}
	day := time.Date(2025, 3, 4, 23, 30, 0, 0, time.UTC)
	f, _ := user.WriteFolder(alicePrivate)
	if got := f.Daily(day); got != "memory/users/telegram/100/2025-03-04.md" {
		t.Errorf("Daily = %q", got)
	}
	if got := notes.SharedFolder().Daily(day); got != "memory/2025-03-04.md" {
		t.Errorf("shared Daily = %q", got)
	}
}

func TestWritesGoToTheCallersFolder(t *testing.T) {
	n, dir := newNotes(t, memcfg.ScopeUser)
	now := time.Date(2025, 3, 4, 9, 15, 0, 0, time.UTC)
	mustWrite := func(s notes.Scope, kind, text string) string {
		t.Helper()
		rel, err := n.Write(s, kind, text, now)
		if err != nil {
			t.Fatalf("Write(%+v, %s) = %v", s, kind, err)
		}
		return rel
	}
	if rel := mustWrite(alicePrivate, notes.KindCore, "Alice is allergic to peanuts"); rel != "memory/users/telegram/100/MEMORY.md" {
		t.Errorf("private core went to %s", rel)
	}
	mustWrite(alicePrivate, notes.KindCore, "- prefers tea")
	mustWrite(alicePrivate, notes.KindCore, "Projects:\n- switchboard")
	if got := readFile(t, dir, "memory/users/telegram/100/MEMORY.md"); got != "# Memory\n\n- Alice is allergic to peanuts\n- prefers tea\n\nProjects:\n- switchboard\n" {
		t.Errorf("MEMORY.md = %q", got)
	}
	group := aliceInGroup
	group.GroupNotes = true
	if rel := mustWrite(group, notes.KindDaily, "deploy freeze starts Monday"); rel != "memory/chats/telegram/-500/2025-03-04.md" {
		t.Errorf("group daily went to %s", rel)
	}
	if rel := mustWrite(group, notes.KindCore, "team standup at 10"); rel != "memory/chats/telegram/-500/MEMORY.md" {
		t.Errorf("group core went to %s", rel)
	}
	if rel := mustWrite(aliceInGroup, notes.KindCore, "Alice leads the standup"); rel != "memory/chats/telegram/-500/users/100/MEMORY.md" {
		t.Errorf("in-group core went to %s", rel)
	}
	mustWrite(group, notes.KindDaily, "decided:\nuse NATS")
	if got := readFile(t, dir, "memory/chats/telegram/-500/2025-03-04.md"); got != "# 2025-03-04\n\n- 09:15 deploy freeze starts Monday\n\n## 09:15\n\ndecided:\nuse NATS\n" {
		t.Errorf("group daily = %q", got)
	}
	// Nothing said in the group reached Alice's private folder.
	entries, _ := os.ReadDir(filepath.Join(dir, "memory/users/telegram/100"))
	if len(entries) != 1 {
		t.Errorf("Alice's folder holds %d files, want only MEMORY.md", len(entries))
	}

	for _, tt := range []struct {
		kind, text, want string
	}{
		{"core", "  \n", "empty"},
		{"core", strings.Repeat("x", notes.MaxWriteBytes+1), "more than"},
		{"daily", "a\x00b", "NUL"},
		{"wiki", "x", "kind"},
	} {
		if _, err := n.Write(alicePrivate, tt.kind, tt.text, now); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("Write(%s, %.20q) = %v, want an error mentioning %q", tt.kind, tt.text, err, tt.want)
		}
	}
	if _, err := n.Write(notes.Scope{Speaker: bus.Speaker{Channel: "telegram"}}, notes.KindCore, "x", now); !errors.Is(err, notes.ErrScope) {
		t.Errorf("Write without user = %v, want ErrScope", err)
	}
}

func TestAppendDaily(t *testing.T) {
	var written []string
	var mu sync.Mutex
	dir := t.TempDir()
	root, err := os.OpenRoot(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	n, err := notes.New(root, notes.Options{OnWrite: func(rel string) { mu.Lock(); written = append(written, rel); mu.Unlock() }})
	if err != nil {
		t.Fatal(err)
	}
	tz := time.FixedZone("UTC+9", 9*3600)
	at := time.Date(2025, 3, 4, 23, 30, 0, 0, time.UTC).In(tz) // already March 5th in UTC+9
	rel, err := n.AppendDaily(bobPrivate, at, "## Trimmed context (08:30)\n\n- Bob chose plan B\n\n")
	if err != nil {
		t.Fatal(err)
	}
	if rel != "memory/users/telegram/200/2025-03-05.md" {
		t.Errorf("AppendDaily wrote %s, want the day in t's location", rel)
	}
	writeFile(t, dir, rel, readFile(t, dir, rel)+"hand edit without newline")
	if _, err := n.AppendDaily(bobPrivate, at, "## Session notes\n\n- more"); err != nil {
		t.Fatal(err)
	}
	want := "# 2025-03-05\n\n## Trimmed context (08:30)\n\n- Bob chose plan B\nhand edit without newline\n\n## Session notes\n\n- more\n"
	if got := readFile(t, dir, rel); got != want {
		t.Errorf("daily file = %q\nwant %q", got, want)
	}
	if !slices.Equal(written, []string{rel, rel}) {
		t.Errorf("OnWrite saw %v", written)
	}
	if _, err := n.AppendDaily(bobPrivate, at, strings.Repeat("x", notes.MaxAppendBytes+1)); err == nil {
		t.Error("AppendDaily accepted an oversized text")
	}
}

func TestPromptScoping(t *testing.T) {
	n, dir := newNotes(t, memcfg.ScopeUser)
	writeFile(t, dir, "MEMORY.md", "shared: office closes at 6\n")
	writeFile(t, dir, "memory/users/telegram/100/MEMORY.md", "alice secret: birthday party plan\n")
	writeFile(t, dir, "memory/users/telegram/100/USER.md", "# User\nName: Alice\n")
	writeFile(t, dir, "memory/users/telegram/200/MEMORY.md", "bob secret: job interview\n")
	writeFile(t, dir, "memory/chats/telegram/-500/MEMORY.md", "group: sprint ends Friday\n")

	text := func(p notes.Prompt) string {
		var b strings.Builder
		for _, s := range p.Memory {
			fmt.Fprintf(&b, "[%s %s] %s", s.Kind, s.Path, s.Content)
		}
		return b.String() + "USER:" + p.User
	}
	for _, tt := range []struct {
		name     string
		s        notes.Scope
		want     []string
		mustNot  []string
		userPath string
	}{
		{"alice private", alicePrivate, []string{"office closes", "alice secret", "Name: Alice"}, []string{"bob secret", "sprint"}, "memory/users/telegram/100/USER.md"},
		{"alice in group", aliceInGroup, []string{"office closes", "sprint"}, []string{"bob secret", "alice secret", "Name: Alice"}, ""},
		{"bob in group", bobInGroup, []string{"office closes", "sprint"}, []string{"alice secret", "Alice", "bob secret"}, ""},
		{"bob private", bobPrivate, []string{"bob secret"}, []string{"alice secret", "sprint"}, ""},
	} {
		p, err := n.Prompt(tt.s)
		if err != nil {
			t.Fatalf("%s: %v", tt.name, err)
		}
		got := text(p)
		for _, w := range tt.want {
			if !strings.Contains(got, w) {
				t.Errorf("%s: prompt lacks %q: %s", tt.name, w, got)
			}
		}
		for _, w := range tt.mustNot {
			if strings.Contains(got, w) {
				t.Errorf("%s: prompt leaks %q: %s", tt.name, w, got)
			}
		}
		if p.UserPath != tt.userPath {
			t.Errorf("%s: UserPath = %q, want %q", tt.name, p.UserPath, tt.userPath)
		}
	}
	p, _ := n.Prompt(aliceInGroup)
	var kinds []string
	for _, s := range p.Memory {
		kinds = append(kinds, s.Kind)
	}
	if !slices.Equal(kinds, []string{notes.FolderShared, notes.FolderChat}) {
		t.Errorf("section order = %v, want shared, chat", kinds)
	}

	shared, sdir := newNotes(t, memcfg.ScopeShared)
	writeFile(t, sdir, "MEMORY.md", "everyone's notes\n")
	writeFile(t, sdir, "memory/users/telegram/100/USER.md", "ignored in shared scope\n")
	p, err := shared.Prompt(alicePrivate)
	if err != nil || len(p.Memory) != 1 || p.Memory[0].Path != "MEMORY.md" || p.User != "" {
		t.Errorf("shared prompt = %+v, %v", p, err)
	}
}

func TestPromptCacheAndTail(t *testing.T) {
	n, dir := newNotes(t, memcfg.ScopeUser)
	rel := "memory/users/telegram/100/MEMORY.md"
	var b strings.Builder
	for i := range 500 {
		fmt.Fprintf(&b, "line %04d\n", i)
	}
	writeFile(t, dir, rel, b.String())
	p, err := n.Prompt(alicePrivate)
	if err != nil {
		t.Fatal(err)
	}
	sec := p.Memory[0]
	lines := strings.Split(strings.TrimSuffix(sec.Content, "\n"), "\n")
	if !sec.Truncated || len(lines) != notes.MaxLines || lines[0] != "line 0300" || lines[len(lines)-1] != "line 0499" {
		t.Errorf("tail: truncated %v, %d lines from %q to %q", sec.Truncated, len(lines), lines[0], lines[len(lines)-1])
	}
	reads := n.Reads()
	for range 3 {
		if _, err := n.Prompt(alicePrivate); err != nil {
			t.Fatal(err)
		}
	}
	if n.Reads() != reads {
		t.Errorf("unchanged files were read again: %d reads, want %d", n.Reads(), reads)
	}
	writeFile(t, dir, rel, strings.Repeat("€", 10000)) // 30,000 bytes, one line
	future := time.Now().Add(time.Hour)
	if err := os.Chtimes(filepath.Join(dir, rel), future, future); err != nil {
		t.Fatal(err)
	}
	p, _ = n.Prompt(alicePrivate)
	if n.Reads() != reads+1 {
		t.Errorf("edit not picked up: %d reads, want %d", n.Reads(), reads+1)
	}
	if c := p.Memory[0].Content; len(c) > notes.MaxBytes || strings.ContainsRune(c, '\uFFFD') || !p.Memory[0].Truncated {
		t.Errorf("long line: %d bytes, truncated %v", len(c), p.Memory[0].Truncated)
	}
	writeFile(t, dir, rel, "  \n\n")
	if p, _ := n.Prompt(alicePrivate); len(p.Memory) != 0 {
		t.Errorf("blank MEMORY.md entered the prompt: %+v", p.Memory)
	}
	if err := os.Remove(filepath.Join(dir, rel)); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(dir, rel), 0o700); err != nil {
		t.Fatal(err)
	}
	if _, err := n.Prompt(alicePrivate); err == nil || !strings.Contains(err.Error(), "MEMORY.md") {
		t.Errorf("Prompt with MEMORY.md a folder = %v, want an error naming it", err)
	}
	// A large USER.md is shown from its start.
	writeFile(t, dir, "memory/users/telegram/200/USER.md", "Name: Bob\n"+strings.Repeat("x", notes.MaxBytes))
	if p, err := n.Prompt(bobPrivate); err != nil || !strings.HasPrefix(p.User, "Name: Bob") || len(p.User) > notes.MaxBytes {
		t.Errorf("large USER.md: %d bytes starting %.12q, %v", len(p.User), p.User, err)
	}
}

func TestReadable(t *testing.T) {
	n, _ := newNotes(t, memcfg.ScopeUser)
	for _, tt := range []struct {
		s    notes.Scope
		rel  string
		want bool
	}{
		{alicePrivate, "MEMORY.md", true},
		{alicePrivate, "memory/2025-03-04.md", true},
		{alicePrivate, "memory/users/telegram/100/MEMORY.md", true},
		{alicePrivate, "memory/users/telegram/100/sub/x.md", true},
		{alicePrivate, "./memory/users/telegram/100/../100/MEMORY.md", true},
		{alicePrivate, "memory/users/telegram/200/MEMORY.md", false},
		{alicePrivate, "memory/users/telegram/100/../200/MEMORY.md", false},
		{alicePrivate, "memory/chats/telegram/-500/MEMORY.md", false},
		{aliceInGroup, "memory/chats/telegram/-500/MEMORY.md", true},
		{bobInGroup, "memory/users/telegram/100/MEMORY.md", false},
		{alicePrivate, "memory/users/telegram/1000/MEMORY.md", false},
		{alicePrivate, "memory/users/telegram/10/MEMORY.md", false},
		{alicePrivate, "AGENT.md", false},
		{alicePrivate, "../MEMORY.md", false},
		{alicePrivate, "/MEMORY.md", false},
		{alicePrivate, "", false},
		{alicePrivate, "memory", false},
	} {
		if got := n.CanRead(tt.s, tt.rel); got != tt.want {
			t.Errorf("CanRead(user %s group %v, %q) = %v, want %v", tt.s.UserID, tt.s.IsGroup, tt.rel, got, tt.want)
		}
	}
	shared, _ := newNotes(t, memcfg.ScopeShared)
	if shared.CanRead(alicePrivate, "memory/users/telegram/100/MEMORY.md") || !shared.CanRead(alicePrivate, "memory/2025-01-01.md") {
		t.Error("shared scope reads only MEMORY.md and memory/*.md")
	}
}

func TestOpen(t *testing.T) {
	n, dir := newNotes(t, memcfg.ScopeUser)
	writeFile(t, dir, "memory/users/telegram/100/MEMORY.md", "alice")
	writeFile(t, dir, "memory/users/telegram/200/MEMORY.md", "bob")
	f, rel, err := n.Open(alicePrivate, "memory/users/telegram/100/./MEMORY.md")
	if err != nil || rel != "memory/users/telegram/100/MEMORY.md" {
		t.Fatalf("Open own = %q, %v", rel, err)
	}
	_ = f.Close()
	if _, _, err := n.Open(alicePrivate, "memory/users/telegram/200/MEMORY.md"); !errors.Is(err, notes.ErrDenied) {
		t.Errorf("Open other user's = %v, want ErrDenied", err)
	}
	// A symbolic link inside Alice's folder that leads into Bob's.
	if err := os.Symlink("../200/MEMORY.md", filepath.Join(dir, "memory/users/telegram/100/link.md")); err != nil {
		t.Fatal(err)
	}
	if _, _, err := n.Open(alicePrivate, "memory/users/telegram/100/link.md"); !errors.Is(err, notes.ErrDenied) {
		t.Errorf("Open through a symlink = %v, want ErrDenied", err)
	}
	if _, _, err := n.Open(alicePrivate, "memory/users/telegram/100"); err == nil {
		t.Error("Open of a folder succeeded")
	}
	if _, err := n.ReadFile("memory/users/telegram/100/link.md"); !errors.Is(err, notes.ErrDenied) {
		t.Errorf("ReadFile through a symlink = %v, want ErrDenied", err)
	}
	// Writing through a symlinked folder is refused too.
	if err := os.Symlink("200", filepath.Join(dir, "memory/users/telegram/300")); err != nil {
		t.Fatal(err)
	}
	if _, err := n.Write(notes.Scope{Speaker: bus.Speaker{Channel: "telegram", UserID: "300", ChatID: "300"}}, notes.KindCore, "x", time.Now()); !errors.Is(err, notes.ErrDenied) {
		t.Errorf("Write through a symlinked folder = %v, want ErrDenied", err)
	}
	if got := readFile(t, dir, "memory/users/telegram/200/MEMORY.md"); got != "bob" {
		t.Errorf("Bob's memory changed: %q", got)
	}
}

func TestReplaceCore(t *testing.T) {
	n, dir := newNotes(t, memcfg.ScopeUser)
	f, _ := notes.UserFolder("telegram", "100")
	backup, err := n.ReplaceCore(f, "- fresh", "2025-03-04")
	if err != nil || backup != "" {
		t.Fatalf("ReplaceCore on a new folder = %q, %v", backup, err)
	}
	if got := readFile(t, dir, f.Core()); got != "- fresh\n" {
		t.Errorf("core = %q", got)
	}
	backup, err = n.ReplaceCore(f, "- second\n", "2025-03-05")
	if err != nil || backup != f.Core()+".bak-2025-03-05" {
		t.Fatalf("ReplaceCore = %q, %v", backup, err)
	}
	if readFile(t, dir, backup) != "- fresh\n" || readFile(t, dir, f.Core()) != "- second\n" {
		t.Error("backup or new content wrong")
	}
	for _, bad := range []struct{ text, suffix string }{{"x", ""}, {"x", "../x"}, {"x", "a.b"}, {" ", "ok"}, {"a\x00", "ok"}} {
		if _, err := n.ReplaceCore(f, bad.text, bad.suffix); err == nil {
			t.Errorf("ReplaceCore(%q, %q) succeeded", bad.text, bad.suffix)
		}
	}
	entries, _ := os.ReadDir(filepath.Join(dir, f.Dir))
	for _, e := range entries {
		if strings.HasSuffix(e.Name(), ".tmp") {
			t.Errorf("temporary file left behind: %s", e.Name())
		}
	}
}

func TestFoldersAndDailyFiles(t *testing.T) {
	n, dir := newNotes(t, memcfg.ScopeUser)
	writeFile(t, dir, "memory/users/telegram/100/2025-03-01.md", "a")
	writeFile(t, dir, "memory/users/telegram/100/2025-02-28.md", "b")
	writeFile(t, dir, "memory/users/telegram/100/notes.md", "c")
	writeFile(t, dir, "memory/users/telegram/100/2025-02-30.md", "not a day")
	writeFile(t, dir, "memory/users/slack/U1/MEMORY.md", "d")
	writeFile(t, dir, "memory/chats/telegram/-500/2025-03-01.md", "e")
	writeFile(t, dir, "memory/users/.hidden/x/MEMORY.md", "f")
	fs, err := n.Folders()
	if err != nil {
		t.Fatal(err)
	}
	var dirs []string
	for _, f := range fs {
		dirs = append(dirs, f.Kind+":"+f.Dir)
	}
	want := []string{"shared:", "user:memory/users/slack/U1", "user:memory/users/telegram/100", "chat:memory/chats/telegram/-500"}
	if !slices.Equal(dirs, want) {
		t.Errorf("Folders = %v, want %v", dirs, want)
	}
	days, err := n.DailyFiles(fs[2], time.UTC)
	if err != nil {
		t.Fatal(err)
	}
	if len(days) != 2 || days[0].Path != "memory/users/telegram/100/2025-02-28.md" || !days[1].Day.Equal(time.Date(2025, 3, 1, 0, 0, 0, 0, time.UTC)) {
		t.Errorf("DailyFiles = %+v", days)
	}
	shared, _ := newNotes(t, memcfg.ScopeShared)
	if fs, _ := shared.Folders(); len(fs) != 1 || fs[0].Kind != notes.FolderShared {
		t.Errorf("shared Folders = %+v", fs)
	}
}

func TestIndexableAndClean(t *testing.T) {
	for rel, want := range map[string]bool{
		"MEMORY.md": true, "memory/2025-01-01.md": true, "memory/users/t/1/MEMORY.md": true,
		"memory/users/t/1/MEMORY.md.bak-2025-01-01": false, "memory/.x/a.md": false, "memory/users/t/1/.MEMORY.md.tmp": false,
		"AGENT.md": false, "memory/a.txt": false, "notes/a.md": false,
	} {
		if got := notes.Indexable(rel); got != want {
			t.Errorf("Indexable(%q) = %v, want %v", rel, got, want)
		}
	}
	for in, want := range map[string]string{"a/./b/../c.md": "a/c.md", `memory\x.md`: "memory/x.md", "..": "", "../a": "", "/a": "", "a\x00": "", ".": ""} {
		got, ok := notes.Clean(in)
		if got != want || ok != (want != "") {
			t.Errorf("Clean(%q) = %q, %v; want %q", in, got, ok, want)
		}
	}
	if d, ok := notes.DayOf("memory/2025-03-04.md", time.UTC); !ok || d.Day() != 4 {
		t.Errorf("DayOf = %v, %v", d, ok)
	}
	if _, ok := notes.DayOf("memory/MEMORY.md", time.UTC); ok {
		t.Error("DayOf(MEMORY.md) ok")
	}
}

func TestConcurrentWrites(t *testing.T) {
	n, dir := newNotes(t, memcfg.ScopeUser)
	var wg sync.WaitGroup
	now := time.Date(2025, 3, 4, 10, 0, 0, 0, time.UTC)
	for g := range 8 {
		wg.Go(func() {
			for i := range 20 {
				if _, err := n.Write(alicePrivate, notes.KindDaily, fmt.Sprintf("note %d-%d", g, i), now); err != nil {
					t.Error(err)
				}
			}
		})
	}
	wg.Wait()
	got := readFile(t, dir, "memory/users/telegram/100/2025-03-04.md")
	for g := range 8 {
		for i := range 20 {
			if !strings.Contains(got, fmt.Sprintf("- 10:00 note %d-%d\n", g, i)) {
				t.Fatalf("note %d-%d missing", g, i)
			}
		}
	}
	if strings.Count(got, "# 2025-03-04") != 1 {
		t.Error("header written more than once")
	}
}

func TestVisible(t *testing.T) {
	n, _ := newNotes(t, memcfg.ScopeUser)
	for _, tt := range []struct {
		s    notes.Scope
		rel  string
		want bool
	}{
		{bobInGroup, ".", true},
		{bobInGroup, "", true},
		{bobInGroup, "AGENT.md", true},
		{bobInGroup, "notes/todo.md", true},
		{bobInGroup, "memory", true},
		{bobInGroup, "memory/2025-03-04.md", true},
		{bobInGroup, "memory/users", true},
		{bobInGroup, "memory/users/telegram", false},
		{bobInGroup, "memory/users/slack", false},
		{bobPrivate, "memory/users/telegram", true},
		{bobPrivate, "memory/users/slack", false},
		{bobInGroup, "memory/users/telegram/200", false},
		{bobInGroup, "memory/users/telegram/200/MEMORY.md", false},
		{bobPrivate, "memory/users/telegram/200", true},
		{bobPrivate, "memory/users/telegram/200/MEMORY.md", true},
		{bobInGroup, "memory/users/telegram/100", false},
		{bobInGroup, "memory/users/telegram/100/MEMORY.md", false},
		{bobInGroup, "memory/users/telegram/200/../100/MEMORY.md", false},
		{bobInGroup, "memory/chats/telegram/-500", true},
		{bobInGroup, "memory/chats/telegram/-500/2025-03-04.md", true},
		{bobPrivate, "memory/chats/telegram/-500/2025-03-04.md", false},
		{bobInGroup, "memory/chats/telegram/-600/MEMORY.md", false},
		{bobInGroup, "../x", false},
		{bobInGroup, "/etc/passwd", false},
	} {
		if got := n.Visible(tt.s, tt.rel); got != tt.want {
			t.Errorf("Visible(user %s group %v, %q) = %v, want %v", tt.s.UserID, tt.s.IsGroup, tt.rel, got, tt.want)
		}
	}
	shared, _ := newNotes(t, memcfg.ScopeShared)
	if !shared.Visible(bobPrivate, "memory/users/telegram/100/MEMORY.md") {
		t.Error("shared scope hides files")
	}
}

func TestGroupWritesNeedNoUser(t *testing.T) {
	n, dir := newNotes(t, memcfg.ScopeUser)
	rel, err := n.AppendDaily(notes.Scope{GroupNotes: true, Speaker: bus.Speaker{Channel: "telegram", ChatID: "-500", IsGroup: true}}, time.Date(2025, 3, 4, 12, 0, 0, 0, time.UTC), "## Daily summary\n\n- shipped")
	if err != nil || rel != "memory/chats/telegram/-500/2025-03-04.md" {
		t.Fatalf("AppendDaily for a group without a user = %q, %v", rel, err)
	}
	if !strings.Contains(readFile(t, dir, rel), "- shipped") {
		t.Error("group summary not written")
	}
	if _, err := n.AppendDaily(notes.Scope{Speaker: bus.Speaker{Channel: "telegram", ChatID: "1"}}, time.Now(), "x"); !errors.Is(err, notes.ErrScope) {
		t.Errorf("private AppendDaily without a user = %v, want ErrScope", err)
	}
}

package files_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"go.uber.org/goleak"

	"github.com/switchboard-chat/switchboard/bus"
	"github.com/switchboard-chat/switchboard/tools"
	"github.com/switchboard-chat/switchboard/tools/files"
	"github.com/switchboard-chat/switchboard/workspace"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

type env struct {
	dir string
	ws  *workspace.Workspace
	reg *tools.Registry
}

func newEnv(t *testing.T) *env {
	t.Helper()
	dir := t.TempDir()
	ws, err := workspace.Open(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ws.Close() })
	reg, err := tools.NewRegistry(files.New(ws)...)
	if err != nil {
		t.Fatalf("NewRegistry(files.New) = %v", err)
	}
	return &env{dir: dir, ws: ws, reg: reg}
}

// run calls a tool directly and returns its text and error.
func (e *env) run(t *testing.T, name string, args any) (string, error) {
	t.Helper()
	tool, ok := e.reg.Get(name)
	if !ok {
		t.Fatalf("tool %s not registered", name)
	}
	raw, ok := args.(string)
	if !ok {
		b, err := json.Marshal(args)
		if err != nil {
			t.Fatal(err)
		}
		raw = string(b)
	}
	res, err := tool.Run(t.Context(), tools.Call{ID: "c1", Args: json.RawMessage(raw)})
	return res.Text, err
}

// ok calls a tool and fails the test on error.
func (e *env) ok(t *testing.T, name string, args any) string {
	t.Helper()
	text, err := e.run(t, name, args)
	if err != nil {
		t.Fatalf("%s(%v) = %v", name, args, err)
	}
	return text
}

// fails calls a tool and checks the error mentions want.
func (e *env) fails(t *testing.T, name string, args any, want string) error {
	t.Helper()
	text, err := e.run(t, name, args)
	if err == nil {
		t.Errorf("%s(%v) = %q, want an error containing %q", name, args, text, want)
		return nil
	}
	if !strings.Contains(err.Error(), want) {
		t.Errorf("%s(%v) error = %q, want it to contain %q", name, args, err, want)
	}
	return err
}

func (e *env) write(t *testing.T, rel, content string) {
	t.Helper()
	p := filepath.Join(e.dir, rel)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func (e *env) read(t *testing.T, rel string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(e.dir, rel))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func numbered(from, to int) string {
	var b strings.Builder
	for i := from; i <= to; i++ {
		fmt.Fprintf(&b, "line %d\n", i)
	}
	return b.String()
}

func TestToolMetadata(t *testing.T) {
	e := newEnv(t)
	want := []struct {
		name     string
		perm     string
		parallel bool
	}{
		{"read_file", tools.PermRead, true},
		{"write_file", tools.PermWrite, false},
		{"edit_file", tools.PermWrite, false},
		{"list_dir", tools.PermRead, true},
	}
	list := e.reg.List()
	if len(list) != len(want) {
		t.Fatalf("New returned %d tools, want %d", len(list), len(want))
	}
	for i, w := range want {
		tool := list[i]
		if tool.Name() != w.name || tool.Permission() != w.perm || tool.ParallelSafe() != w.parallel {
			t.Errorf("tool %d = %s/%s/%v, want %s/%s/%v", i, tool.Name(), tool.Permission(), tool.ParallelSafe(), w.name, w.perm, w.parallel)
		}
		if tool.Description() == "" {
			t.Errorf("%s has no description", tool.Name())
		}
		var schema struct {
			Type       string                     `json:"type"`
			Properties map[string]json.RawMessage `json:"properties"`
			Required   []string                   `json:"required"`
		}
		if err := json.Unmarshal(tool.Schema(), &schema); err != nil || schema.Type != "object" {
			t.Errorf("%s schema invalid: %v", tool.Name(), err)
		}
		for _, r := range schema.Required {
			if _, ok := schema.Properties[r]; !ok {
				t.Errorf("%s: required %q is not a property", tool.Name(), r)
			}
		}
	}
}

func TestReadFile(t *testing.T) {
	e := newEnv(t)
	e.write(t, "a.txt", "first\r\nsecond\n\tthird")
	if got := e.ok(t, "read_file", map[string]any{"path": "a.txt"}); got != "     1\tfirst\n     2\tsecond\n     3\t\tthird" {
		t.Errorf("read_file = %q", got)
	}
	e.write(t, "empty.txt", "")
	if got := e.ok(t, "read_file", map[string]any{"path": "empty.txt"}); got != "(empty file)" {
		t.Errorf("empty file = %q", got)
	}
	e.write(t, "n.txt", numbered(1, 10))
	tests := []struct {
		name string
		args map[string]any
		want string
	}{
		{"offset", map[string]any{"path": "n.txt", "offset": 9}, "     9\tline 9\n    10\tline 10"},
		{"offset and limit", map[string]any{"path": "n.txt", "offset": 2, "limit": 2}, "     2\tline 2\n     3\tline 3\n... 7 more lines; call again with offset=4"},
		{"one more line", map[string]any{"path": "n.txt", "offset": 9, "limit": 1}, "     9\tline 9\n... 1 more line; call again with offset=10"},
		{"negative offset", map[string]any{"path": "n.txt", "offset": -2}, "     9\tline 9\n    10\tline 10"},
		{"negative offset with limit", map[string]any{"path": "n.txt", "offset": -3, "limit": 1}, "     8\tline 8\n... 2 more lines; call again with offset=9"},
		{"negative offset beyond start", map[string]any{"path": "n.txt", "offset": -50, "limit": 1}, "     1\tline 1\n... 9 more lines; call again with offset=2"},
		{"limit above max is clamped", map[string]any{"path": "n.txt", "offset": 10, "limit": 100000}, "    10\tline 10"},
		{"absolute path inside", map[string]any{"path": filepath.Join(e.dir, "n.txt"), "offset": 10}, "    10\tline 10"},
	}
	for _, tt := range tests {
		if got := e.ok(t, "read_file", tt.args); got != tt.want {
			t.Errorf("%s: read_file = %q, want %q", tt.name, got, tt.want)
		}
	}
	e.fails(t, "read_file", map[string]any{"path": "n.txt", "offset": 11}, "offset 11 is past the end of the file (10 lines)")
	e.fails(t, "read_file", map[string]any{"path": "n.txt", "limit": -1}, "limit must be >= 1")
	e.fails(t, "read_file", map[string]any{"path": "missing.txt"}, "no such file")
	e.write(t, "sub/x.txt", "x")
	e.fails(t, "read_file", map[string]any{"path": "sub"}, "is a directory; use list_dir")
}

func TestReadFileLimits(t *testing.T) {
	e := newEnv(t)
	e.write(t, "big.txt", numbered(1, 2500))
	got := e.ok(t, "read_file", map[string]any{"path": "big.txt"})
	lines := strings.Split(got, "\n")
	if len(lines) != 2001 || lines[1999] != "  2000\tline 2000" || lines[2000] != "... 500 more lines; call again with offset=2001" {
		t.Errorf("2500-line file: %d lines, last two %q", len(lines), lines[len(lines)-2:])
	}
	got = e.ok(t, "read_file", map[string]any{"path": "big.txt", "offset": 2001})
	if !strings.HasSuffix(got, "  2500\tline 2500") || strings.Contains(got, "more lines") {
		t.Errorf("continuation read ends %q", got[len(got)-40:])
	}

	// 1,000 lines of 100 bytes: the 50 KB cap applies before the line cap.
	var wide strings.Builder
	for i := 1; i <= 1000; i++ {
		fmt.Fprintf(&wide, "%04d%s\n", i, strings.Repeat("w", 96))
	}
	e.write(t, "wide.txt", wide.String())
	got = e.ok(t, "read_file", map[string]any{"path": "wide.txt"})
	if len(got) > files.MaxReadBytes+100 {
		t.Errorf("read returned %d bytes, more than %d", len(got), files.MaxReadBytes)
	}
	last := got[strings.LastIndex(got, "\n")+1:]
	var more, next int
	if _, err := fmt.Sscanf(last, "... %d more lines; call again with offset=%d", &more, &next); err != nil || more+next != 1001 || next < 400 {
		t.Errorf("wide file note = %q (%v)", last, err)
	}

	// One line longer than the byte cap is cut at a rune boundary and noted.
	long := strings.Repeat("é", 40000)
	e.write(t, "long.txt", long+"\n"+long+"\nshort\n")
	got = e.ok(t, "read_file", map[string]any{"path": "long.txt"})
	if !strings.Contains(got, "[... line cut, 80000 bytes in total]") || strings.ContainsRune(got, '\uFFFD') ||
		!strings.HasSuffix(got, "... 2 more lines; call again with offset=2") || len(got) > files.MaxReadBytes+100 {
		t.Errorf("long line: %d bytes, ends %q", len(got), got[len(got)-120:])
	}
	if got := e.ok(t, "read_file", map[string]any{"path": "long.txt", "offset": 3}); got != "     3\tshort" {
		t.Errorf("after long line = %q", got)
	}
}

func TestReadFileBinary(t *testing.T) {
	e := newEnv(t)
	e.write(t, "img.png", "\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR")
	e.fails(t, "read_file", map[string]any{"path": "img.png"}, "binary file")
	e.write(t, "latin1.txt", "caf\xe9 au lait")
	e.fails(t, "read_file", map[string]any{"path": "latin1.txt"}, "binary file")
	// A multi-byte rune cut by the 8 KiB sniff window is still text.
	e.write(t, "utf8.txt", strings.Repeat("a", 8191)+"€ ok")
	if _, err := e.run(t, "read_file", map[string]any{"path": "utf8.txt"}); err != nil {
		t.Errorf("UTF-8 text refused: %v", err)
	}
}

func TestWriteFile(t *testing.T) {
	e := newEnv(t)
	if got := e.ok(t, "write_file", map[string]any{"path": "notes/2025/a.md", "content": "héllo"}); got != "Created notes/2025/a.md (6 bytes written)" {
		t.Errorf("write_file = %q", got)
	}
	if got := e.read(t, "notes/2025/a.md"); got != "héllo" {
		t.Errorf("file = %q", got)
	}
	if got := e.ok(t, "write_file", map[string]any{"path": "notes/2025/a.md", "content": "x"}); got != "Overwrote notes/2025/a.md (1 bytes written)" {
		t.Errorf("overwrite = %q", got)
	}
	if got := e.read(t, "notes/2025/a.md"); got != "x" {
		t.Errorf("after overwrite file = %q", got)
	}
	e.ok(t, "write_file", map[string]any{"path": "empty.txt", "content": ""})
	if got := e.read(t, "empty.txt"); got != "" {
		t.Errorf("empty write = %q", got)
	}
	e.fails(t, "write_file", map[string]any{"path": "notes"}, "content is required")
	e.fails(t, "write_file", map[string]any{"path": "notes", "content": "x"}, "is a directory")
	e.fails(t, "write_file", map[string]any{"path": ".", "content": "x"}, "must name a file")
	e.write(t, "file", "x")
	e.fails(t, "write_file", map[string]any{"path": "file/child.txt", "content": "x"}, "file/child.txt")
	// The prompt files are writable for an owner (TestAttackSharedInputs:
	// for nobody else).
	owner := tools.Session{Key: "console/c", Speaker: bus.Speaker{Channel: "console", ChatID: "c", UserID: "op"}, Owner: true}
	if res := e.reg.Run(t.Context(), "write_file", tools.Call{ID: "c1", Session: owner,
		Args: json.RawMessage(`{"path":"USER.md","content":"# User\nName: Ann\n"}`)}); res.IsError {
		t.Fatalf("the owner's write_file USER.md = %q", res.Text)
	}
	pf, err := e.ws.PromptFiles()
	if err != nil || pf[1].Name != "USER.md" || !strings.Contains(pf[1].Content, "Ann") {
		t.Errorf("USER.md edit not visible to PromptFiles: %+v, %v", pf, err)
	}
}

func TestEditFile(t *testing.T) {
	e := newEnv(t)
	e.write(t, "a.txt", "one two two three\n")
	if got := e.ok(t, "edit_file", map[string]any{"path": "a.txt", "old_text": "one", "new_text": "1"}); !strings.HasPrefix(got, "Replaced 1 occurrence in a.txt") {
		t.Errorf("edit = %q", got)
	}
	e.fails(t, "edit_file", map[string]any{"path": "a.txt", "old_text": "two", "new_text": "2"}, "matches 2 times")
	if got := e.read(t, "a.txt"); got != "1 two two three\n" {
		t.Errorf("file after refused edit = %q", got)
	}
	if got := e.ok(t, "edit_file", map[string]any{"path": "a.txt", "old_text": "two", "new_text": "2", "replace_all": true}); !strings.HasPrefix(got, "Replaced 2 occurrences") {
		t.Errorf("replace_all = %q", got)
	}
	e.fails(t, "edit_file", map[string]any{"path": "a.txt", "old_text": "four", "new_text": "4"}, "old_text not found in a.txt")
	e.ok(t, "edit_file", map[string]any{"path": "a.txt", "old_text": " three", "new_text": ""})
	if got := e.read(t, "a.txt"); got != "1 2 2\n" {
		t.Errorf("file after edits = %q", got)
	}
	// Append, to an existing and to a new file.
	if got := e.ok(t, "edit_file", map[string]any{"path": "a.txt", "old_text": "", "new_text": "end\n"}); got != "Appended 4 bytes to a.txt" {
		t.Errorf("append = %q", got)
	}
	if got := e.read(t, "a.txt"); got != "1 2 2\nend\n" {
		t.Errorf("file after append = %q", got)
	}
	if got := e.ok(t, "edit_file", map[string]any{"path": "new/b.md", "old_text": "", "new_text": "- note\n"}); got != "Created new/b.md with 7 bytes" {
		t.Errorf("append to new file = %q", got)
	}
	e.fails(t, "edit_file", map[string]any{"path": "a.txt", "old_text": "end", "new_text": "end"}, "identical")
	e.fails(t, "edit_file", map[string]any{"path": "a.txt", "old_text": "", "new_text": ""}, "both empty")
	e.fails(t, "edit_file", map[string]any{"path": "missing.txt", "old_text": "x", "new_text": "y"}, "no such file")
	e.fails(t, "edit_file", map[string]any{"path": "new", "old_text": "x", "new_text": "y"}, "is a directory")
	e.fails(t, "edit_file", map[string]any{"path": "new", "old_text": "", "new_text": "y"}, "is a directory")
	e.fails(t, "edit_file", map[string]any{"path": "a.txt", "new_text": "y"}, "old_text is required")
	e.fails(t, "edit_file", map[string]any{"path": "a.txt", "old_text": "y"}, "new_text is required")
	e.write(t, "bin.dat", "ab\x00cd")
	e.fails(t, "edit_file", map[string]any{"path": "bin.dat", "old_text": "ab", "new_text": "x"}, "binary file")
	e.write(t, "huge.txt", strings.Repeat("x", files.MaxEditBytes+1))
	e.fails(t, "edit_file", map[string]any{"path": "huge.txt", "old_text": "x", "new_text": "y"}, "edits files up to")
	e.write(t, "crlf.txt", "a\r\nb\r\n")
	e.ok(t, "edit_file", map[string]any{"path": "crlf.txt", "old_text": "a\r\nb", "new_text": "a\r\nB"})
	if got := e.read(t, "crlf.txt"); got != "a\r\nB\r\n" {
		t.Errorf("CRLF edit = %q", got)
	}
}

func TestListDir(t *testing.T) {
	e := newEnv(t)
	e.write(t, "b.txt", "12345")
	e.write(t, "sub/c.txt", "x")
	if err := os.Mkdir(filepath.Join(e.dir, "emptydir"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("b.txt", filepath.Join(e.dir, "link")); err != nil {
		t.Fatal(err)
	}
	got := e.ok(t, "list_dir", map[string]any{})
	want := "AGENT.md  (" // defaults are there; check ordering and forms below
	if !strings.HasPrefix(got, want) {
		t.Errorf("list_dir = %q", got)
	}
	for _, line := range []string{"b.txt  (5 bytes)", "emptydir/", "link -> b.txt", "sub/"} {
		if !strings.Contains(got, "\n"+line) {
			t.Errorf("list_dir output lacks %q:\n%s", line, got)
		}
	}
	if strings.Index(got, "b.txt") > strings.Index(got, "emptydir/") || strings.Index(got, "link") > strings.Index(got, "sub/") {
		t.Errorf("entries not sorted:\n%s", got)
	}
	if got := e.ok(t, "list_dir", map[string]any{"path": "sub"}); got != "c.txt  (1 bytes)" {
		t.Errorf("list_dir sub = %q", got)
	}
	if got := e.ok(t, "list_dir", map[string]any{"path": "emptydir"}); got != "(empty directory)" {
		t.Errorf("empty dir = %q", got)
	}
	if got := e.ok(t, "list_dir", map[string]any{"path": e.dir + "/sub/"}); got != "c.txt  (1 bytes)" {
		t.Errorf("list_dir absolute = %q", got)
	}
	e.fails(t, "list_dir", map[string]any{"path": "b.txt"}, "is a file, not a directory")
	e.fails(t, "list_dir", map[string]any{"path": "nope"}, "no such file")
}

func TestListDirCap(t *testing.T) {
	e := newEnv(t)
	for i := range 520 {
		e.write(t, fmt.Sprintf("many/f%03d", i), "")
	}
	got := e.ok(t, "list_dir", map[string]any{"path": "many"})
	lines := strings.Split(got, "\n")
	if len(lines) != 501 || lines[0] != "f000  (0 bytes)" || lines[499] != "f499  (0 bytes)" ||
		lines[500] != "... 20 more entries not shown (520 in total); list a subfolder or narrow the path" {
		t.Errorf("capped listing: %d lines, tail %q", len(lines), lines[len(lines)-2:])
	}
}

func TestEscapes(t *testing.T) {
	e := newEnv(t)
	outsideDir := t.TempDir()
	secret := filepath.Join(outsideDir, "secret.txt")
	if err := os.WriteFile(secret, []byte("top secret"), 0o644); err != nil {
		t.Fatal(err)
	}
	// Symlinks inside the workspace leading outside, to a file and a folder.
	if err := os.Symlink(secret, filepath.Join(e.dir, "abs-out")); err != nil {
		t.Fatal(err)
	}
	rel, err := filepath.Rel(e.dir, secret)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(rel, filepath.Join(e.dir, "rel-out")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outsideDir, filepath.Join(e.dir, "dir-out")); err != nil {
		t.Fatal(err)
	}
	// And one that stays inside.
	e.write(t, "real/in.txt", "inside")
	if err := os.Symlink("real/in.txt", filepath.Join(e.dir, "in-link")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("real", filepath.Join(e.dir, "dir-in")); err != nil {
		t.Fatal(err)
	}

	escapes := []string{"../x", "../../etc/passwd", "/etc/passwd", "a/../../x", secret, "abs-out", "rel-out", "dir-out/secret.txt"}
	for _, p := range escapes {
		for _, call := range []struct {
			tool string
			args map[string]any
		}{
			{"read_file", map[string]any{"path": p}},
			{"write_file", map[string]any{"path": p, "content": "pwned"}},
			{"edit_file", map[string]any{"path": p, "old_text": "top", "new_text": "pwned"}},
			{"edit_file", map[string]any{"path": p, "old_text": "", "new_text": "pwned"}},
			{"list_dir", map[string]any{"path": p}},
		} {
			text, err := e.run(t, call.tool, call.args)
			if err == nil {
				t.Errorf("%s(%q) escaped the workspace: %q", call.tool, p, text)
			}
			if strings.Contains(text, "top secret") {
				t.Errorf("%s(%q) leaked the secret", call.tool, p)
			}
		}
	}
	if b, _ := os.ReadFile(secret); string(b) != "top secret" {
		t.Errorf("file outside the workspace was modified: %q", b)
	}
	if _, err := os.Stat(filepath.Join(filepath.Dir(e.dir), "x")); err == nil {
		t.Error("a file was created outside the workspace")
	}
	e.fails(t, "read_file", map[string]any{"path": "/etc/passwd"}, "outside the workspace")
	e.fails(t, "list_dir", map[string]any{"path": "dir-out"}, "leads outside the workspace")

	// Symlinks inside are followed.
	if got := e.ok(t, "read_file", map[string]any{"path": "in-link"}); got != "     1\tinside" {
		t.Errorf("read through inside symlink = %q", got)
	}
	if got := e.ok(t, "list_dir", map[string]any{"path": "dir-in"}); got != "in.txt  (6 bytes)" {
		t.Errorf("list through inside symlink = %q", got)
	}
	e.ok(t, "edit_file", map[string]any{"path": "dir-in/in.txt", "old_text": "inside", "new_text": "edited"})
	if got := e.read(t, "real/in.txt"); got != "edited" {
		t.Errorf("edit through inside symlink = %q", got)
	}
}

func TestBadArgs(t *testing.T) {
	e := newEnv(t)
	e.write(t, "a.txt", "a")
	tests := []struct {
		tool, args, want string
	}{
		{"read_file", `{}`, "path is required"},
		{"read_file", `{"path":""}`, "path is required"},
		{"read_file", `{"path":7}`, `field "path" must be a string`},
		{"read_file", `{"path":"a.txt","offset":"3"}`, `field "offset" must be an integer`},
		{"read_file", `{"path":"a.txt","limit":2.5}`, `field "limit" must be an integer`},
		{"read_file", `{"path":"a.txt","lines":3}`, `unknown field "lines"`},
		{"read_file", `["a.txt"]`, "must be a JSON object"},
		{"write_file", `{"content":"x"}`, "path is required"},
		{"write_file", `{"path":"b.txt","content":5}`, `field "content" must be a string`},
		{"write_file", `{"path":"b.txt","content":"x","mode":"0644"}`, `unknown field "mode"`},
		{"edit_file", `{"old_text":"a","new_text":"b"}`, "path is required"},
		{"edit_file", `{"path":"a.txt","old_text":"a","new_text":"b","replace_all":"yes"}`, `field "replace_all" must be a boolean`},
		{"edit_file", `{"path":"a.txt","old":"a","new_text":"b"}`, `unknown field "old"`},
		{"list_dir", `{"path":["."]}`, `field "path" must be a string`},
		{"list_dir", `{"dir":"."}`, `unknown field "dir"`},
	}
	for _, tt := range tests {
		err := e.fails(t, tt.tool, tt.args, tt.want)
		if err != nil && !errors.Is(err, tools.ErrBadArgs) {
			t.Errorf("%s(%s) = %v, want ErrBadArgs", tt.tool, tt.args, err)
		}
	}
	if _, err := os.Stat(filepath.Join(e.dir, "b.txt")); err == nil {
		t.Error("a rejected write_file created its file")
	}
}

func TestThroughRegistry(t *testing.T) {
	e := newEnv(t)
	res := e.reg.Run(t.Context(), "read_file", tools.Call{Args: json.RawMessage(`{"path":"../x"}`)})
	if !res.IsError || !strings.HasPrefix(res.Text, "Error: path ../x is outside the workspace") {
		t.Errorf("registry result = %+v", res)
	}
	e.write(t, "e.txt", "")
	res = e.reg.Run(t.Context(), "read_file", tools.Call{Args: json.RawMessage(`{"path":"e.txt"}`)})
	if res.IsError || res.Text != "(empty file)" {
		t.Errorf("empty file through registry = %+v", res)
	}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	tool, _ := e.reg.Get("write_file")
	if _, err := tool.Run(ctx, tools.Call{Args: json.RawMessage(`{"path":"c.txt","content":"x"}`)}); !errors.Is(err, context.Canceled) {
		t.Errorf("write_file(canceled) = %v, want context.Canceled", err)
	}
}

func TestGuardHidesOtherUsersMemory(t *testing.T) {
	ws := newEnv(t).ws
	for _, p := range []string{"memory/users/console/alice/MEMORY.md", "memory/users/console/bob/MEMORY.md"} {
		if err := os.MkdirAll(filepath.Join(ws.Dir(), filepath.Dir(p)), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(ws.Dir(), p), []byte("secret of "+p), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	guard := files.WithGuard(func(s tools.Session, rel string) bool {
		return !strings.HasPrefix(rel, "memory/users/console/") || strings.HasPrefix(rel+"/", "memory/users/console/"+s.UserID+"/")
	})
	reg, err := tools.NewRegistry(append(files.New(ws, guard), files.NewSearch(ws, tools.DefaultConfig().SearchFiles, guard))...)
	if err != nil {
		t.Fatal(err)
	}
	alice := tools.Session{Key: "console/c", Speaker: bus.Speaker{Channel: "console", ChatID: "c", UserID: "alice"}}
	run := func(name, args string) tools.Result {
		return reg.Run(t.Context(), name, tools.Call{Args: json.RawMessage(args), Session: alice})
	}
	if r := run("read_file", `{"path":"memory/users/console/alice/MEMORY.md"}`); r.IsError {
		t.Fatalf("own memory: %s", r.Text)
	}
	for _, c := range []struct{ tool, args string }{
		{"read_file", `{"path":"memory/users/console/bob/MEMORY.md"}`},
		{"write_file", `{"path":"memory/users/console/bob/MEMORY.md","content":"x"}`},
		{"edit_file", `{"path":"memory/users/console/bob/MEMORY.md","old_text":"","new_text":"x"}`},
		{"list_dir", `{"path":"memory/users/console/bob"}`},
	} {
		if r := run(c.tool, c.args); !r.IsError || !r.Denied {
			t.Errorf("%s on bob's memory: %+v", c.tool, r)
		}
	}
	if r := run("list_dir", `{"path":"memory/users/console"}`); strings.Contains(r.Text, "bob") || !strings.Contains(r.Text, "alice") {
		t.Errorf("listing shows other users: %s", r.Text)
	}
	if r := run("search_files", `{"pattern":"secret"}`); strings.Contains(r.Text, "bob") || !strings.Contains(r.Text, "alice") {
		t.Errorf("search shows other users: %s", r.Text)
	}
}

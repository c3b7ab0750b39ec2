package files

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/switchboard-chat/switchboard/tools"
	"github.com/switchboard-chat/switchboard/workspace"
)

// searchEnv is a workspace with a search_files tool.
type searchEnv struct {
	dir string
	ws  *workspace.Workspace
	t   *searchFiles
}

func newSearchEnv(t *testing.T, cfg tools.SearchFilesConfig) *searchEnv {
	t.Helper()
	dir := t.TempDir()
	ws, err := workspace.Open(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ws.Close() })
	return &searchEnv{dir: dir, ws: ws, t: NewSearch(ws, cfg).(*searchFiles)}
}

func (e *searchEnv) write(t *testing.T, rel, content string) {
	t.Helper()
	p := filepath.Join(e.dir, rel)
	if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
}

func (e *searchEnv) run(t *testing.T, args string) (string, error) {
	t.Helper()
	res, err := e.t.Run(t.Context(), tools.Call{Args: json.RawMessage(args)})
	return res.Text, err
}

func (e *searchEnv) mustRun(t *testing.T, args string) string {
	t.Helper()
	text, err := e.run(t, args)
	if err != nil {
		t.Fatalf("search_files %s = %v", args, err)
	}
	return text
}

func TestSearchFilesContent(t *testing.T) {
	e := newSearchEnv(t, tools.SearchFilesConfig{})
	e.write(t, "a.txt", "first line\nHello world\nthird hello\n")
	e.write(t, "sub/b.md", "nothing\r\nhello again\r\n")
	e.write(t, ".git/config", "hello from git\n")
	e.write(t, "node_modules/x/index.js", "hello from npm\n")

	got := e.mustRun(t, `{"pattern":"hello"}`)
	want := "a.txt:3: third hello\nsub/b.md:2: hello again"
	if got != want {
		t.Errorf("pattern hello:\n%s\nwant:\n%s", got, want)
	}
	got = e.mustRun(t, `{"pattern":"hello","ignore_case":true}`)
	if !strings.Contains(got, "a.txt:2: Hello world") || strings.Count(got, "\n") != 2 {
		t.Errorf("ignore_case:\n%s", got)
	}
	got = e.mustRun(t, `{"pattern":"hello","path":"sub"}`)
	if got != "sub/b.md:2: hello again" {
		t.Errorf("path sub: %q", got)
	}
	got = e.mustRun(t, `{"pattern":"h.llo","glob":"*.md"}`)
	if got != "sub/b.md:2: hello again" {
		t.Errorf("pattern with glob: %q", got)
	}
	got = e.mustRun(t, `{"pattern":"zzz"}`)
	if !strings.HasPrefix(got, "no matches found") {
		t.Errorf("no match: %q", got)
	}
}

func TestSearchFilesGlob(t *testing.T) {
	e := newSearchEnv(t, tools.SearchFilesConfig{})
	for _, f := range []string{"top.md", "a/one.md", "a/b/two.md", "a/b/three.txt", "c/four.md"} {
		e.write(t, f, "x")
	}
	tests := []struct{ glob, want string }{
		{"*.md", "AGENT.md,MEMORY.md,RULE.md,USER.md,a/b/two.md,a/one.md,c/four.md,top.md"},
		{"a/*.md", "a/one.md"},
		{"a/**/*.md", "a/b/two.md,a/one.md"},
		{"**/t*", "a/b/three.txt,a/b/two.md,top.md"},
		{"*.go", ""},
	}
	for _, tt := range tests {
		got := e.mustRun(t, `{"glob":"`+tt.glob+`"}`)
		var names []string
		for _, line := range strings.Split(got, "\n") {
			if name, _, ok := strings.Cut(line, "  ("); ok {
				names = append(names, name)
			}
		}
		if strings.Join(names, ",") != tt.want {
			t.Errorf("glob %s = %q, want %s", tt.glob, got, tt.want)
		}
	}
}

func TestSearchFilesLimits(t *testing.T) {
	e := newSearchEnv(t, tools.SearchFilesConfig{MaxResults: 3, MaxFileBytes: 100})
	e.write(t, "many.txt", strings.Repeat("match\n", 10))
	e.write(t, "big.txt", "match\n"+strings.Repeat("x", 200))
	e.write(t, "bin.dat", "match\x00\x01")

	got := e.mustRun(t, `{"pattern":"match"}`)
	if n := strings.Count(got, "many.txt:"); n != 3 {
		t.Errorf("got %d results, want the cap of 3:\n%s", n, got)
	}
	if !strings.Contains(got, "more matches exist; only the first 3") {
		t.Errorf("no note about the cap:\n%s", got)
	}
	got = e.mustRun(t, `{"pattern":"match","max_results":2}`)
	if n := strings.Count(got, "many.txt:"); n != 2 {
		t.Errorf("max_results 2 gave %d results", n)
	}
	got = e.mustRun(t, `{"pattern":"match","glob":"b*"}`)
	if strings.Contains(got, "big.txt:") || strings.Contains(got, "bin.dat:") || !strings.Contains(got, "2 files skipped") {
		t.Errorf("big or binary file was searched:\n%s", got)
	}
	e = newSearchEnv(t, tools.SearchFilesConfig{})
	e.write(t, "long.txt", "match "+strings.Repeat("é", 400))
	got = e.mustRun(t, `{"pattern":"match","glob":"long.txt"}`)
	if !strings.HasSuffix(got, " [...]") || len(got) > maxShownLine+40 || strings.ContainsRune(got, '\uFFFD') {
		t.Errorf("long line not cut on a rune boundary: %d bytes %q", len(got), got[len(got)-20:])
	}
}

func TestSearchFilesTimeout(t *testing.T) {
	e := newSearchEnv(t, tools.SearchFilesConfig{Timeout: time.Nanosecond})
	e.write(t, "a.txt", "hello\n")
	got := e.mustRun(t, `{"pattern":"hello"}`)
	if !strings.Contains(got, "the search stopped after 1ns") {
		t.Errorf("timeout not reported: %q", got)
	}
}

func TestSearchFilesBadArgs(t *testing.T) {
	e := newSearchEnv(t, tools.SearchFilesConfig{})
	e.write(t, "a.txt", "x")
	tests := []struct{ args, want string }{
		{`{}`, "give pattern"},
		{`{"pattern":"("}`, "not a valid regular expression"},
		{`{"glob":"[a"}`, "malformed"},
		{`{"glob":"../*"}`, `must not contain ".."`},
		{`{"pattern":"x","max_results":-1}`, "max_results must be >= 1"},
		{`{"pattern":"x","colour":1}`, `unknown field "colour"`},
		{`{"pattern":"x","path":"a.txt"}`, "is a file, not a folder"},
		{`{"pattern":"x","path":"nope"}`, "no such file or directory"},
		{`{"pattern":` + `"` + strings.Repeat("a", maxPatternLen+1) + `"}`, "at most 1000 bytes"},
	}
	for _, tt := range tests {
		_, err := e.run(t, tt.args)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("search_files %.60s = %v, want an error containing %q", tt.args, err, tt.want)
		}
	}
	if _, err := e.run(t, `{}`); !errors.Is(err, tools.ErrBadArgs) {
		t.Errorf("empty args error %v does not wrap ErrBadArgs", err)
	}
}

func TestSearchFilesStaysInWorkspace(t *testing.T) {
	e := newSearchEnv(t, tools.SearchFilesConfig{})
	outside := t.TempDir()
	if err := os.WriteFile(filepath.Join(outside, "secret.txt"), []byte("TOPSECRET\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	e.write(t, "inside.txt", "harmless\n")
	if err := os.Symlink(filepath.Join(outside, "secret.txt"), filepath.Join(e.dir, "link.txt")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, filepath.Join(e.dir, "linkdir")); err != nil {
		t.Fatal(err)
	}
	e.write(t, "inner/target.txt", "reachable through an inside link\n")
	if err := os.Symlink("inner/target.txt", filepath.Join(e.dir, "good.txt")); err != nil {
		t.Fatal(err)
	}

	got := e.mustRun(t, `{"pattern":"."}`)
	if strings.Contains(got, "TOPSECRET") {
		t.Fatalf("search followed a symlink out of the workspace:\n%s", got)
	}
	if !strings.Contains(got, "good.txt:1: reachable") {
		t.Errorf("a symlink to a file inside the workspace was not searched:\n%s", got)
	}
	for _, p := range []string{"..", "../", outside, "/etc", "inner/../../x"} {
		_, err := e.run(t, `{"pattern":".","path":"`+p+`"}`)
		if err == nil || !strings.Contains(err.Error(), "outside the workspace") {
			t.Errorf("path %q: err = %v, want outside the workspace", p, err)
		}
	}
	// An absolute path inside the workspace is fine.
	if got := e.mustRun(t, `{"pattern":"harm","path":"`+e.dir+`"}`); !strings.HasPrefix(got, "inside.txt:1: harmless\n... 2 files skipped") {
		t.Errorf("absolute path inside: %q", got)
	}
	_, err := e.run(t, `{"pattern":".","path":"linkdir"}`)
	if err == nil {
		t.Error("path through a symlink leading outside was accepted")
	}
}

// TestSearchFilesSymlinkSwappedAfterListing replaces a file and a folder
// with symlinks leading outside after search_files listed their parent and
// before it opens them: the opens go through os.Root, which refuses them.
func TestSearchFilesSymlinkSwappedAfterListing(t *testing.T) {
	e := newSearchEnv(t, tools.SearchFilesConfig{})
	outside := t.TempDir()
	if err := os.WriteFile(filepath.Join(outside, "secret.txt"), []byte("TOPSECRET file\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	e.write(t, "a/file.txt", "plain file\n")
	e.write(t, "a/dir/inner.txt", "plain inner\n")
	swapped := false
	e.t.listed = func(rel string) {
		if rel != "a" || swapped {
			return
		}
		swapped = true
		// The listing said a regular file and a folder; now both lead out.
		must(t, os.Remove(filepath.Join(e.dir, "a/file.txt")))
		must(t, os.Symlink(filepath.Join(outside, "secret.txt"), filepath.Join(e.dir, "a/file.txt")))
		must(t, os.RemoveAll(filepath.Join(e.dir, "a/dir")))
		must(t, os.Symlink(outside, filepath.Join(e.dir, "a/dir")))
	}
	got := e.mustRun(t, `{"pattern":"."}`)
	if !swapped {
		t.Fatal("the hook did not run")
	}
	if strings.Contains(got, "TOPSECRET") {
		t.Fatalf("a symlink swapped in after the listing leaked a file outside the workspace:\n%s", got)
	}
	if !strings.Contains(got, "files skipped") {
		t.Errorf("the refused opens were not reported as skipped:\n%s", got)
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func TestGlobMatch(t *testing.T) {
	tests := []struct {
		glob, path string
		want       bool
	}{
		{"**/*.go", "a.go", true},
		{"**/*.go", "x/y/a.go", true},
		{"x/**", "x/y/z", true},
		{"x/**/z", "x/z", true},
		{"x/*/z", "x/z", false},
		{"x/*", "x/y/z", false},
		{"*.md", "a.md", true},
	}
	for _, tt := range tests {
		if got := globMatch(strings.Split(tt.glob, "/"), strings.Split(tt.path, "/")); got != tt.want {
			t.Errorf("globMatch(%s, %s) = %v, want %v", tt.glob, tt.path, got, tt.want)
		}
	}
}

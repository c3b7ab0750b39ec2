package archtest

import (
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

const module = "github.com/switchboard-chat/switchboard"

// rules are the import directions of docs/architecture.md ("Package
// dependencies"): a package under from (exactly from, when from ends with
// "!") never imports one under to.
var rules = []struct{ from, to, why string }{
	{"channels", "agent", "channel adapters meet the agent only on the bus"},
	{"agent", "channels", "the agent knows nothing of Telegram or Slack"},
	{"agent/loop", "bus", "the tool-calling loop knows nothing of the bus"},
	{"agent/loop", "agent!", "the tool-calling loop knows nothing of sessions"},
	{"bus", "agent", "the bus is below everything that uses it"},
	{"bus", "channels", "the bus is below everything that uses it"},
	{"bus", "memory", "the bus is below everything that uses it"},
	{"memory", "agent", "storage never depends on the agent loop"},
	{"memory", "channels", "storage never depends on a channel"},
	{"llm", "agent", "the model client is used by the agent, memory and the daemon alike"},
	{"workspace", "agent", "the workspace is below the agent"},
	{"workspace!", "tools", "path confinement is below the tools (workspace/skills serves skills as tool results)"},
	{"workspace!", "bus", "file names on disk have their own codec, not the bus's subject encoding"},
	{"tools", "agent", "tools know nothing of sessions or the loop"},
	{"tools", "channels", "tools reach chats through the bus, not the adapters"},
}

// TestImportDirections parses every product (non-test) Go file and fails
// for an import that goes against a rule.
func TestImportDirections(t *testing.T) {
	root := filepath.Join("..", "..")
	fset := token.NewFileSet()
	checked := 0
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if n := d.Name(); path != root && (n == "node_modules" || n == "testdata" || strings.HasPrefix(n, ".")) {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		rel, err := filepath.Rel(root, filepath.Dir(path))
		if err != nil {
			return err
		}
		pkg := filepath.ToSlash(rel)
		f, err := parser.ParseFile(fset, path, nil, parser.ImportsOnly)
		if err != nil {
			return err
		}
		checked++
		for _, imp := range f.Imports {
			p, _ := strconv.Unquote(imp.Path.Value)
			target, ok := strings.CutPrefix(p, module+"/")
			if !ok {
				continue
			}
			for _, r := range rules {
				if under(pkg, r.from) && under(target, r.to) {
					t.Errorf("%s imports %s: %s must not import %s (%s)", filepath.ToSlash(path[len(root)+1:]), p, strings.TrimSuffix(r.from, "!"), r.to, r.why)
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if checked < 100 {
		t.Fatalf("checked %d files; the walk missed the tree", checked)
	}
}

// under reports whether package path p is dir or below it; a dir ending
// with "!" matches itself only.
func under(p, dir string) bool {
	if exact, ok := strings.CutSuffix(dir, "!"); ok {
		return p == exact
	}
	return p == dir || strings.HasPrefix(p, dir+"/")
}

package archtest

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// walkPackages maps the package names the walk uses to their folders.
var walkPackages = map[string]string{
	"telegram": "channels/telegram",
	"bridge":   "bus/bridge",
	"agent":    "agent",
	"loop":     "agent/loop",
	"natsbus":  "bus/natsbus",
	"llm":      "llm",
}

// TestMessageWalkNamesRealFunctions keeps "The walk of one message" in
// docs/architecture.md true: every numbered step names a method that
// exists in the package it says, there are at most eight steps, and they
// stay within four packages.
func TestMessageWalkNamesRealFunctions(t *testing.T) {
	root := filepath.Join("..", "..")
	doc, err := os.ReadFile(filepath.Join(root, "docs", "architecture.md"))
	if err != nil {
		t.Fatal(err)
	}
	text := string(doc)
	start := strings.Index(text, "## The walk of one message")
	if start < 0 {
		t.Fatal(`docs/architecture.md has no "## The walk of one message"`)
	}
	section := text[start:]
	if end := strings.Index(section[3:], "\n## "); end >= 0 {
		section = section[:end+3]
	}
	step := regexp.MustCompile("(?m)^\\d+\\. `(\\w+)\\.\\(\\*(\\w+)\\)\\.(\\w+)`")
	steps := step.FindAllStringSubmatch(section, -1)
	if len(steps) == 0 || len(steps) > 8 {
		t.Fatalf("the walk has %d numbered steps naming a method, want 1 to 8", len(steps))
	}
	pkgs := map[string]bool{}
	for _, s := range steps {
		pkg, typ, method := s[1], s[2], s[3]
		pkgs[pkg] = true
		dir, ok := walkPackages[pkg]
		if !ok {
			t.Errorf("step %s.(*%s).%s: unknown package %q", pkg, typ, method, pkg)
			continue
		}
		if !hasMethod(t, filepath.Join(root, dir), typ, method) {
			t.Errorf("step %s.(*%s).%s: no such method in %s", pkg, typ, method, dir)
		}
	}
	if len(pkgs) > 4 {
		t.Errorf("the walk's steps are in %d packages, want at most 4", len(pkgs))
	}
	// Every other method the walk names in passing exists too.
	mention := regexp.MustCompile("`(\\w+)\\.\\(\\*(\\w+)\\)\\.(\\w+)`")
	for _, m := range mention.FindAllStringSubmatch(section, -1) {
		if dir, ok := walkPackages[m[1]]; ok && !hasMethod(t, filepath.Join(root, dir), m[2], m[3]) {
			t.Errorf("%s names %s.(*%s).%s, which does not exist", "the walk", m[1], m[2], m[3])
		}
	}
}

// hasMethod reports whether a product file in dir declares method on
// *typ (or typ).
func hasMethod(t *testing.T, dir, typ, method string) bool {
	t.Helper()
	fset := token.NewFileSet()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if !strings.HasSuffix(e.Name(), ".go") || strings.HasSuffix(e.Name(), "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, filepath.Join(dir, e.Name()), nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range f.Decls {
			fn, ok := d.(*ast.FuncDecl)
			if !ok || fn.Recv == nil || fn.Name.Name != method {
				continue
			}
			rt := fn.Recv.List[0].Type
			if st, ok := rt.(*ast.StarExpr); ok {
				rt = st.X
			}
			if id, ok := rt.(*ast.Ident); ok && id.Name == typ {
				return true
			}
		}
	}
	return false
}

package archtest

import (
	"bytes"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

// The shape of the agent packages (issue 15): no struct stores a
// context, no struct keeps a back pointer to the session manager, only the
// manager's own methods touch its map of sessions, no type
// has more than maxFields fields or methods in more than two files, and
// no function is longer than maxFuncLines. agent.Config is the exception
// to the field bound: its fields are the public YAML keys of the agent
// section, which a nested struct would change.
const (
	maxFields    = 12
	maxFuncLines = 70
)

var shapePackages = []string{"agent", "agent/loop"}

var fieldExceptions = map[string]bool{
	"agent.Config": true,
}

func TestAgentShape(t *testing.T) {
	root := filepath.Join("..", "..")
	for _, pkg := range shapePackages {
		fset := token.NewFileSet()
		entries, err := os.ReadDir(filepath.Join(root, pkg))
		if err != nil {
			t.Fatal(err)
		}
		methodFiles := map[string]map[string]bool{}
		parsed := 0
		for _, e := range entries {
			file := e.Name()
			if e.IsDir() || !strings.HasSuffix(file, ".go") || strings.HasSuffix(file, "_test.go") {
				continue
			}
			f, err := parser.ParseFile(fset, filepath.Join(root, pkg, file), nil, 0)
			if err != nil {
				t.Fatal(err)
			}
			parsed++
			checkStructs(t, fset, pkg, f)
			checkFuncs(t, fset, pkg, file, f, methodFiles)
		}
		if parsed == 0 {
			t.Fatalf("%s: no product files", pkg)
		}
		for typ, files := range methodFiles {
			if len(files) > 2 {
				names := make([]string, 0, len(files))
				for f := range files {
					names = append(names, f)
				}
				sort.Strings(names)
				t.Errorf("%s.%s has methods in %d files %v (at most 2)", pkg, typ, len(files), names)
			}
		}
	}
}

// checkFuncs checks the functions declared in f and notes in methodFiles
// which files hold each type's methods.
func checkFuncs(t *testing.T, fset *token.FileSet, pkg, file string, f *ast.File, methodFiles map[string]map[string]bool) {
	t.Helper()
	for _, d := range f.Decls {
		fd, ok := d.(*ast.FuncDecl)
		if !ok {
			continue
		}
		name, recv := fd.Name.Name, receiver(fd)
		if recv != "" {
			if methodFiles[recv] == nil {
				methodFiles[recv] = map[string]bool{}
			}
			methodFiles[recv][file] = true
			name = recv + "." + name
		}
		if recv != "Manager" && touchesSessions(fd) {
			t.Errorf("%s.%s touches the manager's sessions map: only the Manager adds and removes sessions", pkg, name)
		}
		if n := fset.Position(fd.End()).Line - fset.Position(fd.Pos()).Line + 1; n > maxFuncLines {
			t.Errorf("%s.%s is %d lines long (at most %d): break it into named steps", pkg, name, n, maxFuncLines)
		}
	}
}

// checkStructs checks the struct types declared in f.
func checkStructs(t *testing.T, fset *token.FileSet, pkg string, f *ast.File) {
	t.Helper()
	ast.Inspect(f, func(n ast.Node) bool {
		ts, ok := n.(*ast.TypeSpec)
		if !ok {
			return true
		}
		st, ok := ts.Type.(*ast.StructType)
		if !ok {
			return true
		}
		name := filepath.Base(pkg) + "." + ts.Name.Name
		count := 0
		for _, fl := range st.Fields.List {
			count += max(len(fl.Names), 1)
			switch typ := exprString(fl.Type); typ {
			case "context.Context":
				t.Errorf("%s (%s) stores a context: pass ctx as the first argument instead", name, fset.Position(fl.Pos()))
			case "*Manager":
				t.Errorf("%s (%s) keeps a back pointer to the Manager: depend on a small interface instead", name, fset.Position(fl.Pos()))
			}
		}
		if count > maxFields && !fieldExceptions[name] {
			t.Errorf("%s has %d fields (at most %d): split its state", name, count, maxFields)
		}
		return true
	})
}

// touchesSessions reports whether fd selects a field named sessions.
func touchesSessions(fd *ast.FuncDecl) bool {
	found := false
	ast.Inspect(fd, func(n ast.Node) bool {
		if se, ok := n.(*ast.SelectorExpr); ok && se.Sel.Name == "sessions" {
			found = true
		}
		return !found
	})
	return found
}

func receiver(fd *ast.FuncDecl) string {
	if fd.Recv == nil || len(fd.Recv.List) == 0 {
		return ""
	}
	typ := fd.Recv.List[0].Type
	if s, ok := typ.(*ast.StarExpr); ok {
		typ = s.X
	}
	if ix, ok := typ.(*ast.IndexExpr); ok {
		typ = ix.X
	}
	if id, ok := typ.(*ast.Ident); ok {
		return id.Name
	}
	return ""
}

func exprString(e ast.Expr) string {
	switch e := e.(type) {
	case *ast.Ident:
		return e.Name
	case *ast.SelectorExpr:
		return exprString(e.X) + "." + e.Sel.Name
	case *ast.StarExpr:
		return "*" + exprString(e.X)
	}
	return ""
}

// maxCmdLines is the most lines of product code cmd/switchboard may hold
// (issue 15: "wiring only ... under 1,200 lines"); library work belongs in
// the packages.
const maxCmdLines = 1200

// TestCmdIsWiringOnly keeps cmd/switchboard under maxCmdLines lines of
// non-test Go.
func TestCmdIsWiringOnly(t *testing.T) {
	dir := filepath.Join("..", "..", "cmd", "switchboard")
	files, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	total := 0
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		total += bytes.Count(data, []byte("\n"))
	}
	if total >= maxCmdLines {
		t.Errorf("cmd/switchboard holds %d lines of non-test Go, want under %d: move library code into its package", total, maxCmdLines)
	}
}

package main

import (
	"bytes"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/switchboard-chat/switchboard/internal/cli"
)

// runOut runs switchboard with args and returns the exit code, stdout and
// stderr.
func runOut(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code := run(t.Context(), args, strings.NewReader(""), &out, &errOut)
	return code, out.String(), errOut.String()
}

func goldenText(t *testing.T, path, got string) {
	t.Helper()
	if *updateGolden {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (go test -run %s -update creates it)", err, t.Name())
	}
	if diff := cmp.Diff(string(want), got); diff != "" {
		t.Fatalf("%s differs (-want +got):\n%s", path, diff)
	}
}

// TestHelpGolden: `switchboard help` and a verb's -h, on standard output,
// exit code 0: the verb's flags and examples.
func TestHelpGolden(t *testing.T) {
	for _, tt := range []struct {
		golden string
		args   []string
	}{
		{"testdata/help.golden", []string{"help"}},
		{"testdata/help_history.golden", []string{"history", "-h"}},
		{"testdata/help_history_export.golden", []string{"history", "export", "--help"}},
		{"testdata/help_chat.golden", []string{"chat", "-h"}},
	} {
		t.Run(strings.Join(tt.args, "_"), func(t *testing.T) {
			code, out, errOut := runOut(t, tt.args...)
			if code != 0 || errOut != "" {
				t.Fatalf("exit %d, stderr %q", code, errOut)
			}
			goldenText(t, tt.golden, out)
		})
	}
	// help VERB is VERB -h.
	_, viaHelp, _ := runOut(t, "help", "history", "export")
	_, viaFlag, _ := runOut(t, "history", "export", "-h")
	if viaHelp != viaFlag || !strings.Contains(viaFlag, "-session string") {
		t.Fatalf("help history export:\n%s\nhistory export -h:\n%s", viaHelp, viaFlag)
	}
}

// switchVerbs returns the verbs of run's switch in main.go.
func switchVerbs(t *testing.T) []string {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), "main.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	var verbs []string
	ast.Inspect(f, func(n ast.Node) bool {
		fd, ok := n.(*ast.FuncDecl)
		if ok && fd.Name.Name != "run" {
			return false
		}
		sw, ok := n.(*ast.SwitchStmt)
		if !ok {
			return true
		}
		if id, ok := sw.Tag.(*ast.Ident); !ok || id.Name != "verb" {
			return true
		}
		for _, s := range sw.Body.List {
			for _, e := range s.(*ast.CaseClause).List {
				if lit, ok := e.(*ast.BasicLit); ok {
					v, _ := strconv.Unquote(lit.Value)
					verbs = append(verbs, v)
				}
			}
		}
		return false
	})
	if len(verbs) < 5 {
		t.Fatalf("found only %q in run's switch", verbs)
	}
	return verbs
}

// TestVerbTableMatchesSwitch: every verb the switch dispatches is in
// internal/cli's table (help, completion) and the reverse.
func TestVerbTableMatchesSwitch(t *testing.T) {
	got, want := switchVerbs(t), cli.Names()
	slices.Sort(got)
	slices.Sort(want)
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("internal/cli.Verbs and run's switch differ (-table +switch):\n%s", diff)
	}
}

var flagLine = regexp.MustCompile(`(?m)^  -(\S+)`)

// TestVerbTableFlagsMatchFlagSets: each verb's flags in the table are the
// flags its FlagSet defines (read from its -h).
func TestVerbTableFlagsMatchFlagSets(t *testing.T) {
	for _, v := range cli.Verbs {
		paths := [][]string{{v.Name}}
		if len(v.Subs) > 0 {
			paths = nil
			for _, s := range v.Subs {
				paths = append(paths, []string{v.Name, s.Name})
			}
		}
		for _, path := range paths {
			t.Run(strings.Join(path, "_"), func(t *testing.T) {
				verb, _ := cli.Lookup(path...)
				code, out, errOut := runOut(t, append(slices.Clone(path), "-h")...)
				if code != 0 {
					t.Fatalf("%s -h: exit %d, stderr %q", path, code, errOut)
				}
				var defined, listed []string
				for _, m := range flagLine.FindAllStringSubmatch(out, -1) {
					defined = append(defined, m[1])
				}
				for _, f := range verb.Flags {
					listed = append(listed, f.Name)
				}
				slices.Sort(defined)
				slices.Sort(listed)
				if diff := cmp.Diff(listed, defined, cmpopts.EquateEmpty()); diff != "" {
					t.Fatalf("flags of %s: table and FlagSet differ (-table +flagset):\n%s\n%s", path, diff, out)
				}
				if len(verb.Examples) > 0 && !strings.Contains(out, "Examples:\n  "+verb.Examples[0]) {
					t.Fatalf("%s -h shows no examples:\n%s", path, out)
				}
			})
		}
	}
}

func TestCompletionVerb(t *testing.T) {
	code, out, _ := runOut(t, "completion", "bash")
	if code != 0 || !strings.Contains(out, "complete -o filenames -F _switchboard switchboard") {
		t.Fatalf("completion bash: exit %d\n%s", code, out)
	}
	code, _, errOut := runOut(t, "completion", "tcsh")
	if code != 2 || !strings.Contains(errOut, "bash, zsh or fish") {
		t.Fatalf("completion tcsh: exit %d, stderr %q", code, errOut)
	}
}

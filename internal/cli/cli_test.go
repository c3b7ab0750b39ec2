package cli_test

import (
	"bytes"
	"flag"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/switchboard-chat/switchboard/internal/cli"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata")

// golden compares got with testdata/name, rewriting it with -update.
func golden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
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

func TestCompletionGolden(t *testing.T) {
	for _, shell := range cli.Shells {
		t.Run(shell, func(t *testing.T) {
			var b bytes.Buffer
			if err := cli.Completion(&b, shell); err != nil {
				t.Fatal(err)
			}
			golden(t, "completion."+shell, b.String())
		})
	}
	if err := cli.Completion(&bytes.Buffer{}, "tcsh"); err == nil || !strings.Contains(err.Error(), "bash, zsh or fish") {
		t.Fatalf("Completion(tcsh) = %v, want an error naming the shells", err)
	}
}

// TestBashCompletionWorks sources the bash script in a real bash and
// completes partial command lines with it.
func TestBashCompletionWorks(t *testing.T) {
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Skip("no bash")
	}
	var script bytes.Buffer
	if err := cli.Completion(&script, "bash"); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	path := filepath.Join(dir, "switchboard.bash")
	if err := os.WriteFile(path, script.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "config-prod.yaml"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		words []string // the last is the word being completed
		want  string
	}{
		{[]string{"switchboard", "hi"}, "history"},
		{[]string{"switchboard", "d"}, "doctor demo"},
		{[]string{"switchboard", "history", ""}, "list export reset compact"},
		{[]string{"switchboard", "history", "export", "--"}, "--config --session --out --help"},
		{[]string{"switchboard", "bus", ""}, "tail context"},
		{[]string{"switchboard", "bus", "tail", "--ch"}, "--channel"},
		{[]string{"switchboard", "--config", "x.yaml", "bus", "t"}, "tail"},
		{[]string{"switchboard", "bus", "tail", "--config", "config-"}, "config-prod.yaml"},
		{[]string{"switchboard", "check", "--"}, "--config --json --help"},
		{[]string{"switchboard", "doctor", "--json", "--c"}, "--config"},
		{[]string{"switchboard", "bench", "--json", "x", "--c"}, "--chats --compare"},
		{[]string{"switchboard", "completion", ""}, "bash zsh fish"},
		{[]string{"switchboard", "help", "hi"}, "history"},
		{[]string{"switchboard", "demo", "-"}, "--keep -v --help"},
		{[]string{"switchboard", "version", ""}, ""},
	} {
		t.Run(strings.Join(tt.words, "_"), func(t *testing.T) {
			var words []string
			for _, w := range tt.words {
				words = append(words, "'"+w+"'")
			}
			prog := "source " + path + "; COMP_WORDS=(" + strings.Join(words, " ") + "); COMP_CWORD=" +
				strconv.Itoa(len(tt.words)-1) + "; _switchboard; echo \"${COMPREPLY[*]}\""
			cmd := exec.CommandContext(t.Context(), bash, "--norc", "--noprofile", "-c", prog)
			cmd.Dir = dir
			out, err := cmd.CombinedOutput()
			if err != nil {
				t.Fatalf("bash: %v\n%s", err, out)
			}
			if got := strings.TrimSpace(string(out)); got != tt.want {
				t.Fatalf("completing %q = %q, want %q", tt.words, got, tt.want)
			}
		})
	}
}

func TestLookupAndHelp(t *testing.T) {
	if v, ok := cli.Lookup("check"); !ok || v.Name != "doctor" {
		t.Fatalf("Lookup(check) = %v, %v; want the doctor verb", v.Name, ok)
	}
	if _, ok := cli.Lookup("history", "nope"); ok {
		t.Fatal("Lookup(history nope) found a verb")
	}
	fs := flag.NewFlagSet("history export", flag.ContinueOnError)
	fs.String("session", "", "session key (required)")
	var b bytes.Buffer
	cli.Help(&b, fs, "history", "export")
	for _, want := range []string{"Usage: switchboard history export [--config FILE] --session KEY [--out FILE]", "-session string", "session key (required)", "Examples:\n  switchboard history export --session"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("help lacks %q:\n%s", want, b.String())
		}
	}
}

func TestWantsHelp(t *testing.T) {
	for _, tt := range []struct {
		args []string
		want bool
	}{
		{[]string{"-h"}, true}, {[]string{"--config", "x", "--help"}, true}, {[]string{"-help"}, true},
		{nil, false}, {[]string{"--", "-h"}, false}, {[]string{"--config", "h"}, false},
	} {
		if got := cli.WantsHelp(tt.args); got != tt.want {
			t.Errorf("WantsHelp(%q) = %v", tt.args, got)
		}
	}
}

// shellScript writes the completion script of shell to a temporary file.
func shellScript(t *testing.T, shell string) (dir, path string) {
	t.Helper()
	var b bytes.Buffer
	if err := cli.Completion(&b, shell); err != nil {
		t.Fatal(err)
	}
	dir = t.TempDir()
	path = filepath.Join(dir, "switchboard."+shell)
	if err := os.WriteFile(path, b.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "config-prod.yaml"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	return dir, path
}

// TestFishCompletionWorks completes command lines with fish's own
// `complete -C` after sourcing the script.
func TestFishCompletionWorks(t *testing.T) {
	fish, err := exec.LookPath("fish")
	if err != nil {
		t.Skip("no fish")
	}
	dir, path := shellScript(t, "fish")
	for _, tt := range []struct{ line, want string }{
		{"switchboard hi", "history"},
		{"switchboard history ", "compact export list reset"},
		{"switchboard history export --", "--config --help --out --session"},
		{"switchboard bus tail --config config-", "config-prod.yaml"},
		{"switchboard --config x.yaml bus t", "tail"},
		{"switchboard check --", "--config --help --json"},
		{"switchboard completion ", "bash fish zsh"},
	} {
		t.Run(tt.line, func(t *testing.T) {
			cmd := exec.CommandContext(t.Context(), fish, "--no-config", "-c", "source "+path+"; complete -C '"+tt.line+"'")
			cmd.Dir = dir
			out, err := cmd.CombinedOutput()
			if err != nil {
				t.Fatalf("fish: %v\n%s", err, out)
			}
			var got []string
			for l := range strings.Lines(string(out)) {
				name, _, _ := strings.Cut(strings.TrimSpace(l), "\t")
				got = append(got, name)
			}
			slices.Sort(got)
			if g := strings.Join(got, " "); g != tt.want {
				t.Fatalf("completing %q = %q, want %q", tt.line, g, tt.want)
			}
		})
	}
}

// TestZshCompletionWorks runs the zsh script's own logic on command lines:
// compsys's compadd, _describe, _files and _message are stubbed to print
// what they are given (outside a completion widget they cannot run).
func TestZshCompletionWorks(t *testing.T) {
	zsh, err := exec.LookPath("zsh")
	if err != nil {
		t.Skip("no zsh")
	}
	_, path := shellScript(t, "zsh")
	stubs := `compdef() { :; }
compadd() { [[ $1 == -- ]] && shift; print -r -- "flags: $*"; }
_describe() { local w; for w in ${(P)4}; do print -r -- "word: ${w%%:*}"; done; }
_files() { print -r -- files; }
_message() { print -r -- "value"; }
t() { words=("$@"); CURRENT=${#words}; PREFIX=${words[-1]}; _switchboard; }
`
	for _, tt := range []struct {
		words []string
		want  string
	}{
		{[]string{"switchboard", "history", ""}, "word: list\nword: export\nword: reset\nword: compact"},
		{[]string{"switchboard", "history", "export", "--"}, "flags: --config --session --out --help"},
		{[]string{"switchboard", "bus", "tail", "--config", ""}, "files"},
		{[]string{"switchboard", "--config", "x.yaml", "bus", ""}, "word: tail\nword: context"},
		{[]string{"switchboard", "bench", "--chats", ""}, "value"},
		{[]string{"switchboard", "check", "-"}, "flags: --config --json --help"},
	} {
		t.Run(strings.Join(tt.words, "_"), func(t *testing.T) {
			var q []string
			for _, w := range tt.words {
				q = append(q, "'"+w+"'")
			}
			prog := stubs + "source " + path + "\n" + "t " + strings.Join(q, " ") + "\n"
			out, err := exec.CommandContext(t.Context(), zsh, "-f", "-c", prog).CombinedOutput()
			if err != nil {
				t.Fatalf("zsh: %v\n%s", err, out)
			}
			if got := strings.TrimSpace(string(out)); got != tt.want {
				t.Fatalf("completing %q:\n%s\nwant:\n%s", tt.words, got, tt.want)
			}
		})
	}
}

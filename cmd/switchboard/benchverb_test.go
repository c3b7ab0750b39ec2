package main

import (
	"bytes"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/switchboard-chat/switchboard/internal/loadgen"
	"github.com/switchboard-chat/switchboard/llm/llmtest"
)

// runVerb runs the command line args and returns its exit code, stdout and
// stderr.
func runVerb(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	code := run(t.Context(), args, strings.NewReader(""), &stdout, &stderr)
	return code, stdout.String(), stderr.String()
}

// benchRow matches one figure of the report: a name and a number (and,
// compared, the saved number and the ratio).
func benchRow(name string, compared bool) *regexp.Regexp {
	num := `[0-9]+(\.[0-9]+)?`
	tail := ""
	if compared {
		tail = `\s+` + num + `\s+(` + num + `×|-)`
	}
	return regexp.MustCompile(`(?m)^\s*` + regexp.QuoteMeta(name) + `\s+` + num + tail + `\s*$`)
}

var benchRows = []string{"turns", "seconds", "turns/s", "latency p50 (ms)", "latency p90 (ms)", "latency p99 (ms)",
	"latency max (ms)", "latency mean (ms)", "turn in daemon (ms)", "model calls (ms)", "history commit (ms)", "before the turn (ms)",
	"rss before (MB)", "rss after (MB)", "allocated per turn (B)", "allocations per turn"}

// switchboard bench runs the daemon with the scripted model, prints every
// figure, saves them with --json, and --compare prints the ratios to a
// saved result.
func TestBenchVerbReportAndCompare(t *testing.T) {
	saved := filepath.Join(t.TempDir(), "before.json")
	code, out, errOut := runVerb(t, "bench", "--chats", "3", "--messages", "2", "--json", saved)
	if code != 0 {
		t.Fatalf("bench: exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
	}
	if !strings.HasPrefix(out, "switchboard bench: 3 chats × 2 messages, closed loop, tools all, model latency 0 ms, ") {
		t.Errorf("report header:\n%s", out)
	}
	for _, name := range benchRows {
		if !benchRow(name, false).MatchString(out) {
			t.Errorf("report has no row %q:\n%s", name, out)
		}
	}
	if !regexp.MustCompile(`(?m)^\s*turns\s+6\s*$`).MatchString(out) {
		t.Errorf("report does not count 6 turns:\n%s", out)
	}
	r, err := loadgen.ReadResult(saved)
	if err != nil {
		t.Fatal(err)
	}
	if r.Turns != 6 || r.Chats != 3 || r.Messages != 2 || r.Tools != "all" || r.TurnsPerSecond <= 0 || r.AllocsPerTurn <= 0 || r.RSSBytes <= 0 ||
		r.MeanMs <= 0 || r.TurnMs <= 0 || r.ModelMs <= 0 || r.CommitMs <= 0 || r.TurnMs > r.MeanMs || r.ModelMs+r.CommitMs > r.TurnMs {
		t.Fatalf("saved result %+v", r)
	}

	code, out, errOut = runVerb(t, "bench", "--chats", "2", "--messages", "2", "--tools", "files", "--rate", "100", "--compare", saved)
	if code != 0 {
		t.Fatalf("bench --compare: exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
	}
	for _, want := range []string{
		"switchboard bench: 2 chats × 2 messages, open loop at 100 messages/s, tools files, ",
		"compared with " + saved + ": 3 chats × 2 messages, closed loop, tools all, ",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("compared report has no %q:\n%s", want, out)
		}
	}
	if !regexp.MustCompile(`(?m)^\s*now\s+before\s+ratio\s*$`).MatchString(out) {
		t.Errorf("compared report has no column heads:\n%s", out)
	}
	for _, name := range benchRows {
		if !benchRow(name, true).MatchString(out) {
			t.Errorf("compared report has no row %q with the saved figure and the ratio:\n%s", name, out)
		}
	}
	if !regexp.MustCompile(`(?m)^\s*turns\s+4\s+6\s+0\.67×\s*$`).MatchString(out) {
		t.Errorf("turns row is not 4 against 6 (0.67×):\n%s", out)
	}
}

// --model-url uses a model served elsewhere (here by the test) instead
// of the scripted model in the bench's process.
func TestBenchVerbExternalModel(t *testing.T) {
	model := llmtest.NewServer(t, llmtest.WithResponder(llmtest.EchoResponder), llmtest.WithStrict())
	code, out, errOut := runVerb(t, "bench", "--chats", "2", "--messages", "2", "--model-url", model.URL())
	if code != 0 {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
	}
	if n := model.RequestCount(); n != 4 {
		t.Errorf("the external model answered %d requests, want 4", n)
	}
	if v := model.Violations(); len(v) > 0 {
		t.Errorf("requests broke the wire rules: %v", v)
	}
	if !strings.Contains(out, "tools all, model "+model.URL()+", ") {
		t.Errorf("report does not name the model:\n%s", out)
	}
}

// --keep keeps the temporary folder with the daemon's history in it.
func TestBenchVerbKeep(t *testing.T) {
	code, out, errOut := runVerb(t, "bench", "--chats", "1", "--messages", "1", "--keep")
	if code != 0 {
		t.Fatalf("exit %d\n%s\n%s", code, out, errOut)
	}
	m := regexp.MustCompile(`data and workspace kept in (\S+)`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("no kept folder in:\n%s", out)
	}
	t.Cleanup(func() { os.RemoveAll(m[1]) })
	if _, err := os.Stat(filepath.Join(m[1], "data", "history.db")); err != nil {
		t.Fatalf("kept folder: %v", err)
	}
}

// A turn that never answers ends the run with an error naming the chat.
func TestBenchVerbTurnWithoutAnswer(t *testing.T) {
	code, out, errOut := runVerb(t, "bench", "--chats", "2", "--messages", "1", "--model-latency", "3s", "--timeout", "200ms")
	if code != 1 {
		t.Fatalf("exit %d, want 1\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
	}
	if !regexp.MustCompile(`switchboard: loadgen: chat c[01]: no final reply to message c[01]-0 within 200ms`).MatchString(errOut) {
		t.Fatalf("stderr does not name the chat:\n%s", errOut)
	}
}

// Bad flags are usage errors (exit 2) naming the flag; a --compare file
// that is not a result is refused before the daemon starts.
func TestBenchVerbBadFlags(t *testing.T) {
	notResult := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(notResult, []byte("data_dir: ./data\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"--chats", "0"}, 2, "--chats: must be at least 1, got 0"},
		{[]string{"--messages", "-1"}, 2, "--messages: must be at least 1, got -1"},
		{[]string{"--rate", "-5"}, 2, "--rate: must be 0 (closed loop) or a positive number"},
		{[]string{"--tools", "web"}, 2, `--tools: must be all or files, got "web"`},
		{[]string{"--model-latency", "-1s"}, 2, "--model-latency: must not be negative"},
		{[]string{"--timeout", "0s"}, 2, "--timeout: must be positive"},
		{[]string{"--model-url", "127.0.0.1:8088"}, 2, "--model-url: must be an http:// or https:// URL"},
		{[]string{"--model-url", "http://127.0.0.1:8088/v1", "--model-latency", "1s"}, 2, "--model-latency: the scripted model's delay"},
		{[]string{"--chats", "many"}, 2, `invalid value "many" for flag -chats`},
		{[]string{"extra"}, 2, `unexpected argument "extra"`},
		{[]string{"--compare", filepath.Join(t.TempDir(), "missing.json")}, 1, "missing.json: no such file"},
		{[]string{"--compare", notResult}, 1, notResult + " is not a result of switchboard bench --json"},
	} {
		code, out, errOut := runVerb(t, append([]string{"bench"}, tc.args...)...)
		if code != tc.code || !strings.Contains(errOut, tc.want) {
			t.Errorf("bench %v: exit %d, stderr %q; want exit %d and %q", tc.args, code, errOut, tc.code, tc.want)
		}
		if out != "" {
			t.Errorf("bench %v printed a report:\n%s", tc.args, out)
		}
	}
}

package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/switchboard-chat/switchboard/memory"
	"github.com/switchboard-chat/switchboard/memory/boltstore"
	"github.com/switchboard-chat/switchboard/memory/memtest"
)

// historyEnv writes a config whose data_dir holds a history.db with two
// sessions: tg/1 (many turns, compacted) and tg/2 (one turn).
func historyEnv(t *testing.T) (cfgPath, dbPath string) {
	t.Helper()
	dir := t.TempDir()
	dataDir := filepath.Join(dir, "data")
	cfgPath = filepath.Join(dir, "config.yaml")
	cfg := fmt.Sprintf("data_dir: %q\nagent:\n  workspace: %q\nbus:\n  listen: \"\"\nadmin:\n  listen: \"\"\n", dataDir, filepath.Join(dir, "ws"))
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	dbPath = filepath.Join(dataDir, "history.db")
	s, err := boltstore.Open(dbPath, boltstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := t.Context()
	for i := range 300 {
		if err := s.CommitTurn(ctx, memtest.Turn("tg/1", fmt.Sprint(i), fmt.Sprintf("question %d %s", i, strings.Repeat("x", 500)), fmt.Sprint("answer ", i))); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Compact(ctx, "tg/1", "earlier questions", 2); err != nil {
		t.Fatal(err)
	}
	if err := s.CommitTurn(ctx, memtest.Turn("tg/2", "a", "hi", "hello")); err != nil {
		t.Fatal(err)
	}
	return cfgPath, dbPath
}

func runHistoryCLI(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code = run(t.Context(), args, strings.NewReader(""), &out, &errOut)
	return code, out.String(), errOut.String()
}

func TestHistoryExport(t *testing.T) {
	cfg, _ := historyEnv(t)
	code, out, errOut := runHistoryCLI(t, "history", "export", "--config", cfg, "--session", "tg/1")
	if code != 0 {
		t.Fatalf("export = %d, stderr %q", code, errOut)
	}
	sc := bufio.NewScanner(strings.NewReader(out))
	sc.Buffer(nil, 1<<20)
	n := 0
	for sc.Scan() {
		var m memory.Message
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			t.Fatalf("line %d: %v", n+1, err)
		}
		if n == 0 && !strings.HasPrefix(m.Text(), "question 0 ") {
			t.Errorf("first line = %q, want the oldest message", m.Text())
		}
		n++
	}
	if n != 600 {
		t.Errorf("exported %d lines, want all 600 messages (not only the context)", n)
	}

	file := filepath.Join(t.TempDir(), "tg1.jsonl")
	code, out, errOut = runHistoryCLI(t, "history", "export", "--config", cfg, "--session", "tg/2", "--out", file)
	if code != 0 || !strings.Contains(out, "exported session tg/2 to "+file) {
		t.Fatalf("export --out = %d, %q, %q", code, out, errOut)
	}
	data, err := os.ReadFile(file)
	if err != nil || strings.Count(string(data), "\n") != 2 || !strings.Contains(string(data), `"hello"`) {
		t.Errorf("exported file = %q, %v", data, err)
	}

	code, _, errOut = runHistoryCLI(t, "history", "export", "--config", cfg, "--session", "tg/none", "--out", filepath.Join(t.TempDir(), "x.jsonl"))
	if code != 1 || !strings.Contains(errOut, "no such session") {
		t.Errorf("export of an unknown session = %d, %q", code, errOut)
	}
}

func TestHistoryResetAndList(t *testing.T) {
	cfg, db := historyEnv(t)
	code, out, errOut := runHistoryCLI(t, "history", "list", "--config", cfg)
	if code != 0 || !strings.Contains(out, "SESSION") || !historyLineMatches(out, `tg/1\s+600\s+4\s+2\s+17 B`) || !historyLineMatches(out, `tg/2\s+2\s+2\s+1\s+-`) {
		t.Fatalf("list = %d, %q, %q", code, out, errOut)
	}
	code, out, errOut = runHistoryCLI(t, "history", "reset", "--config", cfg, "--session", "tg/1")
	if code != 0 || !strings.Contains(out, "reset session tg/1: deleted 600 messages") {
		t.Fatalf("reset = %d, %q, %q", code, out, errOut)
	}
	s, err := boltstore.Open(db, boltstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	snap, err := s.Load(t.Context(), "tg/1", 30)
	if err != nil || len(snap.Messages) != 0 || snap.Summary != "" {
		t.Errorf("after reset: %+v, %v", snap, err)
	}
	if snap, _ := s.Load(t.Context(), "tg/2", 30); len(snap.Messages) != 2 {
		t.Error("reset touched another session")
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if code, _, errOut := runHistoryCLI(t, "history", "reset", "--config", cfg, "--session", "tg/1"); code != 1 || !strings.Contains(errOut, "no such session") {
		t.Errorf("second reset = %d, %q", code, errOut)
	}
}

func TestHistoryCompact(t *testing.T) {
	cfg, db := historyEnv(t)
	if code, _, errOut := runHistoryCLI(t, "history", "reset", "--config", cfg, "--session", "tg/1"); code != 0 {
		t.Fatal(errOut)
	}
	before, _ := os.Stat(db)
	code, out, errOut := runHistoryCLI(t, "history", "compact", "--config", cfg)
	if code != 0 || !strings.Contains(out, "compacted "+db) {
		t.Fatalf("compact = %d, %q, %q", code, out, errOut)
	}
	after, _ := os.Stat(db)
	if after.Size() >= before.Size() {
		t.Errorf("history.db %d -> %d bytes, want smaller", before.Size(), after.Size())
	}
	s, err := boltstore.Open(db, boltstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if snap, _ := s.Load(t.Context(), "tg/2", 30); len(snap.Messages) != 2 {
		t.Errorf("data lost in compaction: %+v", snap)
	}
}

func TestHistoryRefusesWhileDaemonRuns(t *testing.T) {
	cfg, db := historyEnv(t)
	s, err := boltstore.Open(db, boltstore.Options{}) // the "daemon"
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for _, args := range [][]string{
		{"compact"},
		{"export", "--session", "tg/2"},
		{"reset", "--session", "tg/2"},
		{"list"},
	} {
		code, _, errOut := runHistoryCLI(t, append(append([]string{"history"}, args...), "--config", cfg)...)
		if code != 1 || !strings.Contains(errOut, "is the daemon running? Stop it first") {
			t.Errorf("history %v while the file is held = %d, %q", args, code, errOut)
		}
	}
	if snap, _ := s.Load(t.Context(), "tg/2", 30); len(snap.Messages) != 2 {
		t.Error("a refused command changed the history")
	}
}

func TestHistoryUsage(t *testing.T) {
	cfg, _ := historyEnv(t)
	for _, tt := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"history"}, 2, "want a subcommand"},
		{[]string{"history", "help"}, 0, "export [--config FILE] --session KEY [--out FILE]"},
		{[]string{"history", "shrink"}, 2, `unknown subcommand "shrink"`},
		{[]string{"history", "export", "--config", cfg}, 2, "--session is required"},
		{[]string{"history", "reset", "--config", cfg, "--session", "a\x00b"}, 2, "NUL"},
		{[]string{"history", "list", "--config", cfg, "extra"}, 2, "unexpected argument"},
		{[]string{"history", "compact", "--session", "x"}, 2, "flag provided but not defined"},
		{[]string{"history", "list", "--config", filepath.Join(t.TempDir(), "missing.yaml")}, 1, "does not exist"},
	} {
		code, out, errOut := runHistoryCLI(t, tt.args...)
		if code != tt.code || !strings.Contains(out+errOut, tt.want) {
			t.Errorf("%q = %d, %q, %q; want %d mentioning %q", tt.args, code, out, errOut, tt.code, tt.want)
		}
	}
	// A data_dir without history.db: a clear error, and no file created.
	dir := t.TempDir()
	empty := filepath.Join(dir, "config.yaml")
	if err := os.WriteFile(empty, []byte(fmt.Sprintf("data_dir: %q\n", filepath.Join(dir, "data"))), 0o600); err != nil {
		t.Fatal(err)
	}
	if code, _, errOut := runHistoryCLI(t, "history", "list", "--config", empty); code != 1 || !strings.Contains(errOut, "no history has been stored") {
		t.Errorf("list without history.db = %d, %q", code, errOut)
	}
	if _, err := os.Stat(filepath.Join(dir, "data", "history.db")); !os.IsNotExist(err) {
		t.Error("history list created history.db")
	}
}

func TestMemoryConfigValidated(t *testing.T) {
	_, err := ParseConfig([]byte("memory:\n  scope: everyone\n  retention: -1\n  consolidate: \"25:00\"\n  index_interval: 10ms\n  embedding_base_url: ftp://x\n"), nil)
	for _, want := range []string{"memory.scope", "memory.retention", "memory.consolidate", "memory.index_interval", "memory.embedding_base_url"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("ParseConfig with bad memory values = %v, want an error naming %s", err, want)
		}
	}
	cfg, err := ParseConfig([]byte("memory:\n  retention: 90\n  consolidate: \"23:50\"\n"), nil)
	if err != nil || cfg.Memory.Retention != 90 || cfg.Memory.Consolidate != "23:50" || cfg.Memory.Scope != "user" {
		t.Errorf("ParseConfig = %+v, %v", cfg.Memory, err)
	}
}

// historyLineMatches reports whether some line of s matches the regular
// expression re.
func historyLineMatches(s, re string) bool {
	return regexp.MustCompile(`(?m)^` + re).MatchString(s)
}

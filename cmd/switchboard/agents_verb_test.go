package main

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestAgentsVerbGolden: `switchboard agents` lists the agents and the
// bindings of a configuration, offline.
func TestAgentsVerbGolden(t *testing.T) {
	cfg := filepath.Join("testdata", "agents", "config.yaml")
	code, out, errOut := runOut(t, "agents", "--config", cfg)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	goldenText(t, filepath.Join("testdata", "agents_list.golden"), out)
}

// TestAgentsWhich: `agents which` names the agent a new session gets and
// the binding that matched, with --config before or after the subcommand.
func TestAgentsWhich(t *testing.T) {
	cfg := filepath.Join("testdata", "agents", "config.yaml")
	var got strings.Builder
	for _, args := range [][]string{
		{"agents", "which", "--channel", "telegram", "--chat", "-100123456", "--user", "9", "--group", "--config", cfg},
		{"agents", "--config", cfg, "which", "--channel", "telegram", "--chat", "7", "--user", "7"},
		{"agents", "--config=" + cfg, "which", "--channel", "telegram", "--chat", "-5", "--user", "7", "--group"},
		{"agents", "which", "--config", cfg, "--channel", "slack", "--chat", "C0123", "--thread", "1700000000.000100", "--user", "U1"},
	} {
		code, out, errOut := runOut(t, args...)
		if code != 0 {
			t.Fatalf("%q: exit %d: %s", args, code, errOut)
		}
		got.WriteString("$ switchboard " + strings.Join(args, " ") + "\n" + out)
	}
	goldenText(t, filepath.Join("testdata", "agents_which.golden"), strings.ReplaceAll(got.String(), cfg, "CONFIG"))
	if code, _, errOut := runOut(t, "agents", "which", "--config", cfg); code != 2 || !strings.Contains(errOut, "--channel is required") {
		t.Errorf("which without --channel: exit %d, %q", code, errOut)
	}
	if code, _, errOut := runOut(t, "agents", "whom", "--config", cfg); code != 2 || !strings.Contains(errOut, `unknown subcommand "whom"`) {
		t.Errorf("unknown subcommand: exit %d, %q", code, errOut)
	}
}

// TestAgentsDocExample: the worked example of docs/agents.md is a valid
// configuration and the output shown there is what the verbs print.
func TestAgentsDocExample(t *testing.T) {
	doc, err := os.ReadFile(filepath.Join("..", "..", "docs", "agents.md"))
	if err != nil {
		t.Fatal(err)
	}
	blocks := regexp.MustCompile("(?s)```(yaml)?\n(.*?)```").FindAllStringSubmatch(string(doc), -1)
	var yaml, shell string
	for _, b := range blocks {
		switch {
		case b[1] == "yaml" && yaml == "":
			yaml = b[2]
		case strings.HasPrefix(b[2], "$ switchboard agents"):
			shell = b[2]
		}
	}
	if yaml == "" || shell == "" {
		t.Fatal("docs/agents.md: no yaml block or no $ switchboard agents block")
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "config.yaml"), []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Chdir(dir)
	var got strings.Builder
	for _, cmd := range regexp.MustCompile(`(?m)^\$ switchboard (.*)$`).FindAllStringSubmatch(shell, -1) {
		code, out, errOut := runOut(t, strings.Fields(cmd[1])...)
		if code != 0 {
			t.Fatalf("%s: exit %d: %s", cmd[0], code, errOut)
		}
		if got.Len() > 0 {
			got.WriteString("\n")
		}
		got.WriteString(cmd[0] + "\n" + out)
	}
	if diff := cmp.Diff(shell, got.String()); diff != "" {
		t.Errorf("docs/agents.md shows other output than the verbs print (-doc +got):\n%s", diff)
	}
}

// TestAgentsConfigErrors: problems of agents and bindings are reported
// with the other problems of the file, each naming its full key path.
func TestAgentsConfigErrors(t *testing.T) {
	_, err := ParseConfig([]byte(`
agents:
  work:
    llm: {modle: x}
    workspace: ./data/workspace
bindings:
  - {agent: wrok, channel: slack}
log: {level: loud}
`), nil)
	for _, want := range []string{
		"agents.work.llm.modle (line 4): unknown key (did you mean model?)",
		"log.level",
		"agents.work.workspace: ./data/workspace is agent main's workspace too",
		`bindings[0].agent: no agent "wrok" (agents: main, work)`,
	} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error %v\nwant it to hold %q", err, want)
		}
	}
}

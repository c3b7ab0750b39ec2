package main

import (
	"path/filepath"
	"strings"
	"testing"
)

// TestAgentsVerbGolden: `switchboard agents` lists the agents and the
// bindings of a configuration, offline.
func TestAgentsVerbGolden(t *testing.T) {
	cfg := filepath.Join("testdata", "agents.yaml")
	code, out, errOut := runOut(t, "agents", "--config", cfg)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	goldenText(t, filepath.Join("testdata", "agents_list.golden"), out)
}

// TestAgentsWhich: `agents which` names the agent a new session gets and
// the binding that matched, with --config before or after the subcommand.
func TestAgentsWhich(t *testing.T) {
	cfg := filepath.Join("testdata", "agents.yaml")
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

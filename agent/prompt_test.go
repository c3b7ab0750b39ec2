package agent

import (
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/switchboard-chat/switchboard/memory"
	"github.com/switchboard-chat/switchboard/tools"
	"github.com/switchboard-chat/switchboard/workspace"
)

var update = flag.Bool("update", false, "update golden files")

type staticPrompts struct {
	dir   string
	files []workspace.PromptFile
}

func (s staticPrompts) PromptFiles() ([]workspace.PromptFile, error) { return s.files, nil }
func (s staticPrompts) Dir() string                                  { return s.dir }

func TestBuildPromptGolden(t *testing.T) {
	ws := staticPrompts{dir: "/srv/ws", files: []workspace.PromptFile{
		{Name: "AGENT.md", Content: "# Agent\nYou are helpful.\n"},
		{Name: "USER.md", Content: "Likes tea."},
		{Name: "MEMORY.md", Content: "- met on Monday", Truncated: true},
	}}
	tl := []tools.Tool{&fakeTool{name: "read_file"}, &fakeTool{name: "list_dir"}}
	now := time.Date(2026, 11, 30, 9, 5, 0, 0, time.FixedZone("CET", 3600))
	got, err := promptText(nil, ws, tl, "", "", nil, turnFacts{Now: now, Model: "gpt-x", Channel: "telegram", IsGroup: true, Speaker: SpeakerLabel("telegram", "42", "Ann")})
	if err != nil {
		t.Fatal(err)
	}
	golden := filepath.Join("testdata", "prompt.golden")
	if *update {
		if err := os.WriteFile(golden, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatal(err)
	}
	if got != string(want) {
		t.Fatalf("prompt differs from %s (run with -update):\n%s", golden, got)
	}
}

func TestBuildPromptWithMemorySkillsAndSummary(t *testing.T) {
	ws := staticPrompts{dir: "/srv/ws", files: []workspace.PromptFile{
		{Name: "AGENT.md", Content: "You are helpful."},
		{Name: "USER.md", Content: "Workspace-wide user notes."},
		{Name: "MEMORY.md", Content: "shared file shown through the view instead"},
	}}
	mem := &memory.View{
		User:     "Ann prefers short answers.",
		Sections: []memory.Section{{Title: "Shared notes", Content: "- office closes at 6"}, {Title: "Private notes about the speaker", Content: "- Ann's cat is Mia", Truncated: true}},
		Rules:    "## Memory\n\nUse memory_search before answering about the past.",
	}
	now := time.Date(2026, 11, 30, 9, 5, 0, 0, time.UTC)
	got, err := promptText(nil, ws, nil, "- earlier: Ann asked about taxes", "## Skills\n\n- pdf: read PDFs (skills/pdf/SKILL.md)", mem,
		turnFacts{Now: now, Model: "m", Channel: "slack", Speaker: SpeakerLabel("slack", "U1", "Ann")})
	if err != nil {
		t.Fatal(err)
	}
	golden := filepath.Join("testdata", "prompt_memory.golden")
	if *update {
		if err := os.WriteFile(golden, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatal(err)
	}
	if got != string(want) {
		t.Fatalf("prompt differs from %s (run with -update):\n%s", golden, got)
	}
	for _, hidden := range []string{"Workspace-wide user notes", "shared file shown through the view instead"} {
		if strings.Contains(got, hidden) {
			t.Fatalf("%q should be replaced by the scoped memory", hidden)
		}
	}
}

// TestBuildPromptFollowsEdits uses the real workspace: an edit shows up on
// the next build, and unchanged files are not re-read.
func TestBuildPromptFollowsEdits(t *testing.T) {
	dir := t.TempDir()
	ws, err := workspace.Open(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer ws.Close()
	f := turnFacts{Now: time.Now(), Model: "m", Channel: "console"}
	heads := &promptHeads{}
	if _, err := promptText(heads, ws, nil, "", "", nil, f); err != nil {
		t.Fatal(err)
	}
	reads := ws.Reads()
	p, err := promptText(heads, ws, nil, "", "", nil, f)
	if err != nil {
		t.Fatal(err)
	}
	if ws.Reads() != reads {
		t.Fatalf("unchanged files were re-read: %d -> %d", reads, ws.Reads())
	}
	if n := heads.builds.Load(); n != 1 {
		t.Fatalf("the head was built %d times for unchanged files, want once", n)
	}
	if strings.Contains(p, "speak like a robot") {
		t.Fatal("unexpected text")
	}
	if err := os.WriteFile(filepath.Join(dir, "USER.md"), []byte("The user wants you to speak like a robot."), 0o600); err != nil {
		t.Fatal(err)
	}
	p, err = promptText(heads, ws, nil, "", "", nil, f)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(p, "speak like a robot") {
		t.Fatal("edit to USER.md not in the next prompt")
	}
	if n := heads.builds.Load(); n != 2 {
		t.Fatalf("the head was built %d times after one edit, want twice", n)
	}
}

// promptText is the whole prompt buildPrompt builds.
func promptText(heads *promptHeads, ws PromptFiles, tl []tools.Tool, summary, skills string, mem *memory.View, f turnFacts) (string, error) {
	p, err := buildPrompt(heads, ws, tl, summary, skills, mem, f)
	return p.String(), err
}

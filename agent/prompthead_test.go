package agent

import (
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"
	"unsafe"

	"github.com/switchboard-chat/switchboard/agent/loop"
	"github.com/switchboard-chat/switchboard/bus"
	"github.com/switchboard-chat/switchboard/llm/llmtest"
	"github.com/switchboard-chat/switchboard/memory"
	"github.com/switchboard-chat/switchboard/tools"
	"github.com/switchboard-chat/switchboard/workspace"
)

// descTool is a tool with a given description (several lines: the prompt
// shows the first).
type descTool struct {
	fakeTool
	desc string
}

func (d *descTool) Description() string { return d.desc }

// TestPromptMatchesReference checks that the prompt built from a shared
// head and a per-turn tail is byte for byte the prompt the whole-prompt
// builder (refBuildPrompt, the code before the split) made, for every
// variant, built fresh and taken from the cache, one cache serving all the
// cases in turn as one agent's sessions would.
func TestPromptMatchesReference(t *testing.T) {
	files := []workspace.PromptFile{
		{Name: "AGENT.md", Content: "\n# Agent\nYou are helpful. <b>&</b> é日本\n\n"},
		{Name: "USER.md", Content: "Workspace-wide user notes."},
		{Name: "RULE.md", Content: "Be kind."},
		{Name: "MEMORY.md", Content: "- met on Monday", Truncated: true},
	}
	tl := []tools.Tool{&descTool{fakeTool{name: "read_file"}, "Reads a file.\nMore detail."}, &fakeTool{name: "list_dir"}}
	userMem := &memory.View{User: "Ann prefers short answers.",
		Sections: []memory.Section{{Title: "Shared notes", Content: "- office closes at 6"}, {Title: "Private", Content: "- cat Mia", Truncated: true}},
		Rules:    "## Memory\n\nUse memory_search."}
	noUserMem := &memory.View{Sections: []memory.Section{{Title: "Shared notes", Content: "- office"}}}
	emptyMem := &memory.View{}
	now := time.Date(2026, 11, 30, 9, 5, 0, 0, time.FixedZone("X", -(3*3600+1800)))
	group := turnFacts{Now: now, Model: "m", Channel: "telegram", IsGroup: true, Speaker: SpeakerLabel("telegram", "42", "Ann")}
	private := turnFacts{Now: now.UTC(), Model: "m2", Channel: "slack", Speaker: SpeakerLabel("slack", "U1", "Bob")}
	cases := []struct {
		name            string
		ws              staticPrompts
		tools           []tools.Tool
		summary, skills string
		mem             *memory.View
		f               turnFacts
	}{
		{"plain", staticPrompts{"/srv/ws", files}, tl, "", "", nil, group},
		{"memory replaces USER.md", staticPrompts{"/srv/ws", files}, tl, "", "", userMem, private},
		{"memory without own USER.md", staticPrompts{"/srv/ws", files}, tl, "", "", noUserMem, private},
		{"empty memory", staticPrompts{"/srv/ws", files}, tl, "", "", emptyMem, group},
		{"summary and skills", staticPrompts{"/srv/ws", files}, tl, "  - earlier: taxes\n", "\n## Skills\n\n- pdf: read PDFs\n", userMem, group},
		{"no tools, no files", staticPrompts{"/other", nil}, nil, "- s", "", nil, private},
		{"truncated files only", staticPrompts{"/srv/ws", files[3:]}, nil, "", "## Skills\n\n- x", nil, group},
		{"back to plain", staticPrompts{"/srv/ws", files}, tl, "", "", nil, group},
	}
	shared := &promptHeads{}
	for _, tc := range cases {
		want, err := refBuildPrompt(tc.ws, tc.tools, tc.summary, tc.skills, tc.mem, tc.f)
		if err != nil {
			t.Fatal(err)
		}
		for _, heads := range []*promptHeads{nil, shared, shared} { // fresh, built or cached, cached
			got, err := buildPrompt(heads, tc.ws, tc.tools, tc.summary, tc.skills, tc.mem, tc.f)
			if err != nil {
				t.Fatal(err)
			}
			if got.String() != want {
				t.Fatalf("%s: prompt differs from the reference\n got: %q\nwant: %q", tc.name, got.String(), want)
			}
			if got.tokens() != loop.TextTokens(want) {
				t.Fatalf("%s: token estimate %d, the whole prompt's is %d", tc.name, got.tokens(), loop.TextTokens(want))
			}
		}
	}
	// Heads built: plain, USER.md replaced, MEMORY.md replaced, summary
	// and skills, no files, truncated only, and plain again (its variant's
	// head was replaced by "no tools, no files" and "truncated files only").
	if n := shared.builds.Load(); n != 7 {
		t.Fatalf("built %d heads, want 7 (one per change of inputs)", n)
	}
}

// TestSessionsShareThePromptHead drives two sessions of one agent over the
// bus with a real workspace: their turns share one head, built once, and
// an AGENT.md edited between turns is in the very next request.
func TestSessionsShareThePromptHead(t *testing.T) {
	dir := t.TempDir()
	ws, err := workspace.Open(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer ws.Close()
	h := newHarness(t, func(hc *harnessConfig) {
		hc.prompts = ws
		hc.tools = []tools.Tool{&fakeTool{name: "lookup"}}
		hc.modelOption = []llmtest.Option{llmtest.WithResponder(llmtest.EchoResponder)}
	})
	ask := func(id, chat, text string) string {
		t.Helper()
		h.bus.Send(bus.Inbound{ID: id, Channel: "console", ChatID: chat, UserID: "u-" + chat, UserName: "Ann", Text: text})
		h.final(id)
		reqs := h.model.Requests()
		return llmtest.MessageText(reqs[len(reqs)-1].Body.Messages[0])
	}
	heads := h.mgr.agentEnv(MainAgent).heads
	first := ask("m1", "c1", "hello")
	second := ask("m2", "c2", "hello")
	if n := heads.builds.Load(); n != 1 {
		t.Fatalf("two sessions built the head %d times, want once", n)
	}
	head := heads.heads[allFiles].Load().prompt.Text()
	if !strings.HasPrefix(first, head) || !strings.HasPrefix(second, head) || !strings.Contains(head, "## AGENT.md") {
		t.Fatalf("the requests' system prompts do not start with the shared head\nhead: %q\nfirst: %q", head, first)
	}
	if err := os.WriteFile(filepath.Join(dir, "AGENT.md"), []byte("You are a pirate. Say arr."), 0o600); err != nil {
		t.Fatal(err)
	}
	if third := ask("m3", "c1", "hello again"); !strings.Contains(third, "You are a pirate. Say arr.") {
		t.Fatalf("the edited AGENT.md is not in the next turn's prompt:\n%s", third)
	}
	if n := heads.builds.Load(); n != 2 {
		t.Fatalf("the head was built %d times after one edit, want twice", n)
	}
}

// TestPromptBuildDoesNotCopyTheHead checks that a turn whose head is
// unchanged allocates for its tail only, not for the whole prompt: with a
// 12 KB head the fresh build (no cache) allocates more than the head's
// size per turn, the shared one a small fraction of it.
func TestPromptBuildDoesNotCopyTheHead(t *testing.T) {
	ws := staticPrompts{dir: "/srv/ws", files: []workspace.PromptFile{{Name: "AGENT.md", Content: strings.Repeat("You are a careful assistant. ", 400)}}}
	tl := []tools.Tool{&fakeTool{name: "read_file"}}
	f := turnFacts{Now: time.Date(2026, 11, 30, 9, 5, 0, 0, time.UTC), Model: "m", Channel: "console", Speaker: "Ann"}
	perTurn := func(heads *promptHeads) uint64 {
		const n = 1000
		if _, err := buildPrompt(heads, ws, tl, "", "", nil, f); err != nil { // warm the cache and the pool
			t.Fatal(err)
		}
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		for range n {
			if _, err := buildPrompt(heads, ws, tl, "", "", nil, f); err != nil {
				t.Fatal(err)
			}
		}
		runtime.ReadMemStats(&after)
		return (after.TotalAlloc - before.TotalAlloc) / n
	}
	head := 12000
	if fresh := perTurn(nil); fresh < uint64(head) {
		t.Fatalf("a fresh build allocates %d B per turn, less than its %d B head: the check measures nothing", fresh, head)
	}
	// (Under -race sync.Pool drops a quarter of what is put back, so the
	// tail's pooled buffer is allocated again now and then: a few KB.)
	heads := &promptHeads{}
	if shared := perTurn(heads); shared > uint64(head/2) {
		t.Fatalf("a turn with a shared head allocates %d B, want under %d B (the tail only)", shared, head/2)
	}
	a, _ := buildPrompt(heads, ws, tl, "", "", nil, f)
	b, _ := buildPrompt(heads, ws, tl, "", "", nil, f)
	if unsafe.StringData(a.head.Text()) != unsafe.StringData(b.head.Text()) || len(a.head.Text()) < head {
		t.Fatal("two turns do not share the head's text")
	}
}

// BenchmarkBuildPrompt is one turn's prompt over a real workspace (its
// files stamped every turn) with eleven tools, and its token estimate:
// "whole" as it was built before the split (refBuildPrompt), "shared"
// with the head unchanged.
//
//	go test ./agent -run '^$' -bench BuildPrompt -benchmem
func BenchmarkBuildPrompt(b *testing.B) {
	ws, err := workspace.Open(b.TempDir(), nil)
	if err != nil {
		b.Fatal(err)
	}
	defer ws.Close()
	var tl []tools.Tool
	for _, name := range []string{"read_file", "write_file", "edit_file", "list_dir", "search_files", "bash", "web_fetch", "memory_write", "memory_search", "message", "schedule"} {
		tl = append(tl, &descTool{fakeTool{name: name}, "Does " + name + " for the model, carefully, within the workspace.\nDetails."})
	}
	f := turnFacts{Now: time.Now(), Model: "m", Channel: "console", Speaker: "Ann"}
	b.Run("whole", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			p, err := refBuildPrompt(ws, tl, "", "", nil, f)
			if err != nil {
				b.Fatal(err)
			}
			_ = loop.TextTokens(p)
		}
	})
	b.Run("shared", func(b *testing.B) {
		heads := &promptHeads{}
		b.ReportAllocs()
		for b.Loop() {
			p, err := buildPrompt(heads, ws, tl, "", "", nil, f)
			if err != nil {
				b.Fatal(err)
			}
			_ = p.tokens()
		}
	})
}

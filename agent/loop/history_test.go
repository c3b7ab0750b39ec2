package loop

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/switchboard-chat/switchboard/llm"
	"github.com/switchboard-chat/switchboard/memory"
)

// validForOpenAI checks the API's rules on a converted request: every
// assistant tool call is answered by tool messages right after it, in
// order, each with content, and no tool message stands anywhere else.
func validForOpenAI(msgs []llm.Message) error {
	for i := 0; i < len(msgs); i++ {
		m := msgs[i]
		if m.Role == llm.RoleTool {
			return fmt.Errorf("orphan tool message at %d", i)
		}
		if m.Role != llm.RoleAssistant || len(m.ToolCalls) == 0 {
			continue
		}
		for j, c := range m.ToolCalls {
			k := i + 1 + j
			if k >= len(msgs) || msgs[k].Role != llm.RoleTool || msgs[k].ToolID != c.ID || msgs[k].Content == "" {
				return fmt.Errorf("call %s at %d not answered at %d", c.ID, i, k)
			}
		}
		i += len(m.ToolCalls)
	}
	return nil
}

// TestSanitizeProperty builds random histories with holes (missing,
// duplicated, misplaced and orphaned results, broken tool_use blocks) and
// checks the sanitised output is always valid for the OpenAI API and keeps
// every user message.
func TestSanitizeProperty(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for iter := range 3000 {
		var msgs []memory.Message
		users := 0
		n := 1 + rng.IntN(12)
		id := 0
		for range n {
			switch rng.IntN(4) {
			case 0:
				msgs = append(msgs, userMsg("u"))
				users++
			case 1:
				msgs = append(msgs, memory.Message{Role: memory.RoleAssistant, Blocks: []memory.Block{{Type: memory.BlockText, Text: "a"}}})
			case 2:
				am := memory.Message{Role: memory.RoleAssistant}
				var ids []string
				for range 1 + rng.IntN(3) {
					id++
					tid := fmt.Sprintf("t%d", id)
					if rng.IntN(10) == 0 {
						tid = "" // broken block
					}
					if rng.IntN(10) == 0 && len(ids) > 0 {
						tid = ids[0] // duplicate id
					}
					ids = append(ids, tid)
					am.Blocks = append(am.Blocks, memory.Block{Type: memory.BlockToolUse, ToolID: tid, ToolName: "x"})
				}
				msgs = append(msgs, am)
				res := memory.Message{Role: memory.RoleTool}
				rng.Shuffle(len(ids), func(i, j int) { ids[i], ids[j] = ids[j], ids[i] })
				for _, tid := range ids {
					if rng.IntN(4) == 0 {
						continue // hole
					}
					txt := "r"
					if rng.IntN(6) == 0 {
						txt = ""
					}
					res.Blocks = append(res.Blocks, memory.Block{Type: memory.BlockToolResult, ToolID: tid, Text: txt})
				}
				if rng.IntN(5) > 0 {
					msgs = append(msgs, res)
				}
			case 3:
				msgs = append(msgs, memory.Message{Role: memory.RoleTool, Blocks: []memory.Block{{Type: memory.BlockToolResult, ToolID: fmt.Sprintf("orphan%d", rng.IntN(5)), Text: "o"}}})
			}
		}
		out := sanitize(msgs)
		if err := validForOpenAI(toLLM(out)); err != nil {
			t.Fatalf("iteration %d: %v\ninput: %+v\noutput: %+v", iter, err, msgs, out)
		}
		got := 0
		for _, m := range out {
			if m.Role == memory.RoleUser {
				got++
			}
		}
		if got != users {
			t.Fatalf("iteration %d: %d user messages became %d", iter, users, got)
		}
		// Idempotent.
		if again := sanitize(out); len(again) != len(out) {
			t.Fatalf("iteration %d: sanitize not idempotent", iter)
		}
	}
}

func TestTrimTurns(t *testing.T) {
	var msgs []memory.Message
	for i := range 10 {
		msgs = append(msgs, userMsg(fmt.Sprintf("q%d", i)),
			memory.Message{Role: memory.RoleAssistant, Blocks: []memory.Block{{Type: memory.BlockText, Text: strings.Repeat("x", 400)}}})
	}
	got := trimTurns(msgs, 3, 1<<30)
	if len(got) != 6 || got[0].Text() != "q7" {
		t.Fatalf("by turns: %d messages starting %q", len(got), got[0].Text())
	}
	got = trimTurns(msgs, 100, 250)
	if len(got) != 4 || got[0].Text() != "q8" {
		t.Fatalf("by tokens: %d messages starting %q", len(got), got[0].Text())
	}
	got = trimTurns(msgs, 1, 1)
	if len(got) != 2 || got[0].Text() != "q9" {
		t.Fatalf("newest turn must stay: %d", len(got))
	}
}
func TestNormaliseArgs(t *testing.T) {
	for _, tc := range []struct {
		raw, finish string
		ok          bool
		want        string
	}{
		{"", "", true, "{}"},
		{"", llm.FinishLength, false, ""},
		{`{"a":1}`, "", true, `{"a":1}`},
		{`[1]`, "", false, ""},
		{`{"a":`, "", false, ""},
		{`{a: 1}`, "", true, `{"a":1}`},
		{`{"a":"x"}`, llm.FinishLength, true, `{"a":"x"}`},
		{`{"a": "trunc}`, llm.FinishLength, false, ""},
	} {
		got, reason := normaliseArgs(tc.raw, tc.finish)
		if (reason == "") != tc.ok || (tc.ok && string(got) != tc.want) {
			t.Errorf("normaliseArgs(%q, %q) = %s, %q", tc.raw, tc.finish, got, reason)
		}
	}
}

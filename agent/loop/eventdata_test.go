package loop

import (
	"testing"

	"github.com/switchboard-chat/switchboard/internal/jsonwire/jsonwiretest"
	"github.com/switchboard-chat/switchboard/llm"
	"github.com/switchboard-chat/switchboard/tools"
)

// TestEventDataBytes: the typed data of usage, step_end and post-turn
// tool_result events is byte for byte what the maps and llm.Usage gave.
func TestEventDataBytes(t *testing.T) {
	for _, u := range []llm.Usage{{}, {PromptTokens: 1200, CompletionTokens: 34, TotalTokens: 1234}, {PromptTokens: -1}} {
		jsonwiretest.CheckAppender(t, usageData(u), u)
	}
	for _, d := range []stepEndData{{}, {Step: 3, ToolCalls: 2}} {
		jsonwiretest.CheckAppender(t, d, map[string]any{"step": d.Step, "tool_calls": d.ToolCalls})
	}
	for _, d := range []postResultData{{Name: "record_chat", Stage: tools.StagePostTurn, Text: "recorded"},
		{Error: true, Name: "x<y>", Stage: "post_turn", Text: "fail & \u2028 \"q\" \xff"}, {}} {
		jsonwiretest.CheckAppender(t, d, map[string]any{"name": d.Name, "stage": d.Stage, "error": d.Error, "text": d.Text})
	}
}

// FuzzEventData checks the post-turn result and usage data against
// encoding/json.
func FuzzEventData(f *testing.F) {
	f.Add("record_chat", "recorded", 3, true)
	f.Add("<&>", "\xff\u2029", -7, false)
	f.Fuzz(func(t *testing.T, name, text string, n int, flag bool) {
		jsonwiretest.CheckAppender(t, postResultData{Error: flag, Name: name, Stage: text, Text: text},
			map[string]any{"name": name, "stage": text, "error": flag, "text": text})
		jsonwiretest.CheckAppender(t, usageData{PromptTokens: n, CompletionTokens: -n, TotalTokens: n * 2}, llm.Usage{PromptTokens: n, CompletionTokens: -n, TotalTokens: n * 2})
		jsonwiretest.CheckAppender(t, stepEndData{Step: n, ToolCalls: -n}, map[string]any{"step": n, "tool_calls": -n})
	})
}

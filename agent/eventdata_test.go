package agent

import (
	"testing"

	"github.com/switchboard-chat/switchboard/internal/jsonwire/jsonwiretest"
	"github.com/switchboard-chat/switchboard/llm"
)

func turnEndMap(d turnEndData) map[string]any {
	return map[string]any{"id": d.ID, "steps": d.Steps, "kind": d.Kind, "stop_reason": d.StopReason, "usage": d.Usage}
}

// TestEventDataBytes: the typed data of turn_start, turn_end and llm_delta
// events is byte for byte what their maps gave.
func TestEventDataBytes(t *testing.T) {
	for _, id := range []string{"", "m1", "<&>\u2028\xff\"\\"} {
		jsonwiretest.CheckAppender(t, turnStartData{ID: id}, map[string]any{"id": id})
		jsonwiretest.CheckAppender(t, deltaData{Text: id}, map[string]any{"text": id})
	}
	for _, d := range []turnEndData{{},
		{ID: "m<1>", Kind: "reply", Steps: 2, StopReason: "completed", Usage: llm.Usage{PromptTokens: 900, CompletionTokens: 12, TotalTokens: 912}}} {
		jsonwiretest.CheckAppender(t, d, turnEndMap(d))
	}
}

// FuzzEventData checks turn_end's and llm_delta's data against
// encoding/json.
func FuzzEventData(f *testing.F) {
	f.Add("m1", "reply", "completed", 2, 1000)
	f.Add("\xff<", "\u2028", "&", -1, 0)
	f.Fuzz(func(t *testing.T, id, kind, stop string, steps, tokens int) {
		d := turnEndData{ID: id, Kind: kind, Steps: steps, StopReason: stop, Usage: llm.Usage{PromptTokens: tokens, CompletionTokens: steps, TotalTokens: tokens + steps}}
		jsonwiretest.CheckAppender(t, d, turnEndMap(d))
		jsonwiretest.CheckAppender(t, deltaData{Text: kind}, map[string]any{"text": kind})
		jsonwiretest.CheckAppender(t, turnStartData{ID: id}, map[string]any{"id": id})
	})
}

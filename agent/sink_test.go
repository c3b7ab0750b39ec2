package agent

import (
	"log/slog"
	"testing"
	"time"

	"github.com/switchboard-chat/switchboard/bus"
	"github.com/switchboard-chat/switchboard/llm"
)

// TestSinkAllocations: a typing signal, a delta and an event are encoded
// into pooled buffers, each envelope once (issue 16: before, every event
// was marshalled twice and every envelope allocated its bytes); the data
// of turn_end costs one allocation (its map cost one per field).
func TestSinkAllocations(t *testing.T) {
	now := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	env := &sessionEnv{agent: "main", opt: Options{Subjects: bus.Subjects{Prefix: "chat"}, Now: func() time.Time { return now }},
		deps: Deps{Publisher: leanPublisher{}}, log: slog.New(slog.DiscardHandler)}
	in := &bus.Inbound{V: 1, ID: "m1", Channel: "wechat", ChatID: "room@1", UserID: "u1", Text: "hi"}
	k := newTurnSink(env, in, now)
	kind, stop := bus.KindReply, "completed"
	data := map[string]any{"id": "call_1", "name": "read_file", "error": false, "text": "a result <b>", "duration_ms": int64(3)}
	for name, tc := range map[string]struct {
		run  func()
		most float64
	}{
		"event": {func() { k.Event(bus.EventToolResult, data) }, 1},
		"turn_end": {func() {
			k.Event(bus.EventTurnEnd, turnEndData{ID: in.ID, Kind: kind, Steps: 2, StopReason: stop, Usage: llm.Usage{PromptTokens: 900, TotalTokens: 912}})
		}, 1},
		"typing":         {func() { k.Typing() }, 1},
		"delta envelope": {func() { k.publish(newOutbound(in, bus.KindDelta, "so far", 2, false)) }, 1},
	} {
		if n := testing.AllocsPerRun(200, tc.run); n > tc.most {
			t.Errorf("%s: %.0f allocations, want at most %.0f", name, n, tc.most)
		} else {
			t.Logf("%s: %.0f allocations", name, n)
		}
	}
}

package agent

import (
	"testing"

	"github.com/switchboard-chat/switchboard/agent/loop"
	"github.com/switchboard-chat/switchboard/bus"
)

// The loop knows nothing of the bus: its event types and outbound kinds
// are its own constants, which the session publishes unchanged. They must
// be the protocol's values.
func TestLoopSpeaksTheBusProtocol(t *testing.T) {
	for loopName, busName := range map[string]string{
		loop.EventLLMDelta:       bus.EventLLMDelta,
		loop.EventReasoningDelta: bus.EventReasoningDelta,
		loop.EventToolCall:       bus.EventToolCall,
		loop.EventToolResult:     bus.EventToolResult,
		loop.EventUsage:          bus.EventUsage,
		loop.EventStepEnd:        bus.EventStepEnd,
		loop.KindReply:           bus.KindReply,
		loop.KindNotice:          bus.KindNotice,
		loop.KindError:           bus.KindError,
	} {
		if loopName != busName {
			t.Errorf("loop uses %q where the bus protocol says %q", loopName, busName)
		}
	}
}

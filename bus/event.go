package bus

import (
	"encoding/json"
	"time"
)

// Agent event types (Event.Type), published on chat.event.<channel>.<chat>.
const (
	EventTurnStart  = "turn_start"  // a turn began for an inbound message
	EventLLMDelta   = "llm_delta"   // streamed model output
	EventToolCall   = "tool_call"   // the model called a tool
	EventToolResult = "tool_result" // a tool returned
	EventTurnEnd    = "turn_end"    // the turn finished (its final outbound was published)
	EventUsage      = "usage"       // token usage of one model call
	// EventReasoningDelta carries streamed reasoning ("thinking") text.
	EventReasoningDelta = "reasoning_delta"
	// EventStepEnd marks the end of one model step (a call and its tools).
	EventStepEnd = "step_end"
	// EventHeartbeat reports a heartbeat's outcome (agent/heartbeat):
	// data.outcome is fired, skipped_busy, skipped_no_target, sent, silent
	// or failed.
	EventHeartbeat = "heartbeat"
)

// Event is an agent event for observers (UIs, logs, tests), published with
// core NATS (no persistence, no acknowledgement) on
// "<p>.event.<channel>.<chat>" (DESIGN.md §3). Data is a JSON value whose
// shape depends on Type; observers must ignore types and fields they do not
// know.
type Event struct {
	V         int    `json:"v"`
	Type      string `json:"type"`
	Session   string `json:"session"`
	Channel   string `json:"channel"`
	ChatID    string `json:"chat_id"`
	ThreadID  string `json:"thread_id,omitempty"`
	InReplyTo string `json:"in_reply_to,omitempty"`
	// Agent is the name of the agent answering the session (main unless
	// bindings chose another; docs/agents.md).
	Agent string          `json:"agent,omitempty"`
	Time  time.Time       `json:"time"`
	Data  json.RawMessage `json:"data,omitempty"`
}

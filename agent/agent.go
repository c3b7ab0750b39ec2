// Package agent is Switchboard's session manager: a goroutine per chat
// session only while it has messages to process (an idle session costs the
// memory of its context cache, for agent.session_idle, and nothing after),
// in-order turns within a session, concurrency across sessions, the session commands (/new, /stop, /steer, /compact, /status),
// history and its summaries, the system prompt, and the delivery of every
// answer exactly once (receipt, publish, acknowledge). The tool-calling
// model loop of one turn is package agent/loop; a session runs it with the
// fitted history and turns its result into outbound messages.
//
// One manager runs every agent of the daemon (Deps.Main and Deps.Agents):
// each session is answered by one agent, chosen when the session is
// created and kept (by name) for its life. Each turn acquires the agent's
// current generation (its prompt files, model, tools, memory, skills and
// limits, from its current Profile) and releases it when done, so a
// reload (Manager.Swap, Replace, Add, Remove) applies from the next turn
// and a replaced generation is closed after its last turn; the bus, the
// store, the turn slots and the delivery are shared.
//
// The runtime knows nothing about Telegram or Slack: it consumes inbound
// envelopes from the bus and publishes outbound ones (DESIGN.md §3–6). Its
// dependencies are the small interfaces below, satisfied in main by
// natsbus.Bus, llm.Client, boltstore.Store, tools.Registry and
// workspace.Workspace, and in tests by fakes.
package agent

import (
	"context"
	"time"

	"github.com/switchboard-chat/switchboard/agent/loop"
	"github.com/switchboard-chat/switchboard/bus"
	"github.com/switchboard-chat/switchboard/memory"
	"github.com/switchboard-chat/switchboard/workspace"
)

// Model streams one chat completion (loop.Model). Implementations are safe
// for concurrent use; onDelta is called from the calling goroutine, in
// order.
type Model = loop.Model

// Publisher sends messages on the bus. Safe for concurrent use.
type Publisher interface {
	// Publish sends data durably (JetStream) with the given Nats-Msg-Id and
	// blocks until the bus acknowledged it.
	Publish(ctx context.Context, subject string, data []byte, msgID string) error
	// PublishCore sends data best-effort without waiting.
	PublishCore(subject string, data []byte) error
}

// Source delivers inbound messages. Consume calls handler from one goroutine
// in delivery order and blocks until ctx is cancelled.
type Source interface {
	Consume(ctx context.Context, handler func(bus.Delivery)) error
}

// Toolbox is the set of tools offered to the model (loop.Toolbox). Run
// never returns an empty text and never panics (tools.Registry guarantees
// both).
type Toolbox = loop.Toolbox

// Observer receives the runtime's measurements (the metrics package
// implements it). Its methods must be cheap, must not block, and must be
// safe for concurrent use. Label values passed are bounded: channel names,
// stop reasons, tool names, fixed outcome words. ToolDone, Rollback and
// BreakerTrip come from the loop (loop.Observer).
type Observer interface {
	// Inbound: outcome is accepted, duplicate, rejected_invalid,
	// rejected_too_large or dead_lettered (a valid message given up:
	// MaxDeliveries).
	Inbound(channel, outcome string)
	// Outbound counts a final outbound message of a kind.
	Outbound(channel, kind string)
	// TurnDone: agent is the agent's name (MainAgent unless bindings
	// chose another); firstDelta is zero when nothing was streamed.
	TurnDone(agent, stopReason string, firstDelta, total time.Duration)
	// ToolDone: outcome is ok, error or denied.
	ToolDone(tool, outcome string, d time.Duration)
	// Rollback: reason is markup, unknown_tool or duplicate.
	Rollback(reason string)
	// BreakerTrip: kind is block or abort.
	BreakerTrip(kind string)
	// Redelivered counts a delivery of a message the bus had delivered
	// before (after a crash or an expired AckWait), not counting the
	// runtime's own hand-backs of a flooded session.
	Redelivered(channel string)
	// DuplicateSuppressed counts a delivery of a message already answered
	// (its receipt existed): nothing is processed or shown for it again.
	DuplicateSuppressed(channel string)
	// Collected counts n messages answered together in one turn
	// (agent.queue_mode collect, n >= 2).
	Collected(channel string, n int)
}

// nopObserver is the Observer used when none is configured.
type nopObserver struct{}

func (nopObserver) Inbound(string, string)                                {}
func (nopObserver) Outbound(string, string)                               {}
func (nopObserver) TurnDone(string, string, time.Duration, time.Duration) {}
func (nopObserver) ToolDone(string, string, time.Duration)                {}
func (nopObserver) Rollback(string)                                       {}
func (nopObserver) BreakerTrip(string)                                    {}
func (nopObserver) Redelivered(string)                                    {}
func (nopObserver) DuplicateSuppressed(string)                            {}
func (nopObserver) Collected(string, int)                                 {}

// Memory is scoped long-term memory (memory/notes in main): one user's
// private memory never reaches another user's turn. Safe for concurrent
// use.
type Memory interface {
	// View returns what the speaker may see of long-term memory.
	View(s bus.Speaker) (memory.View, error)
	// NoteSummary records a summary (of trimmed context, or of a
	// conversation that went quiet) under a heading in the daily notes of
	// the chat (groups) or the user (private chats).
	NoteSummary(s bus.Speaker, at time.Time, heading, text string) error
}

// PromptFiles supplies the workspace's prompt files, re-read only when they
// changed. Safe for concurrent use.
type PromptFiles interface {
	PromptFiles() ([]workspace.PromptFile, error)
	Dir() string
}

// Package loop runs the tool-calling model loop of one turn: it sends the
// conversation to the model, runs the tools the model calls, feeds their
// results back and repeats until the model answers, a limit is reached or
// the turn is cancelled. It knows nothing of sessions, chats or the bus
// (package agent drives it; sub-agents are nested runs of the same loop).
//
// # Input
//
// [Executor.Run] takes an [Input]: the system prompt (optionally as a
// [Prompt] head shared by many turns, built and counted once, and the
// turn's own text after it), the history (already
// fitted to the budget, oldest first), the new user message(s), the
// [tools.Session] the tools act for, and optionally a [Sink] and a
// [Steering] inbox. The tool set is the [Toolbox] given to [New], read at
// the start of every run; [Options] carry the limits (steps, extra attempts,
// rollbacks, tool timeout, parallelism, the model's context window) and the
// sub-agents offered as tools named agent-<name>.
//
// # Output
//
// Run returns a [Result]: the turn's new messages (the user message first;
// every tool_use has its tool_result), the history the next turn starts
// from, the messages overflow recovery dropped, the final text with its
// outbound kind ([KindReply], [KindError], [KindNotice]) and the stop
// reason (Stop* constants). Whatever the model or the tools do, a run ends
// with a final text (a proactive run may end silently with [StopEmpty]).
//
// While it runs, the loop reports through the [Sink] (called from the
// run's goroutine and from tool goroutines): Delta with the current step's
// text so far, Typing while it waits for a retry, and Event with the
// Event* types of this package (their values are the bus protocol's event
// names) and a JSON-encodable payload. Measurements go to the [Observer].
//
// # Cancellation
//
// Cancelling ctx with the cause [ErrStopped] (context.WithCancelCause) is a
// user's /stop: the run keeps what it produced, pairs every open tool call
// with a result and returns [StopStopped]. Any other cancellation
// (shutdown) makes Run return [ErrAborted] and a zero Result: nothing of
// the turn must be committed. Tools get ctx (bounded by the tool timeout);
// Run returns only after every tool goroutine it started has returned.
package loop

package loop

import (
	"context"
	"errors"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/switchboard-chat/switchboard/llm"
	"github.com/switchboard-chat/switchboard/memory"
	"github.com/switchboard-chat/switchboard/tools"
)

// Limits of what one turn stores and sends (cowagent.md §1). The exported
// ones are part of the contract: a result is cut to MaxToolResultChars, sent
// again later cut to MaxOldToolResultChars, reasoning kept up to
// MaxStoredReasoning.
const (
	MaxStoredReasoning    = 4096    // chars of reasoning kept per message (head + tail)
	MaxToolResultChars    = 50_000  // chars of a result of the current step
	MaxOldToolResultChars = 20_000  // chars of older results sent again
	maxArgBytes           = 1 << 20 // tool arguments larger than this are refused
	defaultToolTimeout    = 120 * time.Second
	defaultParallelTools  = 4
)

// Stop reasons reported in Result.StopReason.
const (
	StopCompleted      = "completed"
	StopMaxSteps       = "max_steps"
	StopEmpty          = "empty"
	StopError          = "error"
	StopStopped        = "stopped"
	StopCircuitBreaker = "circuit_breaker"
	StopOverflowReset  = "overflow_reset"
	StopContextLimit   = "context_limit"
)

// Outbound kinds of Result.Kind (the bus protocol's values).
const (
	KindReply  = "reply"  // a complete answer
	KindNotice = "notice" // the run was stopped by the user
	KindError  = "error"  // a user-visible failure
)

// Event types the loop reports through Sink.Event. The first six are the
// bus protocol's event names (bus.Event*); package agent checks they match.
const (
	EventLLMDelta       = "llm_delta"
	EventReasoningDelta = "reasoning_delta"
	EventToolCall       = "tool_call"
	EventToolResult     = "tool_result"
	EventUsage          = "usage"
	EventStepEnd        = "step_end"

	EventRollback         = "rollback"
	EventCircuitBreaker   = "circuit_breaker"
	EventSteer            = "steer"
	EventContextGuard     = "context_guard"
	EventContextCompacted = "context_compacted"
	EventSubagentStart    = "subagent_start"
	EventSubagentEnd      = "subagent_end"
)

// ErrStopped is the cancellation cause of a run stopped by the user
// (/stop): cancel the run's context with it (context.WithCancelCause) and
// Run keeps what was produced and returns StopStopped.
var ErrStopped = errors.New("stopped by the user")

// ErrAborted is returned by Run when the turn was cancelled for a reason
// other than ErrStopped (daemon shutdown): nothing must be committed or
// acknowledged, so the message is redelivered and answered after restart.
var ErrAborted = errors.New("agent: turn aborted")

// Model streams one chat completion. Implementations are safe for concurrent
// use; onDelta is called from the calling goroutine, in order.
type Model interface {
	Stream(ctx context.Context, req llm.Request, onDelta func(llm.Delta)) (*llm.Response, error)
}

// Toolbox is the set of tools offered to the model. Run never returns an
// empty text and never panics (tools.Registry guarantees both).
type Toolbox interface {
	List() []tools.Tool
	Run(ctx context.Context, name string, call tools.Call) tools.Result
}

// Observer receives the loop's measurements. Its methods must be cheap,
// must not block, and must be safe for concurrent use.
type Observer interface {
	// ToolDone: outcome is ok, error or denied.
	ToolDone(tool, outcome string, d time.Duration)
	// Rollback: reason is markup, unknown_tool or duplicate.
	Rollback(reason string)
	// BreakerTrip: kind is block or abort.
	BreakerTrip(kind string)
}

type nopObserver struct{}

func (nopObserver) ToolDone(string, string, time.Duration) {}
func (nopObserver) Rollback(string)                        {}
func (nopObserver) BreakerTrip(string)                     {}

// Sink receives what a run produces while it runs. Implementations must be
// safe for calls from the run's goroutine and from tool goroutines.
type Sink interface {
	// Delta reports the whole text of the current model step so far.
	Delta(text string)
	// Typing tells the user the agent is still working (e.g. while it
	// waits to retry a failed model call).
	Typing()
	// Event reports an event (the Event* types) with its data.
	Event(typ string, data any)
}

// Steering is the inbox of /steer messages of a running turn.
type Steering interface {
	// Take returns and removes the pending items.
	Take() []string
	// TakeOrClose returns and removes the pending items; when there are
	// none it closes the inbox, atomically, so that a /steer arriving later
	// is handled as a normal message.
	TakeOrClose() []string
}

// Input is everything one turn needs.
type Input struct {
	// System is the system prompt, or its part after Prefix.
	System string
	// Prefix, when set, is the start of the system prompt, shared with
	// other turns: the request's system message is Prefix's text followed
	// by System, written without joining them.
	Prefix  *Prompt
	History []memory.Message // context before this turn, oldest first, already fitted
	User    memory.Message   // the new user message (TurnStart set)
	// More are further user messages answered in the same turn (collected
	// while an earlier turn ran), in order after User, TurnStart unset.
	More    []memory.Message
	Session tools.Session
	Sink    Sink     // may be nil
	Steer   Steering // may be nil
	// Log, when set, is the turn's logger (carrying channel, session,
	// msg_id and turn); the executor's logger otherwise.
	Log *slog.Logger
	// Proactive turns (scheduled, not answering a user) may end silently
	// when the model has nothing to say.
	Proactive bool
}

// Result is what a turn produced.
type Result struct {
	// Messages are the turn's new messages (the user message first), to be
	// committed in one transaction. Every tool_use has its tool_result.
	Messages []memory.Message
	// History is the context the next turn should start from: the input
	// history (less what overflow recovery dropped) plus Messages.
	History []memory.Message
	// Dropped are older messages that overflow recovery removed from the
	// context; they belong in the summary.
	Dropped []memory.Message
	// ResetContext asks the caller to start a fresh context: overflow
	// recovery failed. Stored history is kept.
	ResetContext bool
	// Text is the final text for the user and Kind its outbound kind. Text
	// is empty only for a proactive turn that ended silently.
	Text       string
	Kind       string
	StopReason string
	Steps      int
	Usage      llm.Usage
}

// Options configure an Executor.
type Options struct {
	ModelName   string
	Temperature float32 // the configured temperature (llm.temperature)
	Limits      Limits
	Subagents   Subagents
	Observer    Observer // measurements; nil discards
}

// Limits bound one run.
type Limits struct {
	MaxSteps        int           // model calls per turn (agent.max_steps)
	ExtraAttempts   int           // calls beyond MaxSteps for rollbacks and retries (agent.extra_attempts)
	MaxRollbacks    int           // consecutive rollbacks (agent.max_consecutive_rollbacks)
	KeepToolResults int           // newest tool results of a run sent in full; -1 all (agent.keep_tool_results)
	ToolTimeout     time.Duration // per tool call (default 120 s)
	ParallelTools   int           // concurrent parallel-safe calls (default 4)
	ContextWindow   int           // the model's window (llm.context_window); 0 disables the in-run guard
	MaxOutputTokens int           // reserved for the reply (llm.max_tokens)
}

// Subagents are the sub-agents offered to the model as tools agent-<name>.
type Subagents struct {
	Agents      map[string]Subagent
	Depth       int // 1: sub-agents cannot call sub-agents
	Concurrency int // sub-agents running at once in one step
}

// SubagentToolPrefix starts the tool name of every sub-agent.
const SubagentToolPrefix = "agent-"

// Subagent is a resolved agent.subagents.<name> entry.
type Subagent struct {
	Description string
	// Prompt returns the system prompt (it may read a workspace file, so
	// edits apply on the next use).
	Prompt   func() (string, error)
	Tools    []string // allow-list
	MaxSteps int      // 0: half the parent's
	Model    string   // "" : the configured model
	Timeout  time.Duration
}

// postTurnRunner is the optional capability of a Toolbox that has
// post-turn tools (tools.Registry has it).
type postTurnRunner interface {
	PostTurn() []tools.Tool
	RunPostTurn(ctx context.Context, t tools.Tool, call tools.Call) tools.Result
}

// knower is the optional capability of a Toolbox that answers calls to
// names it does not list (e.g. skills called as tools).
type knower interface {
	Known(name string) bool
}

// Executor runs the tool-calling loop of one turn. It is immutable and safe
// for concurrent use by many sessions. The tool set is read at the start of
// every turn, so a toolbox whose tools change (MCP servers joining) works.
type Executor struct {
	model Model
	tools Toolbox
	post  postTurnRunner
	opt   Options
	log   *slog.Logger

	// topSet caches the user turns' tool set while the toolbox lists the
	// same tools (compared by name and schema), so schemas are not parsed
	// again on every turn.
	topSet atomic.Pointer[cachedToolSet]
}

// New returns an executor. tb may be nil (no tools).
func New(model Model, tb Toolbox, opt Options, log *slog.Logger) *Executor {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	l := &opt.Limits
	l.MaxSteps = max(l.MaxSteps, 1)
	if l.ToolTimeout <= 0 {
		l.ToolTimeout = defaultToolTimeout
	}
	if l.ParallelTools <= 0 {
		l.ParallelTools = defaultParallelTools
	}
	if opt.Subagents.Depth <= 0 {
		opt.Subagents.Depth = 1
	}
	if opt.Subagents.Concurrency <= 0 {
		opt.Subagents.Concurrency = 3
	}
	if opt.Observer == nil {
		opt.Observer = nopObserver{}
	}
	if l.KeepToolResults == 0 && l.MaxRollbacks == 0 && l.ExtraAttempts == 0 {
		l.KeepToolResults = -1 // zero Limits keep every result
	}
	e := &Executor{model: model, tools: tb, opt: opt, log: log}
	if p, ok := tb.(postTurnRunner); ok && tb != nil {
		e.post = p
	}
	return e
}

// Tools returns the tools offered to the model.
func (e *Executor) Tools() []tools.Tool {
	if e.tools == nil {
		return nil
	}
	return e.tools.List()
}

// Run executes one turn. It returns ErrAborted (and a zero result) when ctx
// was cancelled by anything but ErrStopped; otherwise it always returns a
// result with a final text, whatever the model or the tools do.
func (e *Executor) Run(ctx context.Context, in Input) (Result, error) {
	t := e.newTurn(in, runSpec{maxSteps: e.opt.Limits.MaxSteps}, nil)
	if err := t.loop(ctx); err != nil {
		return Result{}, err
	}
	t.runPostTurn(ctx)
	t.res.Messages = t.tr.added
	if !t.res.ResetContext {
		t.res.History = t.tr.context
	}
	return t.res, nil
}

// newTurn starts a run: a user turn, or a sub-agent whose tools allow admits.
func (e *Executor) newTurn(in Input, spec runSpec, allow func(string) bool) *turn {
	ts := e.toolSet(allow, spec.depth)
	t := &turn{e: e, in: in, log: in.Log, ts: ts, spec: spec,
		tr:  newTranscript(in.History),
		pol: callPolicy{ts: ts, obs: e.opt.Observer}}
	if t.log == nil {
		t.log = e.log.With("session", in.Session.Key)
	}
	t.tr.add(in.User)
	for _, m := range in.More {
		t.tr.add(m)
	}
	return t
}

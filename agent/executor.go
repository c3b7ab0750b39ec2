package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"
	"time"

	"github.com/switchboard-chat/switchboard/bus"
	"github.com/switchboard-chat/switchboard/internal/failpoint"
	"github.com/switchboard-chat/switchboard/llm"
	"github.com/switchboard-chat/switchboard/memory"
	"github.com/switchboard-chat/switchboard/tools"
)

// Limits of what one turn stores and sends (cowagent.md §1).
const (
	maxStoredReasoning    = 4096    // chars of reasoning kept per message (head + tail)
	maxToolResultChars    = 50_000  // chars of a result of the current step
	maxOldToolResultChars = 20_000  // chars of older results sent again
	maxArgBytes           = 1 << 20 // tool arguments larger than this are refused
	defaultToolTimeout    = 120 * time.Second
	defaultParallelTools  = 4
	maxSteerItems         = 16
	maxSteerChars         = 8000
)

// Stop reasons reported in TurnResult.StopReason and the turn_end event.
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

// User-visible texts of the executor. They are honest about what happened.
const (
	textNotConfigured = "No language model is configured yet, so I cannot answer. " +
		"The operator should set OPENAI_API_KEY (and OPENAI_BASE_URL for Ollama, vLLM or another OpenAI-compatible server, " +
		"OPENAI_MODEL for the model name) and restart Switchboard, or edit the llm section of config.yaml. " +
		"`switchboard check` tells whether the endpoint is reachable."
	textOverflowReset = "This conversation grew too long for the model, even after shortening it, so I started a fresh context. " +
		"Your earlier messages are kept on disk. Please send your last request again."
	textEmptyFallback = "I could not produce an answer this time. Please try again or rephrase your request."
	textCancelled     = "Cancelled by the user before this tool finished."
	textSkipped       = "Skipped because the user redirected the task before this tool ran."
	textStopped       = "_(stopped by the user)_"
	maxStepsPrompt    = "You have used all %d steps allowed for this request. Do not call any tools. " +
		"Summarise for the user what you did, what you found, and what is still left to do."
	stuckPrompt = "You stopped making progress: %s Do not call any tools. " +
		"Summarise for the user what you did, what you found, and what is still left to do."
	textMaxStepsFallback = "I stopped after %d steps without finishing this request. " +
		"Ask me to continue, or split the task into smaller steps."
	nudgePrompt      = "Tell the user the result of the tool calls above, in plain words."
	steerPrefix      = "[Steering update from the user for the task in progress]\nFollow this new instruction; it takes precedence over the earlier request where they conflict:\n"
	repeatHint       = "\n\n[Note: this exact call has now succeeded several times. Do not repeat it; use the result and answer the user.]"
	textBreakerStop  = "I'm sorry — I stopped because %s Please rephrase the request or split it into smaller steps."
	splitWriteAdvice = " To write a large file, create it with write_file holding the first part, then append the rest with edit_file calls " +
		"whose old_text is empty, a few KB each."
)

// errUserStop is the cancellation cause of a turn stopped with /stop.
var errUserStop = errors.New("stopped by the user")

// ErrAborted is returned by Executor.Run when the turn was cancelled for a
// reason other than /stop (daemon shutdown): nothing must be committed or
// acknowledged, so the message is redelivered and answered after restart.
var ErrAborted = errors.New("agent: turn aborted")

// TurnSink receives what a turn produces while it runs. Implementations
// must be safe for calls from the turn's goroutine and from tool goroutines.
type TurnSink interface {
	// Delta reports the whole text of the current model step so far.
	Delta(text string)
	// Typing tells the user the agent is still working (e.g. while it
	// waits to retry a failed model call).
	Typing()
	// Event reports an agent event (bus.Event* types) with its data.
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

// TurnInput is everything one turn needs.
type TurnInput struct {
	System  string           // the system prompt
	History []memory.Message // context before this turn, oldest first, already fitted
	User    memory.Message   // the new user message (TurnStart set)
	// More are further user messages answered in the same turn (collected
	// while an earlier turn ran), in order after User, TurnStart unset.
	More    []memory.Message
	Session tools.Session
	Sink    TurnSink // may be nil
	Steer   Steering // may be nil
	// Log, when set, is the turn's logger (carrying channel, session,
	// msg_id and turn); the executor's logger otherwise.
	Log *slog.Logger
	// Proactive turns (scheduled, not answering a user) may end silently
	// when the model has nothing to say.
	Proactive bool
}

// TurnResult is what a turn produced.
type TurnResult struct {
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

// ExecOptions configure an Executor.
type ExecOptions struct {
	ModelName       string
	Temperature     float32       // the configured temperature (llm.temperature)
	MaxSteps        int           // model calls per turn (agent.max_steps)
	ExtraAttempts   int           // calls beyond MaxSteps for rollbacks and retries (agent.extra_attempts)
	MaxRollbacks    int           // consecutive rollbacks (agent.max_consecutive_rollbacks)
	KeepToolResults int           // newest tool results of a run sent in full; -1 all (agent.keep_tool_results)
	ToolTimeout     time.Duration // per tool call (default 120 s)
	ParallelTools   int           // concurrent parallel-safe calls (default 4)
	ContextWindow   int           // the model's window (llm.context_window); 0 disables the in-run guard
	MaxOutputTokens int           // reserved for the reply (llm.max_tokens)

	Observer Observer // measurements; nil discards

	Subagents           map[string]Subagent // offered as tools agent-<name>
	SubagentDepth       int                 // 1: sub-agents cannot call sub-agents
	SubagentConcurrency int                 // sub-agents running at once in one step
}

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
	opt   ExecOptions
	log   *slog.Logger

	// topSet caches the user turns' tool set while the toolbox lists the
	// same tools (compared by name and schema), so schemas are not parsed
	// again on every turn.
	topSet atomic.Pointer[cachedToolSet]
}

type cachedToolSet struct {
	key string
	ts  toolSet
}

// toolSet is the tools offered during one run (a turn or a sub-agent).
type toolSet struct {
	specs    []llm.Tool
	names    map[string]bool
	required map[string][]string        // tool → required parameters
	parallel map[string]bool            // tool → parallel-safe
	schemas  map[string]json.RawMessage // tool → parameter schema
	aliases  map[string]map[string]string
}

var subtaskSchema = json.RawMessage(`{"type":"object","properties":{"subtask":{"type":"string","description":"The subtask, clearly defined, with the background the sub-agent needs."}},"required":["subtask"]}`)

// toolSet snapshots the toolbox for one run: the tools allow admits, plus
// the sub-agent tools when depth allows. The unfiltered top-level set is
// cached while the tools stay the same.
func (e *Executor) toolSet(allow func(string) bool, depth int) toolSet {
	if allow != nil || depth != 0 {
		return e.buildToolSet(e.Tools(), allow, depth)
	}
	list := e.Tools()
	var kb strings.Builder
	for _, t := range list {
		kb.WriteString(t.Name())
		kb.WriteByte(0)
		kb.Write(t.Schema())
		kb.WriteByte(0)
	}
	key := kb.String()
	if c := e.topSet.Load(); c != nil && c.key == key {
		return c.ts
	}
	ts := e.buildToolSet(list, nil, 0)
	e.topSet.Store(&cachedToolSet{key: key, ts: ts})
	return ts
}

// buildToolSet parses the tools' schemas into a toolSet. The result is
// read-only once built.
func (e *Executor) buildToolSet(list []tools.Tool, allow func(string) bool, depth int) toolSet {
	ts := toolSet{names: map[string]bool{}, required: map[string][]string{}, parallel: map[string]bool{},
		schemas: map[string]json.RawMessage{}, aliases: map[string]map[string]string{}}
	add := func(name, desc string, schema json.RawMessage, parallel bool) {
		ts.specs = append(ts.specs, llm.Tool{Name: name, Description: desc, Parameters: schema})
		ts.names[name], ts.parallel[name], ts.schemas[name] = true, parallel, schema
		var s struct {
			Required []string `json:"required"`
		}
		if json.Unmarshal(schema, &s) == nil {
			ts.required[name] = s.Required
		}
	}
	for _, t := range list {
		if allow != nil && !allow(t.Name()) {
			continue
		}
		add(t.Name(), t.Description(), t.Schema(), t.ParallelSafe())
		if a, ok := t.(Aliased); ok {
			ts.aliases[t.Name()] = a.Aliases()
		}
	}
	if depth < e.opt.SubagentDepth {
		for _, name := range sortedKeys(e.opt.Subagents) {
			add(SubagentToolPrefix+name, e.opt.Subagents[name].Description, subtaskSchema, true)
		}
	}
	return ts
}

// NewExecutor returns an executor. tb may be nil (no tools).
func NewExecutor(model Model, tb Toolbox, opt ExecOptions, log *slog.Logger) *Executor {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	opt.MaxSteps = max(opt.MaxSteps, 1)
	if opt.ToolTimeout <= 0 {
		opt.ToolTimeout = defaultToolTimeout
	}
	if opt.ParallelTools <= 0 {
		opt.ParallelTools = defaultParallelTools
	}
	if opt.SubagentDepth <= 0 {
		opt.SubagentDepth = 1
	}
	if opt.SubagentConcurrency <= 0 {
		opt.SubagentConcurrency = 3
	}
	if opt.Observer == nil {
		opt.Observer = nopObserver{}
	}
	if opt.KeepToolResults == 0 && opt.MaxRollbacks == 0 && opt.ExtraAttempts == 0 {
		opt.KeepToolResults = -1 // a zero ExecOptions keeps every result
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

// turn is the state of one run — a user turn or a sub-agent — used from its
// goroutine only (tool goroutines write their own result slots).
type turn struct {
	e       *Executor
	in      TurnInput
	ctx     context.Context
	log     *slog.Logger
	context []memory.Message // history + new messages
	added   []memory.Message
	res     TurnResult
	ts      toolSet
	br      breaker

	maxSteps int    // steps allowed
	model    string // model override ("" = configured)
	depth    int    // 0 for a user turn, 1 for its sub-agents, ...
	subName  string // the sub-agent's name, "" for a user turn

	steps     int  // progress; goes back down on a rollback
	attempts  int  // model calls made for the loop; never decreases
	rollbacks int  // consecutive rollbacks
	resample  bool // the next call resamples a rolled-back answer

	// answered maps tool+canonical args of successful calls in this run
	// to their result, for duplicate detection.
	answered map[string]string

	overflowed bool
	repaired   bool     // a tool-pairing rejection was answered by simplifying the context
	pending    []string // steering taken between tool calls, applied next step
	// lastResults is the index in context of the current step's tool
	// results (sent uncut), or -1.
	lastResults int

	// In-run guard: usage of the last call, the context length then, and
	// the tool results elided since (by tool id).
	lastUsage  int
	lastLen    int
	savedSince int // tokens elided since the last call
	elided     map[string]bool
}

func (t *turn) add(m memory.Message) {
	t.context = append(t.context, m)
	t.added = append(t.added, m)
}

func (t *turn) event(typ string, data any) {
	if t.in.Sink != nil {
		t.in.Sink.Event(typ, data)
	}
}

func (e *Executor) newTurn(ctx context.Context, in TurnInput, maxSteps, depth int, allow func(string) bool) *turn {
	t := &turn{e: e, in: in, ctx: ctx, log: in.Log, lastResults: -1, ts: e.toolSet(allow, depth), maxSteps: maxSteps, depth: depth,
		answered: map[string]string{}, elided: map[string]bool{}}
	if t.log == nil {
		t.log = e.log.With("session", in.Session.Key)
	}
	t.context = make([]memory.Message, 0, len(in.History)+8)
	t.context = append(t.context, in.History...)
	t.add(in.User)
	for _, m := range in.More {
		t.add(m)
	}
	return t
}

// Run executes one turn. It returns ErrAborted (and a zero result) when ctx
// was cancelled by anything but /stop; otherwise it always returns a result
// with a final text, whatever the model or the tools do.
func (e *Executor) Run(ctx context.Context, in TurnInput) (TurnResult, error) {
	t := e.newTurn(ctx, in, e.opt.MaxSteps, 0, nil)
	if err := t.loop(); err != nil {
		return TurnResult{}, err
	}
	t.runPostTurn()
	t.res.Messages = t.added
	if !t.res.ResetContext {
		t.res.History = t.context
	}
	return t.res, nil
}

// isTool reports whether the model may call name in this run.
func (t *turn) isTool(name string) bool {
	if t.ts.names[name] {
		return true
	}
	if k, ok := t.e.tools.(knower); ok && t.e.tools != nil && !strings.HasPrefix(name, SubagentToolPrefix) {
		return k.Known(name)
	}
	return false
}

// answerKey identifies a call for duplicate detection.
func answerKey(c llm.ToolCall) string { return c.Name + "\x00" + argsHash([]byte(c.Arguments)) }

// rollbackReason says why a reply should be dropped and resampled, or
// "": a kind for metrics (markup, unknown_tool, duplicate) and a text.
// A duplicate the breaker would block is not rolled back: the model gets
// the breaker's error result instead.
func (t *turn) rollbackReason(text string, calls []llm.ToolCall, finish string) (kind, why string) {
	if len(calls) == 0 && hasCallMarkup(text, t.isTool) {
		return "markup", "tool-call markup in the text instead of a tool call"
	}
	for _, c := range calls {
		if !t.isTool(c.Name) {
			return "unknown_tool", fmt.Sprintf("call to %q, which is not a tool", c.Name)
		}
	}
	for _, c := range calls {
		if _, dup := t.answered[answerKey(c)]; dup {
			if v, _ := t.br.check(c.Name, t.breakerHash(c, finish)); v != allow {
				return "", ""
			}
			return "duplicate", fmt.Sprintf("exact duplicate of an earlier %s call in this task", c.Name)
		}
	}
	return "", ""
}

// noteDuplicates records the duplicate calls of a rolled-back reply in the
// breaker: they were not run, but the model made them, and the breaker
// counts identical calls however they were answered.
func (t *turn) noteDuplicates(calls []llm.ToolCall, finish string) {
	for _, c := range calls {
		if _, dup := t.answered[answerKey(c)]; dup {
			t.br.note(c.Name, t.breakerHash(c, finish), true)
		}
	}
}

// resampleTemperature is the temperature of a call that resamples a
// rolled-back answer: a deterministic model would repeat its mistake.
func (t *turn) resampleTemperature() *float32 {
	if !t.resample {
		return nil
	}
	temp := t.e.opt.Temperature
	if temp < 0.7 {
		temp = 0.7
	} else {
		temp = min(temp+0.2, 2)
	}
	return &temp
}

// loop runs model steps until a final answer or a limit. Two counters bound
// it: steps (progress, lowered again by a rollback) and attempts (every
// call, never lowered): it ends at maxSteps steps or maxSteps +
// extra_attempts attempts, so no sequence of rollbacks or empty replies can
// loop forever.
func (t *turn) loop() error {
	e := t.e
	emptyRetried, nudged, afterTools := false, false, false
	for {
		if err := t.checkCancel(); err != nil {
			return t.stopped(err)
		}
		t.applySteer(append(t.pending, t.takeSteer(false)...))
		t.pending = nil
		if t.steps >= t.maxSteps || t.attempts >= t.maxSteps+e.opt.ExtraAttempts {
			t.limitReached()
			return nil
		}
		t.attempts++
		t.steps++
		t.res.Steps = t.steps
		if !t.guard(t.ts.specs, nil) {
			t.cutShort()
			return nil
		}
		resp, err := t.callRecovering(t.ts.specs, nil)
		t.resample = false
		if err != nil {
			if cerr := t.checkCancel(); cerr != nil {
				t.keepPartial(resp)
				return t.stopped(cerr)
			}
			t.fail(err)
			return nil
		}
		calls := uniqueIDs(resp.ToolCalls)
		if stuck, why := t.stuck(calls, resp.FinishReason); stuck {
			// The reply is dropped (nothing of it is stored or run).
			e.opt.Observer.BreakerTrip("abort")
			t.log.Warn("model repeats a blocked call; ending the run", "reason", why)
			t.event("circuit_breaker", map[string]any{"reason": why, "attempt": t.attempts, "subagent": t.subName})
			t.stuckSummary(why)
			return nil
		}
		if kind, why := t.rollbackReason(resp.Text, calls, resp.FinishReason); why != "" && t.rollbacks < e.opt.MaxRollbacks {
			if kind == "duplicate" {
				t.noteDuplicates(calls, resp.FinishReason)
			}
			e.opt.Observer.Rollback(kind)
			t.rollbacks++
			t.steps--
			t.resample = true
			t.log.Info("rolling back a model reply", "reason", why, "consecutive", t.rollbacks)
			t.event("rollback", map[string]any{"reason": why, "consecutive": t.rollbacks, "attempt": t.attempts, "subagent": t.subName})
			continue
		}
		text := cleanReply(resp.Text, t.isTool)
		if text == "" && len(calls) == 0 {
			switch {
			case !emptyRetried:
				emptyRetried = true
				t.steps--
				t.log.Warn("empty model reply; retrying once")
				continue
			case afterTools && !nudged && t.subName == "":
				nudged = true
				t.log.Warn("empty model reply after tools; nudging")
				if r, err := t.call(nil, []llm.Message{{Role: llm.RoleUser, Content: nudgePrompt}}); err == nil {
					if s := cleanReply(r.Text, t.isTool); s != "" {
						t.finalText(s, bus.KindReply, StopCompleted)
						return nil
					}
				}
			}
			if t.in.Proactive {
				t.res.Text, t.res.Kind, t.res.StopReason = "", "", StopEmpty
				return nil
			}
			t.res.Text, t.res.Kind, t.res.StopReason = textEmptyFallback, bus.KindError, StopEmpty
			return nil
		}
		t.rollbacks = 0 // a good step
		am := memory.Message{Role: memory.RoleAssistant, Time: time.Now().UTC()}
		if r := truncateMiddle(resp.Reasoning, maxStoredReasoning); r != "" {
			am.Blocks = append(am.Blocks, memory.Block{Type: memory.BlockThinking, Text: r})
		}
		if text != "" {
			am.Blocks = append(am.Blocks, memory.Block{Type: memory.BlockText, Text: text})
		}
		if len(calls) == 0 {
			t.add(am)
			// Steering that arrived during the last call is applied rather
			// than lost; only an empty inbox closes.
			if items := t.takeSteer(true); len(items) > 0 {
				t.applySteer(items)
				t.event(bus.EventStepEnd, map[string]any{"step": t.steps, "tool_calls": 0, "steered": true})
				continue
			}
			t.res.Text, t.res.Kind, t.res.StopReason = text, bus.KindReply, StopCompleted
			t.event(bus.EventStepEnd, map[string]any{"step": t.steps, "tool_calls": 0})
			return nil
		}
		for _, c := range calls {
			am.Blocks = append(am.Blocks, memory.Block{Type: memory.BlockToolUse, ToolID: c.ID, ToolName: c.Name, Input: argsForHistory(c.Arguments)})
		}
		t.add(am)
		aborted, why := t.runTools(calls, resp.FinishReason)
		afterTools = true
		t.event(bus.EventStepEnd, map[string]any{"step": t.steps, "tool_calls": len(calls)})
		if aborted {
			t.finalText(fmt.Sprintf(textBreakerStop, why), bus.KindError, StopCircuitBreaker)
			return nil
		}
	}
}

// limitReached ends a run whose counters are exhausted: a user turn gets
// the forced summary; a sub-agent goes on to its report.
func (t *turn) limitReached() {
	if t.subName != "" {
		t.res.StopReason = StopMaxSteps
		return
	}
	t.forcedSummary()
}

func (t *turn) finalText(text, kind, reason string) {
	t.add(memory.Message{Role: memory.RoleAssistant, Time: time.Now().UTC(), Blocks: []memory.Block{{Type: memory.BlockText, Text: text}}})
	t.res.Text, t.res.Kind, t.res.StopReason = text, kind, reason
}

// keepPartial stores the text streamed before a /stop.
func (t *turn) keepPartial(resp *llm.Response) {
	if resp == nil {
		return
	}
	if s := cleanReply(resp.Text, t.isTool); s != "" {
		t.add(memory.Message{Role: memory.RoleAssistant, Time: time.Now().UTC(), Blocks: []memory.Block{{Type: memory.BlockText, Text: s}}})
	}
}

// stopped ends a cancelled turn: /stop keeps what was produced and reports
// it; any other cancellation aborts.
func (t *turn) stopped(cause error) error {
	if !errors.Is(cause, errUserStop) {
		return fmt.Errorf("%w: %w", ErrAborted, cause)
	}
	t.takeSteer(true)
	t.add(memory.Message{Role: memory.RoleAssistant, Time: time.Now().UTC(),
		Blocks: []memory.Block{{Type: memory.BlockText, Text: textStopped}}})
	t.res.Text, t.res.Kind, t.res.StopReason = "Stopped.", bus.KindNotice, StopStopped
	return nil
}

// checkCancel returns the cancellation cause, or nil while the turn may go on.
func (t *turn) checkCancel() error {
	if t.ctx.Err() == nil {
		return nil
	}
	if c := context.Cause(t.ctx); c != nil {
		return c
	}
	return t.ctx.Err()
}

func (t *turn) takeSteer(close bool) []string {
	if t.in.Steer == nil {
		return nil
	}
	if close {
		return t.in.Steer.TakeOrClose()
	}
	return t.in.Steer.Take()
}

// applySteer adds steering items as user messages.
func (t *turn) applySteer(items []string) {
	for _, s := range items {
		t.add(memory.Message{Role: memory.RoleUser, Time: time.Now().UTC(), Blocks: []memory.Block{{Type: memory.BlockText, Text: steerPrefix + s}}})
		t.event("steer", map[string]any{"text": s})
	}
}

// call makes one model call over the sanitised context. extra messages are
// sent but never stored.
func (t *turn) call(specs []llm.Tool, extra []llm.Message) (*llm.Response, error) {
	msgs := make([]llm.Message, 0, len(t.context)+2+len(extra))
	msgs = append(msgs, llm.Message{Role: llm.RoleSystem, Content: t.in.System})
	msgs = append(msgs, toLLM(sanitize(t.requestContext()))...)
	msgs = append(msgs, extra...)
	var text strings.Builder
	restarts := 0
	onDelta := func(d llm.Delta) {
		if t.in.Sink == nil {
			return
		}
		if d.Restart {
			// The client retries a stream that failed after it had
			// streamed: what it sent is void. The next delta (a higher
			// seq) carries the new attempt's text from its start and
			// replaces the shown one.
			text.Reset()
			restarts++
			t.in.Sink.Event(bus.EventLLMDelta, map[string]any{"restart": true, "restarts": restarts})
			return
		}
		if d.Reasoning != "" {
			t.in.Sink.Event(bus.EventReasoningDelta, map[string]any{"text": d.Reasoning})
		}
		if d.Text != "" {
			text.WriteString(d.Text)
			if s := strings.TrimSpace(stripThink(text.String())); s != "" {
				t.in.Sink.Delta(s)
				failpoint.Hit(failpoint.MidStream)
			}
		}
	}
	req := llm.Request{Messages: msgs, Tools: specs, Model: t.model, Temperature: t.resampleTemperature(),
		OnRetry: func(attempt int, wait time.Duration, err error) {
			if t.in.Sink != nil {
				t.in.Sink.Typing()
			}
			t.log.Info("model call will be retried", "attempt", attempt, "wait", wait, "err", err)
		}}
	resp, err := t.e.model.Stream(t.ctx, req, onDelta)
	t.lastLen, t.lastUsage, t.savedSince = len(t.context), 0, 0
	if resp != nil {
		t.lastUsage = resp.Usage.PromptTokens
		t.res.Usage.PromptTokens += resp.Usage.PromptTokens
		t.res.Usage.CompletionTokens += resp.Usage.CompletionTokens
		t.res.Usage.TotalTokens += resp.Usage.TotalTokens
		if resp.Usage.TotalTokens > 0 {
			t.event(bus.EventUsage, resp.Usage)
		}
	}
	return resp, err
}

// fail turns a model error into an honest final text.
func (t *turn) fail(err error) {
	t.log.Warn("model call failed", "err", err)
	t.res.Kind, t.res.StopReason = bus.KindError, StopError
	switch {
	case errors.Is(err, llm.ErrNotConfigured):
		t.res.Text = textNotConfigured
	case errors.Is(err, errOverflowReset):
		t.res.Text, t.res.StopReason, t.res.ResetContext = textOverflowReset, StopOverflowReset, true
	default:
		t.res.Text = "Sorry, the model request failed (" + shortErr(err) + "). Please try again in a moment."
	}
}

// forcedSummary makes one extra call without tools after max_steps, with a
// temporary instruction that is never stored.
func (t *turn) forcedSummary() {
	n := t.maxSteps
	text := t.summaryCall(fmt.Sprintf(maxStepsPrompt, n))
	if text == "" {
		text = fmt.Sprintf(textMaxStepsFallback, n)
	}
	t.finalText(text, bus.KindReply, StopMaxSteps)
}

// stuckSummary ends a run whose model repeats a call the breaker blocked:
// a user turn gets the forced summary (one call without tools); a
// sub-agent goes on to its report.
func (t *turn) stuckSummary(why string) {
	if t.subName != "" {
		t.res.StopReason = StopCircuitBreaker
		return
	}
	if text := t.summaryCall(fmt.Sprintf(stuckPrompt, why)); text != "" {
		t.finalText(text, bus.KindReply, StopCircuitBreaker)
		return
	}
	t.finalText(fmt.Sprintf(textBreakerStop, "I kept repeating the same step."), bus.KindError, StopCircuitBreaker)
}

// summaryCall makes one call without tools with a temporary instruction
// that is never stored, and returns its cleaned text ("" on failure).
func (t *turn) summaryCall(prompt string) string {
	extra := []llm.Message{{Role: llm.RoleUser, Content: prompt}}
	if !t.guard(nil, extra) {
		return ""
	}
	resp, err := t.callRecovering(nil, extra)
	if err != nil {
		return ""
	}
	return cleanReply(resp.Text, t.isTool)
}

// runPostTurn runs the post-turn tools (never offered to the model) with
// the final text; their results are logged and published as events only.
func (t *turn) runPostTurn() {
	if t.e.post == nil || t.res.Text == "" {
		return
	}
	args, _ := json.Marshal(map[string]string{"reply": t.res.Text})
	for _, tl := range t.e.post.PostTurn() {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(t.ctx), t.e.opt.ToolTimeout)
		r := t.e.post.RunPostTurn(ctx, tl, tools.Call{ID: "post_" + tl.Name(), Args: args, Session: t.in.Session})
		cancel()
		if r.IsError {
			t.log.Warn("post-turn tool failed", "tool", tl.Name(), "result", truncateMiddle(r.Text, 500))
		}
		t.event(bus.EventToolResult, map[string]any{"name": tl.Name(), "stage": tools.StagePostTurn, "error": r.IsError, "text": truncateMiddle(r.Text, 2000)})
	}
}

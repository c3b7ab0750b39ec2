package agent

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"switchboard/agent/llm"
	"switchboard/bus"
	"switchboard/memory"
	"switchboard/tools"
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
	Session tools.Session
	Sink    TurnSink // may be nil
	Steer   Steering // may be nil
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
	MaxSteps        int           // model calls per turn (agent.max_steps)
	ToolTimeout     time.Duration // per tool call (default 120 s)
	ParallelTools   int           // concurrent parallel-safe calls (default 4)
	ContextWindow   int           // the model's window (llm.context_window)
	MaxOutputTokens int           // reserved for the reply (llm.max_tokens)
}

// postTurnRunner is the optional capability of a Toolbox that has
// post-turn tools (tools.Registry has it).
type postTurnRunner interface {
	PostTurn() []tools.Tool
	RunPostTurn(ctx context.Context, t tools.Tool, call tools.Call) tools.Result
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
}

// toolSet is the tools offered during one turn.
type toolSet struct {
	specs    []llm.Tool
	required map[string][]string // tool → required parameters
	parallel map[string]bool     // tool → parallel-safe
}

// toolSet snapshots the toolbox for one turn.
func (e *Executor) toolSet() toolSet {
	ts := toolSet{required: map[string][]string{}, parallel: map[string]bool{}}
	for _, t := range e.Tools() {
		ts.specs = append(ts.specs, llm.Tool{Name: t.Name(), Description: t.Description(), Parameters: t.Schema()})
		ts.parallel[t.Name()] = t.ParallelSafe()
		var s struct {
			Required []string `json:"required"`
		}
		if json.Unmarshal(t.Schema(), &s) == nil {
			ts.required[t.Name()] = s.Required
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

// turn is the state of one running turn; it is used from the turn's
// goroutine only (tool goroutines write their own result slots).
type turn struct {
	e          *Executor
	in         TurnInput
	ctx        context.Context
	context    []memory.Message // history + new messages
	added      []memory.Message
	res        TurnResult
	ts         toolSet
	br         breaker
	overflowed bool
	repaired   bool     // a tool-pairing rejection was answered by simplifying the context
	pending    []string // steering taken between tool calls, applied next step
	// lastResults is the index in context of the current step's tool
	// results (sent uncut), or -1.
	lastResults int
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

// Run executes one turn. It returns ErrAborted (and a zero result) when ctx
// was cancelled by anything but /stop; otherwise it always returns a result
// with a final text, whatever the model or the tools do.
func (e *Executor) Run(ctx context.Context, in TurnInput) (TurnResult, error) {
	t := &turn{e: e, in: in, ctx: ctx, lastResults: -1, ts: e.toolSet()}
	t.context = make([]memory.Message, 0, len(in.History)+8)
	t.context = append(t.context, in.History...)
	t.add(in.User)
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

// loop runs model steps until a final answer or a limit.
func (t *turn) loop() error {
	e := t.e
	emptyRetried, nudged, afterTools := false, false, false
	for step := 1; ; step++ {
		if err := t.checkCancel(); err != nil {
			return t.stopped(err)
		}
		t.applySteer(append(t.pending, t.takeSteer(false)...))
		t.pending = nil
		if step > e.opt.MaxSteps {
			t.forcedSummary()
			return nil
		}
		t.res.Steps = step
		resp, err := t.callRecovering(t.ts.specs, nil)
		if err != nil {
			if cerr := t.checkCancel(); cerr != nil {
				t.keepPartial(resp)
				return t.stopped(cerr)
			}
			t.fail(err)
			return nil
		}
		text := strings.TrimSpace(stripThink(resp.Text))
		calls := uniqueIDs(resp.ToolCalls)
		if text == "" && len(calls) == 0 {
			switch {
			case !emptyRetried:
				emptyRetried = true
				step--
				e.log.Warn("empty model reply; retrying once", "session", t.in.Session.Key)
				continue
			case afterTools && !nudged:
				nudged = true
				e.log.Warn("empty model reply after tools; nudging", "session", t.in.Session.Key)
				if r, err := t.call(nil, []llm.Message{{Role: llm.RoleUser, Content: nudgePrompt}}); err == nil {
					if s := strings.TrimSpace(stripThink(r.Text)); s != "" {
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
				t.event(bus.EventStepEnd, map[string]any{"step": step, "tool_calls": 0, "steered": true})
				continue
			}
			t.res.Text, t.res.Kind, t.res.StopReason = text, bus.KindReply, StopCompleted
			t.event(bus.EventStepEnd, map[string]any{"step": step, "tool_calls": 0})
			return nil
		}
		for _, c := range calls {
			am.Blocks = append(am.Blocks, memory.Block{Type: memory.BlockToolUse, ToolID: c.ID, ToolName: c.Name, Input: argsForHistory(c.Arguments)})
		}
		t.add(am)
		aborted, why := t.runTools(calls, resp.FinishReason)
		afterTools = true
		t.event(bus.EventStepEnd, map[string]any{"step": step, "tool_calls": len(calls)})
		if aborted {
			t.finalText(fmt.Sprintf(textBreakerStop, why), bus.KindError, StopCircuitBreaker)
			return nil
		}
	}
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
	if s := strings.TrimSpace(stripThink(resp.Text)); s != "" {
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
	msgs = append(msgs, toLLM(sanitize(limitOldResults(t.context, t.lastResults, maxOldToolResultChars)))...)
	msgs = append(msgs, extra...)
	var text, reasoning strings.Builder
	onDelta := func(d llm.Delta) {
		if t.in.Sink == nil {
			return
		}
		if d.Reasoning != "" {
			reasoning.WriteString(d.Reasoning)
			t.in.Sink.Event(bus.EventReasoningDelta, map[string]any{"text": d.Reasoning})
		}
		if d.Text != "" {
			text.WriteString(d.Text)
			if s := strings.TrimSpace(stripThink(text.String())); s != "" {
				t.in.Sink.Delta(s)
			}
		}
	}
	req := llm.Request{Messages: msgs, Tools: specs, OnRetry: func(attempt int, wait time.Duration, err error) {
		if t.in.Sink != nil {
			t.in.Sink.Typing()
		}
		t.e.log.Info("model call will be retried", "session", t.in.Session.Key, "attempt", attempt, "wait", wait, "err", err)
	}}
	resp, err := t.e.model.Stream(t.ctx, req, onDelta)
	if resp != nil {
		t.res.Usage.PromptTokens += resp.Usage.PromptTokens
		t.res.Usage.CompletionTokens += resp.Usage.CompletionTokens
		t.res.Usage.TotalTokens += resp.Usage.TotalTokens
		if resp.Usage.TotalTokens > 0 {
			t.event(bus.EventUsage, resp.Usage)
		}
	}
	return resp, err
}

// errOverflowReset marks a context overflow that compaction did not cure.
var errOverflowReset = errors.New("agent: context overflow persists after compaction")

// callRecovering is call with overflow self-healing: on a context overflow
// it compacts the context to 90 % of the budget the error reveals and
// retries once; a second overflow in the same turn gives errOverflowReset.
func (t *turn) callRecovering(specs []llm.Tool, extra []llm.Message) (*llm.Response, error) {
	resp, err := t.call(specs, extra)
	if err != nil && errors.Is(err, llm.ErrToolPairing) && !t.repaired {
		// Our sanitiser keeps OpenAI's rules; a provider with stricter ones
		// gets the older turns as plain text (tool traffic dropped), once.
		t.repaired = true
		cur := len(t.context) - len(t.added)
		t.context = append(compressTurns(t.context[:cur]), t.context[cur:]...)
		t.lastResults = -1
		if len(t.added) > 0 && t.added[len(t.added)-1].Role == memory.RoleTool {
			t.lastResults = len(t.context) - 1
		}
		t.e.log.Warn("provider rejected tool pairing; retrying with older turns as plain text", "session", t.in.Session.Key, "err", err)
		resp, err = t.call(specs, extra)
	}
	if err == nil || !errors.Is(err, llm.ErrContextOverflow) {
		return resp, err
	}
	if t.overflowed {
		return nil, fmt.Errorf("%w: %w", errOverflowReset, err)
	}
	t.overflowed = true
	window := windowFromError(err)
	if window == 0 {
		window = t.e.opt.ContextWindow
	}
	sys := textTokens(t.in.System)
	target := int(0.9 * float64(window-t.e.opt.MaxOutputTokens-sys))
	before := totalTokens(t.context)
	t.compactTo(target)
	t.e.log.Warn("context overflow; compacted and retrying once", "session", t.in.Session.Key,
		"window", window, "target_tokens", target, "before_tokens", before, "after_tokens", totalTokens(t.context))
	t.event("context_compacted", map[string]any{"window": window, "target": target, "before": before, "after": totalTokens(t.context)})
	resp, err = t.call(specs, extra)
	if err != nil && errors.Is(err, llm.ErrContextOverflow) {
		return nil, fmt.Errorf("%w: %w", errOverflowReset, err)
	}
	return resp, err
}

// compactTo shrinks the context toward target tokens in at most 32 rounds:
// first the older half of earlier turns goes (into Dropped), then the
// largest tool result of this turn is halved.
func (t *turn) compactTo(target int) {
	for range maxCompactRounds {
		if totalTokens(t.context) <= target {
			return
		}
		cur := len(t.context) - len(t.added) // first message of this turn
		if starts := turnStarts(t.context[:cur]); len(starts) > 0 {
			cut := cur
			if len(starts) > 1 {
				cut = starts[len(starts)/2]
			}
			t.res.Dropped = append(t.res.Dropped, t.context[:cut]...)
			t.context = append([]memory.Message(nil), t.context[cut:]...)
			continue
		}
		if !t.halveLargestResult(cur) {
			return
		}
	}
}

// halveLargestResult cuts the largest tool result of this turn (from index
// cur) to half its size; false when nothing is left to cut.
func (t *turn) halveLargestResult(cur int) bool {
	bi, bj, size := -1, -1, 1000
	for i := cur; i < len(t.context); i++ {
		for j, b := range t.context[i].Blocks {
			if b.Type == memory.BlockToolResult && len(b.Text) > size {
				bi, bj, size = i, j, len(b.Text)
			}
		}
	}
	if bi < 0 {
		return false
	}
	m := t.context[bi]
	m.Blocks = append([]memory.Block(nil), m.Blocks...)
	m.Blocks[bj].Text = truncateMiddle(m.Blocks[bj].Text, size/2)
	t.context[bi] = m
	if k := bi - (len(t.context) - len(t.added)); k >= 0 {
		t.added[k] = m
	}
	return true
}

// fail turns a model error into an honest final text.
func (t *turn) fail(err error) {
	t.e.log.Warn("model call failed", "session", t.in.Session.Key, "err", err)
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
	n := t.e.opt.MaxSteps
	extra := []llm.Message{{Role: llm.RoleUser, Content: fmt.Sprintf(maxStepsPrompt, n)}}
	resp, err := t.callRecovering(nil, extra)
	text := ""
	if err == nil {
		text = strings.TrimSpace(stripThink(resp.Text))
	}
	if text == "" {
		text = fmt.Sprintf(textMaxStepsFallback, n)
	}
	t.finalText(text, bus.KindReply, StopMaxSteps)
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
			t.e.log.Warn("post-turn tool failed", "tool", tl.Name(), "session", t.in.Session.Key, "result", truncateMiddle(r.Text, 500))
		}
		t.event(bus.EventToolResult, map[string]any{"name": tl.Name(), "stage": tools.StagePostTurn, "error": r.IsError, "text": truncateMiddle(r.Text, 2000)})
	}
}

// prepared is one tool call after argument and breaker checks.
type prepared struct {
	call llm.ToolCall
	args json.RawMessage
	hash string
	err  string // set: the call is answered with this error without running
	stop bool   // the breaker ended the run; err says why
}

// prepare parses a call's arguments and asks the circuit breaker.
func (t *turn) prepare(c llm.ToolCall, finish string) prepared {
	p := prepared{call: c, hash: argsHash([]byte(c.Arguments))}
	writes := c.Name == "write_file" || c.Name == "edit_file"
	switch args, reason := normaliseArgs(c.Arguments, finish); {
	case len(c.Arguments) > maxArgBytes:
		p.err = fmt.Sprintf("the arguments of this %s call are too large (%d bytes; the limit is %d). Send less per call.", c.Name, len(c.Arguments), maxArgBytes)
		if writes {
			p.err += splitWriteAdvice
		}
	case reason != "":
		p.err = reason
		if writes && strings.Contains(reason, "cut off") {
			p.err += splitWriteAdvice
		}
	default:
		p.args, p.hash = args, argsHash(args)
		if req := t.ts.required[c.Name]; len(req) > 0 && string(args) == "{}" {
			p.err = fmt.Sprintf("your %s call arrived with no arguments at all, but it requires: %s. It was probably cut off; send the call again with its arguments.",
				c.Name, strings.Join(req, ", "))
		}
	}
	if p.err != "" {
		return p
	}
	switch v, why := t.br.check(c.Name, p.hash); v {
	case block:
		p.err = why
	case abort:
		p.err, p.stop = why, true
	}
	return p
}

// runTools runs the calls of one step and appends exactly one result per
// call, in call order, whatever happens: a deferred fill covers panics in
// this function, cancellation, steering and the circuit breaker. Parse
// errors and blocked calls count as failures. It reports whether the
// circuit breaker ended the run, and why.
func (t *turn) runTools(calls []llm.ToolCall, finish string) (aborted bool, why string) {
	results := make([]memory.Block, len(calls))
	done := make([]bool, len(calls))
	preps := make([]prepared, len(calls))
	denied := make([]bool, len(calls))
	launched := make([]bool, len(calls))
	skipped := false
	var wg sync.WaitGroup
	defer func() {
		rec := recover()
		msg := memory.Message{Role: memory.RoleTool, Time: time.Now().UTC()}
		for i, c := range calls {
			if !done[i] {
				text := missingToolResult
				switch {
				case skipped:
					text = "Error: " + textSkipped
				case t.ctx.Err() != nil:
					text = "Error: " + textCancelled
				case aborted:
					text = "Error: not run: the run was stopped after repeated failures."
				}
				results[i] = memory.Block{Type: memory.BlockToolResult, ToolID: c.ID, Text: text, IsError: true}
			}
			msg.Blocks = append(msg.Blocks, results[i])
		}
		t.add(msg)
		t.lastResults = len(t.context) - 1
		if rec != nil {
			t.e.log.Error("tool step panicked", "session", t.in.Session.Key, "panic", rec)
		}
	}()
	defer wg.Wait() // runs before the fill above

	nParallel := 0
	for _, c := range calls {
		if t.ts.parallel[c.Name] {
			nParallel++
		}
	}
	sem := make(chan struct{}, t.e.opt.ParallelTools)
	record := func(i int) {
		if denied[i] {
			return // permission denials are not failures of the model's approach
		}
		if t.br.record(calls[i].Name, preps[i].hash, !results[i].IsError) {
			results[i].Text += repeatHint
		}
	}
	for i, c := range calls {
		if t.ctx.Err() != nil {
			return false, ""
		}
		if items := t.takeSteer(false); len(items) > 0 {
			wg.Wait()
			skipped = true
			t.pending = append(t.pending, items...)
			return false, ""
		}
		preps[i] = t.prepare(c, finish)
		p := preps[i]
		if p.stop {
			t.br.record(c.Name, p.hash, false)
			return true, p.err
		}
		if p.err != "" {
			results[i] = memory.Block{Type: memory.BlockToolResult, ToolID: c.ID, Text: "Error: " + p.err, IsError: true}
			done[i] = true
			t.br.record(c.Name, p.hash, false)
			t.event(bus.EventToolResult, map[string]any{"id": c.ID, "name": c.Name, "error": true, "text": p.err, "duration_ms": 0})
			continue
		}
		if nParallel >= 2 && t.ts.parallel[c.Name] {
			launched[i] = true
			sem <- struct{}{}
			wg.Go(func() {
				defer func() { <-sem }()
				results[i], denied[i] = t.runTool(p)
				done[i] = true
			})
			continue
		}
		results[i], denied[i] = t.runTool(p)
		done[i] = true
		record(i)
	}
	wg.Wait()
	for i := range calls {
		if launched[i] && done[i] {
			record(i)
		}
	}
	return false, ""
}

// runTool runs one call with its own timeout; the toolbox turns errors and
// panics into error results. It reports whether the tool denied the call.
func (t *turn) runTool(p prepared) (memory.Block, bool) {
	c := p.call
	t.event(bus.EventToolCall, map[string]any{"id": c.ID, "name": c.Name, "arguments": string(p.args)})
	start := time.Now()
	var r tools.Result
	if t.e.tools == nil {
		r = tools.Result{Text: "Error: no tools are available", IsError: true}
	} else {
		ctx, cancel := context.WithTimeout(t.ctx, t.e.opt.ToolTimeout)
		r = t.e.tools.Run(ctx, c.Name, tools.Call{ID: c.ID, Args: p.args, Session: t.in.Session})
		if ctx.Err() == context.DeadlineExceeded && t.ctx.Err() == nil && !r.IsError {
			r = tools.Result{Text: fmt.Sprintf("Error: %s timed out after %s", c.Name, t.e.opt.ToolTimeout), IsError: true}
		}
		cancel()
	}
	text := truncateMiddle(r.Text, maxToolResultChars)
	if text == "" {
		text = emptyToolResult
	}
	t.event(bus.EventToolResult, map[string]any{"id": c.ID, "name": c.Name, "error": r.IsError,
		"duration_ms": time.Since(start).Milliseconds(), "text": truncateMiddle(text, 2000)})
	return memory.Block{Type: memory.BlockToolResult, ToolID: c.ID, Text: text, IsError: r.IsError}, r.Denied
}

// uniqueIDs gives every call of a step a distinct, non-empty id (some
// providers repeat or omit them): "call_" and 24 random hex digits.
func uniqueIDs(calls []llm.ToolCall) []llm.ToolCall {
	seen := make(map[string]bool, len(calls))
	out := make([]llm.ToolCall, len(calls))
	for i, c := range calls {
		if c.ID == "" || seen[c.ID] {
			c.ID = newCallID()
		}
		seen[c.ID] = true
		out[i] = c
	}
	return out
}

func newCallID() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return "call_" + hex.EncodeToString(b[:])
}

// argsForHistory stores the arguments as sent when they are valid JSON
// objects, and an empty object otherwise (the problem is reported in the
// result).
func argsForHistory(raw string) []byte {
	if a, reason := normaliseArgs(raw, ""); reason == "" && len(raw) <= maxArgBytes {
		return a
	}
	return []byte("{}")
}

// stripThink removes <think>...</think> sections, and an unfinished one at
// the end, from model text.
func stripThink(s string) string {
	for {
		i := strings.Index(s, "<think>")
		if i < 0 {
			return s
		}
		j := strings.Index(s[i:], "</think>")
		if j < 0 {
			return s[:i]
		}
		s = s[:i] + s[i+j+len("</think>"):]
	}
}

// truncateMiddle keeps the head and tail of s within max bytes (cut on rune
// boundaries) with a note of what was left out.
func truncateMiddle(s string, max int) string {
	if len(s) <= max {
		return s
	}
	h, ts := max/2, len(s)-max/2
	for h > 0 && !utf8.RuneStart(s[h]) {
		h--
	}
	for ts < len(s) && !utf8.RuneStart(s[ts]) {
		ts++
	}
	head, tail := s[:h], s[ts:]
	return fmt.Sprintf("%s\n\n... [%d bytes omitted] ...\n\n%s", head, len(s)-len(head)-len(tail), tail)
}

func shortErr(err error) string {
	s := err.Error()
	if len(s) > 200 {
		s = s[:200] + "..."
	}
	return s
}

package agent

import (
	"context"
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

// Limits of what one turn stores and sends.
const (
	maxStoredReasoning = 4096   // chars of reasoning kept per message (head + tail)
	maxToolResultChars = 50_000 // chars of one tool result kept
	defaultToolTimeout = 120 * time.Second
)

// User-visible texts of the executor. They are honest about what happened.
const (
	textNotConfigured = "No language model is configured yet, so I cannot answer. " +
		"The operator should set OPENAI_API_KEY (and OPENAI_BASE_URL for Ollama, vLLM or another OpenAI-compatible server, " +
		"OPENAI_MODEL for the model name) and restart Switchboard, or edit the llm section of config.yaml. " +
		"`switchboard check` tells whether the endpoint is reachable."
	textOverflow      = "This conversation no longer fits in the model's context window. Send /new to start a fresh context."
	textEmptyFallback = "I could not produce an answer this time. Please try again or rephrase your request."
	textCancelled     = "Cancelled by the user before this tool finished."
	textStopped       = "_(stopped)_"
	maxStepsPrompt    = "You have used all %d steps allowed for this request. Do not call any tools. " +
		"Summarise for the user what you did, what you found, and what is still left to do."
	textMaxStepsFallback = "I stopped after %d steps without finishing this request. " +
		"Ask me to continue, or split the task into smaller steps."
)

// errUserStop is the cancellation cause of a turn stopped with /stop.
var errUserStop = errors.New("stopped by the user")

// ErrAborted is returned by Executor.Run when the turn was cancelled for a
// reason other than /stop (daemon shutdown): nothing must be committed or
// acknowledged, so the message is redelivered and answered after restart.
var ErrAborted = errors.New("agent: turn aborted")

// TurnSink receives what a turn produces while it runs. Implementations must
// be safe for calls from the turn's goroutine and from tool goroutines.
type TurnSink interface {
	// Delta reports the whole text of the current model step so far.
	Delta(text string)
	// Event reports an agent event (bus.Event* types) with its data.
	Event(typ string, data any)
}

// TurnInput is everything one turn needs.
type TurnInput struct {
	System  string           // the system prompt
	History []memory.Message // trimmed context before this turn, oldest first
	User    memory.Message   // the new user message (TurnStart set)
	Session tools.Session
	Sink    TurnSink
}

// TurnResult is what a turn produced.
type TurnResult struct {
	// Messages are the turn's new messages (the user message first), to be
	// committed in one transaction. Every tool_use has its tool_result.
	Messages []memory.Message
	// Text is the final text for the user and Kind its outbound kind.
	Text  string
	Kind  string
	Steps int
	Usage llm.Usage
}

// Executor runs the tool-calling loop of one turn. It is safe for
// concurrent use by many sessions.
type Executor struct {
	model       Model
	tools       Toolbox
	modelName   string
	maxSteps    int
	toolTimeout time.Duration
	log         *slog.Logger
}

// NewExecutor returns an executor. tb may be nil (no tools).
func NewExecutor(model Model, tb Toolbox, modelName string, maxSteps int, log *slog.Logger) *Executor {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if maxSteps < 1 {
		maxSteps = 1
	}
	return &Executor{model: model, tools: tb, modelName: modelName, maxSteps: maxSteps, toolTimeout: defaultToolTimeout, log: log}
}

func (e *Executor) toolList() []tools.Tool {
	if e.tools == nil {
		return nil
	}
	return e.tools.List()
}

func (e *Executor) toolSpecs() []llm.Tool {
	list := e.toolList()
	specs := make([]llm.Tool, 0, len(list))
	for _, t := range list {
		specs = append(specs, llm.Tool{Name: t.Name(), Description: t.Description(), Parameters: t.Schema()})
	}
	return specs
}

// turn is the state of one running turn.
type turn struct {
	e       *Executor
	in      TurnInput
	ctx     context.Context
	context []memory.Message // history + new messages
	added   []memory.Message
	res     TurnResult
}

func (t *turn) add(m memory.Message) {
	t.context = append(t.context, m)
	t.added = append(t.added, m)
}

// Run executes one turn. It returns ErrAborted (and a zero result) when ctx
// was cancelled by anything but /stop; otherwise it always returns a result
// with a final text, whatever the model or the tools do.
func (e *Executor) Run(ctx context.Context, in TurnInput) (TurnResult, error) {
	t := &turn{e: e, in: in, ctx: ctx}
	t.context = make([]memory.Message, 0, len(in.History)+8)
	t.context = append(t.context, in.History...)
	t.add(in.User)
	specs := e.toolSpecs()
	emptyRetried := false
	for step := 1; ; step++ {
		if err := t.checkCancel(); err != nil {
			return t.finish(err)
		}
		if step > e.maxSteps {
			t.forcedSummary()
			break
		}
		t.res.Steps = step
		resp, err := t.call(specs, nil)
		if err != nil {
			if cerr := t.checkCancel(); cerr != nil {
				return t.finish(cerr)
			}
			t.fail(err)
			break
		}
		text := strings.TrimSpace(stripThink(resp.Text))
		if text == "" && len(resp.ToolCalls) == 0 {
			if !emptyRetried {
				emptyRetried = true
				step--
				e.log.Warn("empty model reply; retrying once", "session", in.Session.Key)
				continue
			}
			t.res.Text, t.res.Kind = textEmptyFallback, bus.KindError
			break
		}
		am := memory.Message{Role: memory.RoleAssistant, Time: time.Now().UTC()}
		if r := truncateMiddle(resp.Reasoning, maxStoredReasoning); r != "" {
			am.Blocks = append(am.Blocks, memory.Block{Type: memory.BlockThinking, Text: r})
		}
		if text != "" {
			am.Blocks = append(am.Blocks, memory.Block{Type: memory.BlockText, Text: text})
		}
		if len(resp.ToolCalls) == 0 {
			t.add(am)
			t.res.Text, t.res.Kind = text, bus.KindReply
			break
		}
		calls := resp.ToolCalls
		for _, c := range calls {
			am.Blocks = append(am.Blocks, memory.Block{Type: memory.BlockToolUse, ToolID: c.ID, ToolName: c.Name, Input: argsForHistory(c.Arguments)})
		}
		t.add(am)
		t.runTools(calls, resp.FinishReason)
	}
	t.res.Messages = t.added
	return t.res, nil
}

// finish ends a cancelled turn: /stop keeps what was produced and reports
// it; any other cancellation aborts.
func (t *turn) finish(cause error) (TurnResult, error) {
	if !errors.Is(cause, errUserStop) {
		return TurnResult{}, fmt.Errorf("%w: %w", ErrAborted, cause)
	}
	t.add(memory.Message{Role: memory.RoleAssistant, Time: time.Now().UTC(),
		Blocks: []memory.Block{{Type: memory.BlockText, Text: textStopped}}})
	t.res.Text, t.res.Kind = "Stopped.", bus.KindNotice
	t.res.Messages = t.added
	return t.res, nil
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

// call makes one model call over the sanitised context. extra messages are
// sent but never stored.
func (t *turn) call(specs []llm.Tool, extra []llm.Message) (*llm.Response, error) {
	msgs := make([]llm.Message, 0, len(t.context)+2+len(extra))
	msgs = append(msgs, llm.Message{Role: llm.RoleSystem, Content: t.in.System})
	msgs = append(msgs, toLLM(sanitize(t.context))...)
	msgs = append(msgs, extra...)
	var sb strings.Builder
	onDelta := func(d llm.Delta) {
		if d.Text == "" || t.in.Sink == nil {
			return
		}
		sb.WriteString(d.Text)
		if s := strings.TrimSpace(stripThink(sb.String())); s != "" {
			t.in.Sink.Delta(s)
		}
	}
	resp, err := t.e.model.Stream(t.ctx, llm.Request{Messages: msgs, Tools: specs}, onDelta)
	if err != nil {
		return nil, err
	}
	t.res.Usage.PromptTokens += resp.Usage.PromptTokens
	t.res.Usage.CompletionTokens += resp.Usage.CompletionTokens
	t.res.Usage.TotalTokens += resp.Usage.TotalTokens
	if t.in.Sink != nil && resp.Usage.TotalTokens > 0 {
		t.in.Sink.Event(bus.EventUsage, resp.Usage)
	}
	return resp, nil
}

// fail turns a model error into an honest final text.
func (t *turn) fail(err error) {
	t.e.log.Warn("model call failed", "session", t.in.Session.Key, "err", err)
	t.res.Kind = bus.KindError
	switch {
	case errors.Is(err, llm.ErrNotConfigured):
		t.res.Text = textNotConfigured
	case errors.Is(err, llm.ErrContextOverflow):
		t.res.Text = textOverflow
	default:
		t.res.Text = "Sorry, the model request failed (" + shortErr(err) + "). Please try again in a moment."
	}
}

// forcedSummary makes one extra call without tools after max_steps, with a
// temporary instruction that is never stored.
func (t *turn) forcedSummary() {
	n := t.e.maxSteps
	extra := []llm.Message{{Role: llm.RoleUser, Content: fmt.Sprintf(maxStepsPrompt, n)}}
	resp, err := t.call(nil, extra)
	text := ""
	if err == nil {
		text = strings.TrimSpace(stripThink(resp.Text))
	}
	if text == "" {
		text = fmt.Sprintf(textMaxStepsFallback, n)
	}
	t.add(memory.Message{Role: memory.RoleAssistant, Time: time.Now().UTC(),
		Blocks: []memory.Block{{Type: memory.BlockText, Text: text}}})
	t.res.Text, t.res.Kind = text, bus.KindReply
}

// runTools runs the calls of one step and appends exactly one result per
// call, in call order, whatever happens: a deferred fill covers panics in
// this function and cancellation.
func (t *turn) runTools(calls []llm.ToolCall, finish string) {
	results := make([]memory.Block, len(calls))
	done := make([]bool, len(calls))
	var wg sync.WaitGroup
	defer func() {
		rec := recover()
		msg := memory.Message{Role: memory.RoleTool, Time: time.Now().UTC()}
		for i, c := range calls {
			if !done[i] {
				text := missingToolResult
				if t.ctx.Err() != nil {
					text = "Error: " + textCancelled
				}
				results[i] = memory.Block{Type: memory.BlockToolResult, ToolID: c.ID, Text: text, IsError: true}
			}
			msg.Blocks = append(msg.Blocks, results[i])
		}
		t.add(msg)
		if rec != nil {
			t.e.log.Error("tool step panicked", "session", t.in.Session.Key, "panic", rec)
		}
	}()
	defer wg.Wait() // runs before the fill above

	// Parallel-safe tools run concurrently; the others in model order.
	for i, c := range calls {
		if t.ctx.Err() != nil {
			break
		}
		args, reason := normaliseArgs(c.Arguments, finish)
		if reason != "" {
			results[i] = memory.Block{Type: memory.BlockToolResult, ToolID: c.ID, Text: "Error: " + reason, IsError: true}
			done[i] = true
			t.event(bus.EventToolResult, map[string]any{"id": c.ID, "name": c.Name, "error": true, "text": reason})
			continue
		}
		if t.parallelSafe(c.Name) {
			wg.Go(func() {
				results[i] = t.runTool(c, args)
				done[i] = true
			})
			continue
		}
		results[i] = t.runTool(c, args)
		done[i] = true
	}
}

func (t *turn) parallelSafe(name string) bool {
	for _, tl := range t.e.toolList() {
		if tl.Name() == name {
			return tl.ParallelSafe()
		}
	}
	return false
}

func (t *turn) event(typ string, data any) {
	if t.in.Sink != nil {
		t.in.Sink.Event(typ, data)
	}
}

// runTool runs one call with its own timeout; the toolbox turns errors and
// panics into error results.
func (t *turn) runTool(c llm.ToolCall, args []byte) memory.Block {
	t.event(bus.EventToolCall, map[string]any{"id": c.ID, "name": c.Name, "arguments": string(args)})
	var r tools.Result
	if t.e.tools == nil {
		r = tools.Result{Text: "Error: no tools are available", IsError: true}
	} else {
		ctx, cancel := context.WithTimeout(t.ctx, t.e.toolTimeout)
		r = t.e.tools.Run(ctx, c.Name, tools.Call{ID: c.ID, Args: args, Session: t.in.Session})
		cancel()
	}
	text := truncateMiddle(r.Text, maxToolResultChars)
	if text == "" {
		text = emptyToolResult
	}
	t.event(bus.EventToolResult, map[string]any{"id": c.ID, "name": c.Name, "error": r.IsError, "text": truncateMiddle(text, 2000)})
	return memory.Block{Type: memory.BlockToolResult, ToolID: c.ID, Text: text, IsError: r.IsError}
}

// argsForHistory stores the arguments as sent when they are valid JSON, and
// an empty object otherwise (the invalid text is reported in the result).
func argsForHistory(raw string) []byte {
	if a, reason := normaliseArgs(raw, ""); reason == "" {
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

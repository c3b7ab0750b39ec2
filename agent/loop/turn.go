package loop

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/switchboard-chat/switchboard/internal/jsonwire"
	"github.com/switchboard-chat/switchboard/llm"
	"github.com/switchboard-chat/switchboard/memory"
	"github.com/switchboard-chat/switchboard/tools"
)

// User-visible texts of the loop. They are honest about what happened.
const (
	textNotConfigured = "No language model is configured yet, so I cannot answer. " +
		"The operator should set OPENAI_API_KEY (and OPENAI_BASE_URL for Ollama, vLLM or another OpenAI-compatible server, " +
		"OPENAI_MODEL for the model name) and restart Switchboard, or edit the llm section of config.yaml. " +
		"`switchboard check` tells whether the endpoint is reachable."
	TextOverflowReset = "This conversation grew too long for the model, even after shortening it, so I started a fresh context. " +
		"Your earlier messages are kept on disk. Please send your last request again."
	TextEmptyFallback = "I could not produce an answer this time. Please try again or rephrase your request."
	textCancelled     = "Cancelled by the user before this tool finished."
	textSkipped       = "Skipped because the user redirected the task before this tool ran."
	TextStopped       = "_(stopped by the user)_"
	maxStepsPrompt    = "You have used all %d steps allowed for this request. Do not call any tools. " +
		"Summarise for the user what you did, what you found, and what is still left to do."
	stuckPrompt = "You stopped making progress: %s Do not call any tools. " +
		"Summarise for the user what you did, what you found, and what is still left to do."
	textMaxStepsFallback = "I stopped after %d steps without finishing this request. " +
		"Ask me to continue, or split the task into smaller steps."
	NudgePrompt      = "Tell the user the result of the tool calls above, in plain words."
	steerPrefix      = "[Steering update from the user for the task in progress]\nFollow this new instruction; it takes precedence over the earlier request where they conflict:\n"
	repeatHint       = "\n\n[Note: this exact call has now succeeded several times. Do not repeat it; use the result and answer the user.]"
	textBreakerStop  = "I'm sorry — I stopped because %s Please rephrase the request or split it into smaller steps."
	splitWriteAdvice = " To write a large file, create it with write_file holding the first part, then append the rest with edit_file calls " +
		"whose old_text is empty, a few KB each."
)

// runSpec is what distinguishes a run: a user turn or a sub-agent.
type runSpec struct {
	maxSteps int    // steps allowed
	model    string // model override ("" = configured)
	depth    int    // 0 for a user turn, 1 for its sub-agents, ...
	subName  string // the sub-agent's name, "" for a user turn
}

// counters bound the loop and remember what it already tried.
type counters struct {
	steps        int  // progress; goes back down on a rollback
	attempts     int  // model calls made for the loop; never decreases
	rollbacks    int  // consecutive rollbacks
	resample     bool // the next call resamples a rolled-back answer
	emptyRetried bool // an empty reply was retried once
	nudged       bool // an empty reply after tools got the nudge
	afterTools   bool // a tool step ran
}

// turn is the state of one run — a user turn or a sub-agent — used from its
// goroutine only (tool goroutines write their own result slots).
type turn struct {
	e       *Executor
	in      Input
	log     *slog.Logger
	ts      *toolSet
	spec    runSpec
	tr      transcript
	n       counters
	pol     callPolicy
	res     Result
	pending []string // steering taken between tool calls, applied next step
}

func (t *turn) event(typ string, data any) {
	if t.in.Sink != nil {
		t.in.Sink.Event(typ, data)
	}
}

// env is what the tool calls of this run need.
func (t *turn) env() *toolEnv {
	return &toolEnv{e: t.e, ts: t.ts, session: t.in.Session, sink: t.in.Sink, log: t.log, parent: t.spec}
}

// loop runs model steps until a final answer or a limit. Two counters bound
// it: steps (progress, lowered again by a rollback) and attempts (every
// call, never lowered): it ends at maxSteps steps or maxSteps +
// extra_attempts attempts, so no sequence of rollbacks or empty replies can
// loop forever.
func (t *turn) loop(ctx context.Context) error {
	for {
		if done, err := t.step(ctx); done || err != nil {
			return err
		}
	}
}

// step makes one model call and handles its reply; done when the run ended.
func (t *turn) step(ctx context.Context) (done bool, err error) {
	if err := cancelCause(ctx); err != nil {
		return true, t.stopped(err)
	}
	t.applySteer(append(t.pending, t.takeSteer(false)...))
	t.pending = nil
	if t.n.steps >= t.spec.maxSteps || t.n.attempts >= t.spec.maxSteps+t.e.opt.Limits.ExtraAttempts {
		t.limitReached(ctx)
		return true, nil
	}
	t.n.attempts++
	t.n.steps++
	t.res.Steps = t.n.steps
	if !t.guard(t.ts, nil) {
		t.cutShort(ctx)
		return true, nil
	}
	resp, err := t.callRecovering(ctx, t.ts, nil)
	t.n.resample = false
	if err != nil {
		if cerr := cancelCause(ctx); cerr != nil {
			t.keepPartial(resp)
			return true, t.stopped(cerr)
		}
		t.fail(err)
		return true, nil
	}
	return t.handleReply(ctx, resp), nil
}

// handleReply decides what a model reply leads to: the end of a stuck run,
// a rollback, an empty-reply retry, the final answer or a tool step.
func (t *turn) handleReply(ctx context.Context, resp *llm.Response) (done bool) {
	calls := uniqueIDs(resp.ToolCalls)
	if stuck, why := t.pol.stuck(calls, resp.FinishReason); stuck {
		// The reply is dropped (nothing of it is stored or run).
		t.e.opt.Observer.BreakerTrip("abort")
		t.log.Warn("model repeats a blocked call; ending the run", "reason", why)
		t.event(EventCircuitBreaker, map[string]any{"reason": why, "attempt": t.n.attempts, "subagent": t.spec.subName})
		t.stuckSummary(ctx, why)
		return true
	}
	if t.rollBack(resp, calls) {
		return false
	}
	text := cleanReply(resp.Text, t.ts.isTool)
	if text == "" && len(calls) == 0 {
		return t.emptyReply(ctx)
	}
	t.n.rollbacks = 0 // a good step
	am := memory.Message{Role: memory.RoleAssistant, Time: time.Now().UTC()}
	if r := TruncateMiddle(resp.Reasoning, MaxStoredReasoning); r != "" {
		am.Blocks = append(am.Blocks, memory.Block{Type: memory.BlockThinking, Text: r})
	}
	if text != "" {
		am.Blocks = append(am.Blocks, memory.Block{Type: memory.BlockText, Text: text})
	}
	if len(calls) == 0 {
		return t.answer(am, text)
	}
	return t.toolStep(ctx, am, calls, resp.FinishReason)
}

// rollBack drops a reply that should be resampled (markup, unknown tool,
// duplicate) while rollbacks are left; true when it did.
func (t *turn) rollBack(resp *llm.Response, calls []llm.ToolCall) bool {
	kind, why := t.pol.rollbackReason(resp.Text, calls, resp.FinishReason)
	if why == "" || t.n.rollbacks >= t.e.opt.Limits.MaxRollbacks {
		return false
	}
	if kind == "duplicate" {
		t.pol.noteDuplicates(calls, resp.FinishReason)
	}
	t.e.opt.Observer.Rollback(kind)
	t.n.rollbacks++
	t.n.steps--
	t.n.resample = true
	t.log.Info("rolling back a model reply", "reason", why, "consecutive", t.n.rollbacks)
	t.event(EventRollback, map[string]any{"reason": why, "consecutive": t.n.rollbacks, "attempt": t.n.attempts, "subagent": t.spec.subName})
	return true
}

// emptyReply handles a reply with neither text nor calls: retried once,
// after tools nudged once, then an honest fallback.
func (t *turn) emptyReply(ctx context.Context) (done bool) {
	switch {
	case !t.n.emptyRetried:
		t.n.emptyRetried = true
		t.n.steps--
		t.log.Warn("empty model reply; retrying once")
		return false
	case t.n.afterTools && !t.n.nudged && t.spec.subName == "":
		t.n.nudged = true
		t.log.Warn("empty model reply after tools; nudging")
		if r, err := t.call(ctx, nil, []llm.Message{{Role: llm.RoleUser, Content: NudgePrompt}}); err == nil {
			if s := cleanReply(r.Text, t.ts.isTool); s != "" {
				t.finalText(s, KindReply, StopCompleted)
				return true
			}
		}
	}
	if t.in.Proactive {
		t.res.Text, t.res.Kind, t.res.StopReason = "", "", StopEmpty
		return true
	}
	t.res.Text, t.res.Kind, t.res.StopReason = TextEmptyFallback, KindError, StopEmpty
	return true
}

// answer stores a reply without calls; it is final unless steering arrived
// during the call (then it is applied rather than lost; only an empty inbox
// closes).
func (t *turn) answer(am memory.Message, text string) (done bool) {
	t.tr.add(am)
	if items := t.takeSteer(true); len(items) > 0 {
		t.applySteer(items)
		t.event(EventStepEnd, map[string]any{"step": t.n.steps, "tool_calls": 0, "steered": true})
		return false
	}
	t.res.Text, t.res.Kind, t.res.StopReason = text, KindReply, StopCompleted
	t.event(EventStepEnd, stepEndData{Step: t.n.steps})
	return true
}

// toolStep stores a reply with calls, runs them and stores their results.
func (t *turn) toolStep(ctx context.Context, am memory.Message, calls []llm.ToolCall, finish string) (done bool) {
	for _, c := range calls {
		am.Blocks = append(am.Blocks, memory.Block{Type: memory.BlockToolUse, ToolID: c.ID, ToolName: c.Name, Input: argsForHistory(c.Arguments)})
	}
	t.tr.add(am)
	st := newToolStep(&t.pol, t.env(), t.in.Steer, calls, finish)
	results, aborted, why := st.run(ctx)
	t.tr.add(results)
	t.tr.lastResults = len(t.tr.context) - 1
	t.pending = append(t.pending, st.steered...)
	t.n.afterTools = true
	t.event(EventStepEnd, stepEndData{Step: t.n.steps, ToolCalls: len(calls)})
	if aborted {
		t.finalText(fmt.Sprintf(textBreakerStop, why), KindError, StopCircuitBreaker)
		return true
	}
	return false
}

// limitReached ends a run whose counters are exhausted: a user turn gets
// the forced summary; a sub-agent goes on to its report.
func (t *turn) limitReached(ctx context.Context) {
	if t.spec.subName != "" {
		t.res.StopReason = StopMaxSteps
		return
	}
	t.forcedSummary(ctx)
}

func (t *turn) finalText(text, kind, reason string) {
	t.tr.add(memory.Message{Role: memory.RoleAssistant, Time: time.Now().UTC(), Blocks: []memory.Block{{Type: memory.BlockText, Text: text}}})
	t.res.Text, t.res.Kind, t.res.StopReason = text, kind, reason
}

// keepPartial stores the text streamed before a /stop.
func (t *turn) keepPartial(resp *llm.Response) {
	if resp == nil {
		return
	}
	if s := cleanReply(resp.Text, t.ts.isTool); s != "" {
		t.tr.add(memory.Message{Role: memory.RoleAssistant, Time: time.Now().UTC(), Blocks: []memory.Block{{Type: memory.BlockText, Text: s}}})
	}
}

// stopped ends a cancelled turn: /stop keeps what was produced and reports
// it; any other cancellation aborts.
func (t *turn) stopped(cause error) error {
	if !errors.Is(cause, ErrStopped) {
		return fmt.Errorf("%w: %w", ErrAborted, cause)
	}
	t.takeSteer(true)
	t.tr.add(memory.Message{Role: memory.RoleAssistant, Time: time.Now().UTC(),
		Blocks: []memory.Block{{Type: memory.BlockText, Text: TextStopped}}})
	t.res.Text, t.res.Kind, t.res.StopReason = "Stopped.", KindNotice, StopStopped
	return nil
}

// cancelCause returns the cancellation cause, or nil while the run may go on.
func cancelCause(ctx context.Context) error {
	if ctx.Err() == nil {
		return nil
	}
	if c := context.Cause(ctx); c != nil {
		return c
	}
	return ctx.Err()
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
		t.tr.add(memory.Message{Role: memory.RoleUser, Time: time.Now().UTC(), Blocks: []memory.Block{{Type: memory.BlockText, Text: steerPrefix + s}}})
		t.event(EventSteer, map[string]any{"text": s})
	}
}

// fail turns a model error into an honest final text.
func (t *turn) fail(err error) {
	t.log.Warn("model call failed", "err", err)
	t.res.Kind, t.res.StopReason = KindError, StopError
	switch {
	case errors.Is(err, llm.ErrNotConfigured):
		t.res.Text = textNotConfigured
	case errors.Is(err, errOverflowReset):
		t.res.Text, t.res.StopReason, t.res.ResetContext = TextOverflowReset, StopOverflowReset, true
	default:
		t.res.Text = "Sorry, the model request failed (" + shortErr(err) + "). Please try again in a moment."
	}
}

// runPostTurn runs the post-turn tools (never offered to the model) with
// the final text; their results are logged and published as events only.
func (t *turn) runPostTurn(ctx context.Context) {
	if t.e.post == nil || t.res.Text == "" {
		return
	}
	// {"reply": text}, as json.Marshal writes it.
	args := json.RawMessage(append(jsonwire.AppendString(append(make([]byte, 0, len(t.res.Text)+16), `{"reply":`...), t.res.Text), '}'))
	for _, tl := range t.e.post.PostTurn() {
		pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), t.e.opt.Limits.ToolTimeout)
		r := t.e.post.RunPostTurn(pctx, tl, tools.Call{ID: "post_" + tl.Name(), Args: args, Session: t.in.Session})
		cancel()
		if r.IsError {
			t.log.Warn("post-turn tool failed", "tool", tl.Name(), "result", TruncateMiddle(r.Text, 500))
		}
		t.event(EventToolResult, postResultData{Name: tl.Name(), Stage: tools.StagePostTurn, Error: r.IsError, Text: TruncateMiddle(r.Text, 2000)})
	}
}

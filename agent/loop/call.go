package loop

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/switchboard-chat/switchboard/internal/failpoint"
	"github.com/switchboard-chat/switchboard/llm"
	"github.com/switchboard-chat/switchboard/memory"
)

const (
	cutShortPrompt = "This task has grown close to the model's context limit. Do not call any tools. " +
		"Give the user your answer from what you have found so far, and say what is left undone."
	textCutShortNote  = "\n\n_(I had to cut this task short: it outgrew the model's context window.)_"
	TextCutShortEmpty = "I had to stop this task early: it grew beyond what the model can read at once. " +
		"Please split it into smaller requests."
)

// errOverflowReset marks a context overflow that compaction did not cure.
var errOverflowReset = errors.New("agent: context overflow persists after compaction")

// sanitizeScratch holds the slices call sanitises the context into before
// converting it to the request's messages; one that grew past
// maxScratchMessages is left to the collector.
var sanitizeScratch = sync.Pool{New: func() any { s := make([]memory.Message, 0, 64); return &s }}

const maxScratchMessages = 4096

// call makes one model call over the sanitised context, offering the tools
// of ts (nil: none). extra messages are sent but never stored.
func (t *turn) call(ctx context.Context, ts *toolSet, extra []llm.Message) (*llm.Response, error) {
	msgs := make([]llm.Message, 0, len(t.tr.context)+2+len(extra))
	msgs = append(msgs, llm.Message{Role: llm.RoleSystem, Prefix: t.in.Prefix.Text(), Content: t.in.System})
	scratch := sanitizeScratch.Get().(*[]memory.Message)
	clean := sanitizeInto((*scratch)[:0], t.tr.requestContext(t.e.opt.Limits.KeepToolResults))
	msgs = appendLLM(msgs, clean)
	if cap(clean) <= maxScratchMessages {
		clear(clean) // keep no message alive through the pool
		*scratch = clean[:0]
		sanitizeScratch.Put(scratch)
	}
	msgs = append(msgs, extra...)
	req := llm.Request{Messages: msgs, Model: t.spec.model, Temperature: t.resampleTemperature(),
		OnRetry: func(attempt int, wait time.Duration, err error) {
			if t.in.Sink != nil {
				t.in.Sink.Typing()
			}
			t.log.Info("model call will be retried", "attempt", attempt, "wait", wait, "err", err)
		}}
	if ts != nil {
		// The set's tools go out encoded once; a set that does not
		// validate goes out as it is and the request says why it fails.
		req.ToolSet = ts.wire
		if ts.wire == nil {
			req.Tools = ts.specs
		}
	}
	fw := &deltas{sink: t.in.Sink}
	resp, err := t.e.model.Stream(ctx, req, fw.onDelta)
	t.tr.noteCall(resp)
	if resp != nil {
		t.res.Usage.PromptTokens += resp.Usage.PromptTokens
		t.res.Usage.CompletionTokens += resp.Usage.CompletionTokens
		t.res.Usage.TotalTokens += resp.Usage.TotalTokens
		if resp.Usage.TotalTokens > 0 {
			t.event(EventUsage, usageData(resp.Usage))
		}
	}
	return resp, err
}

// deltas forwards one call's stream to the sink: the step's text so far
// (think blocks stripped) and reasoning as events. (A method, not a
// closure returned by a function: the compiler inlines the failpoint's
// empty Hit into it, so release binaries keep no trace of the point.)
type deltas struct {
	sink     Sink // may be nil
	text     strings.Builder
	restarts int
}

func (f *deltas) onDelta(d llm.Delta) {
	if f.sink == nil {
		return
	}
	if d.Restart {
		// The client retries a stream that failed after it had
		// streamed: what it sent is void. The next delta (a higher
		// seq) carries the new attempt's text from its start and
		// replaces the shown one.
		f.text.Reset()
		f.restarts++
		f.sink.Event(EventLLMDelta, map[string]any{"restart": true, "restarts": f.restarts})
		return
	}
	if d.Reasoning != "" {
		f.sink.Event(EventReasoningDelta, map[string]any{"text": d.Reasoning})
	}
	if d.Text != "" {
		f.text.WriteString(d.Text)
		if s := strings.TrimSpace(StripThink(f.text.String())); s != "" {
			f.sink.Delta(s)
			failpoint.Hit(failpoint.MidStream)
		}
	}
}

// resampleTemperature is the temperature of a call that resamples a
// rolled-back answer: a deterministic model would repeat its mistake.
func (t *turn) resampleTemperature() *float32 {
	if !t.n.resample {
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

// callRecovering is call with self-healing: a provider that rejects the
// tool pairing gets the older turns as plain text, once; on a context
// overflow the context is compacted to 90 % of the budget the error reveals
// and the call retried once; a second overflow in the same turn gives
// errOverflowReset.
func (t *turn) callRecovering(ctx context.Context, ts *toolSet, extra []llm.Message) (*llm.Response, error) {
	resp, err := t.call(ctx, ts, extra)
	if err != nil && errors.Is(err, llm.ErrToolPairing) && !t.tr.repaired {
		// Our sanitiser keeps OpenAI's rules; a provider with stricter ones
		// gets the older turns as plain text (tool traffic dropped), once.
		t.tr.simplify()
		t.log.Warn("provider rejected tool pairing; retrying with older turns as plain text", "err", err)
		resp, err = t.call(ctx, ts, extra)
	}
	if err == nil || !errors.Is(err, llm.ErrContextOverflow) {
		return resp, err
	}
	if t.tr.overflowed {
		return nil, fmt.Errorf("%w: %w", errOverflowReset, err)
	}
	t.tr.overflowed = true
	t.compactAfterOverflow(err)
	resp, err = t.call(ctx, ts, extra)
	if err != nil && errors.Is(err, llm.ErrContextOverflow) {
		return nil, fmt.Errorf("%w: %w", errOverflowReset, err)
	}
	return resp, err
}

// compactAfterOverflow shrinks the context to 90 % of what the overflow
// error says fits (the configured window when it says nothing).
func (t *turn) compactAfterOverflow(err error) {
	window := windowFromError(err)
	if window == 0 {
		window = t.e.opt.Limits.ContextWindow
	}
	sys := t.in.systemTokens()
	target := int(0.9 * float64(window-t.e.opt.Limits.MaxOutputTokens-sys))
	before := TotalTokens(t.tr.context)
	t.res.Dropped = append(t.res.Dropped, t.tr.compactTo(target)...)
	t.log.Warn("context overflow; compacted and retrying once",
		"window", window, "target_tokens", target, "before_tokens", before, "after_tokens", TotalTokens(t.tr.context))
	t.event(EventContextCompacted, map[string]any{"window": window, "target": target, "before": before, "after": TotalTokens(t.tr.context)})
}

// guard makes the next request fit the context window before it is sent:
// it elides this run's oldest tool results one by one, and reports false
// when even that is not enough. A request known to overflow is never sent.
func (t *turn) guard(ts *toolSet, extra []llm.Message) bool {
	lim := t.e.opt.Limits
	if lim.ContextWindow <= 0 {
		return true
	}
	fixed := llmTokens(extra) + lim.MaxOutputTokens + guardMargin
	estimate := func() int { return t.tr.estimate(t.in.systemTokens(), ts.specTokens(), lim.KeepToolResults) + fixed }
	for estimate() > lim.ContextWindow {
		id, ok := t.tr.elideOldest()
		if !ok {
			t.log.Warn("context guard: the next request would not fit",
				"estimate", estimate(), "window", lim.ContextWindow)
			return false
		}
		t.event(EventContextGuard, map[string]any{"elided": id})
	}
	return true
}

// cutShort ends a run whose next request would not fit: a user turn
// answers from what fits and says the task was cut short; a sub-agent goes
// on to its report.
func (t *turn) cutShort(ctx context.Context) {
	t.n.steps--
	if t.spec.subName != "" {
		t.res.StopReason = StopContextLimit
		return
	}
	extra := []llm.Message{{Role: llm.RoleUser, Content: cutShortPrompt}}
	text := ""
	if t.guard(nil, extra) {
		if resp, err := t.call(ctx, nil, extra); err == nil {
			text = cleanReply(resp.Text, t.ts.isTool)
		}
	}
	if text == "" {
		t.finalText(TextCutShortEmpty, KindReply, StopContextLimit)
		return
	}
	t.finalText(text+textCutShortNote, KindReply, StopContextLimit)
}

// forcedSummary makes one extra call without tools after max_steps, with a
// temporary instruction that is never stored.
func (t *turn) forcedSummary(ctx context.Context) {
	n := t.spec.maxSteps
	text := t.summaryCall(ctx, fmt.Sprintf(maxStepsPrompt, n))
	if text == "" {
		text = fmt.Sprintf(textMaxStepsFallback, n)
	}
	t.finalText(text, KindReply, StopMaxSteps)
}

// stuckSummary ends a run whose model repeats a call the breaker blocked:
// a user turn gets the forced summary (one call without tools); a
// sub-agent goes on to its report.
func (t *turn) stuckSummary(ctx context.Context, why string) {
	if t.spec.subName != "" {
		t.res.StopReason = StopCircuitBreaker
		return
	}
	if text := t.summaryCall(ctx, fmt.Sprintf(stuckPrompt, why)); text != "" {
		t.finalText(text, KindReply, StopCircuitBreaker)
		return
	}
	t.finalText(fmt.Sprintf(textBreakerStop, "I kept repeating the same step."), KindError, StopCircuitBreaker)
}

// summaryCall makes one call without tools with a temporary instruction
// that is never stored, and returns its cleaned text ("" on failure).
func (t *turn) summaryCall(ctx context.Context, prompt string) string {
	extra := []llm.Message{{Role: llm.RoleUser, Content: prompt}}
	if !t.guard(nil, extra) {
		return ""
	}
	resp, err := t.callRecovering(ctx, nil, extra)
	if err != nil {
		return ""
	}
	return cleanReply(resp.Text, t.ts.isTool)
}

// report asks the finished sub-agent, continuing its own history and
// offering no tools, for its structured report. <think> content is
// stripped. It returns "" when the call fails or says nothing.
func (t *turn) report(ctx context.Context) string {
	extra := []llm.Message{{Role: llm.RoleUser, Content: reportPrompt}}
	if !t.guard(nil, extra) {
		return ""
	}
	resp, err := t.call(ctx, nil, extra)
	if err != nil {
		t.log.Warn("sub-agent report failed", "subagent", t.spec.subName, "err", err)
		return ""
	}
	return cleanReply(resp.Text, t.ts.isTool)
}

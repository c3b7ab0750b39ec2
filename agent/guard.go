package agent

import (
	"github.com/switchboard-chat/switchboard/bus"
	"github.com/switchboard-chat/switchboard/llm"
	"github.com/switchboard-chat/switchboard/memory"
)

const (
	// guardMargin is added to every in-run estimate (tokenisation slack).
	guardMargin = 1000
	// omittedResult replaces tool results left out of a request.
	omittedResult  = "(tool result omitted to save context)"
	cutShortPrompt = "This task has grown close to the model's context limit. Do not call any tools. " +
		"Give the user your answer from what you have found so far, and say what is left undone."
	textCutShortNote  = "\n\n_(I had to cut this task short: it outgrew the model's context window.)_"
	textCutShortEmpty = "I had to stop this task early: it grew beyond what the model can read at once. " +
		"Please split it into smaller requests."
)

// runStart is the index in t.context of this run's first message.
func (t *turn) runStart() int { return len(t.context) - len(t.added) }

// requestContext is the context as it is sent: results of older steps cut
// to 20,000 bytes, and results of this run beyond the newest
// agent.keep_tool_results (and those the guard elided) replaced by a
// placeholder. The stored history keeps everything.
func (t *turn) requestContext() []memory.Message {
	msgs := limitOldResults(t.context, t.lastResults, maxOldToolResultChars)
	keep := t.e.opt.KeepToolResults
	if keep < 0 && len(t.elided) == 0 {
		return msgs
	}
	// Count this run's results from the newest backwards.
	omit := map[string]bool{}
	seen := 0
	for i := len(msgs) - 1; i >= t.runStart(); i-- {
		if msgs[i].Role != memory.RoleTool {
			continue
		}
		for j := len(msgs[i].Blocks) - 1; j >= 0; j-- {
			id := msgs[i].Blocks[j].ToolID
			if t.elided[id] || (keep >= 0 && seen >= keep) {
				omit[id] = true
			}
			seen++
		}
	}
	if len(omit) == 0 {
		return msgs
	}
	out := append([]memory.Message(nil), msgs...)
	for i := t.runStart(); i < len(out); i++ {
		if out[i].Role != memory.RoleTool {
			continue
		}
		out[i].Blocks = append([]memory.Block(nil), out[i].Blocks...)
		for j := range out[i].Blocks {
			if omit[out[i].Blocks[j].ToolID] {
				out[i].Blocks[j].Text = omittedResult
			}
		}
	}
	return out
}

func specTokens(specs []llm.Tool) int {
	n := 0
	for _, s := range specs {
		n += 10 + textTokens(s.Name) + textTokens(s.Description) + textTokens(string(s.Parameters))
	}
	return n
}

func llmTokens(msgs []llm.Message) int {
	n := 0
	for _, m := range msgs {
		n += 4 + textTokens(m.Content)
	}
	return n
}

// estimate is the in-run estimate of the next request plus its reply: the
// last call's reported prompt tokens plus an estimate of what was added
// since (the stored answer and the tool results; MiroThinker adds the raw
// completion instead, which overcounts arguments the runtime did not keep),
// or, before any usage is known, the whole request estimated.
func (t *turn) estimate(specs []llm.Tool, extra []llm.Message) int {
	fixed := llmTokens(extra) + t.e.opt.MaxOutputTokens + guardMargin
	if t.lastUsage > 0 && t.lastLen <= len(t.context) {
		return t.lastUsage + totalTokens(t.context[t.lastLen:]) - t.savedSince + fixed
	}
	return textTokens(t.in.System) + totalTokens(t.requestContext()) + specTokens(specs) + fixed
}

// guard makes the next request fit the context window before it is sent:
// it elides this run's oldest tool results one by one, and reports false
// when even that is not enough. A request known to overflow is never sent.
func (t *turn) guard(specs []llm.Tool, extra []llm.Message) bool {
	w := t.e.opt.ContextWindow
	if w <= 0 {
		return true
	}
	for t.estimate(specs, extra) > w {
		if !t.elideOldest() {
			t.log.Warn("context guard: the next request would not fit",
				"estimate", t.estimate(specs, extra), "window", w)
			return false
		}
	}
	return true
}

// elideOldest leaves the oldest not yet elided tool result of this run out
// of the requests; false when none is left.
func (t *turn) elideOldest() bool {
	for i := t.runStart(); i < len(t.context); i++ {
		if t.context[i].Role != memory.RoleTool {
			continue
		}
		for _, b := range t.context[i].Blocks {
			if !t.elided[b.ToolID] && b.Text != omittedResult {
				t.elided[b.ToolID] = true
				if t.lastUsage > 0 && i < t.lastLen {
					t.savedSince += max(textTokens(b.Text)-textTokens(omittedResult), 0)
				}
				t.event("context_guard", map[string]any{"elided": b.ToolID})
				return true
			}
		}
	}
	return false
}

// cutShort ends a run whose next request would not fit: a user turn
// answers from what fits and says the task was cut short; a sub-agent goes
// on to its report.
func (t *turn) cutShort() {
	t.steps--
	if t.subName != "" {
		t.res.StopReason = StopContextLimit
		return
	}
	extra := []llm.Message{{Role: llm.RoleUser, Content: cutShortPrompt}}
	text := ""
	if t.guard(nil, extra) {
		if resp, err := t.call(nil, extra); err == nil {
			text = cleanReply(resp.Text, t.isTool)
		}
	}
	if text == "" {
		t.finalText(textCutShortEmpty, bus.KindReply, StopContextLimit)
		return
	}
	t.finalText(text+textCutShortNote, bus.KindReply, StopContextLimit)
}

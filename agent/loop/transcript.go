package loop

import (
	"github.com/switchboard-chat/switchboard/llm"
	"github.com/switchboard-chat/switchboard/memory"
)

const (
	// guardMargin is added to every in-run estimate (tokenisation slack).
	guardMargin = 1000
	// OmittedResult replaces tool results left out of a request.
	OmittedResult = "(tool result omitted to save context)"
)

// transcript is a run's context: the history it started from plus what the
// run added, and what the in-run guard and overflow recovery did to it.
type transcript struct {
	context []memory.Message // history + new messages
	added   []memory.Message // the run's new messages
	// lastResults is the index in context of the current step's tool
	// results (sent uncut), or -1.
	lastResults int
	overflowed  bool // an overflow was compacted once
	repaired    bool // a tool-pairing rejection was answered by simplifying the context

	// In-run guard: usage of the last call, the context length then, and
	// the tool results elided since (by tool id).
	lastUsage  int
	lastLen    int
	savedSince int // tokens elided since the last call
	elided     map[string]bool
}

func newTranscript(history []memory.Message) transcript {
	tr := transcript{lastResults: -1, elided: map[string]bool{}}
	if cap(history)-len(history) >= 4 {
		// The session's history has room for this turn (it was the last
		// turn's context): append in place. Only the elements past its
		// length are written, so the caller's slice still reads the same.
		tr.context = history
		return tr
	}
	tr.context = make([]memory.Message, 0, len(history)+len(history)/4+4)
	tr.context = append(tr.context, history...)
	return tr
}

func (tr *transcript) add(m memory.Message) {
	tr.context = append(tr.context, m)
	tr.added = append(tr.added, m)
}

// runStart is the index in context of this run's first message.
func (tr *transcript) runStart() int { return len(tr.context) - len(tr.added) }

// noteCall remembers the context length and the prompt tokens of the call
// just made (resp may be nil), the base of the next estimate.
func (tr *transcript) noteCall(resp *llm.Response) {
	tr.lastLen, tr.lastUsage, tr.savedSince = len(tr.context), 0, 0
	if resp != nil {
		tr.lastUsage = resp.Usage.PromptTokens
	}
}

// requestContext is the context as it is sent: results of older steps cut
// to 20,000 bytes, and results of this run beyond the newest keep
// (agent.keep_tool_results; -1 all) and those the guard elided replaced by
// a placeholder. The stored history keeps everything.
func (tr *transcript) requestContext(keep int) []memory.Message {
	msgs := limitOldResults(tr.context, tr.lastResults, MaxOldToolResultChars)
	if keep < 0 && len(tr.elided) == 0 {
		return msgs
	}
	// Count this run's results from the newest backwards.
	omit := map[string]bool{}
	seen := 0
	for i := len(msgs) - 1; i >= tr.runStart(); i-- {
		if msgs[i].Role != memory.RoleTool {
			continue
		}
		for j := len(msgs[i].Blocks) - 1; j >= 0; j-- {
			id := msgs[i].Blocks[j].ToolID
			if tr.elided[id] || (keep >= 0 && seen >= keep) {
				omit[id] = true
			}
			seen++
		}
	}
	if len(omit) == 0 {
		return msgs
	}
	out := append([]memory.Message(nil), msgs...)
	for i := tr.runStart(); i < len(out); i++ {
		if out[i].Role != memory.RoleTool {
			continue
		}
		out[i].Blocks = append([]memory.Block(nil), out[i].Blocks...)
		for j := range out[i].Blocks {
			if omit[out[i].Blocks[j].ToolID] {
				out[i].Blocks[j].Text = OmittedResult
			}
		}
	}
	return out
}

// specTokens estimates the tokens of tool specs.
func specTokens(specs []llm.Tool) int {
	n := 0
	for _, s := range specs {
		n += 10 + TextTokens(s.Name) + TextTokens(s.Description) + TextTokens(string(s.Parameters))
	}
	return n
}

func llmTokens(msgs []llm.Message) int {
	n := 0
	for _, m := range msgs {
		n += 4 + TextTokens(m.Content)
	}
	return n
}

// estimate is the in-run estimate of the next request (without the extra
// messages and the reply): the last call's reported prompt tokens plus an
// estimate of what was added since (the stored answer and the tool results;
// MiroThinker adds the raw completion instead, which overcounts arguments
// the runtime did not keep), or, before any usage is known, the whole
// request estimated.
func (tr *transcript) estimate(systemTokens, specTokens, keep int) int {
	if tr.lastUsage > 0 && tr.lastLen <= len(tr.context) {
		return tr.lastUsage + TotalTokens(tr.context[tr.lastLen:]) - tr.savedSince
	}
	return systemTokens + TotalTokens(tr.requestContext(keep)) + specTokens
}

// elideOldest leaves the oldest not yet elided tool result of this run out
// of the requests and returns its tool id; false when none is left.
func (tr *transcript) elideOldest() (string, bool) {
	for i := tr.runStart(); i < len(tr.context); i++ {
		if tr.context[i].Role != memory.RoleTool {
			continue
		}
		for _, b := range tr.context[i].Blocks {
			if !tr.elided[b.ToolID] && b.Text != OmittedResult {
				tr.elided[b.ToolID] = true
				if tr.lastUsage > 0 && i < tr.lastLen {
					tr.savedSince += max(TextTokens(b.Text)-TextTokens(OmittedResult), 0)
				}
				return b.ToolID, true
			}
		}
	}
	return "", false
}

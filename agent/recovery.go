package agent

import (
	"errors"
	"fmt"

	"github.com/switchboard-chat/switchboard/llm"
	"github.com/switchboard-chat/switchboard/memory"
)

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
		t.log.Warn("provider rejected tool pairing; retrying with older turns as plain text", "err", err)
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
	t.log.Warn("context overflow; compacted and retrying once",
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

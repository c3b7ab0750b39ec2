package loop

import (
	"regexp"
	"strconv"

	"github.com/switchboard-chat/switchboard/memory"
)

// maxCompactRounds bounds overflow recovery iterations.
const maxCompactRounds = 32

// simplify answers a provider's tool-pairing rejection: the turns before
// this run become plain text (tool traffic dropped), once.
func (tr *transcript) simplify() {
	tr.repaired = true
	cur := tr.runStart()
	tr.context = append(CompressTurns(tr.context[:cur]), tr.context[cur:]...)
	tr.lastResults = -1
	if len(tr.added) > 0 && tr.added[len(tr.added)-1].Role == memory.RoleTool {
		tr.lastResults = len(tr.context) - 1
	}
}

// compactTo shrinks the context toward target tokens in at most 32 rounds:
// first the older half of earlier turns goes (returned, for the summary),
// then the largest tool result of this turn is halved.
func (tr *transcript) compactTo(target int) (dropped []memory.Message) {
	for range maxCompactRounds {
		if TotalTokens(tr.context) <= target {
			return dropped
		}
		cur := tr.runStart() // first message of this turn
		if starts := TurnStarts(tr.context[:cur]); len(starts) > 0 {
			cut := cur
			if len(starts) > 1 {
				cut = starts[len(starts)/2]
			}
			dropped = append(dropped, tr.context[:cut]...)
			tr.context = append([]memory.Message(nil), tr.context[cut:]...)
			continue
		}
		if !tr.halveLargestResult(cur) {
			return dropped
		}
	}
	return dropped
}

// halveLargestResult cuts the largest tool result of this turn (from index
// cur) to half its size; false when nothing is left to cut.
func (tr *transcript) halveLargestResult(cur int) bool {
	bi, bj, size := -1, -1, 1000
	for i := cur; i < len(tr.context); i++ {
		for j, b := range tr.context[i].Blocks {
			if b.Type == memory.BlockToolResult && len(b.Text) > size {
				bi, bj, size = i, j, len(b.Text)
			}
		}
	}
	if bi < 0 {
		return false
	}
	m := tr.context[bi]
	m.Blocks = append([]memory.Block(nil), m.Blocks...)
	m.Blocks[bj].Text = TruncateMiddle(m.Blocks[bj].Text, size/2)
	tr.context[bi] = m
	if k := bi - tr.runStart(); k >= 0 {
		tr.added[k] = m
	}
	return true
}

var windowPatterns = []*regexp.Regexp{
	regexp.MustCompile(`maximum context length is (\d+)`),
	regexp.MustCompile(`context length of (?:only )?(\d+)`),
	regexp.MustCompile(`"?n_ctx"?\s*[:=]\s*(\d+)`),
	regexp.MustCompile(`context window (?:of|is) (\d+)`),
}

// windowFromError extracts the model's context window from an overflow
// error message, or 0.
func windowFromError(err error) int {
	msg := err.Error()
	for _, re := range windowPatterns {
		if m := re.FindStringSubmatch(msg); m != nil {
			if n, err := strconv.Atoi(m[1]); err == nil && n > 0 {
				return n
			}
		}
	}
	return 0
}

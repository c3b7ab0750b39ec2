package agent

import (
	"fmt"
	"strings"

	"github.com/switchboard-chat/switchboard/agent/loop"
	"github.com/switchboard-chat/switchboard/memory"
)

// Context budget (cowagent.md §3).
const (
	compressBelowTurns = 5 // fewer turns than this are compressed, not halved
	maxSummaryBytes    = 6000
	digestLineBytes    = 160
	// maxUnnotedTurns bounds the turns a session keeps for the daily note
	// written when it goes quiet (conversation.unnoted): a chat that stays
	// busy holds its last that many, not every turn since it began.
	maxUnnotedTurns = 100
)

// budget is the token budget of a request's history: the smaller of
// agent.max_context_tokens and the model's window less its output reserve,
// less what the system prompt and the new user message take.
func budget(maxContext, window, reserve, fixed int) int {
	b := maxContext
	if window > 0 {
		b = min(b, window-reserve)
	}
	return max(b-fixed, 0)
}

// fitContext trims history (whole turns only) before a turn's loop: when
// it holds more than maxTurns turns or more tokens than budget, the older
// half is dropped, repeatedly; with fewer than five turns, each turn is
// compressed to its first user text and last reply, and then the oldest
// turns go. It returns the kept messages and the dropped ones (for the
// summary). Messages before the first turn start are dropped too.
func fitContext(history []memory.Message, maxTurns, budget int) (kept, dropped []memory.Message) {
	kept = history
	if s := loop.TurnStarts(kept); len(s) > 0 && s[0] > 0 {
		dropped = append(dropped, kept[:s[0]]...)
		kept = kept[s[0]:]
	}
	compressed := false
	for {
		starts := loop.TurnStarts(kept)
		n := len(starts)
		if n == 0 || (n <= maxTurns && loop.TotalTokens(kept) <= budget) {
			return kept, dropped
		}
		switch {
		case n >= compressBelowTurns:
			cut := starts[n/2] // keep the newer half (the larger half when odd)
			dropped = append(dropped, kept[:cut]...)
			kept = kept[cut:]
		case !compressed:
			compressed = true
			kept = loop.CompressTurns(kept)
		default:
			cut := len(kept)
			if n > 1 {
				cut = starts[1]
			}
			dropped = append(dropped, kept[:cut]...)
			kept = kept[cut:]
		}
	}
}

// digest is the plain, rule-based summary of dropped turns: one line per
// turn with the user's request and the reply, appended to the previous
// summary and bounded in size (the oldest lines go first).
func digest(prev string, dropped []memory.Message) string {
	var b strings.Builder
	b.WriteString(prev)
	starts := loop.TurnStarts(dropped)
	for i, s := range starts {
		end := len(dropped)
		if i+1 < len(starts) {
			end = starts[i+1]
		}
		user := oneLine(dropped[s].Text())
		reply := ""
		for j := end - 1; j > s; j-- {
			if dropped[j].Role == memory.RoleAssistant && dropped[j].Text() != "" {
				reply = oneLine(dropped[j].Text())
				break
			}
		}
		if b.Len() > 0 {
			b.WriteString("\n")
		}
		fmt.Fprintf(&b, "- %s user: %s", dropped[s].Time.Format("2006-01-02 15:04"), user)
		if reply != "" {
			fmt.Fprintf(&b, " → assistant: %s", reply)
		}
	}
	out := b.String()
	for len(out) > maxSummaryBytes {
		_, rest, ok := strings.Cut(out, "\n")
		if !ok {
			out = loop.TruncateMiddle(out, maxSummaryBytes)
			break
		}
		out = rest
	}
	return out
}

func oneLine(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > digestLineBytes {
		cut := digestLineBytes
		for cut > 0 && s[cut]&0xC0 == 0x80 {
			cut--
		}
		s = s[:cut] + "…"
	}
	return s
}

package agent

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"

	"github.com/switchboard-chat/switchboard/memory"
)

// Context budget (cowagent.md §3).
const (
	compressBelowTurns = 5  // fewer turns than this are compressed, not halved
	maxCompactRounds   = 32 // overflow recovery iterations
	maxSummaryBytes    = 6000
	digestLineBytes    = 160
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

func totalTokens(msgs []memory.Message) int {
	n := 0
	for i := range msgs {
		n += estimateTokens(&msgs[i])
	}
	return n
}

// fitContext trims history (whole turns only) before a turn's loop: when
// it holds more than maxTurns turns or more tokens than budget, the older
// half is dropped, repeatedly; with fewer than five turns, each turn is
// compressed to its first user text and last reply, and then the oldest
// turns go. It returns the kept messages and the dropped ones (for the
// summary). Messages before the first turn start are dropped too.
func fitContext(history []memory.Message, maxTurns, budget int) (kept, dropped []memory.Message) {
	kept = history
	if s := turnStarts(kept); len(s) > 0 && s[0] > 0 {
		dropped = append(dropped, kept[:s[0]]...)
		kept = kept[s[0]:]
	}
	compressed := false
	for {
		starts := turnStarts(kept)
		n := len(starts)
		if n == 0 || (n <= maxTurns && totalTokens(kept) <= budget) {
			return kept, dropped
		}
		switch {
		case n >= compressBelowTurns:
			cut := starts[n/2] // keep the newer half (the larger half when odd)
			dropped = append(dropped, kept[:cut]...)
			kept = kept[cut:]
		case !compressed:
			compressed = true
			kept = compressTurns(kept)
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

// compressTurns reduces each turn to its first user text and its last
// assistant text, dropping tool traffic and reasoning.
func compressTurns(msgs []memory.Message) []memory.Message {
	var out []memory.Message
	starts := turnStarts(msgs)
	for i, s := range starts {
		end := len(msgs)
		if i+1 < len(starts) {
			end = starts[i+1]
		}
		turn := msgs[s:end]
		user := turn[0]
		user.Blocks = textBlocks(user.Blocks)
		if len(user.Blocks) == 0 {
			user.Blocks = []memory.Block{{Type: memory.BlockText, Text: "(attachment)"}}
		}
		out = append(out, user)
		for j := len(turn) - 1; j > 0; j-- {
			if turn[j].Role == memory.RoleAssistant {
				if tb := textBlocks(turn[j].Blocks); len(tb) > 0 {
					a := turn[j]
					a.Blocks = tb
					out = append(out, a)
					break
				}
			}
		}
	}
	return out
}

func textBlocks(bs []memory.Block) []memory.Block {
	var out []memory.Block
	for _, b := range bs {
		if b.Type == memory.BlockText {
			out = append(out, b)
		}
	}
	return out
}

// digest is the plain, rule-based summary of dropped turns: one line per
// turn with the user's request and the reply, appended to the previous
// summary and bounded in size (the oldest lines go first).
func digest(prev string, dropped []memory.Message) string {
	var b strings.Builder
	b.WriteString(prev)
	starts := turnStarts(dropped)
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
			out = truncateMiddle(out, maxSummaryBytes)
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

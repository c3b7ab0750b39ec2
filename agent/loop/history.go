package loop

import (
	"encoding/json"
	"strings"
	"unicode/utf8"

	"github.com/switchboard-chat/switchboard/llm"
	"github.com/switchboard-chat/switchboard/memory"
)

// Placeholder texts that keep the OpenAI API's invariants: a tool message
// always has content and every tool call has a result.
const (
	emptyToolResult   = "(no output)"
	missingToolResult = "Error: the tool result was lost (the turn was interrupted before the tool finished)."
)

// sanitize returns a copy of msgs in which every assistant tool_use block is
// followed, in the very next message, by exactly one tool_result per call in
// the same order, and no tool_result is orphaned. It repairs rather than
// rejects: missing results are synthesised as errors, results that answer no
// call are dropped, tool messages out of place are re-attached or dropped,
// and tool_use blocks without id or name are removed. The input is not
// modified.
func sanitize(msgs []memory.Message) []memory.Message {
	return sanitizeInto(make([]memory.Message, 0, len(msgs)), msgs)
}

// sanitizeInto is sanitize appending to out (a reused scratch slice).
func sanitizeInto(out, msgs []memory.Message) []memory.Message {
	for i := 0; i < len(msgs); i++ {
		m := msgs[i]
		switch m.Role {
		case memory.RoleTool:
			// A tool message not consumed right after its assistant message is
			// an orphan: drop it.
			continue
		case memory.RoleAssistant:
			var uses []memory.Block
			var seen map[string]bool
			m.Blocks, uses, seen = splitUses(m.Blocks)
			if len(uses) == 0 {
				if len(m.Blocks) > 0 {
					out = append(out, m)
				}
				continue
			}
			out = append(out, m)
			// Collect the results that follow (possibly spread over several
			// tool messages), then emit them in call order.
			results := map[string]memory.Block{}
			j := i + 1
			for ; j < len(msgs) && msgs[j].Role == memory.RoleTool; j++ {
				for _, b := range msgs[j].Blocks {
					if b.Type == memory.BlockToolResult && seen[b.ToolID] {
						if _, dup := results[b.ToolID]; !dup {
							results[b.ToolID] = b
						}
					}
				}
			}
			i = j - 1
			res := memory.Message{Role: memory.RoleTool, Time: m.Time}
			for _, u := range uses {
				r, ok := results[u.ToolID]
				if !ok {
					r = memory.Block{Type: memory.BlockToolResult, ToolID: u.ToolID, Text: missingToolResult, IsError: true}
				}
				if r.Text == "" {
					r.Text = emptyToolResult
				}
				res.Blocks = append(res.Blocks, r)
			}
			out = append(out, res)
		default:
			out = append(out, m)
		}
	}
	return out
}

// splitUses returns an assistant message's blocks without tool results
// and without the tool calls that lack an id or a name or repeat an id,
// the calls kept, and their ids. Blocks holding neither calls nor results
// (a plain answer) are returned as they are.
func splitUses(blocks []memory.Block) (kept, uses []memory.Block, seen map[string]bool) {
	plain := true
	for _, b := range blocks {
		plain = plain && b.Type != memory.BlockToolUse && b.Type != memory.BlockToolResult
	}
	if plain {
		return blocks, nil, nil
	}
	kept = make([]memory.Block, 0, len(blocks))
	seen = map[string]bool{}
	for _, b := range blocks {
		if b.Type == memory.BlockToolUse {
			if b.ToolID == "" || b.ToolName == "" || seen[b.ToolID] {
				continue
			}
			seen[b.ToolID] = true
			uses = append(uses, b)
		}
		if b.Type == memory.BlockToolResult {
			continue
		}
		kept = append(kept, b)
	}
	return kept, uses, seen
}

// limitOldResults returns msgs with the tool results of every message but
// msgs[keep] (the current step's results; -1 for none) cut to limit bytes.
// Messages are copied only where something is cut.
func limitOldResults(msgs []memory.Message, keep, limit int) []memory.Message {
	var out []memory.Message
	for i, m := range msgs {
		if i == keep || m.Role != memory.RoleTool {
			continue
		}
		for j, b := range m.Blocks {
			if len(b.Text) <= limit {
				continue
			}
			if out == nil {
				out = append([]memory.Message(nil), msgs...)
			}
			if &out[i].Blocks[0] == &msgs[i].Blocks[0] {
				out[i].Blocks = append([]memory.Block(nil), m.Blocks...)
			}
			out[i].Blocks[j].Text = TruncateMiddle(b.Text, limit)
		}
	}
	if out == nil {
		return msgs
	}
	return out
}

// toLLM converts sanitised history into request messages.
func toLLM(msgs []memory.Message) []llm.Message {
	return appendLLM(make([]llm.Message, 0, len(msgs)+4), msgs)
}

// appendLLM appends sanitised history as request messages to out. The
// texts are the history's own strings (a message of one text block is not
// copied).
func appendLLM(out []llm.Message, msgs []memory.Message) []llm.Message {
	for _, m := range msgs {
		switch m.Role {
		case memory.RoleUser:
			lm := llm.Message{Role: llm.RoleUser}
			var sb strings.Builder
			for _, b := range m.Blocks {
				switch b.Type {
				case memory.BlockText:
					if lm.Content == "" && sb.Len() == 0 {
						lm.Content = b.Text // the common single block
						continue
					}
					if sb.Len() == 0 {
						sb.WriteString(lm.Content)
					}
					if sb.Len() > 0 {
						sb.WriteString("\n")
					}
					sb.WriteString(b.Text)
				case memory.BlockImage:
					u := b.URL
					if u == "" && b.Data != "" {
						u = "data:" + b.MIME + ";base64," + b.Data
					}
					if u != "" {
						lm.Images = append(lm.Images, llm.ImagePart{URL: u})
					}
				}
			}
			if sb.Len() > 0 {
				lm.Content = sb.String()
			}
			out = append(out, lm)
		case memory.RoleAssistant:
			lm := llm.Message{Role: llm.RoleAssistant}
			for _, b := range m.Blocks {
				switch b.Type {
				case memory.BlockText:
					lm.Content += b.Text
				case memory.BlockThinking:
					lm.Reasoning += b.Text
				case memory.BlockToolUse:
					args := string(b.Input)
					if args == "" {
						args = "{}"
					}
					lm.ToolCalls = append(lm.ToolCalls, llm.ToolCall{ID: b.ToolID, Name: b.ToolName, Arguments: args})
				}
			}
			out = append(out, lm)
		case memory.RoleTool:
			for _, b := range m.Blocks {
				text := b.Text
				if text == "" {
					text = emptyToolResult
				}
				out = append(out, llm.Message{Role: llm.RoleTool, ToolID: b.ToolID, Content: text})
			}
		}
	}
	return out
}

func jsonKind(c byte) string {
	switch c {
	case '[':
		return "an array"
	case '"':
		return "a string"
	case 't', 'f':
		return "a boolean"
	case 'n':
		return "null"
	}
	return "a number"
}

// EstimateTokens is a cheap token estimate (no tokenizer): ASCII runes count
// a quarter token, other runes one and a half, plus a constant per message
// and per block kind.
func EstimateTokens(m *memory.Message) int {
	n := 4
	for _, b := range m.Blocks {
		switch b.Type {
		case memory.BlockImage:
			n += 1200
		case memory.BlockToolUse:
			n += 50 + TextTokens(string(b.Input)) + TextTokens(b.ToolName)
		case memory.BlockToolResult:
			n += 30 + TextTokens(b.Text)
		default:
			n += TextTokens(b.Text)
		}
	}
	return n
}

// TextTokens is the token estimate of a text: a quarter token per ASCII
// rune, one and a half per other rune (an invalid byte counts as one).
func TextTokens(s string) int { return countText(s).tokens() }

// textCount is what TextTokens counts in a text; counts of two texts add
// up to the count of their concatenation when the first ends with a whole
// character (see endsWhole).
type textCount struct{ ascii, other int }

func countText(s string) textCount {
	ascii, other := 0, 0
	for i := 0; i < len(s); {
		if s[i] < utf8.RuneSelf {
			ascii++
			i++
			continue
		}
		_, w := utf8.DecodeRuneInString(s[i:])
		i += w
		other++
	}
	return textCount{ascii, other}
}

func (c textCount) tokens() int { return c.ascii/4 + c.other*3/2 + 1 }

// endsWhole reports whether s ends with an ASCII byte or a complete, valid
// UTF-8 sequence, so that its runes are the same whatever follows it.
func endsWhole(s string) bool {
	if s == "" || s[len(s)-1] < utf8.RuneSelf {
		return true
	}
	r, size := utf8.DecodeLastRuneInString(s)
	return r != utf8.RuneError || size > 1
}

// TurnStarts returns the indexes of messages that open a turn.
func TurnStarts(msgs []memory.Message) []int {
	var idx []int
	for i, m := range msgs {
		if m.TurnStart {
			idx = append(idx, i)
		}
	}
	return idx
}

// trimTurns drops the oldest whole turns until at most maxTurns remain and the
// estimated tokens fit budget. The newest turn is always kept, whatever its
// size. Messages before the first turn start (left over from an older layout
// or a compaction) are dropped with the first trim.
func trimTurns(msgs []memory.Message, maxTurns, budget int) []memory.Message {
	starts := TurnStarts(msgs)
	if len(starts) == 0 {
		return msgs
	}
	total := 0
	for i := range msgs {
		total += EstimateTokens(&msgs[i])
	}
	first := 0 // index into starts of the first kept turn
	cut := 0   // index into msgs of the first kept message
	for first < len(starts)-1 && (len(starts)-first > maxTurns || total > budget) {
		next := starts[first+1]
		for i := cut; i < next; i++ {
			total -= EstimateTokens(&msgs[i])
		}
		cut = next
		first++
	}
	return msgs[cut:]
}

// normaliseArgs turns model-produced tool arguments into a JSON object. It
// returns the object and "" on success, or nil and a reason for the model.
func normaliseArgs(raw string, finish string) (json.RawMessage, string) {
	s := strings.TrimSpace(raw)
	if s == "" {
		if finish == llm.FinishLength {
			return nil, "the tool call was cut off by the output token limit before its arguments were written; send less in one call"
		}
		return json.RawMessage("{}"), ""
	}
	if json.Valid([]byte(s)) {
		if s[0] != '{' {
			return nil, "tool arguments must be a JSON object, got " + jsonKind(s[0])
		}
		return json.RawMessage(s), ""
	}
	if finish == llm.FinishLength {
		return nil, "the tool call was cut off by the output token limit; repeating the same call will be cut off again — send less in one call"
	}
	if !strings.HasSuffix(s, "}") {
		return nil, "the tool call was cut off (its arguments end mid-JSON); repeating the same call will be cut off again — send less in one call"
	}
	repaired, ok := repairJSON(s)
	if !ok {
		var v any
		err := json.Unmarshal([]byte(s), &v)
		return nil, "invalid JSON in tool arguments: " + strings.TrimPrefix(err.Error(), "json: ")
	}
	return repaired, ""
}

// TotalTokens is the EstimateTokens sum of msgs.
func TotalTokens(msgs []memory.Message) int {
	n := 0
	for i := range msgs {
		n += EstimateTokens(&msgs[i])
	}
	return n
}

// CompressTurns reduces each turn to its first user text and its last
// assistant text, dropping tool traffic and reasoning.
func CompressTurns(msgs []memory.Message) []memory.Message {
	var out []memory.Message
	starts := TurnStarts(msgs)
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

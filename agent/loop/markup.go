package loop

import (
	"regexp"
	"strings"
)

// Tool-call markup some models write into their text instead of making a
// real tool call (Hermes/Qwen <tool_call>, MCP-style <use_mcp_tool>, Llama
// <|python_tag|>, Mistral [TOOL_CALLS], ...).
var markupPairs = [][2]string{
	{"<tool_call>", "</tool_call>"},
	{"<use_mcp_tool>", "</use_mcp_tool>"},
	{"<function_call>", "</function_call>"},
	{"<tool_use>", "</tool_use>"},
	{"<invoke", "</invoke>"},
	{"<function=", "</function>"},
	{"<|tool_call|>", "<|/tool_call|>"},
}

var markupTokens = []string{"<|python_tag|>", "[TOOL_CALLS]", "<|tool_calls_section_begin|>"}

// callObject matches the start of a JSON object shaped like a function
// call: {"name": "x", "arguments": ...} (or "parameters").
var callObject = regexp.MustCompile(`\{\s*"(?:name|function|tool)"\s*:\s*"([A-Za-z0-9_.-]+)"\s*,\s*"(?:arguments|parameters|args|input)"\s*:`)

// hasCallMarkup reports whether text carries tool-call markup, or a JSON
// call object naming one of the tools.
func hasCallMarkup(text string, isTool func(string) bool) bool {
	for _, p := range markupPairs {
		if strings.Contains(text, p[0]) {
			return true
		}
	}
	for _, tok := range markupTokens {
		if strings.Contains(text, tok) {
			return true
		}
	}
	for _, m := range callObject.FindAllStringSubmatch(text, -1) {
		if isTool(m[1]) {
			return true
		}
	}
	return false
}

// cleanReply makes model text fit for a chat: <think> blocks, tool-call
// markup, JSON call objects naming tools, and any echo of the runtime's
// internal instructions are removed.
func cleanReply(text string, isTool func(string) bool) string {
	text = StripThink(text)
	for _, p := range markupPairs {
		text = cutBlocks(text, p[0], p[1])
	}
	for _, tok := range markupTokens {
		if i := strings.Index(text, tok); i >= 0 {
			text = text[:i]
		}
	}
	for {
		loc := callObject.FindStringSubmatchIndex(text)
		if loc == nil || !isTool(text[loc[2]:loc[3]]) {
			break
		}
		end := matchingBrace(text, loc[0])
		start := loc[0]
		// Take a surrounding ```json fence with it.
		if f := strings.LastIndex(text[:start], "```"); f >= 0 && strings.TrimSpace(strings.TrimPrefix(text[f:start], "```json")) == "" {
			start = f
			if g := strings.Index(text[end:], "```"); g >= 0 && strings.TrimSpace(text[end:end+g]) == "" {
				end += g + 3
			}
		}
		text = text[:start] + text[end:]
	}
	for _, internal := range []string{NudgePrompt, strings.TrimSpace(repeatHint), steerPrefix} {
		text = strings.ReplaceAll(text, internal, "")
	}
	return strings.TrimSpace(text)
}

// cutBlocks removes open...close sections, and an unclosed one to the end.
func cutBlocks(s, open, close string) string {
	for {
		i := strings.Index(s, open)
		if i < 0 {
			return s
		}
		j := strings.Index(s[i:], close)
		if j < 0 {
			return s[:i]
		}
		s = s[:i] + s[i+j+len(close):]
	}
}

// matchingBrace returns the index just past the brace closing the object
// that starts at s[start] (or len(s) when unbalanced), skipping strings.
func matchingBrace(s string, start int) int {
	depth, inStr, esc := 0, false, false
	for i := start; i < len(s); i++ {
		c := s[i]
		switch {
		case esc:
			esc = false
		case inStr && c == '\\':
			esc = true
		case c == '"':
			inStr = !inStr
		case inStr:
		case c == '{':
			depth++
		case c == '}':
			depth--
			if depth == 0 {
				return i + 1
			}
		}
	}
	return len(s)
}

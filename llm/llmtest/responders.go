package llmtest

import (
	"strings"

	openai "github.com/sashabaranov/go-openai"
)

// demoMaxLines bounds how many lines of a tool result DemoResponder quotes.
const demoMaxLines = 10

// EchoResponder answers "echo: " followed by the text of the last user
// message.
func EchoResponder(req *Request) Reply {
	text := strings.TrimSpace(req.LastUserText())
	if text == "" {
		text = "(no text)"
	}
	return Reply{Text: "echo: " + text}
}

// DemoResponder is a rule-based stand-in for a model, for demos: when the
// last message is the user's and a tool named list_dir is offered, it calls
// list_dir with {"path":"."}; when the last message is a tool result, it
// answers with the first lines of that result; otherwise it echoes like
// EchoResponder.
func DemoResponder(req *Request) Reply {
	last, ok := req.LastMessage()
	switch {
	case ok && last.Role == openai.ChatMessageRoleUser && req.HasTool("list_dir"):
		return ToolCallReply("list_dir", `{"path":"."}`)
	case ok && last.Role == openai.ChatMessageRoleTool:
		return Reply{Text: describeListing(MessageText(last))}
	default:
		return EchoResponder(req)
	}
}

// describeListing turns a tool result into the demo's answer.
func describeListing(result string) string {
	var lines []string
	rest := strings.TrimSpace(result)
	for rest != "" && len(lines) < demoMaxLines {
		var line string
		line, rest, _ = strings.Cut(rest, "\n")
		if line = strings.TrimSpace(line); line != "" {
			lines = append(lines, line)
		}
	}
	if len(lines) == 0 {
		return "I looked at your workspace, but the listing came back empty. " +
			"(I am the demo model: I list your workspace and echo everything else.)"
	}
	var b strings.Builder
	b.WriteString("I looked at your workspace. It contains:\n")
	for _, l := range lines {
		b.WriteString("- ")
		b.WriteString(l)
		b.WriteByte('\n')
	}
	if strings.TrimSpace(rest) != "" {
		b.WriteString("- …\n")
	}
	b.WriteString("\n(I am the demo model: I list your workspace and echo everything else.)")
	return b.String()
}

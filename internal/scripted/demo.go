package scripted

import (
	"regexp"
	"strings"

	openai "github.com/sashabaranov/go-openai"

	"github.com/switchboard-chat/switchboard/llm/llmtest"
)

// DemoFooter ends every answer of [DemoResponder]: what the script does.
const DemoFooter = "(I am the demo model, a script: I list your workspace with the list_dir tool when you ask about your files, and echo everything else.)"

// demoMaxLines bounds how many lines of a listing DemoResponder quotes.
const demoMaxLines = 10

// asksForFiles matches a message about the workspace's files: "list my
// files", "what is in your workspace?", "ls", "show the folder".
var asksForFiles = regexp.MustCompile(`(?i)\b(files?|workspace|folders?|director(y|ies)|ls|dir)\b`)

// greeting matches a message that only says hello.
var greeting = regexp.MustCompile(`(?i)^\s*(hello|hi|hey|good (morning|afternoon|evening)|hallo|bonjour|hola)\b[\s!.,]*\w*[\s!.]*$`)

// DemoResponder is the scripted model of `switchboard demo`, doing what
// its footer ([DemoFooter]) says: a message asking about files (e.g. "list
// my files") gets a list_dir call, when the tool is offered, and the tool's
// result is reported; a greeting is answered with a short introduction;
// anything else is echoed. It never calls a tool unasked.
func DemoResponder(req *llmtest.Request) llmtest.Reply {
	last, ok := req.LastMessage()
	switch {
	case !ok:
		return llmtest.Reply{Text: "Hello! " + DemoFooter}
	case last.Role == openai.ChatMessageRoleTool:
		return llmtest.Reply{Text: describeListing(llmtest.MessageText(last))}
	}
	text := strings.TrimSpace(req.LastUserText())
	switch {
	case last.Role == openai.ChatMessageRoleUser && asksForFiles.MatchString(text) && req.HasTool("list_dir"):
		return llmtest.ToolCallReply("list_dir", `{"path":"."}`)
	case greeting.MatchString(text):
		return llmtest.Reply{Text: "Hello! This is the Switchboard demo. Ask me to \"list my files\" to see a tool call.\n\n" + DemoFooter}
	case text == "":
		return llmtest.Reply{Text: "(no text)\n\n" + DemoFooter}
	}
	return llmtest.Reply{Text: "echo: " + text + "\n\n" + DemoFooter}
}

// describeListing turns a list_dir result into the demo's answer.
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
		return "I looked at your workspace, but the listing came back empty.\n\n" + DemoFooter
	}
	var b strings.Builder
	b.WriteString("I looked at your workspace. It contains:\n")
	for _, l := range lines {
		b.WriteString("- " + l + "\n")
	}
	if strings.TrimSpace(rest) != "" {
		b.WriteString("- …\n")
	}
	b.WriteString("\n" + DemoFooter)
	return b.String()
}

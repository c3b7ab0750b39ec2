package llmtest

import (
	"strings"
)

// EchoResponder answers "echo: " followed by the text of the last user
// message.
func EchoResponder(req *Request) Reply {
	text := strings.TrimSpace(req.LastUserText())
	if text == "" {
		text = "(no text)"
	}
	return Reply{Text: "echo: " + text}
}

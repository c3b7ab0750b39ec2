package llmtest

import (
	"errors"
	"fmt"

	openai "github.com/sashabaranov/go-openai"
)

// Validate checks the request against the rules the OpenAI chat
// completion API enforces with a 400 on the conversation's shape: known
// roles; every assistant tool call has an id and a function name and is
// answered, before the next other message, by a tool message with its id
// and non-empty content; no tool message answers a call that was not made
// just before it (or answers it twice); an assistant message has content
// or tool calls. A nil error means a strict server would accept the
// messages. The handler itself does not refuse invalid requests; tests
// call Validate on what it recorded (or in a Responder).
func (r *Request) Validate() error {
	var errs []error
	msgs := r.Body.Messages
	open := map[string]bool{} // calls of the last assistant message not answered yet
	var order []string
	closeOpen := func(at int) {
		for _, id := range order {
			if open[id] {
				errs = append(errs, fmt.Errorf("message %d: tool call %s is not answered", at, id))
			}
		}
		clear(open)
		order = order[:0]
	}
	for i, m := range msgs {
		switch m.Role {
		case openai.ChatMessageRoleTool:
			if !open[m.ToolCallID] {
				errs = append(errs, fmt.Errorf("message %d: tool result %q answers no pending tool call", i, m.ToolCallID))
				continue
			}
			open[m.ToolCallID] = false
			if MessageText(m) == "" {
				errs = append(errs, fmt.Errorf("message %d: tool result %q is empty", i, m.ToolCallID))
			}
			continue
		case openai.ChatMessageRoleSystem, openai.ChatMessageRoleDeveloper, openai.ChatMessageRoleUser:
			closeOpen(i)
		case openai.ChatMessageRoleAssistant:
			closeOpen(i)
			if MessageText(m) == "" && len(m.ToolCalls) == 0 {
				errs = append(errs, fmt.Errorf("message %d: assistant message without content or tool calls", i))
			}
			for _, c := range m.ToolCalls {
				switch {
				case c.ID == "" || c.Function.Name == "":
					errs = append(errs, fmt.Errorf("message %d: tool call without id or name", i))
				case open[c.ID]:
					errs = append(errs, fmt.Errorf("message %d: tool call id %s used twice", i, c.ID))
				default:
					open[c.ID] = true
					order = append(order, c.ID)
				}
			}
		default:
			errs = append(errs, fmt.Errorf("message %d: unknown role %q", i, m.Role))
		}
	}
	closeOpen(len(msgs))
	if len(msgs) == 0 {
		errs = append(errs, errors.New("no messages"))
	}
	return errors.Join(errs...)
}

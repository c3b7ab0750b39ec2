package llmtest

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"

	openai "github.com/sashabaranov/go-openai"
)

// Validate checks a chat completion request against the rules OpenAI's API
// enforces on the message list, and a little more (what a strict provider
// rejects):
//   - there is at least one message, each with a known role;
//   - an assistant message has content or tool calls;
//   - an assistant message's tool calls have unique, non-empty ids, a
//     function name and arguments that are a JSON object;
//   - the messages right after an assistant message with tool calls are
//     tool messages answering each of its calls exactly once (in any
//     order), each with non-empty content;
//   - no tool message appears anywhere else;
//   - every offered tool has a name, and tool names are unique.
//
// The first violation is returned, naming the message index.
func Validate(body *openai.ChatCompletionRequest) error {
	if len(body.Messages) == 0 {
		return errors.New("messages: must not be empty")
	}
	seenTool := map[string]bool{}
	for i, t := range body.Tools {
		if t.Function == nil || t.Function.Name == "" {
			return fmt.Errorf("tools[%d]: function name must not be empty", i)
		}
		if seenTool[t.Function.Name] {
			return fmt.Errorf("tools[%d]: duplicate tool name %q", i, t.Function.Name)
		}
		seenTool[t.Function.Name] = true
	}
	ids := map[string]bool{}
	msgs := body.Messages
	for i := 0; i < len(msgs); i++ {
		m := msgs[i]
		switch m.Role {
		case openai.ChatMessageRoleSystem, openai.ChatMessageRoleUser, openai.ChatMessageRoleDeveloper:
			continue
		case openai.ChatMessageRoleTool:
			return fmt.Errorf("messages[%d]: a message with role 'tool' must be a response to a preceding message with 'tool_calls'", i)
		case openai.ChatMessageRoleAssistant:
		default:
			return fmt.Errorf("messages[%d]: unknown role %q", i, m.Role)
		}
		if len(m.ToolCalls) == 0 {
			if strings.TrimSpace(MessageText(m)) == "" {
				return fmt.Errorf("messages[%d]: assistant message without content or tool calls", i)
			}
			continue
		}
		want := map[string]bool{}
		for j, c := range m.ToolCalls {
			switch {
			case c.ID == "":
				return fmt.Errorf("messages[%d].tool_calls[%d]: id must not be empty", i, j)
			case ids[c.ID]:
				return fmt.Errorf("messages[%d].tool_calls[%d]: duplicate tool call id %q", i, j, c.ID)
			case c.Function.Name == "":
				return fmt.Errorf("messages[%d].tool_calls[%d]: function name must not be empty", i, j)
			case !isJSONObject(c.Function.Arguments):
				return fmt.Errorf("messages[%d].tool_calls[%d]: arguments are not a JSON object: %.80q", i, j, c.Function.Arguments)
			}
			ids[c.ID] = true
			want[c.ID] = true
		}
		k := i + 1
		for ; k < len(msgs) && msgs[k].Role == openai.ChatMessageRoleTool; k++ {
			t := msgs[k]
			if !want[t.ToolCallID] {
				return fmt.Errorf("messages[%d]: tool_call_id %q answers no pending tool call of messages[%d]", k, t.ToolCallID, i)
			}
			if strings.TrimSpace(MessageText(t)) == "" {
				return fmt.Errorf("messages[%d]: tool result for %q has no content", k, t.ToolCallID)
			}
			delete(want, t.ToolCallID)
		}
		if len(want) > 0 {
			return fmt.Errorf("messages[%d]: an assistant message with 'tool_calls' must be followed by tool messages responding to each 'tool_call_id' (%d unanswered)", i, len(want))
		}
		i = k - 1
	}
	return nil
}

// Validate checks the recorded request with [Validate].
func (r *Request) Validate() error { return Validate(&r.Body) }

func isJSONObject(s string) bool {
	var v map[string]any
	return json.Unmarshal([]byte(s), &v) == nil && v != nil
}

// WithStrict makes the handler check every request with [Validate] and
// answer an invalid one with 400 invalid_request_error (as OpenAI does)
// instead of a scripted reply; the request is still recorded and counted,
// and its violation is kept (see [Handler.Violations]).
func WithStrict() Option { return func(h *Handler) { h.strict = true } }

// Violations returns the violations of the requests a strict handler
// refused, oldest first, each prefixed with the request's Seq.
func (h *Handler) Violations() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]string(nil), h.violations...)
}

// refuse records req's violation and answers 400.
func (h *Handler) refuse(w http.ResponseWriter, req *Request, err error) {
	h.mu.Lock()
	h.violations = append(h.violations, fmt.Sprintf("request %d: %v", req.Seq, err))
	h.mu.Unlock()
	writeError(w, http.StatusBadRequest, "invalid_request", "llmtest: invalid request: "+err.Error())
}

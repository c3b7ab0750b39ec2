package llmtest

import (
	"strings"
	"testing"

	openai "github.com/sashabaranov/go-openai"
)

// TestRequestValidate: Request.Validate applies [Validate] to a recorded
// request.
func TestRequestValidate(t *testing.T) {
	sys := openai.ChatCompletionMessage{Role: "system", Content: "s"}
	user := openai.ChatCompletionMessage{Role: "user", Content: "u"}
	call := func(ids ...string) openai.ChatCompletionMessage {
		m := openai.ChatCompletionMessage{Role: "assistant"}
		for _, id := range ids {
			m.ToolCalls = append(m.ToolCalls, openai.ToolCall{ID: id, Type: "function", Function: openai.FunctionCall{Name: "f", Arguments: "{}"}})
		}
		return m
	}
	result := func(id, text string) openai.ChatCompletionMessage {
		return openai.ChatCompletionMessage{Role: "tool", ToolCallID: id, Content: text}
	}
	text := openai.ChatCompletionMessage{Role: "assistant", Content: "a"}
	for _, tc := range []struct {
		name string
		msgs []openai.ChatCompletionMessage
		want string // "" valid, else a substring of the error
	}{
		{"plain", []openai.ChatCompletionMessage{sys, user, text, user}, ""},
		{"paired", []openai.ChatCompletionMessage{sys, user, call("a", "b"), result("b", "1"), result("a", "2"), text, user}, ""},
		{"unanswered", []openai.ChatCompletionMessage{sys, user, call("a", "b"), result("a", "1"), user}, "(1 unanswered)"},
		{"dangling at the end", []openai.ChatCompletionMessage{sys, user, call("a")}, "(1 unanswered)"},
		{"orphan", []openai.ChatCompletionMessage{sys, user, result("a", "1")}, "must be a response to a preceding message with 'tool_calls'"},
		{"answered twice", []openai.ChatCompletionMessage{sys, user, call("a"), result("a", "1"), result("a", "1")}, "answers no pending tool call"},
		{"late answer", []openai.ChatCompletionMessage{sys, user, call("a"), user, result("a", "1")}, "unanswered"},
		{"empty result", []openai.ChatCompletionMessage{sys, user, call("a"), result("a", "")}, "has no content"},
		{"empty assistant", []openai.ChatCompletionMessage{sys, user, {Role: "assistant"}, user}, "without content or tool calls"},
		{"bad role", []openai.ChatCompletionMessage{sys, {Role: "robot", Content: "x"}}, "unknown role"},
		{"no messages", nil, "must not be empty"},
	} {
		r := Request{Body: openai.ChatCompletionRequest{Messages: tc.msgs}}
		err := r.Validate()
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%s: %v", tc.name, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%s: err = %v, want %q", tc.name, err, tc.want)
		}
	}
}

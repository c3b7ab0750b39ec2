package llmtest

import (
	"bytes"
	"encoding/json"
	"sync"
	"unicode/utf8"

	openai "github.com/sashabaranov/go-openai"
)

// A lean handler (nothing recorded, not strict) decodes requests into
// shadows of go-openai's types: a message in one pass (go-openai's
// ChatCompletionMessage.UnmarshalJSON decodes each message again, twice
// when its content is a list of parts) and a tool's schema left as raw
// JSON instead of a tree of maps. The rest of the body decodes as it does
// otherwise.

// leanBody shadows the messages and tools of a request (the outer fields
// win over the embedded ones of the same JSON name).
type leanBody struct {
	openai.ChatCompletionRequest
	Messages []leanMessage `json:"messages"`
	Tools    []leanTool    `json:"tools"`
}

type leanMessage struct {
	Role             string               `json:"role"`
	Content          leanContent          `json:"content"`
	Refusal          string               `json:"refusal"`
	Name             string               `json:"name"`
	ReasoningContent string               `json:"reasoning_content"`
	FunctionCall     *openai.FunctionCall `json:"function_call"`
	ToolCalls        []openai.ToolCall    `json:"tool_calls"`
	ToolCallID       string               `json:"tool_call_id"`
}

// leanContent is a message's content: a string or a list of parts.
type leanContent struct {
	text  string
	parts []openai.ChatMessagePart
}

func (c *leanContent) UnmarshalJSON(b []byte) error {
	switch {
	case len(b) > 0 && b[0] == '[':
		return json.Unmarshal(b, &c.parts)
	case string(b) == "null":
		return nil
	case plainString(b):
		// The decoder has checked the syntax; a string without escapes
		// and valid UTF-8 is its own text.
		c.text = string(b[1 : len(b)-1])
		return nil
	default:
		return json.Unmarshal(b, &c.text)
	}
}

// plainString reports whether b is a JSON string literal without escapes
// whose text is valid UTF-8 (what json.Unmarshal would copy unchanged).
func plainString(b []byte) bool {
	if len(b) < 2 || b[0] != '"' || b[len(b)-1] != '"' {
		return false
	}
	inner := b[1 : len(b)-1]
	return bytes.IndexByte(inner, '\\') < 0 && bytes.IndexByte(inner, '"') < 0 && utf8.Valid(inner)
}

type leanTool struct {
	Type     openai.ToolType `json:"type"`
	Function *struct {
		Name        string          `json:"name"`
		Description string          `json:"description"`
		Strict      bool            `json:"strict"`
		Parameters  json.RawMessage `json:"parameters"`
	} `json:"function"`
}

// leanPool holds decoded shadows (*leanBody), for their slices: decoding
// into a slice with room appends in place instead of growing a new one.
var leanPool = sync.Pool{New: func() any { return new(leanBody) }}

// maxPooledMessages bounds the messages a pooled shadow keeps room for.
const maxPooledMessages = 1024

// decodeLean decodes raw into body.
func decodeLean(raw []byte, body *openai.ChatCompletionRequest) error {
	lb := leanPool.Get().(*leanBody)
	defer func() {
		// The decoder fills elements in place: a reused one must be zero.
		msgs, tools := lb.Messages[:0], lb.Tools[:0]
		clear(msgs[:cap(msgs)])
		clear(tools[:cap(tools)])
		*lb = leanBody{Messages: msgs, Tools: tools}
		if cap(msgs) <= maxPooledMessages {
			leanPool.Put(lb)
		}
	}()
	if err := json.Unmarshal(raw, lb); err != nil {
		return err
	}
	*body = lb.ChatCompletionRequest
	if len(lb.Messages) > 0 {
		body.Messages = make([]openai.ChatCompletionMessage, len(lb.Messages))
		for i := range lb.Messages {
			m := &lb.Messages[i]
			body.Messages[i] = openai.ChatCompletionMessage{Role: m.Role, Content: m.Content.text, MultiContent: m.Content.parts,
				Refusal: m.Refusal, Name: m.Name, ReasoningContent: m.ReasoningContent, FunctionCall: m.FunctionCall,
				ToolCalls: m.ToolCalls, ToolCallID: m.ToolCallID}
		}
	}
	if len(lb.Tools) > 0 {
		body.Tools = make([]openai.Tool, len(lb.Tools))
		fns := make([]openai.FunctionDefinition, len(lb.Tools))
		for i, t := range lb.Tools {
			body.Tools[i].Type = t.Type
			if f := t.Function; f != nil {
				fns[i] = openai.FunctionDefinition{Name: f.Name, Description: f.Description, Strict: f.Strict}
				if f.Parameters != nil {
					fns[i].Parameters = f.Parameters
				}
				body.Tools[i].Function = &fns[i]
			}
		}
	}
	return nil
}

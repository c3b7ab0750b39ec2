package llm

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"

	openai "github.com/sashabaranov/go-openai"
)

// This file keeps the request conversion of the go-openai era as the
// reference the hand-written encoder is checked against: TestWireBytes
// marshals its result with go-openai's marshaller and compares the bytes.

// refRequest converts req into a go-openai request, filling the model,
// max_tokens and temperature from cfg where req leaves them unset. It
// validates every message and tool and names the offending field.
func refRequest(cfg Config, req Request) (openai.ChatCompletionRequest, error) {
	out := openai.ChatCompletionRequest{
		Model: cfg.Model,
		//lint:ignore SA1019 OpenAI-compatible servers (Ollama, vLLM, llama.cpp) read max_tokens; max_completion_tokens is OpenAI's newer name
		MaxTokens:     cfg.MaxTokens,
		Temperature:   wireTemperature(cfg.Temperature),
		Stream:        true,
		StreamOptions: &openai.StreamOptions{IncludeUsage: true},
	}
	if req.Model != "" {
		out.Model = req.Model
	}
	if req.MaxTokens < 0 {
		return out, fmt.Errorf("llm: request max_tokens: must not be negative, got %d", req.MaxTokens)
	}
	if req.MaxTokens > 0 {
		//lint:ignore SA1019 OpenAI-compatible servers (Ollama, vLLM, llama.cpp) read max_tokens; max_completion_tokens is OpenAI's newer name
		out.MaxTokens = req.MaxTokens
	}
	if req.Temperature != nil {
		t := *req.Temperature
		if t < 0 || t > 2 || math.IsNaN(float64(t)) {
			return out, fmt.Errorf("llm: request temperature: must be between 0 and 2, got %g", t)
		}
		out.Temperature = wireTemperature(t)
	}
	if len(req.Messages) == 0 {
		return out, errors.New("llm: request messages: must not be empty")
	}
	out.Messages = make([]openai.ChatCompletionMessage, 0, len(req.Messages))
	for i, m := range req.Messages {
		wm, err := convertMessage(m)
		if err != nil {
			return out, fmt.Errorf("llm: request messages[%d]: %w", i, err)
		}
		out.Messages = append(out.Messages, wm)
	}
	if len(req.Tools) > 0 {
		out.Tools = make([]openai.Tool, 0, len(req.Tools))
		seen := make(map[string]bool, len(req.Tools))
		for i, t := range req.Tools {
			wt, err := convertTool(t)
			if err != nil {
				return out, fmt.Errorf("llm: request tools[%d]: %w", i, err)
			}
			if seen[t.Name] {
				return out, fmt.Errorf("llm: request tools[%d].name: duplicate tool %q", i, t.Name)
			}
			seen[t.Name] = true
			out.Tools = append(out.Tools, wt)
		}
	}
	// Reasoning models (o-series, gpt-5, ...) refuse max_tokens and any
	// temperature but 1; go-openai checks this before sending. Use
	// max_completion_tokens and the default temperature for them.
	if openai.NewReasoningValidator().Validate(out) != nil {
		//lint:ignore SA1019 OpenAI-compatible servers (Ollama, vLLM, llama.cpp) read max_tokens; max_completion_tokens is OpenAI's newer name
		out.MaxCompletionTokens, out.MaxTokens = out.MaxTokens, 0
		out.Temperature = 0
		if err := openai.NewReasoningValidator().Validate(out); err != nil {
			return out, fmt.Errorf("llm: model %q: %w", out.Model, err)
		}
	}
	return out, nil
}

func convertMessage(m Message) (openai.ChatCompletionMessage, error) {
	if len(m.Images) > 0 && m.Role != RoleUser {
		return openai.ChatCompletionMessage{}, fmt.Errorf("images: only user messages may carry images, got role %q", m.Role)
	}
	if len(m.ToolCalls) > 0 && m.Role != RoleAssistant {
		return openai.ChatCompletionMessage{}, fmt.Errorf("tool_calls: only assistant messages may carry tool calls, got role %q", m.Role)
	}
	switch m.Role {
	case RoleSystem:
		return openai.ChatCompletionMessage{Role: openai.ChatMessageRoleSystem, Content: nonEmpty(m.Prefix + m.Content)}, nil
	case RoleUser:
		if len(m.Images) == 0 {
			return openai.ChatCompletionMessage{Role: openai.ChatMessageRoleUser, Content: nonEmpty(m.Content)}, nil
		}
		parts := make([]openai.ChatMessagePart, 0, len(m.Images)+1)
		if m.Content != "" {
			parts = append(parts, openai.ChatMessagePart{Type: openai.ChatMessagePartTypeText, Text: m.Content})
		}
		for j, img := range m.Images {
			if img.URL == "" {
				return openai.ChatCompletionMessage{}, fmt.Errorf("images[%d].url: must not be empty", j)
			}
			parts = append(parts, openai.ChatMessagePart{
				Type:     openai.ChatMessagePartTypeImageURL,
				ImageURL: &openai.ChatMessageImageURL{URL: img.URL},
			})
		}
		return openai.ChatCompletionMessage{Role: openai.ChatMessageRoleUser, MultiContent: parts}, nil
	case RoleAssistant:
		wm := openai.ChatCompletionMessage{
			Role:             openai.ChatMessageRoleAssistant,
			Content:          m.Content,
			ReasoningContent: m.Reasoning,
		}
		// OpenAI accepts an assistant message without content when it
		// carries tool calls; without tool calls it needs content.
		if wm.Content == "" && len(m.ToolCalls) == 0 {
			wm.Content = EmptyContent
		}
		if len(m.ToolCalls) > 0 {
			wm.ToolCalls = make([]openai.ToolCall, 0, len(m.ToolCalls))
			for j, tc := range m.ToolCalls {
				if tc.ID == "" {
					return openai.ChatCompletionMessage{}, fmt.Errorf("tool_calls[%d].id: must not be empty", j)
				}
				if tc.Name == "" {
					return openai.ChatCompletionMessage{}, fmt.Errorf("tool_calls[%d].name: must not be empty", j)
				}
				args := tc.Arguments
				if args == "" {
					args = emptyArguments
				}
				wm.ToolCalls = append(wm.ToolCalls, openai.ToolCall{
					ID:       tc.ID,
					Type:     openai.ToolTypeFunction,
					Function: openai.FunctionCall{Name: tc.Name, Arguments: args},
				})
			}
		}
		return wm, nil
	case RoleTool:
		if m.ToolID == "" {
			return openai.ChatCompletionMessage{}, errors.New("tool_call_id: tool message needs the id of the call it answers")
		}
		return openai.ChatCompletionMessage{Role: openai.ChatMessageRoleTool, Content: nonEmpty(m.Content), ToolCallID: m.ToolID}, nil
	default:
		return openai.ChatCompletionMessage{}, fmt.Errorf("role: unknown role %q (want system, user, assistant or tool)", m.Role)
	}
}

func convertTool(t Tool) (openai.Tool, error) {
	if t.Name == "" {
		return openai.Tool{}, errors.New("name: must not be empty")
	}
	params := t.Parameters
	if len(params) == 0 {
		params = emptySchema
	} else if !json.Valid(params) {
		return openai.Tool{}, fmt.Errorf("parameters: tool %q: schema is not valid JSON", t.Name)
	}
	return openai.Tool{
		Type: openai.ToolTypeFunction,
		Function: &openai.FunctionDefinition{
			Name:        t.Name,
			Description: t.Description,
			Parameters:  params,
		},
	}, nil
}

package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/switchboard-chat/switchboard/bus"
	"github.com/switchboard-chat/switchboard/llm"
)

const checkCallTimeout = 30 * time.Second

// checkLLMCall sends one tiny streaming request offering one tool and
// reports whether streaming works and whether the model makes tool calls
// (without them the agent can only chat, not act).
func checkLLMCall(ctx context.Context, cfg llm.Config) checkResult {
	r := checkResult{name: "LLM call"}
	if !cfg.Configured() {
		r.status, r.detail = statusSkip, "no model configured"
		return r
	}
	cfg.MaxRetries, cfg.RequestTimeout, cfg.IdleTimeout, cfg.MaxTokens = 0, checkCallTimeout, checkCallTimeout, 64
	client, err := llm.New(cfg, nil)
	if err != nil {
		r.status, r.detail = statusFail, err.Error()
		return r
	}
	defer client.CloseIdleConnections()
	ctx, cancel := context.WithTimeout(ctx, checkCallTimeout)
	defer cancel()
	resp, err := client.Stream(ctx, llm.Request{
		Messages: []llm.Message{
			{Role: llm.RoleSystem, Content: "You are a connectivity test. Call the tool ping exactly once, with no arguments."},
			{Role: llm.RoleUser, Content: "Call ping."},
		},
		Tools: []llm.Tool{{Name: "ping", Description: "Answers pong. Call it when asked to.", Parameters: json.RawMessage(`{"type":"object","properties":{}}`)}},
	}, nil)
	var ae *llm.APIError
	switch {
	case err == nil:
	case errors.As(err, &ae):
		r.status, r.detail = statusFail, fmt.Sprintf("model %s: streaming request failed: HTTP %d: %s", cfg.Model, ae.Status, ae.Message)
		return r
	default:
		r.status, r.detail = statusFail, fmt.Sprintf("model %s: streaming request failed: %s", cfg.Model, bus.RedactURL(err.Error()))
		return r
	}
	if len(resp.ToolCalls) == 0 {
		r.status, r.detail = statusWarn, fmt.Sprintf("model %s streams, but did not call the offered tool: tools (files, sub-agents, ...) may not work with it", cfg.Model)
		return r
	}
	r.status, r.detail = statusOK, fmt.Sprintf("model %s streams and makes tool calls (%s)", cfg.Model, resp.ToolCalls[0].Name)
	return r
}

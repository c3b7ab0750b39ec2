package llm

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/switchboard-chat/switchboard/bus"
	"github.com/switchboard-chat/switchboard/internal/health"
)

// Bounds on [Probe].
const (
	probeModelsTimeout = 5 * time.Second  // GET <base>/models
	probeCallTimeout   = 30 * time.Second // the streaming request
	probeMaxBody       = 4 << 20          // bytes of a /models answer read
	probeHintBytes     = 200              // of an error body quoted in a detail
)

// Probe checks the model endpoint of cfg for `switchboard check` and
// returns two results. "LLM": the endpoint's model list (GET
// <base>/models) is reachable, accepts the key and lists cfg.Model (a
// warning when it does not, or when no model is configured). "LLM call":
// once the endpoint answered (a model missing from its list included:
// lists are often incomplete, the request tells), one tiny streaming
// request offering one tool (no retries, at most 30s), a warning when the
// model answers without calling it (the agent could then only chat, not
// act); skipped when the endpoint failed or no model is configured. Each detail says what to change, naming the OPENAI_*
// variables, the llm.* keys and configFile; it never shows the API key or
// URL credentials.
func Probe(ctx context.Context, cfg Config, configFile string) []health.Result {
	models := probeModels(ctx, cfg, configFile)
	call := health.Result{Name: "LLM call", Status: health.Skip, Detail: "not tried: the endpoint check did not pass"}
	if models.Status == health.OK || models.Status == health.Warn && cfg.Configured() {
		call = probeCall(ctx, cfg)
	}
	return []health.Result{models, call}
}

// probeModels asks the model endpoint for its model list (GET <base>/models).
func probeModels(ctx context.Context, cfg Config, configFile string) health.Result {
	r := health.Result{Name: "LLM"}
	if !cfg.Configured() {
		r.Status, r.Detail = health.Warn, "not configured: set OPENAI_API_KEY, and optionally OPENAI_BASE_URL (e.g. http://localhost:11434/v1 for Ollama, no key needed) and OPENAI_MODEL; or edit llm.* in "+configFile
		return r
	}
	endpoint := strings.TrimRight(cfg.BaseURL, "/") + "/models"
	shown := bus.RedactURL(endpoint)

	ctx, cancel := context.WithTimeout(ctx, probeModelsTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, endpoint, nil)
	if err != nil {
		r.Status, r.Detail = health.Fail, fmt.Sprintf("bad llm.base_url %s: %v", bus.RedactURL(cfg.BaseURL), err)
		return r
	}
	if cfg.APIKey != "" {
		req.Header.Set("Authorization", "Bearer "+cfg.APIKey)
	}
	req.Header.Set("Accept", "application/json")
	transport := http.DefaultTransport.(*http.Transport).Clone()
	transport.DisableKeepAlives = true
	defer transport.CloseIdleConnections()
	resp, err := (&http.Client{Transport: transport}).Do(req)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		if errors.Is(err, context.DeadlineExceeded) {
			r.Status, r.Detail = health.Fail, fmt.Sprintf("GET %s: no answer within %s", shown, probeModelsTimeout)
		} else {
			r.Status, r.Detail = health.Fail, fmt.Sprintf("cannot reach GET %s: %v", shown, err)
		}
		return r
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, probeMaxBody))

	switch {
	case resp.StatusCode == http.StatusUnauthorized || resp.StatusCode == http.StatusForbidden:
		if cfg.APIKey == "" {
			r.Status, r.Detail = health.Fail, fmt.Sprintf("GET %s: HTTP %d, the endpoint wants an API key: set OPENAI_API_KEY or llm.api_key", shown, resp.StatusCode)
		} else {
			r.Status, r.Detail = health.Fail, fmt.Sprintf("GET %s: HTTP %d, key rejected: check OPENAI_API_KEY or llm.api_key", shown, resp.StatusCode)
		}
		return r
	case resp.StatusCode == http.StatusNotFound:
		r.Status, r.Detail = health.Fail, fmt.Sprintf("GET %s: HTTP 404: check llm.base_url (OpenAI-compatible servers usually end in /v1)", shown)
		return r
	case resp.StatusCode < 200 || resp.StatusCode > 299:
		r.Status, r.Detail = health.Fail, fmt.Sprintf("GET %s: HTTP %d%s", shown, resp.StatusCode, bodyHint(body))
		return r
	}

	var list struct {
		Data []struct {
			ID string `json:"id"`
		} `json:"data"`
	}
	if json.Unmarshal(body, &list) != nil || len(list.Data) == 0 {
		r.Status, r.Detail = health.OK, fmt.Sprintf("GET %s: HTTP %d (model %s)", shown, resp.StatusCode, cfg.Model)
		return r
	}
	for _, m := range list.Data {
		if m.ID == cfg.Model || m.ID == cfg.Model+":latest" {
			r.Status, r.Detail = health.OK, fmt.Sprintf("GET %s: HTTP %d, model %s is available", shown, resp.StatusCode, cfg.Model)
			return r
		}
	}
	var some []string
	for _, m := range list.Data[:min(len(list.Data), 5)] {
		some = append(some, m.ID)
	}
	more := ""
	if len(list.Data) > len(some) {
		more = ", ..."
	}
	r.Status, r.Detail = health.Warn, fmt.Sprintf("GET %s: reachable, but model %q is not among the %d it lists (%s%s): check OPENAI_MODEL or llm.model",
		shown, cfg.Model, len(list.Data), strings.Join(some, ", "), more)
	return r
}

// bodyHint returns the start of an error body, on one line, for a FAIL line.
func bodyHint(body []byte) string {
	s := strings.Join(strings.Fields(string(body)), " ")
	if s == "" {
		return ""
	}
	return ": " + cutRunes(s, probeHintBytes, "...")
}

// probeCall sends one tiny streaming request offering one tool and
// reports whether streaming works and whether the model makes tool calls
// (without them the agent can only chat, not act).
func probeCall(ctx context.Context, cfg Config) health.Result {
	r := health.Result{Name: "LLM call"}
	if !cfg.Configured() {
		r.Status, r.Detail = health.Skip, "no model configured"
		return r
	}
	cfg.MaxRetries, cfg.RequestTimeout, cfg.IdleTimeout, cfg.MaxTokens = 0, probeCallTimeout, probeCallTimeout, 64
	client, err := New(cfg, nil)
	if err != nil {
		r.Status, r.Detail = health.Fail, err.Error()
		return r
	}
	defer client.CloseIdleConnections()
	ctx, cancel := context.WithTimeout(ctx, probeCallTimeout)
	defer cancel()
	resp, err := client.Stream(ctx, Request{
		Messages: []Message{
			{Role: RoleSystem, Content: "You are a connectivity test. Call the tool ping exactly once, with no arguments."},
			{Role: RoleUser, Content: "Call ping."},
		},
		Tools: []Tool{{Name: "ping", Description: "Answers pong. Call it when asked to.", Parameters: json.RawMessage(`{"type":"object","properties":{}}`)}},
	}, nil)
	var ae *APIError
	switch {
	case err == nil:
	case errors.As(err, &ae):
		r.Status, r.Detail = health.Fail, fmt.Sprintf("model %s: streaming request failed: HTTP %d: %s", cfg.Model, ae.Status, ae.Message)
		return r
	default:
		r.Status, r.Detail = health.Fail, fmt.Sprintf("model %s: streaming request failed: %s", cfg.Model, bus.RedactURL(err.Error()))
		return r
	}
	if len(resp.ToolCalls) == 0 {
		r.Status, r.Detail = health.Warn, fmt.Sprintf("model %s streams, but did not call the offered tool: tools (files, sub-agents, ...) may not work with it", cfg.Model)
		return r
	}
	r.Status, r.Detail = health.OK, fmt.Sprintf("model %s streams and makes tool calls (%s)", cfg.Model, resp.ToolCalls[0].Name)
	return r
}

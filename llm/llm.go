// Package llm is Switchboard's client for OpenAI-compatible chat completion
// endpoints: streaming, tool calls assembled by index, reasoning content,
// an idle-stream watchdog and retries (429 with Retry-After, 5xx, network
// errors, and streams cut or stalled mid-way: a retried stream restarts,
// see [Delta.Restart]).
//
// The request and response types here are the runtime's own; the go-openai
// wire types stay inside this package. The request body is written by this
// package, byte for byte as go-openai's marshaller writes it but without
// re-validating what does not change: a caller offering the same tools on
// every call prepares them once ([NewToolSet], Request.ToolSet). A
// scripted, OpenAI-compatible test server lives in
// [github.com/switchboard-chat/switchboard/llm/llmtest].
//
// [Probe] checks an endpoint for `switchboard check`: its model list, then
// one streaming request offering a tool.
package llm

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"
)

// Message roles.
const (
	RoleSystem    = "system"
	RoleUser      = "user"
	RoleAssistant = "assistant"
	RoleTool      = "tool"
)

// Finish reasons as the API reports them.
const (
	FinishStop      = "stop"
	FinishLength    = "length"
	FinishToolCalls = "tool_calls"
	FinishFilter    = "content_filter"
)

// ToolCall is one function call requested by the model.
type ToolCall struct {
	ID        string `json:"id"`
	Name      string `json:"name"`
	Arguments string `json:"arguments"` // raw JSON text as streamed; may be invalid
}

// ImagePart is an image attached to a user message.
type ImagePart struct {
	URL string `json:"url"` // http(s) URL or data: URL
}

// Message is one chat message of a request.
type Message struct {
	Role string `json:"role"`
	// Prefix, in a system message, is the start of its content, sent
	// before Content as one string: a long head shared by many requests
	// (the parts of a system prompt that are the same for every session)
	// is written into the request as it is, not joined to Content into a
	// new string first. Only system messages may carry one.
	Prefix    string      `json:"prefix,omitempty"`
	Content   string      `json:"content,omitempty"`
	Images    []ImagePart `json:"images,omitempty"` // user messages only
	Reasoning string      `json:"reasoning,omitempty"`
	ToolCalls []ToolCall  `json:"tool_calls,omitempty"` // assistant only
	ToolID    string      `json:"tool_call_id,omitempty"`
}

// Tool is a function the model may call.
type Tool struct {
	Name        string          `json:"name"`
	Description string          `json:"description"`
	Parameters  json.RawMessage `json:"parameters"` // JSON Schema object
}

// Request is one chat completion request.
type Request struct {
	Model    string // empty: the client's configured model
	Messages []Message
	Tools    []Tool
	// ToolSet, when set, are the tools offered, validated and encoded
	// beforehand (NewToolSet): a caller offering the same tools on every
	// call sets it instead of Tools.
	ToolSet     *ToolSet
	MaxTokens   int      // 0: the client's configured max_tokens
	Temperature *float32 // nil: the client's configured temperature
	// OnRetry, when set, is called before the client waits to retry a
	// failed attempt (attempt is 1 for the first retry), so the caller can
	// show the user that it is still working.
	OnRetry func(attempt int, wait time.Duration, err error)
}

// Usage reports token counts (zero when the server sent none).
type Usage struct {
	PromptTokens     int `json:"prompt_tokens"`
	CompletionTokens int `json:"completion_tokens"`
	TotalTokens      int `json:"total_tokens"`
}

// Response is a complete, assembled streamed response.
type Response struct {
	Text         string
	Reasoning    string
	ToolCalls    []ToolCall // in index order
	FinishReason string
	Usage        Usage
}

// Delta is an incremental piece of a streamed response, passed to the
// caller's callback as it arrives.
type Delta struct {
	Text      string // new content text
	Reasoning string // new reasoning text
	// Restart reports that the stream starts over (a retry after an attempt
	// that had already streamed, or a fallback endpoint taking over): drop
	// the text and reasoning received so far in this call; later deltas
	// stream the new attempt from its beginning. Text and Reasoning are
	// empty in a restart delta.
	Restart bool
}

// Config configures the client (YAML section "llm").
type Config struct {
	BaseURL        string        `yaml:"base_url"`
	APIKey         string        `yaml:"api_key"`
	Model          string        `yaml:"model"`
	MaxTokens      int           `yaml:"max_tokens"`
	Temperature    float32       `yaml:"temperature"`
	ContextWindow  int           `yaml:"context_window"`
	RequestTimeout time.Duration `yaml:"request_timeout"`
	// IdleTimeout aborts a stream that sends nothing for this long.
	IdleTimeout time.Duration `yaml:"idle_timeout"`
	// MaxRetries is the number of retries after the first attempt.
	MaxRetries int `yaml:"max_retries"`
	// RateLimitBackoff is the first wait after a 429 without Retry-After;
	// later retries wait 1.5× and 2× as long.
	RateLimitBackoff time.Duration `yaml:"rate_limit_backoff"`
	// RetryBackoff is the first wait after other retryable failures; the
	// n-th retry waits n× as long.
	RetryBackoff time.Duration `yaml:"retry_backoff"`
	// Fallbacks are further endpoints tried in order when this one keeps
	// failing.
	Fallbacks []Endpoint `yaml:"fallbacks"`
	// FallbackCooldown is how long a failed endpoint is skipped before it
	// is tried again.
	FallbackCooldown time.Duration `yaml:"fallback_cooldown"`
	// TranscriptionModel is the speech-to-text model of the same endpoint
	// (/audio/transcriptions, e.g. whisper-1) used for voice messages;
	// empty (the default) means voice messages are not transcribed.
	TranscriptionModel string `yaml:"transcription_model"`
}

// Endpoint is a fallback model endpoint (llm.fallbacks[i]). Empty fields
// inherit the primary's value.
type Endpoint struct {
	BaseURL string `yaml:"base_url"`
	APIKey  string `yaml:"api_key"`
	Model   string `yaml:"model"`
}

// Sentinel errors (wrapped; use errors.Is).
var (
	// ErrNotConfigured: no model endpoint is configured (no API key and no base URL).
	ErrNotConfigured = errors.New("llm: no model configured")
	// ErrIdle: the stream sent nothing for longer than IdleTimeout.
	ErrIdle = errors.New("llm: stream idle")
	// ErrTruncated: the stream ended without a finish reason.
	ErrTruncated = errors.New("llm: stream ended without a finish reason")
	// ErrContextOverflow: the request exceeded the model's context window.
	ErrContextOverflow = errors.New("llm: context length exceeded")
	// ErrToolPairing: the provider rejected the request because tool calls
	// and tool results did not match up (never retried as is).
	ErrToolPairing = errors.New("llm: tool calls and results rejected by the provider")
)

// APIError is a non-retryable (or retries exhausted) error from the endpoint.
type APIError struct {
	Status     int    // HTTP status; 0 for a mid-stream error
	Code       string // provider code, e.g. "rate_limit_exceeded"
	Message    string
	RetryAfter time.Duration // from Retry-After, when the server sent one
	Err        error         // the underlying error
}

// Error describes the failure with its status, code and message.
func (e *APIError) Error() string {
	if e.Code != "" {
		return fmt.Sprintf("llm: status %d (%s): %s", e.Status, e.Code, e.Message)
	}
	return fmt.Sprintf("llm: status %d: %s", e.Status, e.Message)
}

// Unwrap returns the underlying error (which wraps ErrContextOverflow for
// a context overflow).
func (e *APIError) Unwrap() error { return e.Err }

package llm

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"
	"sync"

	openai "github.com/sashabaranov/go-openai"

	"github.com/switchboard-chat/switchboard/internal/jsonwire"
)

// The request body is written here, not by go-openai's marshaller: that one
// re-validates and compacts every json.RawMessage (the tool schemas) and
// every message through MarshalJSON on each call. The bytes written are
// exactly what go-openai would send for the same request (TestWireBytes
// compares them), so servers see no difference: the same field order,
// omitempty rules, HTML-escaped strings and float format.

// EmptyContent replaces the empty content of a message (a tool result, an
// assistant message without tool calls, a system or text-only user message):
// go-openai drops an empty content field and the OpenAI API rejects such a
// message. Content is never rejected for being empty, so one odd message in
// the history cannot make every later request of a session fail.
const EmptyContent = "(no output)"

// emptyArguments replaces empty tool call arguments in history: go-openai
// drops an empty arguments field, which OpenAI requires.
const emptyArguments = "{}"

// emptySchema is offered for a tool that declares no parameters.
var emptySchema = json.RawMessage(`{"type":"object","properties":{}}`)

// maxPooledBody bounds the request buffers kept for reuse.
const maxPooledBody = 4 << 20

// bodyPool holds request body buffers (*[]byte).
var bodyPool = sync.Pool{New: func() any { b := make([]byte, 0, 16<<10); return &b }}

// ToolSet is a list of tools validated and encoded once, for requests that
// offer the same tools again and again (Request.ToolSet): a request then
// copies the encoded schemas instead of validating and encoding them
// anew. It is immutable and safe for concurrent use.
type ToolSet struct {
	tools []Tool
	wire  []byte // the JSON array sent as "tools"
}

// NewToolSet checks tools (a name each, names unique, schemas valid JSON;
// an empty schema becomes an object without properties) and encodes them.
// An empty list gives an empty set (no tools offered).
func NewToolSet(tools []Tool) (*ToolSet, error) {
	wire, err := appendTools(nil, tools)
	if err != nil {
		return nil, fmt.Errorf("llm: tool set %w", err)
	}
	return &ToolSet{tools: append([]Tool(nil), tools...), wire: wire}, nil
}

// Tools returns the tools of the set; do not modify them.
func (s *ToolSet) Tools() []Tool {
	if s == nil {
		return nil
	}
	return s.tools
}

// Len returns the number of tools.
func (s *ToolSet) Len() int {
	if s == nil {
		return 0
	}
	return len(s.tools)
}

// wireRequest is the part of a request the client fills from its
// configuration: the model, the token limit and the temperature, as sent.
type wireRequest struct {
	model          string
	maxTokens      int // max_tokens; 0 omitted
	maxCompletion  int // max_completion_tokens (reasoning models); 0 omitted
	temperature    float32
	hasTemperature bool // false: omitted (reasoning models, or 0 as go-openai omits it)
}

// wireTemperature maps a temperature to what go-openai sends: 0 would be
// omitted (and the provider's default applied), so it becomes the smallest
// positive float32.
func wireTemperature(t float32) float32 {
	if t == 0 {
		return math.SmallestNonzeroFloat32
	}
	return t
}

// toolMarker stands for "some tools" in the reasoning validator's input.
var toolMarker [1]openai.Tool

// resolve fills the model, max_tokens and temperature from cfg where req
// leaves them unset, and applies the rules of reasoning models (rules
// remembers them per model and settings; nil works them out every time).
func resolve(cfg Config, req *Request, ntools int, rules *reasoningRules) (wireRequest, error) {
	w := wireRequest{model: cfg.Model, maxTokens: cfg.MaxTokens, temperature: wireTemperature(cfg.Temperature), hasTemperature: true}
	if req.Model != "" {
		w.model = req.Model
	}
	if req.MaxTokens < 0 {
		return w, fmt.Errorf("llm: request max_tokens: must not be negative, got %d", req.MaxTokens)
	}
	if req.MaxTokens > 0 {
		w.maxTokens = req.MaxTokens
	}
	if req.Temperature != nil {
		t := *req.Temperature
		if t < 0 || t > 2 || math.IsNaN(float64(t)) {
			return w, fmt.Errorf("llm: request temperature: must be between 0 and 2, got %g", t)
		}
		w.temperature = wireTemperature(t)
	}
	reasoning, err := rules.of(reasoningKey{model: w.model, maxTokens: w.maxTokens, temperature: w.temperature, tools: ntools > 0})
	if err != nil {
		return w, err
	}
	if reasoning {
		w.maxCompletion, w.maxTokens = w.maxTokens, 0
		w.temperature, w.hasTemperature = 0, false
	}
	return w, nil
}

// reasoningKey is what decides whether a request follows the rules of
// reasoning models.
type reasoningKey struct {
	model       string
	maxTokens   int
	temperature float32
	tools       bool
}

// reasoningRule is the outcome for one key.
type reasoningRule struct {
	reasoning bool
	err       error
}

// reasoningRules remembers the outcome per key: go-openai's validator
// takes its request by value (a large struct, twice per request). The
// keys are the configured models and settings, a handful. Safe for
// concurrent use; nil remembers nothing.
type reasoningRules struct{ m sync.Map } // reasoningKey → reasoningRule

// of reports whether k is a reasoning model's request (max_completion_tokens
// and the default temperature instead of max_tokens and temperature), or
// the error of a request that no setting makes valid.
func (r *reasoningRules) of(k reasoningKey) (bool, error) {
	if r != nil {
		if v, ok := r.m.Load(k); ok {
			rule := v.(reasoningRule)
			return rule.reasoning, rule.err
		}
	}
	rule := checkReasoning(k)
	if r != nil {
		r.m.Store(k, rule)
	}
	return rule.reasoning, rule.err
}

// checkReasoning asks go-openai's validator: reasoning models (o-series,
// gpt-5, ...) refuse max_tokens and any temperature but 1; use
// max_completion_tokens and the default temperature for them.
func checkReasoning(k reasoningKey) reasoningRule {
	probe := openai.ChatCompletionRequest{Model: k.model, Temperature: k.temperature}
	if k.tools {
		probe.Tools = toolMarker[:]
	}
	//lint:ignore SA1019 OpenAI-compatible servers (Ollama, vLLM, llama.cpp) read max_tokens; max_completion_tokens is OpenAI's newer name
	probe.MaxTokens = k.maxTokens
	if openai.NewReasoningValidator().Validate(probe) == nil {
		return reasoningRule{}
	}
	//lint:ignore SA1019 OpenAI-compatible servers (Ollama, vLLM, llama.cpp) read max_tokens; max_completion_tokens is OpenAI's newer name
	probe.MaxCompletionTokens, probe.MaxTokens = k.maxTokens, 0
	probe.Temperature = 0
	if err := openai.NewReasoningValidator().Validate(probe); err != nil {
		return reasoningRule{err: fmt.Errorf("llm: model %q: %w", k.model, err)}
	}
	return reasoningRule{reasoning: true}
}

// appendBody appends the JSON body of a streaming chat completion request.
// tools is the encoded "tools" array (nil or empty: no tools). It
// validates every message and names the offending one.
func appendBody(b []byte, w *wireRequest, msgs []Message, tools []byte) ([]byte, error) {
	if len(msgs) == 0 {
		return b, errors.New("llm: request messages: must not be empty")
	}
	b = append(b, `{"model":`...)
	b = jsonwire.AppendString(b, w.model)
	b = append(b, `,"messages":[`...)
	for i := range msgs {
		if i > 0 {
			b = append(b, ',')
		}
		var err error
		if b, err = appendMessage(b, &msgs[i]); err != nil {
			return b, fmt.Errorf("llm: request messages[%d]: %w", i, err)
		}
	}
	b = append(b, ']')
	if w.maxTokens != 0 {
		b = append(b, `,"max_tokens":`...)
		b = strconv.AppendInt(b, int64(w.maxTokens), 10)
	}
	if w.maxCompletion != 0 {
		b = append(b, `,"max_completion_tokens":`...)
		b = strconv.AppendInt(b, int64(w.maxCompletion), 10)
	}
	if w.hasTemperature && w.temperature != 0 {
		b = append(b, `,"temperature":`...)
		b = appendFloat32(b, w.temperature)
	}
	b = append(b, `,"stream":true`...)
	if len(tools) > 2 { // more than "[]"
		b = append(b, `,"tools":`...)
		b = append(b, tools...)
	}
	return append(b, `,"stream_options":{"include_usage":true}}`...), nil
}

// appendMessage appends one message as go-openai's ChatCompletionMessage
// marshals it, after the checks the API would fail it for.
func appendMessage(b []byte, m *Message) ([]byte, error) {
	if len(m.Images) > 0 && m.Role != RoleUser {
		return b, fmt.Errorf("images: only user messages may carry images, got role %q", m.Role)
	}
	if len(m.ToolCalls) > 0 && m.Role != RoleAssistant {
		return b, fmt.Errorf("tool_calls: only assistant messages may carry tool calls, got role %q", m.Role)
	}
	if m.Prefix != "" && m.Role != RoleSystem {
		return b, fmt.Errorf("prefix: only system messages may carry a prefix, got role %q", m.Role)
	}
	switch m.Role {
	case RoleSystem, RoleUser:
		if len(m.Images) > 0 {
			return appendImageMessage(b, m)
		}
		b = append(b, `{"role":`...)
		b = jsonwire.AppendString(b, m.Role)
		b = append(b, `,"content":`...)
		if m.Prefix != "" {
			b = jsonwire.AppendJoined(b, m.Prefix, m.Content) // Prefix + Content, never empty
		} else {
			b = jsonwire.AppendString(b, nonEmpty(m.Content))
		}
		return append(b, '}'), nil
	case RoleAssistant:
		b = append(b, `{"role":"assistant"`...)
		content := m.Content
		// OpenAI accepts an assistant message without content when it
		// carries tool calls; without tool calls it needs content.
		if content == "" && len(m.ToolCalls) == 0 {
			content = EmptyContent
		}
		if content != "" {
			b = append(b, `,"content":`...)
			b = jsonwire.AppendString(b, content)
		}
		if m.Reasoning != "" {
			b = append(b, `,"reasoning_content":`...)
			b = jsonwire.AppendString(b, m.Reasoning)
		}
		if len(m.ToolCalls) > 0 {
			b = append(b, `,"tool_calls":[`...)
			for j := range m.ToolCalls {
				tc := &m.ToolCalls[j]
				if tc.ID == "" {
					return b, fmt.Errorf("tool_calls[%d].id: must not be empty", j)
				}
				if tc.Name == "" {
					return b, fmt.Errorf("tool_calls[%d].name: must not be empty", j)
				}
				args := tc.Arguments
				if args == "" {
					args = emptyArguments
				}
				if j > 0 {
					b = append(b, ',')
				}
				b = append(b, `{"id":`...)
				b = jsonwire.AppendString(b, tc.ID)
				b = append(b, `,"type":"function","function":{"name":`...)
				b = jsonwire.AppendString(b, tc.Name)
				b = append(b, `,"arguments":`...)
				b = jsonwire.AppendString(b, args)
				b = append(b, "}}"...)
			}
			b = append(b, ']')
		}
		return append(b, '}'), nil
	case RoleTool:
		if m.ToolID == "" {
			return b, errors.New("tool_call_id: tool message needs the id of the call it answers")
		}
		b = append(b, `{"role":"tool","content":`...)
		b = jsonwire.AppendString(b, nonEmpty(m.Content))
		b = append(b, `,"tool_call_id":`...)
		b = jsonwire.AppendString(b, m.ToolID)
		return append(b, '}'), nil
	default:
		return b, fmt.Errorf("role: unknown role %q (want system, user, assistant or tool)", m.Role)
	}
}

// appendImageMessage appends a user message with images as content parts:
// its text (when any), then one image_url part per image.
func appendImageMessage(b []byte, m *Message) ([]byte, error) {
	b = append(b, `{"role":"user","content":[`...)
	first := true
	if m.Content != "" {
		b = append(b, `{"type":"text","text":`...)
		b = jsonwire.AppendString(b, m.Content)
		b = append(b, '}')
		first = false
	}
	for j, img := range m.Images {
		if img.URL == "" {
			return b, fmt.Errorf("images[%d].url: must not be empty", j)
		}
		if !first {
			b = append(b, ',')
		}
		first = false
		b = append(b, `{"type":"image_url","image_url":{"url":`...)
		b = jsonwire.AppendString(b, img.URL)
		b = append(b, "}}"...)
	}
	return append(b, "]}"...), nil
}

// appendTools appends the "tools" array: each tool as go-openai's Tool
// marshals it ({"function":{...},"type":"function"}), the schema compacted
// and HTML-escaped as encoding/json does with a json.RawMessage. Errors
// name the tool.
func appendTools(b []byte, tools []Tool) ([]byte, error) {
	b = append(b, '[')
	seen := make(map[string]bool, len(tools))
	var compact bytes.Buffer
	for i := range tools {
		t := &tools[i]
		if t.Name == "" {
			return b, fmt.Errorf("tools[%d]: name: must not be empty", i)
		}
		params := []byte(t.Parameters)
		if len(params) == 0 {
			params = emptySchema
		} else if !json.Valid(params) {
			return b, fmt.Errorf("tools[%d]: parameters: tool %q: schema is not valid JSON", i, t.Name)
		}
		if seen[t.Name] {
			return b, fmt.Errorf("tools[%d].name: duplicate tool %q", i, t.Name)
		}
		seen[t.Name] = true
		compact.Reset()
		if err := json.Compact(&compact, params); err != nil {
			return b, fmt.Errorf("tools[%d]: parameters: tool %q: %w", i, t.Name, err)
		}
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, `{"function":{"name":`...)
		b = jsonwire.AppendString(b, t.Name)
		if t.Description != "" {
			b = append(b, `,"description":`...)
			b = jsonwire.AppendString(b, t.Description)
		}
		b = append(b, `,"parameters":`...)
		b = appendHTMLEscaped(b, compact.Bytes())
		b = append(b, `},"type":"function"}`...)
	}
	return append(b, ']'), nil
}

// appendHTMLEscaped appends the compact JSON src with <, >, & and U+2028,
// U+2029 escaped, as encoding/json writes a json.RawMessage.
func appendHTMLEscaped(b, src []byte) []byte {
	var buf bytes.Buffer
	json.HTMLEscape(&buf, src)
	return append(b, buf.Bytes()...)
}

// nonEmpty returns s, or EmptyContent when s is empty.
func nonEmpty(s string) string {
	if s == "" {
		return EmptyContent
	}
	return s
}

// appendFloat32 appends f as encoding/json formats a float32 (ES6 number
// conversion: exponent form below 1e-6 and from 1e21 on, "e-7" not "e-07").
func appendFloat32(b []byte, f float32) []byte {
	abs := float32(math.Abs(float64(f)))
	format := byte('f')
	if abs != 0 && (abs < 1e-6 || abs >= 1e21) {
		format = 'e'
	}
	b = strconv.AppendFloat(b, float64(f), format, -1, 32)
	if format == 'e' {
		if n := len(b); n >= 4 && b[n-4] == 'e' && b[n-3] == '-' && b[n-2] == '0' {
			b[n-2] = b[n-1]
			b = b[:n-1]
		}
	}
	return b
}

// requestBuffer is the encoded body of one call, in a pooled buffer shared
// by the call's attempts. The buffer goes back to the pool only when the
// HTTP transport closed every attempt's body (it no longer reads it).
type requestBuffer struct {
	buf      *[]byte
	model    string // the model sent
	reusable bool   // every body handed out was closed
}

// reader returns a body for one attempt.
func (r *requestBuffer) reader() *bodyReader { return &bodyReader{b: *r.buf} }

// done notes the end of the attempt that read br.
func (r *requestBuffer) done(br *bodyReader) {
	if !br.isClosed() {
		r.reusable = false
	}
}

// release returns the buffer to the pool when nothing reads it any more.
func (r *requestBuffer) release() {
	if r.buf == nil {
		return
	}
	if r.reusable && cap(*r.buf) <= maxPooledBody {
		*r.buf = (*r.buf)[:0]
		bodyPool.Put(r.buf)
	}
	r.buf = nil
}

// bodyReader reads a request body from a shared buffer. Close stops
// further reads, so that once it is closed the buffer may be reused.
type bodyReader struct {
	mu     sync.Mutex
	b      []byte
	off    int
	closed bool
}

func (r *bodyReader) len() int { return len(r.b) }

func (r *bodyReader) Read(p []byte) (int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return 0, errBodyClosed
	}
	if r.off >= len(r.b) {
		return 0, io.EOF
	}
	n := copy(p, r.b[r.off:])
	r.off += n
	return n, nil
}

// Close implements io.Closer; the transport calls it when it is done with
// the body.
func (r *bodyReader) Close() error {
	r.mu.Lock()
	r.closed = true
	r.mu.Unlock()
	return nil
}

func (r *bodyReader) isClosed() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.closed
}

var errBodyClosed = errors.New("llm: request body read after close")

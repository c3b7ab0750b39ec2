// Package llmtest is a scripted, OpenAI-compatible chat completion server.
// It streams server-sent events exactly like the real API (chunks of object
// "chat.completion.chunk", an optional usage chunk, then "data: [DONE]"), and
// records every request it receives.
//
// Replies come from a FIFO script (Handler.Enqueue), then from a Responder
// (EchoResponder, internal/scripted's DemoResponder or your own); with neither, a request gets a
// 500 error saying the script is exhausted. Replies can also fail in the
// ways real servers do: HTTP errors with Retry-After, context overflow,
// mid-stream errors, truncated or stalled streams, connection resets, slow
// first bytes.
//
// [Handler] is a plain http.Handler, usable outside tests (cmd/fakellm and
// "switchboard demo" serve it); [NewServer] wraps it in an httptest server
// with cleanup for tests.
package llmtest

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	openai "github.com/sashabaranov/go-openai"

	"github.com/switchboard-chat/switchboard/internal/jsonwire"
)

// maxBody bounds a request body.
const maxBody = 32 << 20

// ToolCall is a tool call the scripted model makes.
type ToolCall struct {
	ID        string // empty: a unique "call_…" id is generated
	Name      string
	Arguments string // sent as is (may be invalid JSON on purpose)
}

// Usage is the token usage a reply reports.
type Usage struct {
	PromptTokens     int
	CompletionTokens int
}

// Reply scripts one response. The zero Reply is an empty answer that
// finishes with "stop".
type Reply struct {
	// Text is the answer text; Reasoning is streamed before it as
	// reasoning_content.
	Text      string
	Reasoning string
	// ToolCalls are streamed after the text, each as a first chunk with id,
	// type and name, then its argument fragments.
	ToolCalls []ToolCall
	// InterleaveToolCalls streams the argument fragments of several calls
	// round-robin instead of one call after the other.
	InterleaveToolCalls bool
	// FinishReason defaults to "stop", or "tool_calls" when there are tool
	// calls.
	FinishReason string
	// Usage is reported in a final chunk when the request asked for it
	// (stream_options.include_usage); nil estimates it from the sizes.
	Usage *Usage
	// ChunkSize splits text and reasoning into pieces of at most N bytes
	// (never splitting a rune) and arguments into pieces of exactly N
	// bytes (anywhere). 0 uses the handler's default (WithChunkSize), whose
	// own default is one piece.
	ChunkSize int
	// Delay waits before the first byte; ChunkDelay between chunks.
	Delay      time.Duration
	ChunkDelay time.Duration
	// KeepAlive, when positive, sends the stream's headers at once and an
	// SSE comment (": keep-alive") every KeepAlive during Delay, as proxies
	// do while a model is slow to start. Ignored when Status is set.
	KeepAlive time.Duration
	// Block, when not nil, holds the request until it is closed (or the
	// request is cancelled, or the handler closed) before anything else.
	Block <-chan struct{}
	// Status, when not 0, answers with this HTTP status and ErrorBody (a
	// default OpenAI error envelope when empty) instead of a stream.
	// RetryAfter, when set, is sent as the Retry-After header.
	Status     int
	ErrorBody  string
	RetryAfter string
	// MidStreamError, when set, ends the stream after the content with
	// `data: {"error":{"message":MidStreamError,...}}` and no [DONE].
	MidStreamError string
	// Truncate ends the stream after the content without a finish reason
	// and without [DONE].
	Truncate bool
	// Stall sends the content, then nothing more, holding the connection
	// until the request is cancelled or the handler closed (a client's
	// idle watchdog should give up on it).
	Stall bool
	// Reset sends the content, then resets the TCP connection (the server
	// hijacks it and closes it with SO_LINGER 0): the client sees
	// "connection reset by peer" mid-stream. A Reset reply with no content
	// (no Text, Reasoning, ToolCalls or RawChunks) resets the connection
	// before any response, as a crashing upstream does.
	Reset bool
	// Empty is an answer with no content and no tool calls that finishes
	// with "stop" (the zero Reply does the same; Empty says so).
	Empty bool
	// RawChunks, when set, replaces the generated chunks: each is sent
	// verbatim as one `data:` event, followed by [DONE] (unless Truncate or
	// Stall). Use it for backend quirks the fields above cannot express.
	RawChunks []string
}

// TextReply answers with text.
func TextReply(s string) Reply { return Reply{Text: s} }

// ToolCallReply answers with one call of tool name with raw JSON arguments.
func ToolCallReply(name, args string) Reply {
	return Reply{ToolCalls: []ToolCall{{Name: name, Arguments: args}}}
}

// ErrorReply answers with an HTTP error in OpenAI's envelope:
// {"error":{"message":..,"type":..,"param":null,"code":..}}. An empty code
// is sent as null.
func ErrorReply(status int, code, message string) Reply {
	return Reply{Status: status, ErrorBody: string(appendErrorEnvelope(nil, errorType(status), code, message))}
}

// RateLimitReply answers 429 rate_limit_exceeded with the given
// Retry-After header value (seconds or an HTTP date; empty sends none).
func RateLimitReply(retryAfter string) Reply {
	r := ErrorReply(http.StatusTooManyRequests, "rate_limit_exceeded",
		"Rate limit reached for requests. Please try again later.")
	r.RetryAfter = retryAfter
	return r
}

// ContextOverflowReply answers 400 context_length_exceeded as OpenAI does.
func ContextOverflowReply() Reply {
	return ErrorReply(http.StatusBadRequest, "context_length_exceeded",
		"This model's maximum context length is 128000 tokens. However, your messages resulted in 131072 tokens. "+
			"Please reduce the length of the messages.")
}

// errorType is OpenAI's error type for a status.
func errorType(status int) string {
	switch {
	case status == http.StatusTooManyRequests:
		return "requests"
	case status == http.StatusUnauthorized:
		return "authentication_error"
	case status >= 500:
		return "server_error"
	default:
		return "invalid_request_error"
	}
}

// Request is one recorded chat completion request.
type Request struct {
	Seq    int                          // 1 for the first request the handler accepted
	Body   openai.ChatCompletionRequest // the decoded body
	Raw    []byte                       // the body as received; do not modify
	Header http.Header                  // the request headers; do not modify
}

// LastMessage returns the last message of the request.
func (r *Request) LastMessage() (openai.ChatCompletionMessage, bool) {
	if len(r.Body.Messages) == 0 {
		return openai.ChatCompletionMessage{}, false
	}
	return r.Body.Messages[len(r.Body.Messages)-1], true
}

// LastUserText returns the text of the last user message, or "".
func (r *Request) LastUserText() string {
	for i := len(r.Body.Messages) - 1; i >= 0; i-- {
		if m := r.Body.Messages[i]; m.Role == openai.ChatMessageRoleUser {
			return MessageText(m)
		}
	}
	return ""
}

// HasTool reports whether the request offers a function tool named name.
func (r *Request) HasTool(name string) bool {
	for _, t := range r.Body.Tools {
		if t.Function != nil && t.Function.Name == name {
			return true
		}
	}
	return false
}

// MessageText returns a message's text: its content, or its text parts
// joined by newlines.
func MessageText(m openai.ChatCompletionMessage) string {
	if m.Content != "" || len(m.MultiContent) == 0 {
		return m.Content
	}
	var b strings.Builder
	for _, p := range m.MultiContent {
		if p.Type == openai.ChatMessagePartTypeText && p.Text != "" {
			if b.Len() > 0 {
				b.WriteByte('\n')
			}
			b.WriteString(p.Text)
		}
	}
	return b.String()
}

// Responder decides the reply to a request when the script is empty. It is
// called from the request's goroutine, possibly concurrently, and must not
// modify req.
type Responder func(req *Request) Reply

// Option configures a Handler.
type Option func(*Handler)

// WithResponder sets the responder used when the script is empty.
func WithResponder(r Responder) Option { return func(h *Handler) { h.responder = r } }

// WithLatency adds d before the first byte of every reply (on top of
// Reply.Delay).
func WithLatency(d time.Duration) Option { return func(h *Handler) { h.latency = max(d, 0) } }

// WithChunkSize sets the chunk size used by replies that leave ChunkSize
// at 0 (0: one chunk per text, reasoning and argument string).
func WithChunkSize(n int) Option { return func(h *Handler) { h.chunkSize = max(n, 0) } }

// WithRecordLimit keeps only the n most recent requests (0 keeps none;
// RequestCount still counts them all). The default keeps every request,
// which a long-running server should not do.
//
// A handler that keeps none and is not strict decodes requests for its
// replies only: the responder's Request.Body then holds each tool's
// parameter schema as a json.RawMessage (not decoded), and Request.Raw is
// valid only until the responder returns (its buffer is reused).
func WithRecordLimit(n int) Option { return func(h *Handler) { h.recordLimit = max(n, 0) } }

// WithModels sets the model ids listed by GET /v1/models (default
// "llmtest").
func WithModels(ids ...string) Option { return func(h *Handler) { h.models = ids } }

// Handler serves POST /v1/chat/completions (streaming only) and GET
// /v1/models (the /v1 prefix is optional). It is safe for concurrent use;
// every request it holds returns when the request's context ends or Close
// is called.
type Handler struct {
	latency     time.Duration
	chunkSize   int
	recordLimit int // -1: unlimited
	models      []string
	idSalt      uint32
	strict      bool
	closed      chan struct{}
	closeOnce   sync.Once

	mu        sync.Mutex
	responder Responder
	queue     []Reply
	requests  []Request
	count     int
	changed   chan struct{} // closed on the next request; nil when nobody waits
	// violations of the requests a strict handler refused
	violations []string
}

// NewHandler returns a handler with an empty script.
func NewHandler(opts ...Option) *Handler {
	h := &Handler{recordLimit: -1, models: []string{"llmtest"}, closed: make(chan struct{}), idSalt: rand.Uint32()}
	for _, o := range opts {
		o(h)
	}
	return h
}

// Enqueue appends replies to the script; each request consumes one, in
// order of arrival.
func (h *Handler) Enqueue(replies ...Reply) {
	h.mu.Lock()
	h.queue = append(h.queue, replies...)
	h.mu.Unlock()
}

// SetResponder sets (or with nil removes) the responder used when the
// script is empty.
func (h *Handler) SetResponder(r Responder) {
	h.mu.Lock()
	h.responder = r
	h.mu.Unlock()
}

// Pending returns the number of scripted replies not consumed yet.
func (h *Handler) Pending() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.queue)
}

// RequestCount returns how many chat completion requests were accepted
// (decoded and valid), recorded or not.
func (h *Handler) RequestCount() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.count
}

// Requests returns a copy of the recorded requests, oldest first.
func (h *Handler) Requests() []Request {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]Request(nil), h.requests...)
}

// WaitRequests waits until at least n requests were accepted and returns
// the recorded ones; it fails t if that takes longer than timeout. Call it
// from the test's goroutine.
func (h *Handler) WaitRequests(t testing.TB, n int, timeout time.Duration) []Request {
	t.Helper()
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for {
		h.mu.Lock()
		if h.count >= n {
			reqs := append([]Request(nil), h.requests...)
			h.mu.Unlock()
			return reqs
		}
		if h.changed == nil {
			h.changed = make(chan struct{})
		}
		ch, got := h.changed, h.count
		h.mu.Unlock()
		select {
		case <-ch:
		case <-deadline.C:
			t.Fatalf("llmtest: got %d requests within %s, want %d", got, timeout, n)
			return nil
		}
	}
}

// Close releases every request the handler holds (Block, Stall, delays)
// and makes later requests fail with 503. It is idempotent.
func (h *Handler) Close() {
	h.closeOnce.Do(func() { close(h.closed) })
}

// ServeHTTP implements http.Handler.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	path := strings.TrimPrefix(r.URL.Path, "/v1")
	switch path {
	case "/chat/completions":
		if r.Method != http.MethodPost {
			w.Header().Set("Allow", http.MethodPost)
			writeError(w, http.StatusMethodNotAllowed, "", "llmtest: use POST for /v1/chat/completions")
			return
		}
		h.serveChat(w, r)
	case "/models":
		if r.Method != http.MethodGet {
			w.Header().Set("Allow", http.MethodGet)
			writeError(w, http.StatusMethodNotAllowed, "", "llmtest: use GET for /v1/models")
			return
		}
		h.serveModels(w)
	default:
		writeError(w, http.StatusNotFound, "unknown_url", "llmtest: unknown path "+r.URL.Path+
			" (serving /v1/chat/completions and /v1/models)")
	}
}

func (h *Handler) serveModels(w http.ResponseWriter) {
	b := append(make([]byte, 0, 128), `{"object":"list","data":[`...)
	for i, id := range h.models {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, `{"id":`...)
		b = jsonwire.AppendString(b, id)
		b = append(b, `,"object":"model","created":1700000000,"owned_by":"llmtest"}`...)
	}
	b = append(b, "]}"...)
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(b)
}

// readBody reads the request body, bounded by maxBody, into buf.
func readBody(w http.ResponseWriter, r *http.Request, buf []byte) ([]byte, error) {
	n := r.ContentLength
	if n > maxBody {
		return nil, &http.MaxBytesError{Limit: maxBody}
	}
	if n < 0 {
		n = 4096
	}
	// ReadFrom wants MinRead bytes of room before it sees EOF.
	if need := int(n) + bytes.MinRead; cap(buf) < need {
		buf = make([]byte, 0, need)
	}
	b := bytes.NewBuffer(buf[:0])
	_, err := b.ReadFrom(http.MaxBytesReader(w, r.Body, maxBody))
	return b.Bytes(), err
}

// lean reports whether requests are neither recorded nor checked: then
// only what a reply needs is decoded (see WithRecordLimit) and the body is
// read into a reused buffer.
func (h *Handler) lean() bool { return h.recordLimit == 0 && !h.strict }

// maxPooledBody bounds the request buffers a lean handler keeps.
const maxPooledBody = 4 << 20

// bodyPool holds the request buffers of a lean handler (*[]byte).
var bodyPool = sync.Pool{New: func() any { return new([]byte) }}

func (h *Handler) serveChat(w http.ResponseWriter, r *http.Request) {
	select {
	case <-h.closed:
		writeError(w, http.StatusServiceUnavailable, "", "llmtest: server is shutting down")
		return
	default:
	}
	var buf []byte
	lean := h.lean()
	if lean {
		pb := bodyPool.Get().(*[]byte)
		buf = *pb
		defer func() {
			if cap(buf) <= maxPooledBody {
				*pb = buf[:0]
				bodyPool.Put(pb)
			}
		}()
	}
	raw, err := readBody(w, r, buf)
	buf = raw
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			writeError(w, http.StatusRequestEntityTooLarge, "", fmt.Sprintf("llmtest: request body larger than %d bytes", mbe.Limit))
			return
		}
		writeError(w, http.StatusBadRequest, "", "llmtest: read request body: "+err.Error())
		return
	}
	req := Request{Raw: raw, Header: r.Header}
	if lean {
		err = decodeLean(raw, &req.Body)
	} else {
		err = json.Unmarshal(raw, &req.Body)
	}
	if err != nil {
		writeError(w, http.StatusBadRequest, "", "llmtest: request body is not a valid chat completion request: "+err.Error())
		return
	}
	switch {
	case req.Body.Model == "":
		writeError(w, http.StatusBadRequest, "", "llmtest: model: must not be empty")
		return
	case len(req.Body.Messages) == 0:
		writeError(w, http.StatusBadRequest, "", "llmtest: messages: must not be empty")
		return
	case !req.Body.Stream:
		writeError(w, http.StatusBadRequest, "", `llmtest: only streaming requests ("stream": true) are supported`)
		return
	}
	if h.strict {
		if err := Validate(&req.Body); err != nil {
			h.mu.Lock()
			h.recordLocked(&req)
			h.mu.Unlock()
			h.refuse(w, &req, err)
			return
		}
	}
	rep, ok := h.next(&req)
	if !ok {
		writeError(w, http.StatusInternalServerError, "script_exhausted",
			"llmtest: script exhausted: no queued reply and no responder for request "+strconv.Itoa(req.Seq))
		return
	}
	h.reply(w, r, &req, &rep)
}

// next records req and picks its reply: the head of the script, else the
// responder's answer. ok is false when there is neither.
func (h *Handler) next(req *Request) (rep Reply, ok bool) {
	h.mu.Lock()
	h.recordLocked(req)
	var responder Responder
	if len(h.queue) > 0 {
		rep, ok = h.queue[0], true
		h.queue[0] = Reply{}
		h.queue = h.queue[1:]
	} else {
		responder = h.responder
	}
	h.mu.Unlock()
	if responder != nil {
		return responder(req), true
	}
	return rep, ok
}

// recordLocked counts and records req, giving it its Seq, and wakes
// WaitRequests. h.mu is held.
func (h *Handler) recordLocked(req *Request) {
	h.count++
	req.Seq = h.count
	switch {
	case h.recordLimit < 0:
		h.requests = append(h.requests, *req)
	case h.recordLimit > 0:
		if len(h.requests) >= h.recordLimit {
			h.requests = append(h.requests[:0], h.requests[len(h.requests)-h.recordLimit+1:]...)
		}
		h.requests = append(h.requests, *req)
	}
	if h.changed != nil {
		close(h.changed)
		h.changed = nil
	}
}

// writeError answers with an OpenAI error envelope.
func writeError(w http.ResponseWriter, status int, code, message string) {
	writeRaw(w, status, appendErrorEnvelope(make([]byte, 0, 128+len(message)), errorType(status), code, message))
}

func writeRaw(w http.ResponseWriter, status int, body []byte) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(status)
	_, _ = w.Write(body)
}

// appendErrorEnvelope appends {"error":{"message":..,"type":..,"param":null,"code":..}}.
func appendErrorEnvelope(b []byte, typ, code, message string) []byte {
	b = append(b, `{"error":{"message":`...)
	b = jsonwire.AppendString(b, message)
	b = append(b, `,"type":`...)
	b = jsonwire.AppendString(b, typ)
	b = append(b, `,"param":null,"code":`...)
	if code == "" {
		b = append(b, "null"...)
	} else {
		b = jsonwire.AppendString(b, code)
	}
	return append(b, "}}"...)
}

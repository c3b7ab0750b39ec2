package llm

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	openai "github.com/sashabaranov/go-openai"
)

// maxRetryAfter is the longest Retry-After the client waits for; a longer
// one ends the call with an *APIError carrying RetryAfter.
const maxRetryAfter = 60 * time.Second

// maxErrorMessage bounds an error message taken from a response body.
const maxErrorMessage = 512

// capture records what the HTTP layer saw for one attempt: that the
// request was sent, and the status and Retry-After of the response.
type capture struct {
	// idle, when set, is reset to idleAfter whenever response body bytes
	// arrive (the idle watchdog's heartbeat; SSE keep-alive comments
	// count).
	idle      *time.Timer
	idleAfter time.Duration

	mu         sync.Mutex
	sent       bool // the request reached the HTTP client
	status     int
	retryAfter string
}

func (c *capture) snapshot() (sent bool, status int, retryAfter string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.sent, c.status, c.retryAfter
}

// do sends req with hc and records what happened.
func (c *capture) do(hc *http.Client, req *http.Request) (*http.Response, error) {
	c.mu.Lock()
	c.sent = true
	c.mu.Unlock()
	resp, err := hc.Do(req)
	if resp != nil {
		c.mu.Lock()
		c.status = resp.StatusCode
		c.retryAfter = resp.Header.Get("Retry-After")
		c.mu.Unlock()
		if c.idle != nil {
			c.idle.Reset(c.idleAfter)
			resp.Body = activityBody{ReadCloser: resp.Body, idle: c.idle, after: c.idleAfter}
		}
	}
	return resp, err
}

// activityBody resets the idle watchdog at every successful read of a
// response body.
type activityBody struct {
	io.ReadCloser
	idle  *time.Timer
	after time.Duration
}

func (b activityBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if n > 0 {
		b.idle.Reset(b.after)
	}
	return n, err
}

// parseRetryAfter reads a Retry-After value: delay seconds or an HTTP date.
// It returns 0 when the value is absent or unparsable, or lies in the past.
func parseRetryAfter(v string, now time.Time) time.Duration {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0
	}
	if secs, err := strconv.ParseFloat(v, 64); err == nil {
		if secs <= 0 || secs > 1e6 {
			return 0
		}
		return time.Duration(secs * float64(time.Second))
	}
	if t, err := http.ParseTime(v); err == nil {
		if d := t.Sub(now); d > 0 {
			return d
		}
	}
	return 0
}

// overflowMarkers are lower-case substrings by which backends report a
// request larger than the model's context window.
var overflowMarkers = [...]string{
	"context_length_exceeded",                // OpenAI code
	"exceed_context_size",                    // llama.cpp type
	"maximum context length",                 // OpenAI, vLLM messages
	"context length exceeded",                // generic
	"exceeds the available context size",     // llama.cpp message
	"exceeds the model's context",            // generic
	"prompt is too long",                     // Anthropic-compatible proxies
	"input length exceeds the context",       // TGI-style
	"reduce the length of the messages",      // OpenAI message tail
	"context window exceeds",                 // generic
	"too many tokens in the context window",  // generic
	"requested more tokens than the context", // generic
}

// markKind wraps err with ErrContextOverflow or ErrToolPairing when the
// provider's answer says so.
func markKind(out *APIError, err error, typ string) error {
	switch {
	case isOverflow(out.Code, typ, out.Message):
		return fmt.Errorf("%w: %w", ErrContextOverflow, err)
	case out.Status == http.StatusBadRequest && isToolPairing(out.Message):
		return fmt.Errorf("%w: %w", ErrToolPairing, err)
	}
	return err
}

// toolPairingMarkers are phrases of providers' 400 answers about tool
// calls and results that do not match up.
var toolPairingMarkers = []string{
	"tool_call_id", "tool_calls' must be followed", "tool_calls must be followed",
	"tool_use ids", "tool_result", "messages with role 'tool'", "role 'tool' must be a response",
}

// isToolPairing reports whether msg names a tool call/result mismatch.
func isToolPairing(msg string) bool {
	l := strings.ToLower(msg)
	for _, m := range toolPairingMarkers {
		if strings.Contains(l, m) {
			return true
		}
	}
	return false
}

// isOverflow reports whether any of the texts names a context overflow.
func isOverflow(texts ...string) bool {
	for _, t := range texts {
		if t == "" {
			continue
		}
		l := strings.ToLower(t)
		for _, m := range overflowMarkers {
			if strings.Contains(l, m) {
				return true
			}
		}
	}
	return false
}

// codeString renders a provider error code (string or number) as text.
func codeString(code any) string {
	switch c := code.(type) {
	case nil:
		return ""
	case string:
		return c
	case int:
		return strconv.Itoa(c)
	case float64:
		return strconv.FormatFloat(c, 'f', -1, 64)
	default:
		return fmt.Sprint(c)
	}
}

// preferType returns the provider's error type instead of code when code
// is empty or numeric (vLLM and llama.cpp repeat the HTTP status there).
func preferType(code, typ string) string {
	if typ == "" {
		return code
	}
	if _, err := strconv.Atoi(code); code == "" || err == nil {
		return typ
	}
	return code
}

// bodyError is the union of the non-envelope error bodies seen in the
// wild: vLLM's top-level {"object":"error","message":..,"type":..,"code":..}
// and Ollama's {"error":"text"}.
type bodyError struct {
	Object  string          `json:"object"`
	Message string          `json:"message"`
	Type    string          `json:"type"`
	Code    any             `json:"code"`
	Error   json.RawMessage `json:"error"`
	Detail  string          `json:"detail"`
}

// parseBody extracts code, type and message from a non-envelope error body.
func parseBody(body []byte) (code, typ, msg string) {
	var b bodyError
	if err := json.Unmarshal(body, &b); err == nil {
		msg = b.Message
		typ = b.Type
		code = codeString(b.Code)
		if msg == "" && len(b.Error) > 0 {
			var s string
			if json.Unmarshal(b.Error, &s) == nil {
				msg = s
			}
		}
		if msg == "" {
			msg = b.Detail
		}
		if msg != "" {
			return code, typ, truncate(msg)
		}
	}
	return "", "", truncate(strings.TrimSpace(string(body)))
}

// truncate bounds s to maxErrorMessage bytes without splitting a rune.
func truncate(s string) string { return cutRunes(s, maxErrorMessage, "…") }

// cutRunes bounds s to n bytes without splitting a rune, marking a cut
// with ellipsis.
func cutRunes(s string, n int, ellipsis string) string {
	if len(s) <= n {
		return s
	}
	cut := n
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + ellipsis
}

// apiError converts an error returned by go-openai into an *APIError, or
// returns nil when err is not an API-level error. status and retryAfter are
// what the capturing doer saw for this attempt.
func apiError(err error, status int, retryAfter time.Duration) *APIError {
	var (
		oa  *openai.APIError
		re  *openai.RequestError
		out *APIError
	)
	switch {
	case errors.As(err, &re):
		out = &APIError{Status: re.HTTPStatusCode, Err: err}
		var inner *openai.APIError
		var typ string
		// go-openai leaves an empty *APIError in Err when the "error"
		// member is not an object (Ollama sends a string).
		if errors.As(re.Err, &inner) && inner.Message != "" {
			out.Code, out.Message, typ = codeString(inner.Code), inner.Message, inner.Type
		} else {
			out.Code, typ, out.Message = parseBody(re.Body)
		}
		out.Code = preferType(out.Code, typ)
		out.Err = markKind(out, err, typ)
	case errors.As(err, &oa):
		out = &APIError{Status: oa.HTTPStatusCode, Code: codeString(oa.Code), Message: oa.Message, Err: err}
		out.Code = preferType(out.Code, oa.Type)
		out.Err = markKind(out, err, oa.Type)
	case status >= 300:
		// The body could not be read or parsed, but the status is known.
		out = &APIError{Status: status, Message: truncate(err.Error()), Err: err}
	default:
		return nil
	}
	if out.Message == "" {
		out.Message = http.StatusText(out.Status)
	}
	if out.Status == status || out.Status == 0 && status == 0 {
		out.RetryAfter = retryAfter
	}
	return out
}

// retryableStatus reports whether an HTTP status is worth retrying.
func retryableStatus(status int) bool {
	return status == http.StatusTooManyRequests || status == http.StatusRequestTimeout || status >= 500
}

// attemptError is the outcome of one failed attempt.
type attemptError struct {
	err       error
	retryable bool
	wait      time.Duration // server-requested wait (Retry-After), 0 for backoff
	limited   bool          // the server rate-limited the call (429)
}

// Error makes an attemptError the failure the retry policy decides about;
// it reads as the underlying error.
func (e attemptError) Error() string { return e.err.Error() }

// classify turns the error of one attempt into an attemptError. ctx is the
// call's context, attemptCtx the attempt's (whose cancellation cause tells
// an idle stream from a timed-out one), c what the HTTP layer saw. Errors
// raised before the request reached the HTTP client (building or
// validating it) are never retried.
func classify(ctx, attemptCtx context.Context, err error, c *capture, now time.Time, idle, timeout time.Duration) attemptError {
	if ctx.Err() != nil {
		return attemptError{err: fmt.Errorf("llm: %w", ctx.Err())}
	}
	switch cause := context.Cause(attemptCtx); {
	case errors.Is(cause, ErrIdle):
		return attemptError{err: fmt.Errorf("llm: nothing received for %s: %w", idle, ErrIdle), retryable: true}
	case errors.Is(cause, errAttemptTimeout):
		return attemptError{err: fmt.Errorf("llm: request took longer than %s: %w", timeout, err), retryable: true}
	}
	if errors.Is(err, ErrTruncated) {
		return attemptError{err: err, retryable: true}
	}
	sent, status, ra := c.snapshot()
	retryAfter := parseRetryAfter(ra, now)
	if ae := apiError(err, status, retryAfter); ae != nil {
		if errors.Is(ae, ErrContextOverflow) || ae.Status == 0 {
			return attemptError{err: ae}
		}
		if !retryableStatus(ae.Status) {
			return attemptError{err: ae}
		}
		if ae.RetryAfter > maxRetryAfter {
			return attemptError{err: ae}
		}
		return attemptError{err: ae, retryable: true, wait: ae.RetryAfter, limited: ae.Status == http.StatusTooManyRequests}
	}
	if !sent {
		return attemptError{err: fmt.Errorf("llm: build request: %w", err)}
	}
	return attemptError{err: fmt.Errorf("llm: transport: %w", err), retryable: true}
}

// errAttemptTimeout is the cancellation cause of an attempt that ran past
// Config.RequestTimeout.
var errAttemptTimeout = errors.New("llm: request timeout")

package llm

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	openai "github.com/sashabaranov/go-openai"

	"github.com/switchboard-chat/switchboard/internal/clock"
	"github.com/switchboard-chat/switchboard/internal/retry"
)

// Client streams chat completions from an OpenAI-compatible endpoint. It is
// immutable after New and safe for concurrent use.
type Client struct {
	cfg     Config
	log     *slog.Logger
	http    *http.Client
	url     string      // <base_url>/chat/completions
	header  http.Header // the headers of every request (read only; see send)
	backoff func(attempt int, rateLimited bool) time.Duration
	sleep   func(ctx context.Context, d time.Duration) error
	now     func() time.Time
	rules   reasoningRules // per model and settings: reasoning model or not
}

// Option customises a Client.
type Option func(*Client)

// WithHTTPClient makes the client send its requests with hc instead of a
// client of its own. The caller keeps ownership of hc; do not set
// hc.Timeout (it would cut long streams; the client applies
// Config.RequestTimeout and Config.IdleTimeout itself). A nil hc is ignored.
func WithHTTPClient(hc *http.Client) Option {
	return func(c *Client) {
		if hc != nil {
			c.http = hc
		}
	}
}

// WithBackoff replaces the wait before retry number attempt (1 for the
// first retry); rateLimited tells a 429 without Retry-After from other
// failures. The default is Config's policy (see Config.RateLimitBackoff and
// Config.RetryBackoff). A Retry-After sent by the server takes precedence.
// A nil f is ignored.
func WithBackoff(f func(attempt int, rateLimited bool) time.Duration) Option {
	return func(c *Client) {
		if f != nil {
			c.backoff = f
		}
	}
}

// WithSleep replaces how the client waits between attempts (tests record
// the waits instead of sleeping). f must return ctx's error, wrapped or
// not, when ctx ends first. A nil f is ignored.
func WithSleep(f func(ctx context.Context, d time.Duration) error) Option {
	return func(c *Client) {
		if f != nil {
			c.sleep = f
		}
	}
}

// Backoff is the retry policy of cfg, the default of every client: the n-th
// retry (1-based) of a rate-limited call waits RateLimitBackoff ×
// (1 + (n−1)/2) up to twice RateLimitBackoff (30/45/60 s by default), of
// any other retryable failure RetryBackoff × n (2/4/6 s by default). Each
// wait gets up to 10 % random jitter so that many sessions do not retry in
// lockstep.
func (cfg Config) Backoff(attempt int, rateLimited bool) time.Duration {
	s := retry.Schedule(func(n int) time.Duration {
		n = max(n, 1)
		if rateLimited {
			base := cfg.RateLimitBackoff
			return min(base+time.Duration(n-1)*base/2, 2*base)
		}
		return time.Duration(n) * cfg.RetryBackoff
	})
	return s.Jitter(0.1)(attempt)
}

// New returns a client for cfg. It does no I/O. A configuration that is not
// Configured is accepted: every call then fails with ErrNotConfigured, so
// the daemon can run and tell users a model is missing. cfg is checked for
// values the client cannot work with (the YAML-level bounds are
// Config.Validate's job); an empty BaseURL means DefaultBaseURL. A nil log
// discards.
func New(cfg Config, log *slog.Logger, opts ...Option) (*Client, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if cfg.BaseURL == "" {
		cfg.BaseURL = DefaultBaseURL
	}
	errs := cfg.workable()
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("llm: config: %w", err)
	}
	c := &Client{
		cfg:     cfg,
		log:     log.With("component", "llm"),
		backoff: cfg.Backoff,
		sleep:   clock.Sleep,
		now:     time.Now,
	}
	for _, o := range opts {
		o(c)
	}
	if c.http == nil {
		tr := http.DefaultTransport.(*http.Transport).Clone()
		// Every session streams from the same host: keep as many idle
		// connections as calls run at once instead of the default two, so
		// that a busy daemon does not open (and close) a connection per
		// call.
		tr.MaxIdleConnsPerHost = maxIdleConns
		tr.MaxIdleConns = maxIdleConns
		tr.DialContext = dialPooled(tr.DialContext)
		c.http = &http.Client{Transport: tr}
	}
	c.url = strings.TrimRight(cfg.BaseURL, "/") + "/chat/completions"
	// The headers go-openai sends with a streaming request.
	c.header = http.Header{
		"Content-Type":  {"application/json"},
		"Accept":        {"text/event-stream"},
		"Cache-Control": {"no-cache"},
		"Connection":    {"keep-alive"},
	}
	if cfg.APIKey != "" {
		c.header.Set("Authorization", "Bearer "+cfg.APIKey)
	}
	return c, nil
}

// dialPooled wraps dial so that its connections copy a request body
// through a pooled buffer: the transport hands a body larger than its
// write buffer to the connection's ReadFrom, and net's (like io.Copy)
// allocates a copy buffer of up to 32 KB for each request.
func dialPooled(dial func(ctx context.Context, network, addr string) (net.Conn, error)) func(ctx context.Context, network, addr string) (net.Conn, error) {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		conn, err := dial(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return pooledConn{conn}, nil
	}
}

// pooledConn is a connection whose ReadFrom copies through a pooled buffer.
type pooledConn struct{ net.Conn }

// copyPool holds the copy buffers of pooledConn (*[32 << 10]byte).
var copyPool = sync.Pool{New: func() any { return new([32 << 10]byte) }}

// ReadFrom implements io.ReaderFrom.
func (c pooledConn) ReadFrom(r io.Reader) (int64, error) {
	buf := copyPool.Get().(*[32 << 10]byte)
	defer copyPool.Put(buf)
	return io.CopyBuffer(struct{ io.Writer }{c.Conn}, r, buf[:])
}

// maxIdleConns is the number of idle connections to the endpoint the
// client's own transport keeps.
const maxIdleConns = 256

// Model returns the configured model name.
func (c *Client) Model() string { return c.cfg.Model }

// CloseIdleConnections closes idle keep-alive connections of the HTTP
// client in use (also one passed with WithHTTPClient). Safe to call at any
// time; in-flight streams are not affected.
func (c *Client) CloseIdleConnections() { c.http.CloseIdleConnections() }

// Stream sends req as a streaming chat completion and returns the assembled
// response: text, reasoning, tool calls (assembled by index, in index order;
// they are authoritative whatever the finish reason says), finish reason
// and usage. It blocks until the stream ends, ctx ends or the call fails.
//
// onDelta, when not nil, is called synchronously from Stream's goroutine,
// in stream order, for every piece of new text or reasoning; it must not
// block for long (it holds up reading and counts toward the idle timeout).
//
// Each attempt is bounded by Config.RequestTimeout, and aborted with
// ErrIdle when no byte arrives for Config.IdleTimeout (waiting for the
// response headers included). Failed attempts (429 honouring Retry-After
// up to one minute, 408, 5xx, network errors and connection resets,
// ErrIdle, ErrTruncated) are retried up to Config.MaxRetries times with
// the backoff policy — also when the failed attempt had already streamed
// text (a stream cut or stalled mid-way): before the retry, onDelta gets a
// Delta with Restart set, which voids everything it received before in
// this call, and the new attempt streams from the start. Tool calls and
// reasoning of a failed attempt are never returned.
//
// Errors: ErrNotConfigured (no I/O happens), ErrContextOverflow (wrapped in
// an *APIError when the server answered; never retried), *APIError for
// non-2xx answers and mid-stream errors (Status 0), ErrIdle, ErrTruncated,
// and ctx's error when ctx ends. All are wrapped: use errors.Is/As. On
// error the returned Response is nil, except when the last attempt called
// onDelta: then it holds what that attempt assembled before the failure
// (a /stop keeps the text the user saw).
func (c *Client) Stream(ctx context.Context, req Request, onDelta func(Delta)) (*Response, error) {
	if !c.cfg.Configured() {
		return nil, fmt.Errorf("llm: stream: %w", ErrNotConfigured)
	}
	body, err := c.build(&req)
	if err != nil {
		return nil, err
	}
	defer body.release()
	b := retry.New(retry.Policy{
		Attempts: max(c.cfg.MaxRetries, 0) + 1,
		Retryable: func(err error) bool {
			ae, _ := errors.AsType[attemptError](err)
			return ae.retryable
		},
		// The server's Retry-After wins over the client's own schedule.
		Delay: func(n int, err error, _ time.Duration) time.Duration {
			ae, _ := errors.AsType[attemptError](err)
			if ae.wait > 0 {
				return ae.wait
			}
			return c.backoff(n, ae.limited)
		},
		Sleep: c.sleep,
	})
	for {
		resp, emitted, ae := c.attempt(ctx, body, onDelta)
		if ae.err == nil {
			return resp, nil
		}
		n, wait, ok := b.Next(ae)
		if !ok {
			if b.Retries() > 0 {
				return resp, fmt.Errorf("llm: giving up after %d attempts: %w", b.Retries()+1, ae.err)
			}
			return resp, ae.err
		}
		if emitted {
			// The consumer drops what this attempt streamed; the next
			// attempt's deltas replace it.
			onDelta(Delta{Restart: true})
		}
		if req.OnRetry != nil {
			req.OnRetry(n, wait, ae.err)
		}
		c.log.WarnContext(ctx, "llm call failed; retrying",
			"model", body.model, "attempt", n, "max_retries", c.cfg.MaxRetries,
			"wait", wait, "streamed", emitted, "err", ae.err)
		if err := b.Sleep(ctx, wait); err != nil {
			return nil, fmt.Errorf("llm: waiting to retry: %w", err)
		}
	}
}

// codexModels are the models go-openai refuses for chat completions.
var codexModels = map[string]bool{
	openai.CodexCodeDavinci002: true, openai.CodexCodeCushman001: true, openai.CodexCodeDavinci001: true,
}

// build validates req and encodes its body into a pooled buffer.
func (c *Client) build(req *Request) (*requestBuffer, error) {
	if req.ToolSet != nil && len(req.Tools) > 0 {
		return nil, errors.New("llm: request: set Tools or ToolSet, not both")
	}
	ntools := len(req.Tools) + req.ToolSet.Len()
	w, err := resolve(c.cfg, req, ntools, &c.rules)
	if err != nil {
		return nil, err
	}
	if codexModels[w.model] {
		return nil, fmt.Errorf("llm: build request: %w", openai.ErrChatCompletionInvalidModel)
	}
	buf := bodyPool.Get().(*[]byte)
	rb := &requestBuffer{buf: buf, model: w.model, reusable: true}
	var tools []byte
	switch {
	case req.ToolSet != nil:
		tools = req.ToolSet.wire
	case len(req.Tools) > 0:
		// Not prepared: encoded for this request only.
		if tools, err = appendTools(nil, req.Tools); err != nil {
			rb.release()
			return nil, fmt.Errorf("llm: request %w", err)
		}
	}
	b, err := appendBody((*buf)[:0], &w, req.Messages, tools)
	*buf = b
	if err != nil {
		rb.release()
		return nil, err
	}
	return rb, nil
}

// attempt runs one request. emitted reports whether onDelta was called.
func (c *Client) attempt(ctx context.Context, body *requestBuffer, onDelta func(Delta)) (resp *Response, emitted bool, ae attemptError) {
	actx, cancelTimeout := context.WithTimeoutCause(ctx, c.cfg.RequestTimeout, errAttemptTimeout)
	defer cancelTimeout()
	actx, cancel := context.WithCancelCause(actx)
	defer cancel(nil)
	// The watchdog is fed by every byte of the response (so SSE keep-alive
	// comments of proxies count as life), and by every chunk.
	idle := time.AfterFunc(c.cfg.IdleTimeout, func() { cancel(ErrIdle) })
	defer idle.Stop()
	capt := &capture{idle: idle, idleAfter: c.cfg.IdleTimeout}

	fail := func(err error) attemptError {
		return classify(ctx, actx, err, capt, c.now(), c.cfg.IdleTimeout, c.cfg.RequestTimeout)
	}
	rb := body.reader()
	defer body.done(rb)
	hr, err := c.send(actx, rb, capt)
	if err != nil {
		return nil, false, fail(err)
	}
	defer hr.Body.Close()
	if hr.StatusCode < http.StatusOK || hr.StatusCode >= http.StatusBadRequest {
		return nil, false, fail(errorResponse(hr))
	}
	sr := newSSEReader(hr.Body)
	defer sr.release()

	asm := newAssembler()
	var chunk openai.ChatCompletionStreamResponse // one per attempt, zeroed for each event
	for {
		chunk = openai.ChatCompletionStreamResponse{}
		err := sr.recv(&chunk)
		if err != nil {
			if errors.Is(err, io.EOF) && actx.Err() == nil {
				if asm.finish == "" {
					err = fmt.Errorf("llm: stream of %q ended after %d bytes of text and %d tool calls: %w",
						body.model, asm.text.Len(), len(asm.calls), ErrTruncated)
					return partial(asm, emitted), emitted, fail(err)
				}
				return asm.response(), emitted, attemptError{}
			}
			return partial(asm, emitted), emitted, fail(err)
		}
		idle.Reset(c.cfg.IdleTimeout)
		d := asm.add(&chunk)
		if onDelta != nil && (d.Text != "" || d.Reasoning != "") {
			emitted = true
			onDelta(d)
		}
	}
}

// send posts one attempt's body with the client's headers.
func (c *Client) send(ctx context.Context, body *bodyReader, capt *capture) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.url, body)
	if err != nil {
		return nil, err
	}
	// The transport only reads the headers, so every request shares them;
	// an http.Client with a cookie jar adds its cookies to them.
	req.Header = c.header
	if c.http.Jar != nil {
		req.Header = c.header.Clone()
	}
	req.ContentLength = int64(body.len())
	return capt.do(c.http, req)
}

// partial returns the assembled response when deltas were emitted (the
// caller may want what it already showed), nil otherwise. Its finish reason
// is the one the server sent, if any.
func partial(asm *assembler, emitted bool) *Response {
	if !emitted {
		return nil
	}
	r := asm.response()
	r.FinishReason = asm.finish
	return r
}

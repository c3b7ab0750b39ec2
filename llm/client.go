package llm

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
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
	api     *openai.Client
	http    *http.Client
	backoff func(attempt int, rateLimited bool) time.Duration
	sleep   func(ctx context.Context, d time.Duration) error
	now     func() time.Time
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
		c.http = &http.Client{Transport: tr}
	}
	oc := openai.DefaultConfig(cfg.APIKey)
	oc.BaseURL = cfg.BaseURL
	oc.HTTPClient = capturingDoer{next: c.http}
	// go-openai fails a stream after 300 consecutive non-data lines; SSE
	// keep-alive comments of proxies (two lines each) reach that within
	// minutes of a slow start. The idle and request timeouts bound a
	// stream instead.
	oc.EmptyMessagesLimit = 1 << 20
	c.api = openai.NewClientWithConfig(oc)
	return c, nil
}

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
	wire, err := buildRequest(c.cfg, req)
	if err != nil {
		return nil, err
	}
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
		resp, emitted, ae := c.attempt(ctx, wire, onDelta)
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
			"model", wire.Model, "attempt", n, "max_retries", c.cfg.MaxRetries,
			"wait", wait, "streamed", emitted, "err", ae.err)
		if err := b.Sleep(ctx, wait); err != nil {
			return nil, fmt.Errorf("llm: waiting to retry: %w", err)
		}
	}
}

// attempt runs one request. emitted reports whether onDelta was called.
func (c *Client) attempt(ctx context.Context, wire openai.ChatCompletionRequest, onDelta func(Delta)) (resp *Response, emitted bool, ae attemptError) {
	actx, cancelTimeout := context.WithTimeoutCause(ctx, c.cfg.RequestTimeout, errAttemptTimeout)
	defer cancelTimeout()
	actx, cancel := context.WithCancelCause(actx)
	defer cancel(nil)
	// The watchdog is fed by every byte of the response (so SSE keep-alive
	// comments of proxies count as life), and by every chunk.
	idle := time.AfterFunc(c.cfg.IdleTimeout, func() { cancel(ErrIdle) })
	defer idle.Stop()
	capt := &capture{activity: func() { idle.Reset(c.cfg.IdleTimeout) }}
	actx = context.WithValue(actx, captureKey{}, capt)

	fail := func(err error) attemptError {
		return classify(ctx, actx, err, capt, c.now(), c.cfg.IdleTimeout, c.cfg.RequestTimeout)
	}
	stream, err := c.api.CreateChatCompletionStream(actx, wire)
	if err != nil {
		return nil, false, fail(err)
	}
	defer stream.Close()

	asm := newAssembler()
	for {
		chunk, err := stream.Recv()
		if err != nil {
			if errors.Is(err, io.EOF) && actx.Err() == nil {
				if asm.finish == "" {
					err = fmt.Errorf("llm: stream of %q ended after %d bytes of text and %d tool calls: %w",
						wire.Model, asm.text.Len(), len(asm.calls), ErrTruncated)
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

package llm

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"sync"
	"time"
)

// Streamer is what Failover switches between; *Client implements it.
type Streamer interface {
	Stream(ctx context.Context, req Request, onDelta func(Delta)) (*Response, error)
	Model() string
}

// Failover streams from the first healthy endpoint of a list: the primary
// first, then llm.fallbacks in order. An endpoint whose call fails for
// reasons of its own (retries exhausted on 429, 5xx, timeouts, network
// errors, cut streams) is skipped for the cool-down period; requests return
// to it afterwards. When the failed endpoint had streamed something, the
// caller's onDelta gets a Delta with Restart set before the next endpoint
// streams. Errors that another endpoint would repeat (a bad request, a
// context overflow, cancellation) are returned as they are. Safe for
// concurrent use.
type Failover struct {
	eps      []Streamer
	cooldown time.Duration
	log      *slog.Logger
	now      func() time.Time

	mu    sync.Mutex
	until []time.Time // endpoint i is skipped until until[i]
}

// NewFailover returns a Failover over primary and fallbacks. A nil log
// discards.
func NewFailover(log *slog.Logger, cooldown time.Duration, primary Streamer, fallbacks ...Streamer) *Failover {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	eps := append([]Streamer{primary}, fallbacks...)
	return &Failover{eps: eps, cooldown: cooldown, log: log.With("component", "llm"), now: time.Now, until: make([]time.Time, len(eps))}
}

// Model returns the primary endpoint's model name.
func (f *Failover) Model() string { return f.eps[0].Model() }

// Stream implements the agent's Model contract; see Failover.
func (f *Failover) Stream(ctx context.Context, req Request, onDelta func(Delta)) (*Response, error) {
	order := f.order()
	var errs []error
	for n, i := range order {
		emitted := false
		on := onDelta
		if onDelta != nil {
			on = func(d Delta) {
				emitted = !d.Restart
				onDelta(d)
			}
		}
		resp, err := f.eps[i].Stream(ctx, req, on)
		if err == nil {
			if n > 0 || i > 0 {
				f.log.InfoContext(ctx, "answered by a fallback model", "model", f.eps[i].Model())
			}
			return resp, nil
		}
		if !endpointFailure(ctx, err) {
			return resp, err
		}
		errs = append(errs, fmt.Errorf("%s: %w", f.eps[i].Model(), err))
		f.markDown(i)
		if n+1 < len(order) {
			if emitted {
				onDelta(Delta{Restart: true})
			}
			f.log.WarnContext(ctx, "model endpoint failing; trying the next one", "model", f.eps[i].Model(),
				"next", f.eps[order[n+1]].Model(), "cooldown", f.cooldown, "err", err)
		}
	}
	return nil, errors.Join(errs...)
}

// order lists healthy endpoints first (in configured order), then the ones
// cooling down, so a call is never refused while any endpoint remains.
func (f *Failover) order() []int {
	f.mu.Lock()
	defer f.mu.Unlock()
	now := f.now()
	var up, down []int
	for i := range f.eps {
		if now.Before(f.until[i]) {
			down = append(down, i)
		} else {
			up = append(up, i)
		}
	}
	return append(up, down...)
}

func (f *Failover) markDown(i int) {
	f.mu.Lock()
	f.until[i] = f.now().Add(f.cooldown)
	f.mu.Unlock()
}

// endpointFailure reports whether err is a failure of the endpoint itself,
// which another endpoint may not share.
func endpointFailure(ctx context.Context, err error) bool {
	if ctx.Err() != nil || errors.Is(err, ErrContextOverflow) || errors.Is(err, context.Canceled) {
		return false
	}
	var ae *APIError
	if errors.As(err, &ae) && ae.Status >= 400 && ae.Status < 500 &&
		ae.Status != http.StatusTooManyRequests && ae.Status != http.StatusRequestTimeout &&
		ae.Status != http.StatusUnauthorized && ae.Status != http.StatusForbidden && ae.Status != http.StatusNotFound {
		return false // a bad request fails everywhere
	}
	return true
}

// Open returns the model client of cfg: the primary endpoint, wrapped in a
// Failover over cfg.Fallbacks when any are configured (each fallback is
// the primary's settings with its own base_url, api_key and model where
// it sets them). A nil log discards.
func Open(cfg Config, log *slog.Logger) (Streamer, error) {
	primary, err := New(cfg, log)
	if err != nil {
		return nil, err
	}
	if len(cfg.Fallbacks) == 0 {
		return primary, nil
	}
	var fbs []Streamer
	for i, f := range cfg.Fallbacks {
		c := cfg
		c.Fallbacks = nil
		if f.BaseURL != "" {
			c.BaseURL = f.BaseURL
		}
		if f.APIKey != "" {
			c.APIKey = f.APIKey
		}
		if f.Model != "" {
			c.Model = f.Model
		}
		fb, err := New(c, log)
		if err != nil {
			return nil, fmt.Errorf("llm.fallbacks[%d]: %w", i, err)
		}
		fbs = append(fbs, fb)
	}
	return NewFailover(log, cfg.FallbackCooldown, primary, fbs...), nil
}

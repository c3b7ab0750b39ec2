package llm

import (
	"errors"
	"fmt"
	"net/url"
	"time"
)

// DefaultBaseURL is used when llm.base_url is empty.
const DefaultBaseURL = "https://api.openai.com/v1"

// DefaultConfig returns the documented defaults.
func DefaultConfig() Config {
	return Config{
		BaseURL:        DefaultBaseURL,
		Model:          "gpt-4o-mini",
		MaxTokens:      4096,
		Temperature:    0,
		ContextWindow:  128000,
		RequestTimeout: 5 * time.Minute,
		IdleTimeout:    90 * time.Second,
		MaxRetries:     3,

		RateLimitBackoff: 30 * time.Second,
		RetryBackoff:     2 * time.Second,
		FallbackCooldown: 5 * time.Minute,
	}
}

// Configured reports whether a model endpoint is set up: an API key, or a
// base URL other than OpenAI's (local servers such as Ollama or vLLM need no
// key).
func (c Config) Configured() bool {
	return c.APIKey != "" || (c.BaseURL != "" && c.BaseURL != DefaultBaseURL)
}

// workable returns the problems of c that no client can work with, the
// rules New and Validate share: an http(s) base URL (empty: the default),
// a model, max_tokens ≥ 1, a temperature in [0, 2], positive timeouts and
// no negative retry count. Validate adds the bounds of a configuration
// file.
func (c Config) workable() []error {
	var errs []error
	if c.BaseURL != "" {
		u, err := url.Parse(c.BaseURL)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			errs = append(errs, fmt.Errorf("llm.base_url: must be an http(s) URL such as http://localhost:11434/v1, got %q", c.BaseURL))
		}
	}
	if c.Model == "" {
		errs = append(errs, errors.New("llm.model: must not be empty"))
	}
	if c.MaxTokens < 1 {
		errs = append(errs, fmt.Errorf("llm.max_tokens: must be at least 1, got %d", c.MaxTokens))
	}
	if c.Temperature < 0 || c.Temperature > 2 {
		errs = append(errs, fmt.Errorf("llm.temperature: must be between 0 and 2, got %g", c.Temperature))
	}
	if c.RequestTimeout <= 0 {
		errs = append(errs, fmt.Errorf("llm.request_timeout: must be positive, got %s", c.RequestTimeout))
	}
	if c.IdleTimeout <= 0 {
		errs = append(errs, fmt.Errorf("llm.idle_timeout: must be positive, got %s", c.IdleTimeout))
	}
	if c.MaxRetries < 0 {
		errs = append(errs, fmt.Errorf("llm.max_retries: must not be negative, got %d", c.MaxRetries))
	}
	return errs
}

// Validate reports every problem, each naming its YAML key.
func (c Config) Validate() error {
	errs := c.workable()
	if c.ContextWindow < 1024 {
		errs = append(errs, fmt.Errorf("llm.context_window: must be at least 1024, got %d", c.ContextWindow))
	}
	if c.RequestTimeout > 0 && c.RequestTimeout < time.Second {
		errs = append(errs, fmt.Errorf("llm.request_timeout: must be at least 1s, got %s", c.RequestTimeout))
	}
	if c.IdleTimeout > 0 && c.IdleTimeout < time.Second {
		errs = append(errs, fmt.Errorf("llm.idle_timeout: must be at least 1s, got %s", c.IdleTimeout))
	}
	if c.MaxRetries > 10 {
		errs = append(errs, fmt.Errorf("llm.max_retries: must be between 0 and 10, got %d", c.MaxRetries))
	}
	if c.RateLimitBackoff < 0 || c.RateLimitBackoff > 10*time.Minute {
		errs = append(errs, fmt.Errorf("llm.rate_limit_backoff: must be between 0 and 10m, got %s", c.RateLimitBackoff))
	}
	if c.RetryBackoff < 0 || c.RetryBackoff > 5*time.Minute {
		errs = append(errs, fmt.Errorf("llm.retry_backoff: must be between 0 and 5m, got %s", c.RetryBackoff))
	}
	if c.FallbackCooldown < 0 {
		errs = append(errs, fmt.Errorf("llm.fallback_cooldown: must not be negative, got %s", c.FallbackCooldown))
	}
	for i, f := range c.Fallbacks {
		if f.BaseURL == "" && f.Model == "" {
			errs = append(errs, fmt.Errorf("llm.fallbacks[%d]: set base_url, model or both", i))
		}
		if f.BaseURL != "" {
			u, err := url.Parse(f.BaseURL)
			if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
				errs = append(errs, fmt.Errorf("llm.fallbacks[%d].base_url: must be an http(s) URL, got %q", i, f.BaseURL))
			}
		}
	}
	return errors.Join(errs...)
}

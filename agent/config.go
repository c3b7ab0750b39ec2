package agent

import (
	"errors"
	"fmt"
	"time"
)

// Config configures the agent runtime (YAML section "agent").
type Config struct {
	// Workspace is the folder holding AGENT.md, USER.md, RULE.md, MEMORY.md.
	Workspace string `yaml:"workspace"`
	// MaxSteps bounds model calls per turn.
	MaxSteps int `yaml:"max_steps"`
	// MaxConcurrentTurns bounds turns running at once across sessions.
	MaxConcurrentTurns int `yaml:"max_concurrent_turns"`
	// SessionIdle is how long a session goroutine lives without messages.
	SessionIdle time.Duration `yaml:"session_idle"`
	// MaxContextTokens is the token budget of one request's history.
	MaxContextTokens int `yaml:"max_context_tokens"`
	// MaxContextTurns bounds the whole turns of history loaded per request.
	MaxContextTurns int `yaml:"max_context_turns"`
	// DeltaInterval is the minimum time between streamed deltas of a turn,
	// and before the first one: a reply faster than this streams nothing.
	DeltaInterval time.Duration `yaml:"delta_interval"`
}

// DefaultConfig returns the documented defaults.
func DefaultConfig() Config {
	return Config{
		Workspace:          "./data/workspace",
		MaxSteps:           30,
		MaxConcurrentTurns: 64,
		SessionIdle:        10 * time.Minute,
		MaxContextTokens:   64000,
		MaxContextTurns:    30,
		DeltaInterval:      500 * time.Millisecond,
	}
}

// Validate reports every problem, each naming its YAML key.
func (c Config) Validate() error {
	var errs []error
	if c.Workspace == "" {
		errs = append(errs, errors.New("agent.workspace: must not be empty"))
	}
	if c.MaxSteps < 1 || c.MaxSteps > 1000 {
		errs = append(errs, fmt.Errorf("agent.max_steps: must be between 1 and 1000, got %d", c.MaxSteps))
	}
	if c.MaxConcurrentTurns < 1 {
		errs = append(errs, fmt.Errorf("agent.max_concurrent_turns: must be at least 1, got %d", c.MaxConcurrentTurns))
	}
	if c.SessionIdle < time.Second {
		errs = append(errs, fmt.Errorf("agent.session_idle: must be at least 1s, got %s", c.SessionIdle))
	}
	if c.MaxContextTokens < 1000 {
		errs = append(errs, fmt.Errorf("agent.max_context_tokens: must be at least 1000, got %d", c.MaxContextTokens))
	}
	if c.MaxContextTurns < 1 {
		errs = append(errs, fmt.Errorf("agent.max_context_turns: must be at least 1, got %d", c.MaxContextTurns))
	}
	if c.DeltaInterval < 10*time.Millisecond || c.DeltaInterval > time.Minute {
		errs = append(errs, fmt.Errorf("agent.delta_interval: must be between 10ms and 1m, got %s", c.DeltaInterval))
	}
	return errors.Join(errs...)
}

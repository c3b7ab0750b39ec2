package agent

import (
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/switchboard-chat/switchboard/agent/loop"
)

// SubagentToolPrefix starts the tool name of every sub-agent.
const SubagentToolPrefix = loop.SubagentToolPrefix

var subagentName = regexp.MustCompile(`^[a-z0-9_-]{1,50}$`)

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// Config configures the agent runtime (YAML section "agent").
type Config struct {
	// Workspace is the folder holding AGENT.md, USER.md, RULE.md, MEMORY.md.
	Workspace string `yaml:"workspace"`
	// MaxSteps bounds model calls per turn.
	MaxSteps int `yaml:"max_steps"`
	// MaxConcurrentTurns bounds turns running at once across sessions.
	MaxConcurrentTurns int `yaml:"max_concurrent_turns"`
	// SessionIdle is how long an idle session (no goroutine, nothing
	// queued) stays in memory with its context cache before it is retired.
	SessionIdle time.Duration `yaml:"session_idle"`
	// MaxContextTokens is the token budget of one request's history.
	MaxContextTokens int `yaml:"max_context_tokens"`
	// MaxContextTurns bounds the whole turns of history loaded per request.
	MaxContextTurns int `yaml:"max_context_turns"`
	// DeltaInterval is the minimum time between streamed deltas of a turn,
	// and before the first one: a reply faster than this streams nothing.
	DeltaInterval time.Duration `yaml:"delta_interval"`
	// ExtraAttempts bounds model calls beyond MaxSteps that rollbacks and
	// empty replies may use: a turn ends at MaxSteps + ExtraAttempts calls.
	ExtraAttempts int `yaml:"extra_attempts"`
	// MaxConsecutiveRollbacks bounds rollbacks in a row; after that the
	// mistake is shown to the model instead.
	MaxConsecutiveRollbacks int `yaml:"max_consecutive_rollbacks"`
	// KeepToolResults, when >= 0, sends only the newest K tool results of
	// the running turn in full; older ones are replaced by a placeholder in
	// the request (history keeps them). -1 keeps all.
	KeepToolResults int `yaml:"keep_tool_results"`
	// Subagents are offered to the model as tools named agent-<name>.
	Subagents map[string]SubagentConfig `yaml:"subagents"`
	// SubagentDepth is how deep sub-agents nest: 1 offers sub-agents no
	// agent-* tools, 2 lets them call one level further.
	SubagentDepth int `yaml:"subagent_depth"`
	// SubagentConcurrency bounds sub-agents running at once in one step.
	SubagentConcurrency int `yaml:"subagent_concurrency"`
	// QueueMode is how a session answers messages that arrive while one of
	// its turns runs: QueueCollect answers them together in the next turn,
	// QueueSequential one turn per message.
	QueueMode string `yaml:"queue_mode"`
	// Partitions is how many partitions the inbound messages are spread
	// over by a stable hash of their channel and chat (all of a session's
	// messages land in one), each consumed by one instance at a time
	// (docs/scale-out.md): 1 to [MaxPartitions]; 0, the default, means
	// [DefaultSharedPartitions] with memory.store jetstream and 1 with
	// bolt ([Config.PartitionCount]).
	Partitions int `yaml:"partitions"`
}

// Bounds of agent.partitions.
const (
	// MaxPartitions is the largest agent.partitions.
	MaxPartitions = 1024
	// DefaultSharedPartitions is agent.partitions when it is 0 and the
	// history is shared (memory.store jetstream).
	DefaultSharedPartitions = 16
)

// PartitionCount returns agent.partitions, or its default when it is 0:
// [DefaultSharedPartitions] when shared (memory.store jetstream: several
// instances may run), else 1.
func (c Config) PartitionCount(shared bool) int {
	switch {
	case c.Partitions > 0:
		return c.Partitions
	case shared:
		return DefaultSharedPartitions
	}
	return 1
}

// Values of Config.QueueMode.
const (
	QueueCollect    = "collect"
	QueueSequential = "sequential"
)

// SubagentConfig declares one sub-agent (agent.subagents.<name>).
type SubagentConfig struct {
	// Description tells the main model when to use it.
	Description string `yaml:"description"`
	// Prompt is its system prompt; PromptFile names a workspace file that
	// holds it instead (read on every use, so edits apply at once).
	Prompt     string `yaml:"prompt"`
	PromptFile string `yaml:"prompt_file"`
	// Tools allow-lists the tools it may use (names); empty gives none.
	Tools []string `yaml:"tools"`
	// MaxSteps bounds its model calls; 0 means half of agent.max_steps.
	MaxSteps int `yaml:"max_steps"`
	// Model overrides the model name; empty uses llm.model.
	Model string `yaml:"model"`
	// Timeout bounds a whole sub-agent run (default 5m).
	Timeout time.Duration `yaml:"timeout"`
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

		ExtraAttempts:           20,
		MaxConsecutiveRollbacks: 5,
		KeepToolResults:         -1,
		SubagentDepth:           1,
		SubagentConcurrency:     3,
		QueueMode:               QueueCollect,
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
	if c.ExtraAttempts < 0 || c.ExtraAttempts > 1000 {
		errs = append(errs, fmt.Errorf("agent.extra_attempts: must be between 0 and 1000, got %d", c.ExtraAttempts))
	}
	if c.MaxConsecutiveRollbacks < 0 || c.MaxConsecutiveRollbacks > 50 {
		errs = append(errs, fmt.Errorf("agent.max_consecutive_rollbacks: must be between 0 and 50, got %d", c.MaxConsecutiveRollbacks))
	}
	if c.KeepToolResults < -1 {
		errs = append(errs, fmt.Errorf("agent.keep_tool_results: must be -1 (keep all) or more, got %d", c.KeepToolResults))
	}
	if c.SubagentDepth < 1 || c.SubagentDepth > 5 {
		errs = append(errs, fmt.Errorf("agent.subagent_depth: must be between 1 and 5, got %d", c.SubagentDepth))
	}
	if c.SubagentConcurrency < 1 || c.SubagentConcurrency > 32 {
		errs = append(errs, fmt.Errorf("agent.subagent_concurrency: must be between 1 and 32, got %d", c.SubagentConcurrency))
	}
	if c.Partitions < 0 || c.Partitions > MaxPartitions {
		errs = append(errs, fmt.Errorf("agent.partitions: must be between 1 and %d, or 0 for the default (%d with memory.store jetstream, 1 with bolt), got %d",
			MaxPartitions, DefaultSharedPartitions, c.Partitions))
	}
	for _, name := range sortedKeys(c.Subagents) {
		errs = append(errs, validateSubagent(name, c.Subagents[name])...)
	}
	if c.QueueMode != QueueCollect && c.QueueMode != QueueSequential {
		errs = append(errs, fmt.Errorf("agent.queue_mode: must be %s or %s, got %q", QueueCollect, QueueSequential, c.QueueMode))
	}
	if c.DeltaInterval < 10*time.Millisecond || c.DeltaInterval > time.Minute {
		errs = append(errs, fmt.Errorf("agent.delta_interval: must be between 10ms and 1m, got %s", c.DeltaInterval))
	}
	return errors.Join(errs...)
}

// validateSubagent reports the problems of agent.subagents.<name>.
func validateSubagent(name string, sc SubagentConfig) []error {
	var errs []error
	key := "agent.subagents." + name
	if !subagentName.MatchString(name) {
		errs = append(errs, fmt.Errorf("%s: the name must match %s (it becomes the tool agent-%s)", key, subagentName, name))
	}
	if strings.TrimSpace(sc.Description) == "" {
		errs = append(errs, fmt.Errorf("%s.description: must not be empty (it tells the model when to use the sub-agent)", key))
	}
	if (sc.Prompt == "") == (sc.PromptFile == "") {
		errs = append(errs, fmt.Errorf("%s: set exactly one of prompt and prompt_file", key))
	}
	if sc.MaxSteps < 0 || sc.MaxSteps > 1000 {
		errs = append(errs, fmt.Errorf("%s.max_steps: must be between 0 and 1000, got %d", key, sc.MaxSteps))
	}
	if sc.Timeout < 0 {
		errs = append(errs, fmt.Errorf("%s.timeout: must not be negative, got %s", key, sc.Timeout))
	}
	for _, tn := range sc.Tools {
		if strings.HasPrefix(tn, SubagentToolPrefix) {
			errs = append(errs, fmt.Errorf("%s.tools: %q: sub-agents reach other sub-agents through agent.subagent_depth, not the allow-list", key, tn))
		}
	}
	return errs
}

package agent

import (
	"errors"
	"fmt"
	"time"

	"github.com/switchboard-chat/switchboard/agent/loop"
	"github.com/switchboard-chat/switchboard/bus"
)

// MainAgent is the name of the agent built from NewManager's own Config,
// Options and Deps: the one that answers when there are no others or no
// binding chose another.
const MainAgent = "main"

// Agents are the agents of a manager beside main and the rule picking one
// for a new session. The zero value is main alone.
type Agents struct {
	// Profiles are the other agents, each with a distinct name other than
	// MainAgent.
	Profiles []Profile
	// Resolve names the agent of a new session from its first message's
	// speaker; it is called once per session (the session keeps the
	// agent for its life), so whatever it reads may change between calls
	// (a reloaded configuration applies to new sessions). "" or an unknown
	// name means main. nil is main for every session.
	Resolve func(bus.Speaker) string
}

// Profile is one agent: its limits, model settings and collaborators. A
// session looks all of them up through its agent, so what one agent
// remembers, reads and may call is never another's. The daemon-wide
// limits (agent.max_concurrent_turns, agent.partitions,
// agent.session_idle) are the manager's Config's, whatever the profile's
// Config says.
type Profile struct {
	// Name is the agent's name, in logs, events, metrics and /status.
	Name     string
	Config   Config
	Settings ModelSettings
	// Model, Tools and Prompts are required; the others optional, as in
	// Deps.
	Model      Model
	Tools      Toolbox
	Prompts    PromptFiles
	Memory     Memory
	Skills     SkillsSection
	Summarizer Summarizer
}

// ModelSettings are the model settings of an agent (the fields of Options
// that vary per agent).
type ModelSettings struct {
	ModelName       string
	ContextWindow   int
	MaxOutputTokens int
	Temperature     float32
	ToolTimeout     time.Duration
	ReadFile        func(name string) (string, error)
}

// apply returns opt with the agent's model settings.
func (ms ModelSettings) apply(opt Options) Options {
	opt.ModelName, opt.ContextWindow, opt.MaxOutputTokens = ms.ModelName, ms.ContextWindow, ms.MaxOutputTokens
	opt.Temperature, opt.ToolTimeout, opt.ReadFile = ms.Temperature, ms.ToolTimeout, ms.ReadFile
	return opt
}

// profileEnv returns the session environment of agent p, sharing the
// manager's courier, counters and bus with main's (env).
func profileEnv(env *sessionEnv, p Profile) *sessionEnv {
	cfg := p.Config
	cfg.MaxConcurrentTurns, cfg.Partitions, cfg.SessionIdle = env.cfg.MaxConcurrentTurns, env.cfg.Partitions, env.cfg.SessionIdle
	opt := p.Settings.apply(env.opt).withDefaults()
	deps := env.deps
	deps.Model, deps.Tools, deps.Prompts, deps.Memory, deps.Skills, deps.Summarizer = p.Model, p.Tools, p.Prompts, p.Memory, p.Skills, p.Summarizer
	deps.Agents = Agents{}
	return &sessionEnv{agent: p.Name, cfg: cfg, opt: opt, deps: deps, courier: env.courier, stats: env.stats,
		log:  env.log.With("agent", p.Name),
		exec: loop.New(p.Model, p.Tools, loopOptions(cfg, opt, deps.Observer), env.log)}
}

// newAgents checks the profiles and returns every agent's environment,
// main's (env) included, by name.
func newAgents(env *sessionEnv, a Agents) (map[string]*sessionEnv, error) {
	out := map[string]*sessionEnv{MainAgent: env}
	var errs []error
	for _, p := range a.Profiles {
		_, dup := out[p.Name]
		switch {
		case p.Name == "" || dup:
			errs = append(errs, fmt.Errorf("agent %q: the name is empty, main or used twice", p.Name))
		case p.Model == nil || p.Prompts == nil:
			errs = append(errs, fmt.Errorf("agent %s: Model and Prompts are required", p.Name))
		default:
			c := p.Config
			c.MaxConcurrentTurns, c.Partitions, c.SessionIdle = env.cfg.MaxConcurrentTurns, env.cfg.Partitions, env.cfg.SessionIdle
			if err := c.Validate(); err != nil {
				errs = append(errs, fmt.Errorf("agent %s: %w", p.Name, err))
				continue
			}
			out[p.Name] = profileEnv(env, p)
		}
	}
	if len(a.Profiles) > 0 {
		env.log = env.log.With("agent", MainAgent)
	}
	return out, errors.Join(errs...)
}

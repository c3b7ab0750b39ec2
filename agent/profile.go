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
// session looks all of them up through its agent's current generation
// (the Profile in force when its turn began), so what one agent
// remembers, reads and may call is never another's. The daemon-wide
// limits (agent.max_concurrent_turns, agent.partitions,
// agent.session_idle) are the manager's Config's, whatever the profile's
// Config says.
type Profile struct {
	// Name is the agent's name, in logs, events, metrics and /status.
	Name     string
	Config   Config
	Settings ModelSettings
	// Model and Prompts are required; the others optional: without Tools
	// the model gets no tools, without Memory each turn reads the
	// workspace MEMORY.md, without Skills the prompt has no skills
	// section, without a Summarizer (or when it fails) a rule-based
	// digest summarises what leaves the context.
	Model      Model
	Tools      Toolbox
	Prompts    PromptFiles
	Memory     Memory
	Skills     SkillsSection
	Summarizer Summarizer
	// Close, when set, releases what the profile holds (its tools' and
	// memory's goroutines and files). The manager owns a profile it was
	// given: it calls Close once, when the profile was replaced or removed
	// and its last turn ended, or when Run returns.
	Close func() error
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

// Apply returns opt with the agent's model settings.
func (ms ModelSettings) Apply(opt Options) Options {
	opt.ModelName, opt.ContextWindow, opt.MaxOutputTokens = ms.ModelName, ms.ContextWindow, ms.MaxOutputTokens
	opt.Temperature, opt.ToolTimeout, opt.ReadFile = ms.Temperature, ms.ToolTimeout, ms.ReadFile
	return opt
}

// settingsOf are the model settings in opt.
func settingsOf(opt Options) ModelSettings {
	return ModelSettings{ModelName: opt.ModelName, ContextWindow: opt.ContextWindow, MaxOutputTokens: opt.MaxOutputTokens,
		Temperature: opt.Temperature, ToolTimeout: opt.ToolTimeout, ReadFile: opt.ReadFile}
}

// profileEnv returns the session environment of agent p, sharing the
// manager's courier, counters and bus (base).
func profileEnv(base *sessionEnv, p Profile) *sessionEnv {
	cfg := p.Config
	cfg.MaxConcurrentTurns, cfg.Partitions, cfg.SessionIdle = base.cfg.MaxConcurrentTurns, base.cfg.Partitions, base.cfg.SessionIdle
	opt := p.Settings.Apply(base.opt).withDefaults()
	return &sessionEnv{agent: p.Name, cfg: cfg, opt: opt, deps: base.deps, prof: p, courier: base.courier, stats: base.stats,
		log:   base.log.With("agent", p.Name),
		exec:  loop.New(p.Model, p.Tools, loopOptions(cfg, opt, base.deps.Observer), base.log),
		heads: &promptHeads{}}
}

// newAgents checks the profiles and returns the set of every agent, main
// (built from NewManager's Config and Options) included.
func newAgents(base *sessionEnv, main Profile, a Agents) (*agentSet, error) {
	set := &agentSet{base: base, cur: map[string]*generation{}, gate: map[string]chan struct{}{}, old: map[string][]*generation{}}
	main.Name, main.Config, main.Settings = MainAgent, base.cfg, settingsOf(base.opt)
	g, err := set.build(main)
	if err != nil {
		return nil, fmt.Errorf("main: %w", err)
	}
	set.cur[MainAgent] = g
	var errs []error
	for _, p := range a.Profiles {
		if _, dup := set.cur[p.Name]; dup {
			errs = append(errs, fmt.Errorf("agent %q: the name is main or used twice", p.Name))
			continue
		}
		g, err := set.build(p)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		set.cur[p.Name] = g
	}
	return set, errors.Join(errs...)
}

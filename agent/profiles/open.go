package profiles

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"golang.org/x/sync/errgroup"

	"github.com/switchboard-chat/switchboard/agent"
	"github.com/switchboard-chat/switchboard/internal/reqlog"
	"github.com/switchboard-chat/switchboard/llm"
	"github.com/switchboard-chat/switchboard/memory/longterm"
	"github.com/switchboard-chat/switchboard/memory/memcfg"
	"github.com/switchboard-chat/switchboard/metrics"
	"github.com/switchboard-chat/switchboard/tools/mcp"
	"github.com/switchboard-chat/switchboard/tools/toolset"
	"github.com/switchboard-chat/switchboard/workspace"
)

// Shared are the daemon's parts and settings every agent uses.
type Shared struct {
	Memory        memcfg.Config
	MCP           mcp.Config
	SubjectPrefix string
	Version       string
	// Bus publishes what the tools send (messages, scheduled tasks).
	Bus toolset.Publisher
	// Metrics and Requests wrap each agent's model client as main's is
	// (model request metrics; the web dashboard's request log).
	Metrics  *metrics.Metrics
	Requests *reqlog.Recorder
	Log      *slog.Logger
}

// Built are the agents beside main, opened: their profiles for
// agent.Agents and what runs and closes with them.
type Built struct {
	Profiles []agent.Profile
	runs     []func(context.Context) error
	closers  []func() error
}

// Open opens every agent of set but main (which the daemon opens itself,
// as it always did): its workspace, model client, long-term memory and
// tool set, each in the agent's own folders. On an error it closes what
// it opened.
func Open(set Set, sh Shared) (_ *Built, err error) {
	log := sh.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	b := &Built{}
	defer func() {
		if err != nil {
			_ = b.Close()
		}
	}()
	for _, spec := range set.Agents {
		if spec.Name == Main {
			continue
		}
		p, err := b.open(spec, sh, log.With("agent", spec.Name))
		if err != nil {
			return nil, fmt.Errorf("agent %s: %w", spec.Name, err)
		}
		b.Profiles = append(b.Profiles, p)
	}
	return b, nil
}

// open opens one agent.
func (b *Built) open(spec Spec, sh Shared, log *slog.Logger) (agent.Profile, error) {
	ws, err := workspace.Open(spec.Workspace, log)
	if err != nil {
		return agent.Profile{}, fmt.Errorf("workspace: %w", err)
	}
	b.closers = append(b.closers, ws.Close)
	client, err := llm.Open(spec.LLM, log)
	if err != nil {
		return agent.Profile{}, err
	}
	model := metrics.Model{Next: client, DefaultModel: spec.LLM.Model, M: sh.Metrics}
	mem, err := longterm.Open(longterm.Options{Config: sh.Memory, Root: ws.Root(), DataDir: spec.DataDir,
		LLMBaseURL: spec.LLM.BaseURL, LLMAPIKey: spec.LLM.APIKey, Model: model, Log: log})
	if err != nil {
		return agent.Profile{}, err
	}
	b.closers = append(b.closers, mem.Close)
	set, err := toolset.Open(toolset.Config{Tools: spec.Tools, MCP: sh.MCP, SubjectPrefix: sh.SubjectPrefix, DataDir: spec.DataDir, Version: sh.Version},
		ws, sh.Bus, log, toolset.Privacy{Guard: mem.Guard, Private: mem.Private, Public: longterm.Public}, mem.Tools()...)
	if err != nil {
		return agent.Profile{}, err
	}
	b.runs = append(b.runs, set.Run, mem.Run)
	p := agent.Profile{Name: spec.Name, Config: spec.Agent, Model: reqlog.Model{Next: model, R: sh.Requests},
		Settings: agent.ModelSettings{ModelName: spec.LLM.Model, ContextWindow: spec.LLM.ContextWindow, MaxOutputTokens: spec.LLM.MaxTokens,
			Temperature: spec.LLM.Temperature, ToolTimeout: set.CallTimeout, ReadFile: ws.ReadText},
		Tools: set.Toolbox, Prompts: ws, Memory: mem, Skills: set.Skills, Summarizer: agent.SummarizerFor(spec.LLM.Configured(), model)}
	return p, nil
}

// Run runs every agent's tool set and memory until ctx ends (tools.db
// closes then). Start it before the manager and stop it after: the
// manager's last turns use them.
func (b *Built) Run(ctx context.Context) error {
	g, gctx := errgroup.WithContext(ctx)
	for _, run := range b.runs {
		g.Go(func() error { return run(gctx) })
	}
	return g.Wait()
}

// Close closes what Open opened, the last opened first.
func (b *Built) Close() error {
	var errs []error
	for i := len(b.closers) - 1; i >= 0; i-- {
		errs = append(errs, b.closers[i]())
	}
	b.closers = nil
	return errors.Join(errs...)
}

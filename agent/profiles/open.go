package profiles

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"sync"
	"sync/atomic"

	"github.com/switchboard-chat/switchboard/agent"
	"github.com/switchboard-chat/switchboard/agent/heartbeat"
	"github.com/switchboard-chat/switchboard/bus"
	"github.com/switchboard-chat/switchboard/internal/kvstate"
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
	// Metrics and Requests wrap each agent's model client (model request
	// metrics; the web dashboard's request log).
	Metrics  *metrics.Metrics
	Requests *reqlog.Recorder
	// State is the cluster state (memory.store jetstream; zero on bolt):
	// main's memory notes and scheduled tasks live in its buckets, its
	// consolidation and scheduler run under the leases "consolidate" and
	// "scheduler".
	State kvstate.Set
	Log   *slog.Logger
}

// OpenAgent opens one agent from its spec: its workspace, model client
// (wrapped in metrics.Model and reqlog.Model), long-term memory and tool
// set, in spec.DataDir (data_dir itself for main, whose memory and
// schedules use sh.State), and starts the memory's and tools' background
// work. The profile's Close stops that work, waits for it and closes the
// files; the agent.Manager calls it when the profile is replaced or the
// manager stops. It also returns the agent's MCP servers (for GET /mcp).
// On an error nothing is left open or running.
func OpenAgent(spec Spec, sh Shared) (_ agent.Profile, _ *mcp.Manager, err error) {
	log := sh.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	log = log.With("agent", spec.Name)
	var closers []func() error
	closeAll := func() error {
		var errs []error
		for i := len(closers) - 1; i >= 0; i-- {
			errs = append(errs, closers[i]())
		}
		return errors.Join(errs...)
	}
	defer func() {
		if err != nil {
			_ = closeAll()
			err = fmt.Errorf("agent %s: %w", spec.Name, err)
		}
	}()
	ws, err := workspace.Open(spec.Workspace, log)
	if err != nil {
		return agent.Profile{}, nil, fmt.Errorf("workspace: %w", err)
	}
	closers = append(closers, ws.Close)
	client, err := llm.Open(spec.LLM, log)
	if err != nil {
		return agent.Profile{}, nil, err
	}
	if !spec.LLM.Configured() {
		log.Warn("no language model is configured: every reply will explain how to configure one. " +
			"Set OPENAI_API_KEY (and OPENAI_BASE_URL / OPENAI_MODEL for other OpenAI-compatible servers such as Ollama or vLLM), " +
			"or edit the llm section of the config file")
	}
	model := metrics.Model{Next: client, DefaultModel: spec.LLM.Model, M: sh.Metrics}
	mo := longterm.Options{Config: sh.Memory, Root: ws.Root(), DataDir: spec.DataDir,
		LLMBaseURL: spec.LLM.BaseURL, LLMAPIKey: spec.LLM.APIKey, Model: model, Log: log}
	tc := toolset.Config{Tools: spec.Tools, MCP: sh.MCP, SubjectPrefix: sh.SubjectPrefix, DataDir: spec.DataDir, Version: sh.Version}
	if spec.Name == Main { // the cluster's shared state is main's (Defaults.Shared)
		mo.Shared, mo.Lease = sh.State.Memory, sh.State.Leases.Exclusive("consolidate")
		tc.ScheduleStore, tc.ScheduleLease = sh.State.Schedules, sh.State.Leases.Exclusive("scheduler")
	}
	mem, err := longterm.Open(mo)
	if err != nil {
		return agent.Profile{}, nil, err
	}
	closers = append(closers, mem.Close)
	set, err := toolset.Open(tc, ws, sh.Bus, log, toolset.Privacy{Guard: mem.Guard, Private: mem.Private, Public: longterm.Public}, mem.Tools()...)
	if err != nil {
		return agent.Profile{}, nil, err
	}
	return agent.Profile{Name: spec.Name, Config: spec.Agent, Model: reqlog.Model{Next: model, R: sh.Requests},
		Settings: agent.ModelSettings{ModelName: spec.LLM.Model, ContextWindow: spec.LLM.ContextWindow, MaxOutputTokens: spec.LLM.MaxTokens,
			Temperature: spec.LLM.Temperature, ToolTimeout: set.CallTimeout, ReadFile: ws.ReadText},
		Tools: set.Toolbox, Prompts: ws, Memory: mem, Skills: set.Skills, Summarizer: agent.SummarizerFor(spec.LLM.Configured(), model),
		Close: running(log, closeAll, set.Run, mem.Run)}, set.MCP, nil
}

// running starts runs (the tools' and memory's background work; the tool
// set's closes tools.db when it returns) and returns the Close that stops
// them, waits for them, then calls closeFiles; it runs once.
func running(log *slog.Logger, closeFiles func() error, runs ...func(context.Context) error) func() error {
	ctx, stop := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for _, run := range runs {
		wg.Go(func() {
			if err := run(ctx); err != nil && !errors.Is(err, context.Canceled) {
				log.Error("an agent's background work stopped", "err", err)
			}
		})
	}
	return sync.OnceValue(func() error {
		stop()
		wg.Wait()
		return closeFiles()
	})
}

// Runtime is the daemon's agents as configured and running: it opens them
// ([Start]), picks new sessions' agents (Resolve), and keeps the running
// agents in step with a reloaded configuration ([Runtime.Reload]). Safe
// for concurrent use.
type Runtime struct {
	router *Router
	sh     Shared
	mcp    atomic.Pointer[mcp.Manager] // main's MCP servers, for GET /mcp
	mu     sync.Mutex                  // one Reload at a time
	// Main and Others are the agents Start opened, for agent.Deps.Main
	// and agent.Agents.Profiles: the manager owns them from NewManager
	// on (Close only when NewManager failed).
	Main   agent.Profile
	Others []agent.Profile
}

// Start opens every agent of set (main first, with OpenAgent). On an error
// it closes what it opened.
func Start(set Set, sh Shared) (*Runtime, error) {
	rt := &Runtime{router: NewRouter(set), sh: sh}
	for _, spec := range set.Agents {
		p, m, err := OpenAgent(spec, sh)
		if err != nil {
			_ = rt.Close()
			return nil, err
		}
		if spec.Name == Main {
			rt.Main = p
			rt.mcp.Store(m)
			continue
		}
		rt.Others = append(rt.Others, p)
	}
	return rt, nil
}

// Close closes the agents Start opened (only when no manager took them).
func (rt *Runtime) Close() error {
	errs := []error{closeProfile(rt.Main)}
	for _, p := range rt.Others {
		errs = append(errs, closeProfile(p))
	}
	return errors.Join(errs...)
}

func closeProfile(p agent.Profile) error {
	if p.Close == nil {
		return nil
	}
	return p.Close()
}

// Agents are the agents beside main and the rule picking one, for
// agent.Deps.Agents.
func (rt *Runtime) Agents() agent.Agents {
	return agent.Agents{Profiles: rt.Others, Resolve: rt.router.Resolve}
}

// Resolve names the agent of a new session (Router.Resolve).
func (rt *Runtime) Resolve(sp bus.Speaker) string { return rt.router.Resolve(sp) }

// Heartbeats are the running agents' heartbeats as the last Reload set
// them.
func (rt *Runtime) Heartbeats() []heartbeat.Agent { return rt.router.Heartbeats() }

// ServeHTTP reports main's MCP servers (GET /mcp on the admin server):
// those of main's current generation.
func (rt *Runtime) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if m := rt.mcp.Load(); m != nil {
		m.ServeHTTP(w, r)
		return
	}
	http.Error(w, "no MCP servers", http.StatusServiceUnavailable)
}

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
	"github.com/switchboard-chat/switchboard/tools/schedule"
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
	// SchedulePace paces every agent's scheduled runs per channel
	// (toolset.Config.SchedulePace).
	SchedulePace *schedule.Pace
	// Metrics and Requests wrap each agent's model client (model request
	// metrics; the web dashboard's request log).
	Metrics  *metrics.Metrics
	Requests *reqlog.Recorder
	// State is the cluster state (memory.store jetstream; zero on bolt):
	// every agent's memory notes and scheduled tasks live in its buckets,
	// main's under the keys they always had, another agent's in its own
	// key scope (kvstate.Scoped); main's consolidation and scheduler run
	// under the leases "consolidate" and "scheduler", another agent's
	// under "consolidate.<name>" and "scheduler.<name>".
	State kvstate.Set
	Log   *slog.Logger
}

// agentFiles are what an agent's generations share while only its model
// or limits change: the workspace, long-term memory and tool set (with
// tools.db and the memory index open, and their background work
// running), opened once and closed after the last profile using them.
type agentFiles struct {
	ws    *workspace.Workspace
	mem   *longterm.System
	set   *toolset.Set
	model currentModel // the consolidation's: the newest profile's model
	refs  atomic.Int32
	close func() error // stops the background work, closes the files
}

// openFiles opens an agent's workspace, memory and tool set from its spec,
// in spec.DataDir (data_dir itself for main, whose memory and schedules use
// sh.State), and starts their background work.
func openFiles(spec Spec, sh Shared, log *slog.Logger) (_ *agentFiles, err error) {
	f := &agentFiles{}
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
		}
	}()
	if f.ws, err = workspace.Open(spec.Workspace, log); err != nil {
		return nil, fmt.Errorf("workspace: %w", err)
	}
	closers = append(closers, f.ws.Close)
	mo := longterm.Options{Config: sh.Memory, Root: f.ws.Root(), DataDir: spec.DataDir,
		LLMBaseURL: spec.LLM.BaseURL, LLMAPIKey: spec.LLM.APIKey, Model: &f.model, Log: log}
	tc := toolset.Config{Tools: spec.Tools, MCP: sh.MCP, SubjectPrefix: sh.SubjectPrefix, DataDir: spec.DataDir, Version: sh.Version,
		SchedulePace: sh.SchedulePace}
	// With the cluster state (memory.store jetstream) main keeps the keys
	// and leases it always had; another agent its own key scope and leases
	// "consolidate.<name>", "scheduler.<name>".
	scope, lease := "", ""
	if spec.Name != Main {
		scope, lease = spec.Name, "."+spec.Name
	}
	mo.Shared, mo.Lease = kvstate.Scoped(sh.State.Memory, scope), sh.State.Leases.Exclusive("consolidate"+lease)
	tc.ScheduleStore, tc.ScheduleLease = kvstate.Scoped(sh.State.Schedules, scope), sh.State.Leases.Exclusive("scheduler"+lease)
	if f.mem, err = longterm.Open(mo); err != nil {
		return nil, err
	}
	closers = append(closers, f.mem.Close)
	if f.set, err = toolset.Open(tc, f.ws, sh.Bus, log, toolset.Privacy{Guard: f.mem.Guard, Private: f.mem.Private, Public: longterm.Public}, f.mem.Tools()...); err != nil {
		return nil, err
	}
	f.close = running(log, closeAll, f.set.Run, f.mem.Run)
	return f, nil
}

// profile builds a profile of the agent over f: a model client of
// spec.LLM (wrapped in metrics.Model and reqlog.Model) and spec's limits.
// Its Close releases f (the last release closes it).
// It also returns the model (for the consolidation: currentModel.use).
func (f *agentFiles) profile(spec Spec, sh Shared, log *slog.Logger) (agent.Profile, agent.Model, error) {
	client, err := llm.Open(spec.LLM, log)
	if err != nil {
		return agent.Profile{}, nil, fmt.Errorf("agent %s: %w", spec.Name, err)
	}
	if !spec.LLM.Configured() {
		log.Warn("no language model is configured: every reply will explain how to configure one. " +
			"Set OPENAI_API_KEY (and OPENAI_BASE_URL / OPENAI_MODEL for other OpenAI-compatible servers such as Ollama or vLLM), " +
			"or edit the llm section of the config file")
	}
	model := &metrics.Model{Next: client, DefaultModel: spec.LLM.Model, M: sh.Metrics}
	f.refs.Add(1)
	release := sync.OnceValue(func() error {
		if f.refs.Add(-1) == 0 {
			return f.close()
		}
		return nil
	})
	return agent.Profile{Name: spec.Name, Config: spec.Agent, Model: reqlog.Model{Next: model, R: sh.Requests},
		Settings: agent.ModelSettings{ModelName: spec.LLM.Model, ContextWindow: spec.LLM.ContextWindow, MaxOutputTokens: spec.LLM.MaxTokens,
			Temperature: spec.LLM.Temperature, ToolTimeout: f.set.CallTimeout, ReadFile: f.ws.ReadText},
		Tools: f.set.Toolbox, Prompts: f.ws, Memory: f.mem, Skills: f.set.Skills, Summarizer: agent.SummarizerFor(spec.LLM.Configured(), model),
		Close: release}, model, nil
}

// openAgent opens one agent from its spec and the daemon's shared parts:
// its files (openFiles) and a profile over them. The profile's Close stops
// the background work, waits for it and closes the files; the
// agent.Manager calls it when the profile is replaced or the manager
// stops. On an error nothing is left open or running.
func openAgent(spec Spec, sh Shared) (agent.Profile, *agentFiles, error) {
	log := sh.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	log = log.With("agent", spec.Name)
	f, err := openFiles(spec, sh, log)
	if err != nil {
		return agent.Profile{}, nil, fmt.Errorf("agent %s: %w", spec.Name, err)
	}
	p, model, err := f.profile(spec, sh, log)
	if err != nil {
		_ = f.close()
		return agent.Profile{}, nil, err
	}
	f.model.use(model)
	return p, f, nil
}

// currentModel is the memory consolidation's model: the one of the
// agent's newest profile. Safe for concurrent use.
type currentModel struct{ m atomic.Pointer[agent.Model] }

func (c *currentModel) use(m agent.Model) { c.m.Store(&m) }

// Stream implements consolidate.Model.
func (c *currentModel) Stream(ctx context.Context, req llm.Request, onDelta func(llm.Delta)) (*llm.Response, error) {
	m := c.m.Load()
	if m == nil {
		return nil, errors.New("no model yet")
	}
	return (*m).Stream(ctx, req, onDelta)
}

// Runtime is the daemon's agents as configured and running: it opens them
// ([Start]), picks new sessions' agents (Resolve), and keeps the running
// agents in step with a reloaded configuration ([Runtime.Reload]). Safe
// for concurrent use.
type Runtime struct {
	router *Router
	sh     Shared
	mcp    atomic.Pointer[mcp.Manager] // main's MCP servers, for GET /mcp
	mu     sync.Mutex                  // one Reload at a time; guards files
	files  map[string]*agentFiles      // each running agent's newest files
	// Main and Others are the agents Start opened, for agent.Deps.Main
	// and agent.Agents.Profiles: the manager owns them from NewManager
	// on (Close only when NewManager failed).
	Main   agent.Profile
	Others []agent.Profile
}

// Start opens every agent of set (main first, with openAgent). On an error
// it closes what it opened.
func Start(set Set, sh Shared) (*Runtime, error) {
	rt := &Runtime{router: NewRouter(set), sh: sh, files: map[string]*agentFiles{}}
	for _, spec := range set.Agents {
		p, f, err := openAgent(spec, sh)
		if err != nil {
			_ = rt.Close()
			return nil, err
		}
		rt.files[spec.Name] = f
		if spec.Name == Main {
			rt.Main = p
			rt.mcp.Store(f.set.MCP)
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

// running starts runs (the tools' and memory's background work; the tool
// set's closes tools.db when it returns) and returns the close that stops
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

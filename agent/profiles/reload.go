package profiles

import (
	"fmt"
	"log/slog"
	"reflect"
	"slices"
	"strings"

	"github.com/switchboard-chat/switchboard/agent"
	"github.com/switchboard-chat/switchboard/agent/heartbeat"
)

// Agents is what a reload changes in the running agents (agent.Manager:
// Replace drains an agent and puts a new profile in force, Swap puts one
// in force without draining, Add opens a new agent, Remove hands its
// sessions to main).
type Agents interface {
	Replace(name string, open, fallback func() (agent.Profile, error)) error
	Swap(p agent.Profile) error
	Add(name string, open func() (agent.Profile, error)) error
	Remove(name string) error
}

// Reload puts next in force and returns a line per change for the
// reload's log:
//   - bindings apply to new sessions (running sessions keep their agent);
//   - an agent whose workspace, llm, agent (its own part: limits,
//     sub-agents) or tools settings changed, main included, is rebuilt
//     (Agents.Replace: its next turn uses the new settings);
//   - an agent added is opened and bindable at once; one removed answers
//     no more (its sessions get main from their next message);
//   - the running agents' heartbeats become next's ([Runtime.Heartbeats]).
//
// What fails to apply is reported "not applied: <why>" and runs as before
// (a binding to an agent that could not be added picks main). The
// daemon-wide agent.max_concurrent_turns, agent.partitions and
// agent.session_idle are reported kept until restart.
func (rt *Runtime) Reload(run Agents, next Set) []string {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	old := rt.router.set.Load()
	var lines []string
	if !slices.EqualFunc(old.Bindings, next.Bindings, func(a, b Binding) bool { return a.String() == b.String() }) {
		lines = append(lines, fmt.Sprintf("bindings: applied (%d bindings) for new sessions; running sessions keep their agent", len(next.Bindings)))
	}
	lines = append(lines, daemonWide(old.Main().Agent, next.Main().Agent)...)
	running := Set{Bindings: next.Bindings}
	for _, spec := range next.Agents {
		was, ok := old.Agent(spec.Name)
		line, keep := rt.apply(run, spec, was, ok)
		if line != "" {
			lines = append(lines, line)
		}
		if keep != nil {
			keep.Heartbeat = spec.Heartbeat
			running.Agents = append(running.Agents, *keep)
		}
	}
	for _, was := range old.Agents {
		if _, ok := next.Agent(was.Name); ok {
			continue
		}
		if err := run.Remove(was.Name); err != nil {
			lines = append(lines, fmt.Sprintf("agents.%s: removal not applied: %v", was.Name, err))
			was.Heartbeat = heartbeat.Config{}
			running.Agents = append(running.Agents, was)
			continue
		}
		delete(rt.files, was.Name)
		lines = append(lines, fmt.Sprintf("agents.%s: removed; its sessions are answered by main from their next message", was.Name))
	}
	rt.router.Swap(running)
	return lines
}

// apply brings one agent to spec (was: its running settings, when ok) and
// returns the reload line ("" when nothing changed) and the settings it
// runs with now (nil: not running).
func (rt *Runtime) apply(run Agents, spec, was Spec, ok bool) (string, *Spec) {
	key := "agents." + spec.Name
	if !ok {
		if err := run.Add(spec.Name, rt.opener(spec)); err != nil {
			return fmt.Sprintf("%s: not applied: %v", key, err), nil
		}
		return key + ": added (bindable now)", &spec
	}
	parts := changedParts(was, spec)
	if len(parts) == 0 {
		return "", &spec
	}
	if err := rt.rebuild(run, was, spec); err != nil {
		return fmt.Sprintf("%s: not applied: %v", key, err), &was
	}
	return fmt.Sprintf("%s: %s applied (next turn)", key, strings.Join(parts, ", ")), &spec
}

// rebuild puts spec in force for a running agent (was). When only its
// model or limits changed, the new profile shares the running one's files
// and is swapped in at once (a turn in flight finishes with the old
// profile); else the agent is drained and its files reopened
// (Agents.Replace), since tools.db and the memory files can be open only
// once.
func (rt *Runtime) rebuild(run Agents, was, spec Spec) error {
	f := rt.files[spec.Name]
	if f == nil || reopens(was, spec, rt.sh) {
		return run.Replace(spec.Name, rt.opener(spec), rt.opener(was))
	}
	log := rt.sh.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	p, model, err := f.profile(spec, rt.sh, log.With("agent", spec.Name))
	if err != nil {
		return err
	}
	if err := run.Swap(p); err != nil {
		_ = p.Close()
		return err
	}
	f.model.use(model)
	return nil
}

// reopens reports whether going from was to next needs the agent's files
// opened again: its workspace or tools changed, or the model server that
// the memory's embeddings use by default.
func reopens(was, next Spec, sh Shared) bool {
	embedsWithLLM := sh.Memory.EmbeddingModel != "" && (sh.Memory.EmbeddingBaseURL == "" || sh.Memory.EmbeddingAPIKey == "")
	return was.Workspace != next.Workspace || !reflect.DeepEqual(was.Tools, next.Tools) ||
		(embedsWithLLM && (was.LLM.BaseURL != next.LLM.BaseURL || was.LLM.APIKey != next.LLM.APIKey))
}

// opener opens spec for Agents.Replace and Add (called while Reload
// runs); main's MCP servers become GET /mcp's.
func (rt *Runtime) opener(spec Spec) func() (agent.Profile, error) {
	return func() (agent.Profile, error) {
		p, f, err := openAgent(spec, rt.sh)
		if err != nil {
			return p, err
		}
		rt.files[spec.Name] = f
		if spec.Name == Main {
			rt.mcp.Store(f.set.MCP)
		}
		return p, nil
	}
}

// changedParts names the sections of an agent's settings that differ
// (workspace, llm, agent, tools), leaving out the heartbeat (applied
// without a rebuild) and the daemon-wide agent keys.
func changedParts(was, next Spec) []string {
	a, b := was.Agent, next.Agent
	a.MaxConcurrentTurns, a.Partitions, a.SessionIdle, a.Workspace = b.MaxConcurrentTurns, b.Partitions, b.SessionIdle, b.Workspace
	var parts []string
	for _, p := range []struct {
		name string
		x, y any
	}{{"workspace", was.Workspace, next.Workspace}, {"llm", was.LLM, next.LLM}, {"agent", a, b}, {"tools", was.Tools, next.Tools}} {
		if !reflect.DeepEqual(p.x, p.y) {
			parts = append(parts, p.name)
		}
	}
	return parts
}

// daemonWide reports the daemon-wide agent keys that changed: they are
// kept until a restart.
func daemonWide(was, next agent.Config) []string {
	var lines []string
	for _, k := range []struct {
		key  string
		x, y any
	}{{"max_concurrent_turns", was.MaxConcurrentTurns, next.MaxConcurrentTurns}, {"partitions", was.Partitions, next.Partitions}, {"session_idle", was.SessionIdle, next.SessionIdle}} {
		if k.x != k.y {
			lines = append(lines, "agent."+k.key+": changed, kept until restart")
		}
	}
	return lines
}

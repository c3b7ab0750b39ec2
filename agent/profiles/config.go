// Package profiles turns the configuration's agents and bindings into the
// runtime's agents: several agents in one daemon, each with its own
// workspace (AGENT.md, USER.md, RULE.md, MEMORY.md, HEARTBEAT.md, skills/),
// model, tools, limits, memory and heartbeat (agent/heartbeat), and the ordered bindings that pick the agent of a new
// session (docs/agents.md).
//
// # Configuration
//
// agents.<name> holds workspace and overrides of the top-level sections
// llm, agent and tools: every agent starts from a copy of the top-level
// values and its own keys are decoded on top ([config.Node]), so it
// overrides only what it sets, with the same key rules as the top level
// and problems named by their full path ("agents.work.llm.model (line 12):
// ..."). The agent main always exists and is the top-level sections
// (agents.main may override them); a configuration without agents is one
// agent, main, exactly as before. Each agent's workspace must be its own:
// two agents sharing a folder would share memory, so that is refused.
// Neither may a workspace lie inside another agent's or hold one, nor be
// or hold data_dir or an agent's data folder (data_dir/agents/<name>).
// agent.max_concurrent_turns, agent.partitions and agent.session_idle are
// daemon-wide and cannot be set per agent; the workspace is
// agents.<name>.workspace.
//
// bindings is an ordered list of matchers {agent, channel, chat_id,
// thread_id, user_id, is_group}; each field is optional (left out or empty
// matches anything) and may be a glob (path.Match: *, ?, [a-z]). The first
// binding that matches a new session's first message picks its agent; no
// match picks main. A session keeps its agent for its life.
//
// # Runtime
//
// [Start] opens every agent, main included, with one function (openAgent:
// its workspace, model client, long-term memory and tool set, in
// data_dir/agents/<name>/; main keeps the daemon's own paths, so an upgrade
// loses nothing) into the agent.Profiles of agent.Deps; [Runtime.Resolve]
// is the agent.Agents.Resolve that the manager calls once per new session.
// [Runtime.Reload] applies a reloaded configuration: bindings for new
// sessions, and each agent whose settings changed rebuilt (a model or
// limits change over the same open files at once, a workspace or tools
// change after draining the agent), added or removed, through the
// manager ([Agents]).
package profiles

import (
	"errors"
	"fmt"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync/atomic"

	"github.com/switchboard-chat/switchboard/agent"
	"github.com/switchboard-chat/switchboard/agent/heartbeat"
	"github.com/switchboard-chat/switchboard/bus"
	"github.com/switchboard-chat/switchboard/config"
	"github.com/switchboard-chat/switchboard/llm"
	"github.com/switchboard-chat/switchboard/tools"
)

// Main is the name of the agent that always exists.
const Main = "main"

var validName = regexp.MustCompile(`^[a-z0-9_-]{1,32}$`)

// Defaults are the top-level sections every agent inherits.
type Defaults struct {
	LLM   llm.Config
	Agent agent.Config
	Tools tools.Config
	// DataDir is data_dir: main's state lives there, another agent's in
	// data_dir/agents/<name>.
	DataDir string
}

// Spec is one agent's settings after inheritance: the top-level sections
// with the agent's overrides decoded on top.
type Spec struct {
	// Name is the key under agents (main for the top-level agent).
	Name string `yaml:"-"`
	// Workspace is the agent's folder (AGENT.md, USER.md, RULE.md,
	// MEMORY.md, skills/); default agent.workspace for main,
	// data_dir/agents/<name>/workspace for the others.
	Workspace string       `yaml:"workspace"`
	LLM       llm.Config   `yaml:"llm"`
	Agent     agent.Config `yaml:"agent"`
	Tools     tools.Config `yaml:"tools"`
	// Heartbeat is the agent's heartbeat (off by default; agent/heartbeat).
	Heartbeat heartbeat.Config `yaml:"heartbeat"`
	// DataDir holds the agent's tools.db and memory index: data_dir for
	// main, data_dir/agents/<name> for the others.
	DataDir string `yaml:"-"`
}

// Binding picks an agent for the sessions it matches (an element of
// bindings). Each field left empty matches anything; the others are
// path.Match globs ("*", "?", "[...]") matched against the session's first
// message.
type Binding struct {
	// Agent is the agent's name (required).
	Agent    string `yaml:"agent"`
	Channel  string `yaml:"channel"`
	ChatID   string `yaml:"chat_id"`
	ThreadID string `yaml:"thread_id"`
	UserID   string `yaml:"user_id"`
	// IsGroup, when set, matches only group chats (true) or only direct
	// chats (false).
	IsGroup *bool `yaml:"is_group"`
}

// Matches reports whether the binding matches the speaker. A bad pattern
// (refused by [Build]) matches nothing.
func (b Binding) Matches(s bus.Speaker) bool {
	if b.IsGroup != nil && *b.IsGroup != s.IsGroup {
		return false
	}
	for _, f := range [...][2]string{{b.Channel, s.Channel}, {b.ChatID, s.ChatID}, {b.ThreadID, s.ThreadID}, {b.UserID, s.UserID}} {
		if f[0] == "" {
			continue
		}
		if ok, err := path.Match(f[0], f[1]); err != nil || !ok {
			return false
		}
	}
	return true
}

// String is the binding as a flow mapping of the fields it sets, e.g.
// "{agent: work, channel: slack}".
func (b Binding) String() string {
	parts := []string{"agent: " + b.Agent}
	for _, f := range [...][2]string{{"channel", b.Channel}, {"chat_id", b.ChatID}, {"thread_id", b.ThreadID}, {"user_id", b.UserID}} {
		if f[1] != "" {
			parts = append(parts, f[0]+": "+quote(f[1]))
		}
	}
	if b.IsGroup != nil {
		parts = append(parts, fmt.Sprintf("is_group: %t", *b.IsGroup))
	}
	return "{" + strings.Join(parts, ", ") + "}"
}

var bareWord = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9_.-]*$`)

// quote quotes a value unless YAML reads it back bare as the same string.
func quote(s string) string {
	switch strings.ToLower(s) {
	case "true", "false", "yes", "no", "on", "off", "null", "y", "n":
		return fmt.Sprintf("%q", s)
	}
	if bareWord.MatchString(s) {
		return s
	}
	return fmt.Sprintf("%q", s)
}

// Set is the agents and bindings of one configuration. The zero Set has
// no agents; [Build] always gives main.
type Set struct {
	// Agents are main first, then the others sorted by name.
	Agents   []Spec
	Bindings []Binding
}

// Which returns the agent that answers a new session whose first message
// is from s, and the index of the binding that matched (-1: none, main).
//
// A heartbeat session (channel heartbeat, agent/heartbeat) is the agent its
// chat names, whatever the bindings say.
func (s Set) Which(sp bus.Speaker) (name string, binding int) {
	if sp.Channel == heartbeat.Channel {
		if _, ok := s.Agent(sp.ChatID); ok {
			return sp.ChatID, -1
		}
	}
	for i, b := range s.Bindings {
		if b.Matches(sp) {
			return b.Agent, i
		}
	}
	return Main, -1
}

// Router picks new sessions' agents from a set that can be swapped while
// sessions run (a configuration reload): each Resolve reads the set in
// force at the call, and running sessions keep the agent they have. Safe
// for concurrent use.
type Router struct{ set atomic.Pointer[Set] }

// NewRouter returns a router of set.
func NewRouter(set Set) *Router {
	r := &Router{}
	r.Swap(set)
	return r
}

// Swap puts set in force for the sessions created from now on.
func (r *Router) Swap(set Set) { r.set.Store(&set) }

// Resolve is Which's agent name in the set in force (agent.Agents.Resolve).
func (r *Router) Resolve(sp bus.Speaker) string {
	name, _ := r.set.Load().Which(sp)
	return name
}

// Heartbeats are every agent's heartbeat settings, main first.
func (s Set) Heartbeats() []heartbeat.Agent {
	out := make([]heartbeat.Agent, 0, len(s.Agents))
	for _, a := range s.Agents {
		out = append(out, heartbeat.Agent{Name: a.Name, Config: a.Heartbeat})
	}
	return out
}

// Main returns the agent main (the zero Spec in the zero Set).
func (s Set) Main() Spec {
	a, _ := s.Agent(Main)
	return a
}

// Agent returns the agent named name.
func (s Set) Agent(name string) (Spec, bool) {
	for _, a := range s.Agents {
		if a.Name == name {
			return a, true
		}
	}
	return Spec{}, false
}

// Build decodes every agents.<name> over a copy of the defaults, checks
// names, workspaces and bindings, and returns the set, or every problem
// (an errors.Join, each naming its key). raw is the agents section as
// read (nil: none); problems the defaults have themselves are not
// reported again for each agent inheriting them.
func Build(d Defaults, raw map[string]config.Node, bindings []Binding) (Set, error) {
	var errs []error
	inherited := problemSet(d)
	names := make([]string, 0, len(raw))
	for name := range raw {
		if name != Main {
			names = append(names, name)
		}
	}
	slices.Sort(names)
	set := Set{Bindings: bindings}
	for _, name := range append([]string{Main}, names...) {
		spec, perrs := decodeSpec(d, name, raw[name], inherited)
		errs = append(errs, perrs...)
		set.Agents = append(set.Agents, spec)
	}
	errs = append(errs, distinctWorkspaces(set.Agents)...)
	errs = append(errs, checkBindings(set, bindings)...)
	if err := errors.Join(errs...); err != nil {
		return Set{}, err
	}
	return set, nil
}

// problemSet is the text of every problem of the defaults.
func problemSet(d Defaults) map[string]bool {
	out := map[string]bool{}
	for _, err := range config.Problems(errors.Join(d.LLM.Validate(), d.Agent.Validate(), d.Tools.Validate())) {
		out[err.Error()] = true
	}
	return out
}

// decodeSpec builds one agent from the defaults and its node.
func decodeSpec(d Defaults, name string, node config.Node, inherited map[string]bool) (Spec, []error) {
	key := "agents." + name
	var errs []error
	if !validName.MatchString(name) {
		errs = append(errs, fmt.Errorf("%s: the name must match %s", key, validName))
	}
	spec := Spec{Name: name, Workspace: d.Agent.Workspace, LLM: d.LLM, Agent: d.Agent, Tools: d.Tools, DataDir: d.DataDir}
	if name != Main {
		spec.DataDir = filepath.Join(d.DataDir, "agents", name)
		spec.Workspace = filepath.Join(spec.DataDir, "workspace")
	}
	if node.IsZero() {
		return spec, errs
	}
	errs = append(errs, config.Problems(node.Decode(&spec))...)
	if spec.Agent.Workspace != d.Agent.Workspace {
		errs = append(errs, fmt.Errorf("%s.agent.workspace: set %s.workspace instead", key, key))
	}
	if spec.Agent.MaxConcurrentTurns != d.Agent.MaxConcurrentTurns {
		errs = append(errs, fmt.Errorf("%s.agent.max_concurrent_turns: daemon-wide, set it in agent.max_concurrent_turns", key))
	}
	if spec.Agent.Partitions != d.Agent.Partitions {
		errs = append(errs, fmt.Errorf("%s.agent.partitions: daemon-wide, set it in agent.partitions", key))
	}
	if spec.Agent.SessionIdle != d.Agent.SessionIdle {
		errs = append(errs, fmt.Errorf("%s.agent.session_idle: daemon-wide, set it in agent.session_idle", key))
	}
	if spec.Workspace == "" {
		errs = append(errs, fmt.Errorf("%s.workspace: must not be empty", key))
	}
	spec.Agent.Workspace = spec.Workspace
	if spec.LLM.BaseURL == "" {
		spec.LLM.BaseURL = llm.DefaultBaseURL
	}
	check := spec.Agent
	check.Workspace = d.Agent.Workspace // reported as agents.<name>.workspace above
	for _, err := range config.Problems(errors.Join(spec.LLM.Validate(), check.Validate(), spec.Tools.Validate())) {
		if !inherited[err.Error()] {
			errs = append(errs, fmt.Errorf("%s.%w", key, err))
		}
	}
	for _, err := range config.Problems(spec.Heartbeat.Validate()) {
		errs = append(errs, fmt.Errorf("%s.%w", key, err))
	}
	return spec, errs
}

// distinctWorkspaces refuses a workspace folder that is another agent's
// too, lies inside another agent's workspace or holds one, or is (or
// holds) data_dir or an agent's data folder: the file tools would reach
// the other agent's users' private memory, or the daemon's credentials
// and history. Paths are compared cleaned and absolute, and again after
// symbolic links where they exist.
func distinctWorkspaces(specs []Spec) []error {
	type place struct {
		name, given string
		forms       [2]string // absolute; real
	}
	at := func(name, p string) (place, bool) {
		abs, err := filepath.Abs(p)
		if err != nil || p == "" {
			return place{}, false
		}
		return place{name, p, [2]string{abs, realPath(abs)}}, true
	}
	var errs []error
	var seen, data []place
	for _, s := range specs {
		if d, ok := at(s.Name, s.DataDir); ok {
			data = append(data, d)
		}
	}
	for _, s := range specs {
		ws, ok := at(s.Name, s.Workspace)
		if !ok {
			continue
		}
		key := workspaceKey(s.Name)
		bad := false
		for _, o := range seen {
			switch {
			case related(ws.forms, o.forms, sameDir):
				errs = append(errs, fmt.Errorf("%s: %s is agent %s's workspace too; each agent needs its own (they would share memory)", key, ws.given, o.name))
			case related(ws.forms, o.forms, within):
				errs = append(errs, fmt.Errorf("%s: %s is inside agent %s's workspace %s; each agent needs a folder of its own, apart from the others' (its file tools would reach the other agent's users' private memory)",
					key, ws.given, o.name, o.given))
			case related(o.forms, ws.forms, within):
				errs = append(errs, fmt.Errorf("%s: %s holds agent %s's workspace %s; each agent needs a folder of its own, apart from the others' (its file tools would reach the other agent's users' private memory)",
					key, ws.given, o.name, o.given))
			default:
				continue
			}
			bad = true
			break
		}
		// data holds main's data_dir first, which holds the others'.
		for _, d := range data {
			if !related(d.forms, ws.forms, within) {
				continue
			}
			what := "data_dir " + d.given
			if d.name != Main {
				what = "agent " + d.name + "'s data folder " + d.given
			}
			errs = append(errs, fmt.Errorf("%s: %s is or holds %s; the workspace must lie apart from it (its file tools would reach the daemon's credentials, history and memory index), e.g. in data_dir/workspace",
				key, ws.given, what))
			break
		}
		if !bad {
			seen = append(seen, ws)
		}
	}
	return errs
}

// workspaceKey names the key of an agent's workspace.
func workspaceKey(name string) string {
	if name == Main {
		return "agent.workspace"
	}
	return "agents." + name + ".workspace"
}

// related reports whether rel holds for a and b as absolute paths or as
// real paths.
func related(a, b [2]string, rel func(p, base string) bool) bool {
	return rel(a[0], b[0]) || rel(a[1], b[1])
}

func sameDir(p, base string) bool { return p == base }

// within reports whether the clean absolute path p is base or lies below
// it.
func within(p, base string) bool {
	r, err := filepath.Rel(base, p)
	return err == nil && (r == "." || filepath.IsLocal(r))
}

// realPath returns the absolute clean path p with the symbolic links of
// its longest existing part resolved (the rest as given).
func realPath(p string) string {
	rest := ""
	for dir := p; ; dir = filepath.Dir(dir) {
		if r, err := filepath.EvalSymlinks(dir); err == nil {
			return filepath.Join(r, rest)
		}
		if filepath.Dir(dir) == dir {
			return p
		}
		rest = filepath.Join(filepath.Base(dir), rest)
	}
}

// checkBindings reports bindings to unknown agents and bad patterns.
func checkBindings(set Set, bindings []Binding) []error {
	var errs []error
	for i, b := range bindings {
		key := fmt.Sprintf("bindings[%d]", i)
		switch _, ok := set.Agent(b.Agent); {
		case b.Agent == "":
			errs = append(errs, fmt.Errorf("%s.agent: must name an agent", key))
		case !ok:
			errs = append(errs, fmt.Errorf("%s.agent: no agent %q (agents: %s)", key, b.Agent, strings.Join(set.names(), ", ")))
		}
		for _, f := range [...][2]string{{"channel", b.Channel}, {"chat_id", b.ChatID}, {"thread_id", b.ThreadID}, {"user_id", b.UserID}} {
			if _, err := path.Match(f[1], ""); err != nil {
				errs = append(errs, fmt.Errorf("%s.%s: bad pattern %q: %w", key, f[0], f[1], err))
			}
		}
	}
	return errs
}

func (s Set) names() []string {
	out := make([]string, 0, len(s.Agents))
	for _, a := range s.Agents {
		out = append(out, a.Name)
	}
	return out
}

// Heartbeats are the heartbeats of the agents running, as the last Reload
// set them.
func (r *Router) Heartbeats() []heartbeat.Agent { return r.set.Load().Heartbeats() }

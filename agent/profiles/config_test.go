package profiles

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/switchboard-chat/switchboard/agent"
	"github.com/switchboard-chat/switchboard/agent/heartbeat"
	"github.com/switchboard-chat/switchboard/bus"
	"github.com/switchboard-chat/switchboard/config"
	"github.com/switchboard-chat/switchboard/llm"
	"github.com/switchboard-chat/switchboard/tools"
)

// file is the part of the daemon's configuration this package reads.
type file struct {
	DataDir  string                 `yaml:"data_dir"`
	LLM      llm.Config             `yaml:"llm"`
	Agent    agent.Config           `yaml:"agent"`
	Tools    tools.Config           `yaml:"tools"`
	Agents   map[string]config.Node `yaml:"agents"`
	Bindings []Binding              `yaml:"bindings"`
}

func build(t *testing.T, yaml string) (Set, error) {
	t.Helper()
	f := file{DataDir: "/data", LLM: llm.DefaultConfig(), Agent: agent.DefaultConfig(), Tools: tools.DefaultConfig()}
	env := func(k string) (string, bool) { return map[string]string{"WORK_KEY": "sk-work"}[k], k == "WORK_KEY" }
	if err := config.Decode([]byte(yaml), &f, config.Options{LookupEnv: env}); err != nil {
		t.Fatalf("decode: %v", err)
	}
	if f.LLM.BaseURL == "" {
		f.LLM.BaseURL = llm.DefaultBaseURL
	}
	return Build(Defaults{LLM: f.LLM, Agent: f.Agent, Tools: f.Tools, DataDir: f.DataDir}, f.Agents, f.Bindings)
}

// TestAgentsInheritAndOverride: an agent is the top-level sections with
// its own keys on top, whatever the order of the sections in the file.
func TestAgentsInheritAndOverride(t *testing.T) {
	set, err := build(t, `
agents:
  work:
    llm: {model: work-model, api_key: "${WORK_KEY}"}
    agent: {max_steps: 9}
    tools: {disabled: [bash]}
  main:
    llm: {temperature: 0.1}
llm: {model: top-model, max_tokens: 321}
agent: {max_steps: 12, workspace: /ws/main}
`)
	if err != nil {
		t.Fatal(err)
	}
	if got := set.names(); !cmp.Equal(got, []string{"main", "work"}) {
		t.Fatalf("agents %v, want [main work]", got)
	}
	main, _ := set.Agent(Main)
	work, _ := set.Agent("work")
	type view struct {
		Workspace, DataDir, Model, Key string
		MaxTokens, MaxSteps            int
		Temperature                    float32
		Disabled                       []string
	}
	see := func(s Spec) view {
		return view{s.Workspace, s.DataDir, s.LLM.Model, s.LLM.APIKey, s.LLM.MaxTokens, s.Agent.MaxSteps, s.LLM.Temperature, s.Tools.Disabled}
	}
	wantMain := view{"/ws/main", "/data", "top-model", "", 321, 12, 0.1, tools.DefaultConfig().Disabled}
	wantWork := view{"/data/agents/work/workspace", "/data/agents/work", "work-model", "sk-work", 321, 9, llm.DefaultConfig().Temperature, []string{"bash"}}
	if diff := cmp.Diff(wantMain, see(main)); diff != "" {
		t.Errorf("main (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(wantWork, see(work)); diff != "" {
		t.Errorf("work (-want +got):\n%s", diff)
	}
	if work.Agent.Workspace != work.Workspace {
		t.Errorf("work's agent.workspace %q, want its workspace %q", work.Agent.Workspace, work.Workspace)
	}
}

// TestNoAgentsIsMain: without agents there is main, the top-level sections.
func TestNoAgentsIsMain(t *testing.T) {
	set, err := build(t, "llm: {model: m}\n")
	if err != nil {
		t.Fatal(err)
	}
	if len(set.Agents) != 1 || set.Agents[0].Name != Main || set.Agents[0].LLM.Model != "m" || set.Agents[0].Workspace != agent.DefaultConfig().Workspace {
		t.Fatalf("agents %+v", set.Agents)
	}
	if name, i := set.Which(bus.Speaker{Channel: "telegram", ChatID: "1", UserID: "1"}); name != Main || i != -1 {
		t.Errorf("Which = %s, %d; want main, -1", name, i)
	}
}

// TestAgentConfigProblems: every problem is reported with its full path.
func TestAgentConfigProblems(t *testing.T) {
	_, err := build(t, `
llm: {model: ""}
agent: {workspace: /ws}
agents:
  work:
    llm: {modle: x, max_tokens: 0}
    agent: {max_steps: 0, partitions: 4, session_idle: 1h, workspace: /elsewhere}
    heartbeat: {every: 1m, to: {channel: telegram}, active_hours: "8-22", timezone: Mars/Olympus}
  Bad.Name: {}
  pet:
    heartbeat: {every: 30m, to: sometimes}
  twin:
    workspace: /ws
bindings:
  - {agent: nobody, channel: telegram}
  - {channel: "[", agent: work}
  - {chat_id: "1"}
`)
	var got []string
	for _, p := range config.Problems(err) {
		got = append(got, p.Error())
	}
	want := []string{
		"agents.work.heartbeat.every: 1m0s is too often: at least 5m0s",
		"agents.work.heartbeat.to.chat_id: required with to.channel",
		"agents.work.heartbeat.timezone: unknown time zone Mars/Olympus",
		`agents.work.heartbeat.active_hours: "8-22": "8" is not a time of day HH:MM`,
		`agents.pet.heartbeat.to (line 11): invalid value "sometimes": want "last" or {channel, chat_id}`,
		`agents.pet.heartbeat.to: required with every: "last" or {channel, chat_id}`,
		"agents.work.llm.modle (line 6): unknown key (did you mean model?)",
		"agents.Bad.Name: the name must match ^[a-z0-9_-]{1,32}$",
		"agents.work.agent.workspace: set agents.work.workspace instead",
		"agents.work.agent.partitions: daemon-wide, set it in agent.partitions",
		"agents.work.agent.session_idle: daemon-wide, set it in agent.session_idle",
		"agents.work.llm.max_tokens: must be at least 1, got 0",
		"agents.work.agent.max_steps: must be between 1 and 1000, got 0",
		"agents.twin.workspace: /ws is agent main's workspace too; each agent needs its own (they would share memory)",
		`bindings[0].agent: no agent "nobody" (agents: main, Bad.Name, pet, twin, work)`,
		`bindings[1].channel: bad pattern "[": syntax error in pattern`,
		"bindings[2].agent: must name an agent",
	}
	// The top-level llm.model problem is the top level's own (reported
	// there), not repeated for every agent that inherits it.
	for _, g := range got {
		if strings.Contains(g, "llm.model: must not be empty") {
			t.Errorf("inherited problem repeated: %s", g)
		}
	}
	if diff := cmp.Diff(sorted(want), sorted(got)); diff != "" {
		t.Errorf("problems (-want +got):\n%s", diff)
	}
}

func sorted(s []string) []string { return slices.Sorted(slices.Values(s)) }

// TestBindingsFirstMatchAndGlobs: bindings are tried in order, each field
// a glob, left-out fields matching anything; no match is main.
func TestBindingsFirstMatchAndGlobs(t *testing.T) {
	set, err := build(t, `
agents: {family: {}, work: {}, code: {}}
bindings:
  - {agent: family, channel: telegram, chat_id: "-100*"}
  - {agent: code, channel: telegram, user_id: "7", is_group: false}
  - {agent: work, channel: "sl[a-z]ck"}
  - {agent: family, channel: telegram}
`)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		sp      bus.Speaker
		agent   string
		binding int
	}{
		{bus.Speaker{Channel: "telegram", ChatID: "-100123", UserID: "7", IsGroup: true}, "family", 0},
		{bus.Speaker{Channel: "telegram", ChatID: "7", UserID: "7"}, "code", 1},
		{bus.Speaker{Channel: "telegram", ChatID: "-5", UserID: "7", IsGroup: true}, "family", 3},
		{bus.Speaker{Channel: "slack", ChatID: "C1", ThreadID: "1.2", UserID: "U1"}, "work", 2},
		{bus.Speaker{Channel: "console", ChatID: "me", UserID: "me"}, "main", -1},
	}
	for _, tt := range tests {
		name, i := set.Which(tt.sp)
		if name != tt.agent || i != tt.binding {
			t.Errorf("Which(%+v) = %s, %d; want %s, %d", tt.sp, name, i, tt.agent, tt.binding)
		}
		if got := NewRouter(set).Resolve(tt.sp); got != tt.agent {
			t.Errorf("Resolver(%+v) = %s, want %s", tt.sp, got, tt.agent)
		}
	}
	if got := set.Bindings[1].String(); got != `{agent: code, channel: telegram, user_id: "7", is_group: false}` {
		t.Errorf("String = %s", got)
	}
}

// TestRouterSwap: a swapped set applies to the next Resolve, and Swap and
// Resolve may run at once (go test -race).
func TestRouterSwap(t *testing.T) {
	work, err := build(t, "agents: {work: {}}\nbindings: [{agent: work, channel: slack}]\n")
	if err != nil {
		t.Fatal(err)
	}
	none, err := build(t, "agents: {work: {}}\n")
	if err != nil {
		t.Fatal(err)
	}
	r := NewRouter(work)
	sp := bus.Speaker{Channel: "slack", ChatID: "C1", UserID: "U1"}
	if got := r.Resolve(sp); got != "work" {
		t.Fatalf("Resolve = %s, want work", got)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for range 100 {
			r.Swap(none)
			r.Swap(work)
		}
	}()
	for range 100 {
		if got := r.Resolve(sp); got != "work" && got != Main {
			t.Fatalf("Resolve = %s during swaps", got)
		}
	}
	<-done
	r.Swap(none)
	if got := r.Resolve(sp); got != Main {
		t.Errorf("after Swap: Resolve = %s, want main", got)
	}
}

// TestHeartbeatConfig: agents.<name>.heartbeat is read for main and the
// others, and a heartbeat session is its agent's whatever the bindings.
func TestHeartbeatConfig(t *testing.T) {
	set, err := build(t, `
agents:
  main:
    heartbeat: {every: 30m, to: last, active_hours: "08:00-22:00", timezone: Europe/Paris}
  work:
    heartbeat:
      every: 1h
      to: {channel: slack, chat_id: C0123}
      prompt: Check the build.
bindings:
  - {agent: work, channel: "*"}
`)
	if err != nil {
		t.Fatal(err)
	}
	want := []heartbeat.Agent{
		{Name: "main", Config: heartbeat.Config{Every: 30 * time.Minute, To: heartbeat.Target{Last: true}, ActiveHours: "08:00-22:00", Timezone: "Europe/Paris"}},
		{Name: "work", Config: heartbeat.Config{Every: time.Hour, To: heartbeat.Target{Channel: "slack", ChatID: "C0123"}, Prompt: "Check the build."}},
	}
	if diff := cmp.Diff(want, set.Heartbeats()); diff != "" {
		t.Errorf("heartbeats (-want +got):\n%s", diff)
	}
	if name, _ := set.Which(bus.Speaker{Channel: heartbeat.Channel, ChatID: "main", UserID: heartbeat.User}); name != "main" {
		t.Errorf("the heartbeat session of main goes to %s (the binding on channel * must not apply)", name)
	}
	if name, _ := set.Which(bus.Speaker{Channel: "console", ChatID: "me", UserID: "me"}); name != "work" {
		t.Errorf("console goes to %s, want work", name)
	}
}

// fakeAgents records what a reload asks of the manager; fail makes the
// named agent's change fail.
type fakeAgents struct {
	calls []string
	fail  map[string]error
}

func (f *fakeAgents) Replace(name string, _, _ func() (agent.Profile, error)) error {
	f.calls = append(f.calls, "replace "+name)
	return f.fail[name]
}

func (f *fakeAgents) Swap(p agent.Profile) error {
	f.calls = append(f.calls, "swap "+p.Name)
	return f.fail[p.Name]
}

func (f *fakeAgents) Add(name string, _ func() (agent.Profile, error)) error {
	f.calls = append(f.calls, "add "+name)
	return f.fail[name]
}

func (f *fakeAgents) Remove(name string) error {
	f.calls = append(f.calls, "remove "+name)
	return f.fail[name]
}

// TestRuntimeReload: new bindings apply; an agent whose settings changed
// is replaced, a new one added, a removed one removed, each reported;
// the heartbeats are next's for the agents running; what the manager
// refuses is reported not applied and runs as before (a binding to an
// agent that could not be added picks main); the daemon-wide keys are
// kept until restart.
func TestRuntimeReload(t *testing.T) {
	old, err := build(t, "agents: {work: {}, gone: {}, same: {}}\nbindings: [{agent: work, channel: slack}]\n")
	if err != nil {
		t.Fatal(err)
	}
	next, err := build(t, `
agent: {max_concurrent_turns: 3}
agents:
  work:
    llm: {model: other}
    tools: {disabled: [bash]}
    heartbeat: {every: 1h, to: {channel: slack, chat_id: C1}}
  same: {}
  pets:
    heartbeat: {every: 1h, to: last}
  birds: {}
bindings:
  - {agent: work, channel: console}
  - {agent: pets, channel: telegram}
  - {agent: birds, channel: web}
`)
	if err != nil {
		t.Fatal(err)
	}
	rt := &Runtime{router: NewRouter(old)}
	fake := &fakeAgents{fail: map[string]error{"birds": errors.New("workspace: cannot create")}}
	lines := rt.Reload(fake, next)
	want := []string{
		"bindings: applied (3 bindings) for new sessions; running sessions keep their agent",
		"agent.max_concurrent_turns: changed, kept until restart",
		"agents.birds: not applied: workspace: cannot create",
		"agents.pets: added (bindable now)",
		"agents.work: llm, tools applied (next turn)",
		"agents.gone: removed; its sessions are answered by main from their next message",
	}
	if diff := cmp.Diff(want, lines); diff != "" {
		t.Errorf("lines (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"add birds", "add pets", "replace work", "remove gone"}, fake.calls); diff != "" {
		t.Errorf("calls (-want +got):\n%s", diff)
	}
	for sp, agent := range map[bus.Speaker]string{
		{Channel: "console", ChatID: "1", UserID: "1"}:  "work",
		{Channel: "telegram", ChatID: "1", UserID: "1"}: "pets",
		{Channel: "slack", ChatID: "C1", UserID: "U1"}:  Main,
	} {
		if got := rt.Resolve(sp); got != agent {
			t.Errorf("Resolve(%v) = %s, want %s", sp, got, agent)
		}
	}
	var names []string
	for _, h := range rt.Heartbeats() {
		if h.Config.Enabled() {
			names = append(names, h.Name)
		}
	}
	if !slices.Equal(names, []string{"pets", "work"}) {
		t.Errorf("heartbeats on: %v, want pets and work", names)
	}

	// A replacement the manager refuses keeps the running settings: a
	// second reload of the same file tries again.
	fake = &fakeAgents{fail: map[string]error{"work": errors.New("still busy")}}
	again, err := build(t, "agents: {work: {llm: {model: third}}, same: {}, pets: {}}\n")
	if err != nil {
		t.Fatal(err)
	}
	lines = rt.Reload(fake, again)
	if !slices.Contains(lines, "agents.work: not applied: still busy") {
		t.Errorf("lines: %q", lines)
	}
	if w, _ := rt.router.set.Load().Agent("work"); w.LLM.Model != "other" {
		t.Errorf("work runs with model %q after a refused replacement, want other", w.LLM.Model)
	}
}

// TestWorkspacesApart: a workspace that is data_dir or holds it, holds an
// agent's data folder, or lies inside another agent's workspace (or holds
// one) would let the file tools read the daemon's credentials, history or
// another agent's users' private memory: each is a problem naming the
// key, found on the paths as written and on their real paths after
// symbolic links. The default layout passes.
func TestWorkspacesApart(t *testing.T) {
	dir := t.TempDir()
	for _, d := range []string{"real/ws/sub", "real/data"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink(filepath.Join(dir, "real"), filepath.Join(dir, "alias")); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, data, yaml string
		want             []string
	}{
		{"default layout", "/data", "agents: {work: {}}\nagent: {workspace: /data/workspace}\n", nil},
		{"data_dir itself", "/data", "agent: {workspace: /data}\n",
			[]string{"agent.workspace: /data is or holds data_dir /data"}},
		{"above data_dir", "/srv/bot/data", "agent: {workspace: /srv/bot}\n",
			[]string{"agent.workspace: /srv/bot is or holds data_dir /srv/bot/data"}},
		{"an agent's data folder", "/data", "agents: {work: {workspace: /data/agents/work}}\nagent: {workspace: /ws}\n",
			[]string{"agents.work.workspace: /data/agents/work is or holds agent work's data folder /data/agents/work"}},
		{"another agent's data folder", "/data", "agents: {work: {}, pets: {workspace: /data/agents}}\nagent: {workspace: /ws}\n",
			[]string{"agents.pets.workspace: /data/agents is or holds agent pets's data folder /data/agents/pets",
				"agents.work.workspace: /data/agents/work/workspace is inside agent pets's workspace /data/agents"}},
		{"inside main's", "/data", "agents: {work: {workspace: /ws/work}}\nagent: {workspace: /ws}\n",
			[]string{"agents.work.workspace: /ws/work is inside agent main's workspace /ws"}},
		{"holding main's", "/data", "agents: {work: {workspace: /srv}}\nagent: {workspace: /srv/main}\n",
			[]string{"agents.work.workspace: /srv holds agent main's workspace /srv/main"}},
		{"inside through a symbolic link", filepath.Join(dir, "real/data"),
			"agents: {work: {workspace: " + filepath.Join(dir, "alias/ws/sub") + "}}\nagent: {workspace: " + filepath.Join(dir, "real/ws") + "}\n",
			[]string{"agents.work.workspace: " + filepath.Join(dir, "alias/ws/sub") + " is inside agent main's workspace " + filepath.Join(dir, "real/ws")}},
		{"data_dir through a symbolic link", filepath.Join(dir, "alias/data"), "agent: {workspace: " + filepath.Join(dir, "real") + "}\n",
			[]string{"agent.workspace: " + filepath.Join(dir, "real") + " is or holds data_dir " + filepath.Join(dir, "alias/data")}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := file{DataDir: tc.data, LLM: llm.DefaultConfig(), Agent: agent.DefaultConfig(), Tools: tools.DefaultConfig()}
			if err := config.Decode([]byte(tc.yaml), &f, config.Options{}); err != nil {
				t.Fatal(err)
			}
			f.LLM.BaseURL = llm.DefaultBaseURL
			_, err := Build(Defaults{LLM: f.LLM, Agent: f.Agent, Tools: f.Tools, DataDir: f.DataDir}, f.Agents, f.Bindings)
			var got []string
			for _, p := range config.Problems(err) {
				got = append(got, p.Error())
			}
			if len(got) != len(tc.want) {
				t.Fatalf("problems %q, want %q", got, tc.want)
			}
			for i, w := range tc.want {
				if !strings.HasPrefix(got[i], w) {
					t.Errorf("problem %q, want it to start with %q", got[i], w)
				}
			}
		})
	}
}

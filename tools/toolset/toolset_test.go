package toolset_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"
	"go.uber.org/goleak"

	"github.com/switchboard-chat/switchboard/bus"
	"github.com/switchboard-chat/switchboard/bus/natsbus"
	"github.com/switchboard-chat/switchboard/tools"
	"github.com/switchboard-chat/switchboard/tools/mcp"
	"github.com/switchboard-chat/switchboard/tools/toolset"
	"github.com/switchboard-chat/switchboard/workspace"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// The bus is what the tools publish through.
var _ toolset.Publisher = (*natsbus.Bus)(nil)

type recordingPublisher struct {
	mu   sync.Mutex
	subj []string
}

func (p *recordingPublisher) Publish(_ context.Context, subject string, _ []byte, _ string) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.subj = append(p.subj, subject)
	return nil
}

func toolsTestSetup(t *testing.T) (toolset.Config, *workspace.Workspace) {
	t.Helper()
	dir := t.TempDir()
	cfg := toolset.Config{Tools: tools.DefaultConfig(), MCP: mcp.DefaultConfig(),
		SubjectPrefix: natsbus.DefaultConfig().SubjectPrefix, DataDir: filepath.Join(dir, "data"), Version: "test"}
	ws, err := workspace.Open(filepath.Join(dir, "ws"), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ws.Close() })
	return cfg, ws
}

// runTools runs the tool layer until the test ends.
func runTools(t *testing.T, set *toolset.Set) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- set.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("run = %v", err)
		}
	})
}

func TestOpenWiring(t *testing.T) {
	cfg, ws := toolsTestSetup(t)
	extra := &namedTool{name: "memory_search"}
	built, err := toolset.Open(cfg, ws, &recordingPublisher{}, nil, toolset.Privacy{}, extra)
	if err != nil {
		t.Fatal(err)
	}
	runTools(t, built)
	tb := built.Toolbox
	want := []string{"read_file", "write_file", "edit_file", "list_dir", "search_files", "web_fetch", "send_message", "schedule", "memory_search"}
	if got := tb.Names(); !slices.Equal(got, want) {
		t.Errorf("tools = %v, want %v (bash is off by default)", got, want)
	}
	if post := tb.PostTurn(); len(post) != 1 || post[0].Name() != "record_chat" {
		t.Errorf("post-turn tools = %v", post)
	}
	if built.CallTimeout != 120*time.Second {
		t.Errorf("CallTimeout = %s", built.CallTimeout)
	}
	if fi, err := os.Stat(filepath.Join(ws.Dir(), "skills")); err != nil || !fi.IsDir() {
		t.Errorf("skills folder not created: %v", err)
	}

	// A skill called as a tool returns its SKILL.md; the prompt lists it.
	skill := "---\nname: demo\ndescription: Shows how skills work.\n---\n# Demo\nDo the demo.\n"
	if err := os.MkdirAll(filepath.Join(ws.Dir(), "skills", "demo"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(ws.Dir(), "skills", "demo", "SKILL.md"), []byte(skill), 0o600); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(built.Skills.PromptSection(), "- demo: Shows how skills work. (skills/demo/SKILL.md)") {
		t.Errorf("prompt section:\n%s", built.Skills.PromptSection())
	}
	if !tb.Known("demo") || tb.Known("nonexistent") {
		t.Error("Known does not cover skills")
	}
	r := tb.Run(t.Context(), "demo", tools.Call{Args: json.RawMessage(`{}`)})
	if r.IsError || !strings.Contains(r.Text, "is a skill, not a tool") || !strings.Contains(r.Text, "Do the demo.") {
		t.Errorf("skill as a tool: %+v", r)
	}
	// search_files is wired to the workspace.
	r = tb.Run(t.Context(), "search_files", tools.Call{Args: json.RawMessage(`{"pattern":"Do the demo"}`)})
	if r.IsError || r.Text != "skills/demo/SKILL.md:6: Do the demo." {
		t.Errorf("search_files: %+v", r)
	}
}

func TestOpenOptions(t *testing.T) {
	cfg, ws := toolsTestSetup(t)
	cfg.Tools.Disabled = []string{"web_*", "schedule"}
	cfg.Tools.Bash.Enabled = true
	cfg.Tools.Bash.AllowUsers = []string{"console:u1"}
	built, err := toolset.Open(cfg, ws, &recordingPublisher{}, nil, toolset.Privacy{})
	if err != nil {
		t.Fatal(err)
	}
	runTools(t, built)
	names := built.Toolbox.Names()
	if !slices.Contains(names, "bash") || slices.Contains(names, "web_fetch") || slices.Contains(names, "schedule") {
		t.Errorf("tools = %v", names)
	}
	if built.CallTimeout != 610*time.Second {
		t.Errorf("CallTimeout with bash = %s", built.CallTimeout)
	}
	u1 := tools.Session{Key: "console/c", Speaker: bus.Speaker{Channel: "console", ChatID: "c", UserID: "u1"}}
	r := built.Toolbox.Run(t.Context(), "bash", tools.Call{Args: json.RawMessage(`{"command":"echo hi"}`), Session: u1})
	if r.IsError || r.Text != "hi\n" {
		t.Errorf("bash: %+v", r)
	}
	other := u1
	other.UserID = "u2"
	if r := built.Toolbox.Run(t.Context(), "bash", tools.Call{Args: json.RawMessage(`{"command":"echo hi"}`), Session: other}); !r.Denied {
		t.Errorf("bash for another user: %+v", r)
	}
}

func TestOpenErrors(t *testing.T) {
	cfg, ws := toolsTestSetup(t)
	cfg.Tools.Bash.Enabled = true
	cfg.Tools.Bash.Sandbox = "nonsense"
	if _, err := toolset.Open(cfg, ws, &recordingPublisher{}, nil, toolset.Privacy{}); err == nil {
		t.Fatal("bad sandbox accepted")
	}
	// Nothing was left open: the database can be opened again at once.
	db, err := bolt.Open(filepath.Join(cfg.DataDir, toolset.DBFile), 0o600, &bolt.Options{Timeout: time.Second})
	if err != nil {
		t.Fatalf("tools.db still locked after a failed build: %v", err)
	}
	_ = db.Close()
	cfg, ws = toolsTestSetup(t)
	if _, err := toolset.Open(cfg, ws, &recordingPublisher{}, nil, toolset.Privacy{}, &namedTool{name: "read_file"}); err == nil {
		t.Error("an extra tool with a built-in's name was accepted")
	}
}

// TestScheduleOverNATS fires a task through the embedded bus and shows
// that publishing the same run again is dropped by JetStream.
func TestScheduleOverNATS(t *testing.T) {
	cfg, ws := toolsTestSetup(t)
	bc := natsbus.DefaultConfig()
	bc.Listen = ""
	b, err := natsbus.Open(t.Context(), bc, filepath.Join(cfg.DataDir, "jetstream"), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() }) // after the tools stopped
	in, err := b.Conn().SubscribeSync(b.Subjects().In("console", "c1"))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = in.Unsubscribe() }()
	out, err := b.Conn().SubscribeSync(b.Subjects().Out("console", "c1"))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = out.Unsubscribe() }()
	built, err := toolset.Open(cfg, ws, b, nil, toolset.Privacy{})
	if err != nil {
		t.Fatal(err)
	}
	runTools(t, built)
	sess := tools.Session{Key: "console/c1", Speaker: bus.Speaker{Channel: "console", ChatID: "c1", UserID: "u1"}}
	r := built.Toolbox.Run(t.Context(), "schedule", tools.Call{Args: json.RawMessage(`{"action":"create","prompt":"say hi","at":"+1s"}`), Session: sess})
	if r.IsError {
		t.Fatalf("schedule: %+v", r)
	}
	msg, err := in.NextMsg(20 * time.Second)
	if err != nil {
		t.Fatalf("no scheduled run arrived: %v", err)
	}
	env, err := bus.ParseInbound(b.Subjects(), msg.Subject, msg.Data, 0)
	if err != nil {
		t.Fatal(err)
	}
	if env.Text != "[Scheduled task] say hi" || env.UserID != "u1" || !strings.HasPrefix(env.ID, "sched:") {
		t.Errorf("run = %+v", env)
	}
	// The same run published again (as after a crash before it was
	// recorded) is a duplicate for the stream.
	if err := b.Publish(t.Context(), msg.Subject, msg.Data, env.DedupKey()); err != nil {
		t.Fatal(err)
	}
	st, err := b.JetStream().Stream(t.Context(), b.Streams().In)
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if info.State.Msgs != 1 {
		t.Errorf("the in stream holds %d messages, want 1 (the copy de-duplicated)", info.State.Msgs)
	}

	// send_message reaches the chat's outbound subject.
	r = built.Toolbox.Run(t.Context(), "send_message", tools.Call{Args: json.RawMessage(`{"text":"hello"}`), Session: sess})
	if r.IsError {
		t.Fatalf("send_message: %+v", r)
	}
	m, err := out.NextMsg(20 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	var o bus.Outbound
	if err := json.Unmarshal(m.Data, &o); err != nil || o.Text != "hello" || o.Kind != bus.KindReply || o.InReplyTo != "" || o.Validate() != nil {
		t.Errorf("outbound = %+v, %v", o, err)
	}
}

// namedTool is a minimal tool for wiring tests.
type namedTool struct{ name string }

func (n *namedTool) Name() string            { return n.name }
func (n *namedTool) Description() string     { return "test tool" }
func (n *namedTool) Schema() json.RawMessage { return json.RawMessage(`{"type":"object"}`) }
func (n *namedTool) Permission() string      { return tools.PermRead }
func (n *namedTool) ParallelSafe() bool      { return true }
func (n *namedTool) Run(context.Context, tools.Call) (tools.Result, error) {
	return tools.Result{Text: "ok"}, nil
}

// A turn asks every tool for its name, description and schema (the
// prompt's tool list, the request's tool set): none of them is built
// again per call. Bash is on here, so that its description is covered.
func TestToolFactsCostNothingPerCall(t *testing.T) {
	cfg, ws := toolsTestSetup(t)
	cfg.Tools.Bash.Enabled, cfg.Tools.Bash.Sandbox = true, "none"
	built, err := toolset.Open(cfg, ws, &recordingPublisher{}, nil, toolset.Privacy{})
	if err != nil {
		t.Fatal(err)
	}
	runTools(t, built)
	list := built.Toolbox.List()
	if !slices.ContainsFunc(list, func(tl tools.Tool) bool { return tl.Name() == "bash" }) {
		t.Fatalf("bash is not in %v", built.Toolbox.Names())
	}
	for _, tl := range list {
		if n := testing.AllocsPerRun(50, func() { _, _, _ = tl.Name(), tl.Description(), tl.Schema() }); n != 0 {
			t.Errorf("%s: %v allocations per Name, Description and Schema", tl.Name(), n)
		}
	}
}

// The tool list of a turn costs one allocation (the caller's slice) when
// no MCP server offers tools.
func TestToolListCostsOneAllocation(t *testing.T) {
	cfg, ws := toolsTestSetup(t)
	built, err := toolset.Open(cfg, ws, &recordingPublisher{}, nil, toolset.Privacy{})
	if err != nil {
		t.Fatal(err)
	}
	runTools(t, built)
	if n := testing.AllocsPerRun(50, func() { _ = built.Toolbox.List() }); n > 1 {
		t.Errorf("List: %v allocations, want 1", n)
	}
}

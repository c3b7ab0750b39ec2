package tools_test

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/switchboard-chat/switchboard/bus"
	"github.com/switchboard-chat/switchboard/tools"
)

// fakeSource is a Source whose tools the test changes.
type fakeSource struct {
	mu sync.Mutex
	ts []tools.Tool
}

func (s *fakeSource) Tools() []tools.Tool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]tools.Tool(nil), s.ts...)
}

func (s *fakeSource) set(ts ...tools.Tool) {
	s.mu.Lock()
	s.ts = ts
	s.mu.Unlock()
}

func TestToolboxDynamic(t *testing.T) {
	var logs bytes.Buffer
	base, err := tools.NewRegistry(&fakeTool{name: "read_file"}, postTool{&fakeTool{name: "indexer"}}, &fakeTool{name: "bash"})
	if err != nil {
		t.Fatal(err)
	}
	base = base.WithLogger(slog.New(slog.NewTextHandler(&logs, nil)))
	src := &fakeSource{}
	tb, err := tools.NewToolbox(base, []string{"bash", "mcp_x_*"}, src)
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(tb.Names(), ","); got != "read_file" {
		t.Errorf("Names() = %s, want read_file (bash disabled, indexer post-turn)", got)
	}
	if r := tb.Run(t.Context(), "bash", tools.Call{}); !r.IsError || !strings.Contains(r.Text, `unknown tool "bash"`) {
		t.Errorf("Run(disabled bash) = %+v", r)
	}

	// A server joins with a tool, a clash with a built-in, a disabled one
	// and an invalid one.
	src.set(&fakeTool{name: "mcp_a_echo"}, &fakeTool{name: "read_file"}, &fakeTool{name: "mcp_x_secret"}, &fakeTool{name: "bad name"})
	if got := strings.Join(tb.Names(), ","); got != "read_file,mcp_a_echo" {
		t.Errorf("Names() after the source changed = %s", got)
	}
	if r := tb.Run(t.Context(), "mcp_a_echo", tools.Call{}); r.IsError || r.Text != "ok mcp_a_echo" {
		t.Errorf("Run(mcp_a_echo) = %+v", r)
	}
	if r := tb.Run(t.Context(), "mcp_x_secret", tools.Call{}); !r.IsError {
		t.Errorf("Run(disabled source tool) = %+v", r)
	}
	if r := tb.Run(t.Context(), "indexer", tools.Call{}); !r.IsError {
		t.Errorf("Run(post-turn tool) = %+v", r)
	}
	r := tb.Run(t.Context(), "nope", tools.Call{})
	if !r.IsError || !strings.Contains(r.Text, "available tools: read_file, mcp_a_echo") {
		t.Errorf("Run(unknown) = %+v", r)
	}
	tb.List() // logged once, not again
	if n := strings.Count(logs.String(), "already exists"); n != 1 {
		t.Errorf("clash logged %d times, want once:\n%s", n, logs.String())
	}
	if !strings.Contains(logs.String(), "bad name") {
		t.Errorf("invalid tool not logged:\n%s", logs.String())
	}
	if got := tb.PostTurn(); len(got) != 1 || got[0].Name() != "indexer" {
		t.Errorf("PostTurn() = %v", got)
	}
	if r := tb.RunPostTurn(t.Context(), got0(tb.PostTurn()), tools.Call{}); r.Text != "ok indexer" {
		t.Errorf("RunPostTurn = %+v", r)
	}

	src.set() // the server went away
	if got := strings.Join(tb.Names(), ","); got != "read_file" {
		t.Errorf("Names() after the source emptied = %s", got)
	}
}

func got0(ts []tools.Tool) tools.Tool { return ts[0] }

func TestToolboxConcurrent(t *testing.T) {
	base, _ := tools.NewRegistry(&fakeTool{name: "a"})
	src := &fakeSource{}
	tb, err := tools.NewToolbox(base, nil, src)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for i := range 4 {
		wg.Go(func() {
			for j := range 50 {
				if i == 0 {
					src.set(&fakeTool{name: "mcp_s_t"})
					if j%2 == 0 {
						src.set()
					}
				}
				_ = tb.List()
				_ = tb.Run(t.Context(), "mcp_s_t", tools.Call{})
			}
		})
	}
	wg.Wait()
}

func TestToolboxErrors(t *testing.T) {
	if _, err := tools.NewToolbox(nil, []string{"[x"}); err == nil {
		t.Error("malformed disabled pattern accepted")
	}
	if _, err := tools.NewToolbox(nil, nil, nil); err == nil {
		t.Error("nil source accepted")
	}
	tb, err := tools.NewToolbox(nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if r := tb.Run(t.Context(), "x", tools.Call{}); !strings.Contains(r.Text, "available tools: (none)") {
		t.Errorf("Run on an empty toolbox = %+v", r)
	}
}

func TestRegistryFallback(t *testing.T) {
	base, _ := tools.NewRegistry(&fakeTool{name: "a"})
	fb := func(_ context.Context, name string, call tools.Call) (tools.Result, bool) {
		switch name {
		case "weather":
			return tools.Result{Text: "skill text for " + call.ID}, true
		case "boom":
			panic("fallback exploded")
		case "empty":
			return tools.Result{}, true
		}
		return tools.Result{}, false
	}
	r := base.WithFallback(fb, func(name string) bool { return name == "weather" })
	if got := r.Run(t.Context(), "weather", tools.Call{ID: "c1"}); got.IsError || got.Text != "skill text for c1" {
		t.Errorf("fallback hit = %+v", got)
	}
	if got := r.Run(t.Context(), "other", tools.Call{}); !got.IsError || !strings.Contains(got.Text, `unknown tool "other"; available tools: a`) {
		t.Errorf("fallback miss = %+v", got)
	}
	if got := r.Run(t.Context(), "boom", tools.Call{}); !got.IsError || !strings.Contains(got.Text, "fallback exploded") {
		t.Errorf("fallback panic = %+v", got)
	}
	if got := r.Run(t.Context(), "empty", tools.Call{}); got.Text != tools.NoOutput {
		t.Errorf("empty fallback result = %+v", got)
	}
	if got := base.Run(t.Context(), "weather", tools.Call{}); !got.IsError {
		t.Errorf("WithFallback changed the receiver: %+v", got)
	}
	if !r.Known("a") || !r.Known("weather") || r.Known("other") || base.Known("weather") {
		t.Error("Registry.Known is wrong")
	}
	// The toolbox goes through the base's fallback too.
	src := &fakeSource{}
	src.set(&fakeTool{name: "mcp_s_t"})
	tb, _ := tools.NewToolbox(r, []string{"a"}, src)
	if got := tb.Run(t.Context(), "weather", tools.Call{ID: "c2"}); got.Text != "skill text for c2" {
		t.Errorf("toolbox fallback = %+v", got)
	}
	if !tb.Known("weather") || !tb.Known("mcp_s_t") || tb.Known("a") || tb.Known("other") {
		t.Error("Toolbox.Known is wrong")
	}
}

func TestResultImagesKeptOnError(t *testing.T) {
	img := tools.File{Name: "a.png", MIME: "image/png", Data: []byte{1}}
	r, _ := tools.NewRegistry(&fakeTool{name: "shot", run: func(context.Context, tools.Call) (tools.Result, error) {
		return tools.Result{Images: []tools.File{img}}, context.DeadlineExceeded
	}})
	got := r.Run(t.Context(), "shot", tools.Call{})
	if !got.IsError || len(got.Images) != 1 {
		t.Errorf("Run = %+v, want an error keeping the image", got)
	}
}

func TestSessionThread(t *testing.T) {
	tests := []struct {
		s    tools.Session
		want string
	}{
		{tools.Session{Key: "slack/C1/171.2", Speaker: bus.Speaker{Channel: "slack", ChatID: "C1"}}, "171.2"},
		{tools.Session{Key: "slack/C1", Speaker: bus.Speaker{Channel: "slack", ChatID: "C1"}}, ""},
		{tools.Session{Key: "x/a/b/c", Speaker: bus.Speaker{Channel: "x", ChatID: "a/b"}}, "c"},
		{tools.Session{Key: "x/a/b", Speaker: bus.Speaker{Channel: "x", ChatID: "a/b"}}, ""},
		{tools.Session{Key: "x/a/b", Speaker: bus.Speaker{Channel: "x", ChatID: "a", ThreadID: "t"}}, "t"},
		{tools.Session{Key: "x/a/b"}, ""},
	}
	for _, tt := range tests {
		if got := tt.s.Thread(); got != tt.want {
			t.Errorf("%+v.Thread() = %q, want %q", tt.s, got, tt.want)
		}
	}
}

func TestScrubEnv(t *testing.T) {
	env := []string{"PATH=/bin", "HOME=/root", "OPENAI_API_KEY=sk-1", "LC_ALL=C", "GITHUB_TOKEN=x", "RANDOM_THING=1",
		"TERM=xterm", "MY_VAR=keep", "DB_PASSWORD=p", "AWS_SECRET_ACCESS_KEY=s", "noequals", "=x"}
	got := strings.Join(tools.ScrubEnv(env, []string{"MY_VAR", "GITHUB_TOKEN"}), " ")
	if got != "PATH=/bin HOME=/root LC_ALL=C GITHUB_TOKEN=x TERM=xterm MY_VAR=keep" {
		t.Errorf("ScrubEnv = %s", got)
	}
}

func TestUserAllowed(t *testing.T) {
	allow := []string{"telegram:42", "console:*"}
	tests := []struct {
		s    tools.Session
		want bool
	}{
		{tools.Session{Speaker: bus.Speaker{Channel: "telegram", UserID: "42"}}, true},
		{tools.Session{Speaker: bus.Speaker{Channel: "telegram", UserID: "43"}}, false},
		{tools.Session{Speaker: bus.Speaker{Channel: "slack", UserID: "42"}}, false},
		{tools.Session{Speaker: bus.Speaker{Channel: "console", UserID: "anyone"}}, true},
		{tools.Session{Speaker: bus.Speaker{Channel: "console"}}, false},
	}
	for _, tt := range tests {
		if got := tools.UserAllowed(allow, tt.s); got != tt.want {
			t.Errorf("UserAllowed(%+v) = %v, want %v", tt.s, got, tt.want)
		}
	}
}

func TestConfigValidate(t *testing.T) {
	if err := tools.DefaultConfig().Validate(); err != nil {
		t.Fatalf("defaults invalid: %v", err)
	}
	c := tools.DefaultConfig()
	c.Disabled = []string{"ok", "[bad", ""}
	c.SearchFiles.MaxResults = 0
	c.Bash.Timeout = 0
	c.Bash.MaxTimeout = -1
	c.Bash.Sandbox = "docker"
	c.Bash.AllowUsers = []string{"telegram:1", "nochannel", "Bad:1"}
	c.Bash.PassEnv = []string{"OK_1", "1BAD"}
	c.Bash.MaxJobs = 100
	c.WebFetch.MaxRedirects = 50
	c.WebFetch.MaxBytes = 10
	c.WebFetch.UserAgent = "a\nb"
	c.SendMessage.MaxFileBytes = 1 << 30
	c.Schedule.MaxPerUser = 0
	c.Schedule.MaxPerChannel = -1
	c.Schedule.MinInterval = time.Second
	c.Schedule.Timezone = "Mars/Olympus"
	err := c.Validate()
	if err == nil {
		t.Fatal("Validate accepted a bad config")
	}
	for _, want := range []string{
		"tools.disabled[1]", "tools.disabled[2]", "tools.search_files.max_results", "tools.bash.timeout", "tools.bash.max_timeout",
		"tools.bash.sandbox", "tools.bash.allow_users[1]", "tools.bash.allow_users[2]", "tools.bash.pass_env[1]",
		"tools.bash.max_jobs", "tools.web_fetch.max_redirects", "tools.web_fetch.max_bytes", "tools.web_fetch.user_agent",
		"tools.send_message.max_file_bytes", "tools.schedule.max_per_user", "tools.schedule.max_per_channel", "tools.schedule.min_interval", "tools.schedule.timezone",
	} {
		if !strings.Contains(err.Error(), want+":") {
			t.Errorf("Validate error lacks %s:\n%v", want, err)
		}
	}
	for _, unwanted := range []string{"tools.disabled[0]", "allow_users[0]", "pass_env[0]"} {
		if strings.Contains(err.Error(), unwanted) {
			t.Errorf("Validate flagged a valid entry %s", unwanted)
		}
	}
}

// TestToolboxListCost: List and PostTurn, asked once per turn, make one
// slice when no source has tools (issue 16); a name taken by a built-in or by an earlier
// source tool is still refused.
func TestToolboxListCost(t *testing.T) {
	var ts []tools.Tool
	for _, n := range []string{"read_file", "write_file", "edit_file", "list_dir", "bash", "web_fetch", "memory", "send_message"} {
		ts = append(ts, &fakeTool{name: n})
	}
	base, err := tools.NewRegistry(append(ts, postTool{&fakeTool{name: "indexer"}})...)
	if err != nil {
		t.Fatal(err)
	}
	base = base.WithLogger(slog.New(slog.DiscardHandler))
	src := &fakeSource{}
	tb, err := tools.NewToolbox(base, []string{"bash"}, src)
	if err != nil {
		t.Fatal(err)
	}
	if n := testing.AllocsPerRun(100, func() { tb.List() }); n > 2 { // the list and the empty source's copy
		t.Errorf("List: %.0f allocations, want at most 2", n)
	}
	if n := testing.AllocsPerRun(100, func() { tb.PostTurn() }); n > 1 {
		t.Errorf("PostTurn: %.0f allocations, want at most 1", n)
	}
	src.set(&fakeTool{name: "mcp_a_one"}, &fakeTool{name: "mcp_a_one"}, &fakeTool{name: "edit_file"}, &fakeTool{name: "mcp_a_two"})
	if got := strings.Join(tb.Names(), ","); got != "read_file,write_file,edit_file,list_dir,web_fetch,memory,send_message,mcp_a_one,mcp_a_two" {
		t.Errorf("Names() = %s", got)
	}
}

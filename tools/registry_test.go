package tools_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"

	"go.uber.org/goleak"

	"github.com/switchboard-chat/switchboard/tools"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// fakeTool is a configurable tool for registry tests.
type fakeTool struct {
	name   string
	perm   string
	schema string
	run    func(ctx context.Context, call tools.Call) (tools.Result, error)
}

func (f *fakeTool) Name() string        { return f.name }
func (f *fakeTool) Description() string { return "fake " + f.name }
func (f *fakeTool) Schema() json.RawMessage {
	if f.schema == "" {
		return json.RawMessage(`{"type":"object","properties":{}}`)
	}
	return json.RawMessage(f.schema)
}
func (f *fakeTool) Permission() string {
	if f.perm == "" {
		return tools.PermRead
	}
	return f.perm
}
func (f *fakeTool) ParallelSafe() bool { return true }
func (f *fakeTool) Run(ctx context.Context, call tools.Call) (tools.Result, error) {
	if f.run == nil {
		return tools.Result{Text: "ok " + f.name}, nil
	}
	return f.run(ctx, call)
}

func TestNewRegistryValid(t *testing.T) {
	a, b, c := &fakeTool{name: "b_tool"}, &fakeTool{name: "A-1"}, &fakeTool{name: strings.Repeat("x", 64), perm: tools.PermMessage}
	r, err := tools.NewRegistry(a, b, c)
	if err != nil {
		t.Fatalf("NewRegistry = %v", err)
	}
	if got := strings.Join(r.Names(), ","); got != "b_tool,A-1,"+strings.Repeat("x", 64) {
		t.Errorf("Names() = %s, want registration order", got)
	}
	list := r.List()
	if len(list) != 3 || list[0] != a || list[1] != b {
		t.Errorf("List() = %v", list)
	}
	list[0] = nil // a copy: the registry is unaffected
	if got, ok := r.Get("b_tool"); !ok || got != a || r.List()[0] != a {
		t.Errorf("Get(b_tool) = %v, %v", got, ok)
	}
	if _, ok := r.Get("missing"); ok {
		t.Error("Get(missing) found something")
	}
	empty, err := tools.NewRegistry()
	if err != nil || len(empty.Names()) != 0 {
		t.Errorf("NewRegistry() = %v, %v", empty, err)
	}
}

func TestNewRegistryRejects(t *testing.T) {
	tests := []struct {
		name  string
		tools []tools.Tool
		want  string
		is    error
	}{
		{"nil tool", []tools.Tool{nil}, "nil", nil},
		{"empty name", []tools.Tool{&fakeTool{name: ""}}, "must match", nil},
		{"duplicate", []tools.Tool{&fakeTool{name: "x"}, &fakeTool{name: "x"}}, `"x"`, tools.ErrDuplicateTool},
		{"bad chars", []tools.Tool{&fakeTool{name: "read file"}}, "must match", nil},
		{"dot", []tools.Tool{&fakeTool{name: "a.b"}}, "must match", nil},
		{"too long", []tools.Tool{&fakeTool{name: strings.Repeat("x", 65)}}, "must match", nil},
		{"schema not JSON", []tools.Tool{&fakeTool{name: "s", schema: `{`}}, "not a JSON object", nil},
		{"schema array", []tools.Tool{&fakeTool{name: "s", schema: `[]`}}, "not a JSON object", nil},
		{"schema null", []tools.Tool{&fakeTool{name: "s", schema: `null`}}, "not a JSON object", nil},
		{"schema without type", []tools.Tool{&fakeTool{name: "s", schema: `{"properties":{}}`}}, `"type": "object"`, nil},
		{"schema wrong type", []tools.Tool{&fakeTool{name: "s", schema: `{"type":"string"}`}}, `"type": "object"`, nil},
		{"bad permission", []tools.Tool{&fakeTool{name: "p", perm: "admin"}}, "permission", nil},
	}
	for _, tt := range tests {
		_, err := tools.NewRegistry(tt.tools...)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: NewRegistry = %v, want error containing %q", tt.name, err, tt.want)
		}
		if tt.is != nil && !errors.Is(err, tt.is) {
			t.Errorf("%s: NewRegistry = %v, want errors.Is %v", tt.name, err, tt.is)
		}
	}
}

func TestRunResults(t *testing.T) {
	var buf bytes.Buffer
	log := slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
	var gotCall tools.Call
	base, err := tools.NewRegistry(
		&fakeTool{name: "ok"},
		&fakeTool{name: "echo", run: func(_ context.Context, c tools.Call) (tools.Result, error) {
			gotCall = c
			return tools.Result{Text: string(c.Args)}, nil
		}},
		&fakeTool{name: "fails", run: func(context.Context, tools.Call) (tools.Result, error) {
			return tools.Result{}, errors.New("disk on fire")
		}},
		&fakeTool{name: "empty", run: func(context.Context, tools.Call) (tools.Result, error) { return tools.Result{}, nil }},
		&fakeTool{name: "blank", run: func(context.Context, tools.Call) (tools.Result, error) { return tools.Result{Text: " \n"}, nil }},
		&fakeTool{name: "iserr", run: func(context.Context, tools.Call) (tools.Result, error) {
			return tools.Result{Text: "quota exceeded", IsError: true}, nil
		}},
		&fakeTool{name: "iserr_prefixed", run: func(context.Context, tools.Call) (tools.Result, error) {
			return tools.Result{Text: "Error: already", IsError: true}, nil
		}},
		&fakeTool{name: "iserr_empty", run: func(context.Context, tools.Call) (tools.Result, error) {
			return tools.Result{IsError: true}, nil
		}},
		&fakeTool{name: "panics", run: func(context.Context, tools.Call) (tools.Result, error) { panic("nil map write") }},
		&fakeTool{name: "files", run: func(context.Context, tools.Call) (tools.Result, error) {
			return tools.Result{Files: []tools.File{{Name: "a.png", MIME: "image/png", Data: []byte{1}}}}, nil
		}},
	)
	if err != nil {
		t.Fatal(err)
	}
	r := base.WithLogger(log)
	call := tools.Call{ID: "call-1", Args: json.RawMessage(`{"x":1}`), Session: tools.Session{Key: "telegram/1"}}
	tests := []struct {
		tool    string
		want    string
		isError bool
	}{
		{"ok", "ok ok", false},
		{"echo", `{"x":1}`, false},
		{"fails", "Error: disk on fire", true},
		{"empty", "(no output)", false},
		{"blank", "(no output)", false},
		{"iserr", "Error: quota exceeded", true},
		{"iserr_prefixed", "Error: already", true},
		{"iserr_empty", "Error: (no output)", true},
		{"panics", "Error: tool panics failed unexpectedly: nil map write", true},
		{"files", "(no output)", false},
		{"nope", `Error: unknown tool "nope"; available tools: ok, echo, fails`, true},
	}
	for _, tt := range tests {
		res := r.Run(t.Context(), tt.tool, call)
		if !strings.HasPrefix(res.Text, tt.want) || res.IsError != tt.isError {
			t.Errorf("Run(%s) = %q, IsError %v; want %q, %v", tt.tool, res.Text, res.IsError, tt.want, tt.isError)
		}
	}
	if gotCall.ID != "call-1" || gotCall.Session.Key != "telegram/1" {
		t.Errorf("tool got call %+v", gotCall)
	}
	if res := r.Run(t.Context(), "files", call); len(res.Files) != 1 {
		t.Errorf("Files dropped: %+v", res)
	}
	logs := buf.String()
	if !strings.Contains(logs, "level=ERROR") || !strings.Contains(logs, "tool=panics") || !strings.Contains(logs, "registry_test.go") {
		t.Errorf("panic not logged at Error level with a stack:\n%s", logs)
	}
	// The base registry stays silent (WithLogger returned a copy).
	buf.Reset()
	base.Run(t.Context(), "panics", call)
	if buf.Len() != 0 {
		t.Errorf("base registry logged: %s", buf.String())
	}
	// An empty registry still answers.
	empty, _ := tools.NewRegistry()
	if res := empty.WithLogger(nil).Run(t.Context(), "x", call); res.Text != `Error: unknown tool "x"; available tools: (none)` {
		t.Errorf("empty registry Run = %q", res.Text)
	}
}

func TestRunCanceledContext(t *testing.T) {
	ran := false
	r, err := tools.NewRegistry(&fakeTool{name: "t", run: func(context.Context, tools.Call) (tools.Result, error) {
		ran = true
		return tools.Result{Text: "x"}, nil
	}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	res := r.Run(ctx, "t", tools.Call{})
	if ran || !res.IsError || !strings.Contains(res.Text, "context canceled") {
		t.Errorf("Run(canceled) = %+v, ran %v", res, ran)
	}
}

func TestRunConcurrent(t *testing.T) {
	r, err := tools.NewRegistry(&fakeTool{name: "a"}, &fakeTool{name: "b"})
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 50 {
				if res := r.Run(context.Background(), "a", tools.Call{}); res.Text != "ok a" {
					t.Errorf("Run = %q", res.Text)
				}
				_ = r.Names()
				_, _ = r.Get("b")
			}
		})
	}
	wg.Wait()
}

func TestDecodeArgs(t *testing.T) {
	type args struct {
		Path  string  `json:"path"`
		Limit int     `json:"limit"`
		All   bool    `json:"all"`
		Text  *string `json:"text"`
	}
	var a args
	if err := tools.DecodeArgs(json.RawMessage(` {"path":"a","limit":3,"all":true,"text":""} `), &a); err != nil {
		t.Fatalf("DecodeArgs = %v", err)
	}
	if a.Path != "a" || a.Limit != 3 || !a.All || a.Text == nil {
		t.Errorf("decoded %+v", a)
	}
	for _, raw := range []string{"", "  ", "{}"} {
		var b args
		if err := tools.DecodeArgs(json.RawMessage(raw), &b); err != nil {
			t.Errorf("DecodeArgs(%q) = %v, want nil", raw, err)
		}
	}
	bad := []struct{ raw, want string }{
		{`{"path":1}`, `field "path" must be a string, got number`},
		{`{"limit":"5"}`, `field "limit" must be an integer, got string`},
		{`{"limit":1.5}`, `field "limit" must be an integer`},
		{`{"all":"yes"}`, `field "all" must be a boolean`},
		{`{"text":3}`, `field "text" must be a string`},
		{`{"path":"a","extra":1}`, `unknown field "extra"`},
		{`[1]`, "must be a JSON object"},
		{`null`, "must be a JSON object"},
		{`"x"`, "must be a JSON object"},
		{`{"path":`, "malformed JSON"},
		{`{"path":"a"} {"path":"b"}`, "unexpected data"},
		{`{"path" "a"}`, "malformed JSON"},
	}
	for _, tt := range bad {
		var b args
		err := tools.DecodeArgs(json.RawMessage(tt.raw), &b)
		if !errors.Is(err, tools.ErrBadArgs) || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("DecodeArgs(%s) = %v, want ErrBadArgs containing %q", tt.raw, err, tt.want)
		}
	}
}

type postTool struct{ *fakeTool }

func (postTool) Stage() string { return tools.StagePostTurn }

func TestStagesAndDenied(t *testing.T) {
	post := postTool{&fakeTool{name: "indexer"}}
	denied := &fakeTool{name: "guarded", run: func(context.Context, tools.Call) (tools.Result, error) {
		return tools.Result{}, fmt.Errorf("only admins may do this: %w", tools.ErrDenied)
	}}
	r, err := tools.NewRegistry(&fakeTool{name: "plain"}, post, denied)
	if err != nil {
		t.Fatal(err)
	}
	if got := r.Names(); len(got) != 2 || got[0] != "plain" || got[1] != "guarded" {
		t.Fatalf("model tools = %v", got)
	}
	if pt := r.PostTurn(); len(pt) != 1 || pt[0].Name() != "indexer" {
		t.Fatalf("post-turn tools = %v", pt)
	}
	if res := r.Run(t.Context(), "indexer", tools.Call{}); !res.IsError || !strings.Contains(res.Text, "unknown tool") {
		t.Fatalf("model could call a post-turn tool: %+v", res)
	}
	if res := r.RunPostTurn(t.Context(), post, tools.Call{}); res.IsError {
		t.Fatalf("RunPostTurn = %+v", res)
	}
	if res := r.Run(t.Context(), "guarded", tools.Call{}); !res.IsError || !res.Denied {
		t.Fatalf("denied call = %+v", res)
	}
}

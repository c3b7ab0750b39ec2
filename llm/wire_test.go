package llm

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
)

// wireCases are requests covering every message shape, escaping and the
// reasoning-model rules.
func wireCases() []Request {
	temp0, temp15 := float32(0), float32(1.5)
	nasty := "quote \" backslash \\ <tag> & amp \u2028 \u2029 \x01 \b\f\n\r\t é 日本 \xff bad utf8 \x7f"
	schema := json.RawMessage("{ \"type\": \"object\",\n \"properties\": {\"path\": {\"type\": \"string\", \"description\": \"a <path> & more\"}}}")
	return []Request{
		{Messages: []Message{{Role: RoleUser, Content: "hi"}}},
		{Messages: []Message{
			{Role: RoleSystem, Content: "be brief " + nasty},
			{Role: RoleUser, Content: "what is this?", Images: []ImagePart{{URL: "data:image/png;base64,AAAA"}, {URL: "https://x/y.png?a=1&b=<2>"}}},
			{Role: RoleUser, Images: []ImagePart{{URL: "https://x/only.png"}}},
			{Role: RoleAssistant, Reasoning: "need to look " + nasty, ToolCalls: []ToolCall{
				{ID: "c1", Name: "list_dir", Arguments: ""}, {ID: "c2", Name: "read_file", Arguments: `{"path":"<a>"}`}}},
			{Role: RoleTool, ToolID: "c1", Content: ""},
			{Role: RoleTool, ToolID: "c2", Content: "file body " + nasty},
			{Role: RoleAssistant, Content: ""},
			{Role: RoleAssistant, Content: "text and call", ToolCalls: []ToolCall{{ID: "c3", Name: "now"}}},
			{Role: RoleTool, ToolID: "c3", Content: "12:00"},
			{Role: RoleUser, Content: ""},
			{Role: RoleSystem, Content: ""},
		}, Tools: []Tool{
			{Name: "list_dir", Description: "list a folder & <more>", Parameters: schema},
			{Name: "now"},
			{Name: "nodesc", Parameters: json.RawMessage(`{"type":"object"}`)},
		}},
		{Model: "other", MaxTokens: 99, Temperature: &temp0, Messages: []Message{{Role: RoleUser, Content: "x"}}},
		{Temperature: &temp15, Messages: []Message{{Role: RoleUser, Content: "x"}}},
		{Model: "o3-mini", Messages: []Message{{Role: RoleUser, Content: "z"}}},
		{Model: "gpt-5", Messages: []Message{{Role: RoleUser, Content: "z"}}, Tools: []Tool{{Name: "t"}}},
		// A system prompt in two parts: a shared head and a per-turn tail,
		// split after ASCII, after a whole character, inside one, or with
		// one part empty; sent as their concatenation.
		{Messages: []Message{
			{Role: RoleSystem, Prefix: "## Tools\n\n" + nasty + "\n\n", Content: "## Runtime <now> & " + nasty},
			{Role: RoleSystem, Prefix: "head é", Content: "\u2028tail"},
			{Role: RoleSystem, Prefix: "split \xe2\x82", Content: "\xac inside the euro sign"},
			{Role: RoleSystem, Prefix: "only a head", Content: ""},
			{Role: RoleSystem, Prefix: "", Content: "only a tail"},
			{Role: RoleUser, Content: "hi"},
		}},
	}
}

// TestWireBytes checks that the body written by the client is byte for
// byte what go-openai's marshaller writes for the same request, with and
// without a prepared tool set, for several configurations.
func TestWireBytes(t *testing.T) {
	cfgs := []Config{DefaultConfig(), func() Config { c := DefaultConfig(); c.Temperature = 0.7; c.MaxTokens = 1234; return c }()}
	for ci, cfg := range cfgs {
		for i, req := range wireCases() {
			ref, err := refRequest(cfg, req)
			if err != nil {
				t.Fatalf("cfg %d case %d: reference: %v", ci, i, err)
			}
			want, err := json.Marshal(ref)
			if err != nil {
				t.Fatalf("cfg %d case %d: marshal: %v", ci, i, err)
			}
			c, err := New(cfg, nil)
			if err != nil {
				t.Fatal(err)
			}
			check := func(name string, req Request) {
				rb, err := c.build(&req)
				if err != nil {
					t.Fatalf("cfg %d case %d %s: build: %v", ci, i, name, err)
				}
				defer rb.release()
				if got := *rb.buf; !bytes.Equal(got, want) {
					t.Errorf("cfg %d case %d %s: body differs from go-openai's\n got: %s\nwant: %s", ci, i, name, got, want)
				}
			}
			check("tools", req)
			if len(req.Tools) > 0 {
				ts, err := NewToolSet(req.Tools)
				if err != nil {
					t.Fatal(err)
				}
				prepared := req
				prepared.Tools, prepared.ToolSet = nil, ts
				check("toolset", prepared)
			}
		}
	}
}

func TestToolSetErrors(t *testing.T) {
	for _, tc := range []struct {
		tools []Tool
		want  string
	}{
		{[]Tool{{}}, "tools[0]: name"},
		{[]Tool{{Name: "f", Parameters: json.RawMessage(`{`)}}, "tools[0]: parameters"},
		{[]Tool{{Name: "f"}, {Name: "f"}}, "tools[1].name: duplicate"},
	} {
		if _, err := NewToolSet(tc.tools); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("NewToolSet(%v) = %v, want an error naming %q", tc.tools, err, tc.want)
		}
	}
	ts, err := NewToolSet(nil)
	if err != nil || ts.Len() != 0 {
		t.Fatalf("empty tool set: %v, %d", err, ts.Len())
	}
	c, _ := New(DefaultConfig(), nil)
	if _, err := c.build(&Request{Messages: []Message{{Role: RoleUser, Content: "x"}}, Tools: []Tool{{Name: "a"}}, ToolSet: ts}); err == nil {
		t.Error("a request with both Tools and ToolSet was accepted")
	}
}

// TestBuildAllocations checks that building the body of a long request
// with prepared tools costs a constant handful of allocations, not some
// per message or tool (go-openai's marshaller made about 300 for it).
func TestBuildAllocations(t *testing.T) {
	msgs := []Message{{Role: RoleSystem, Content: strings.Repeat("system prompt <rules> & more\n", 100)}}
	for i := range 40 {
		switch i % 4 {
		case 0:
			msgs = append(msgs, Message{Role: RoleUser, Content: "question with \"quotes\""})
		case 1:
			msgs = append(msgs, Message{Role: RoleAssistant, ToolCalls: []ToolCall{{ID: "c", Name: "read_file", Arguments: `{"path":"a"}`}}})
		case 2:
			msgs = append(msgs, Message{Role: RoleTool, ToolID: "c", Content: strings.Repeat("result line\n", 50)})
		default:
			msgs = append(msgs, Message{Role: RoleAssistant, Content: "answer"})
		}
	}
	var tools []Tool
	for i := range 11 {
		tools = append(tools, Tool{Name: "tool" + string(rune('a'+i)), Description: "does a thing",
			Parameters: json.RawMessage(`{"type":"object","properties":{"path":{"type":"string"}}}`)})
	}
	ts, err := NewToolSet(tools)
	if err != nil {
		t.Fatal(err)
	}
	c, err := New(DefaultConfig(), nil)
	if err != nil {
		t.Fatal(err)
	}
	req := Request{Messages: msgs, ToolSet: ts}
	if n := testing.AllocsPerRun(100, func() {
		rb, err := c.build(&req)
		if err != nil {
			t.Fatal(err)
		}
		rb.release()
	}); n > 2 {
		t.Errorf("building the body took %.0f allocations, want at most 2", n)
	}
}

// TestPrefixOnlyInSystemMessages checks that a prefix on any other
// message is refused with the message named, not dropped.
func TestPrefixOnlyInSystemMessages(t *testing.T) {
	c, err := New(DefaultConfig(), nil)
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.build(&Request{Messages: []Message{{Role: RoleSystem, Prefix: "p", Content: "s"}, {Role: RoleUser, Prefix: "p", Content: "x"}}})
	if err == nil || !strings.Contains(err.Error(), "messages[1]: prefix") {
		t.Fatalf("a user message with a prefix: %v, want an error naming messages[1]: prefix", err)
	}
}

package loop

import (
	"context"
	"encoding/json"
	"sync"
	"testing"

	"github.com/switchboard-chat/switchboard/llm"
	"github.com/switchboard-chat/switchboard/tools"
)

// schemaTool is a tool whose schema the test changes.
type schemaTool struct {
	fakeTool
	schema json.RawMessage
}

func (s *schemaTool) Schema() json.RawMessage { return s.schema }

// listBox is a toolbox whose list the test changes between turns.
type listBox struct {
	mu   sync.Mutex
	list []tools.Tool
}

func (b *listBox) List() []tools.Tool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]tools.Tool(nil), b.list...)
}

func (b *listBox) set(ts ...tools.Tool) {
	b.mu.Lock()
	b.list = ts
	b.mu.Unlock()
}

func (b *listBox) Run(context.Context, string, tools.Call) tools.Result {
	return tools.Result{Text: "ok"}
}

// TestToolSetEncodedOnce checks that user turns offer the tools as one
// prepared set while the toolbox lists the same tools, and a new set as
// soon as a schema changes or a tool joins.
func TestToolSetEncodedOnce(t *testing.T) {
	m := &scriptModel{}
	for range 5 {
		m.steps = append(m.steps, text("ok"))
	}
	a := &schemaTool{fakeTool: fakeTool{name: "a"}, schema: json.RawMessage(`{"type":"object"}`)}
	box := &listBox{}
	box.set(a)
	e := New(m, box, Options{ModelName: "m", Limits: Limits{MaxSteps: 3}}, nil)
	turn := func() llm.Request {
		t.Helper()
		if _, err := e.Run(t.Context(), Input{System: "s", User: userMsg("hi")}); err != nil {
			t.Fatal(err)
		}
		return m.reqs[len(m.reqs)-1]
	}
	first := turn()
	if first.ToolSet == nil || len(first.Tools) != 0 || first.ToolSet.Len() != 1 {
		t.Fatalf("request offers Tools %v, ToolSet %v; want one prepared set", first.Tools, first.ToolSet)
	}
	if again := turn(); again.ToolSet != first.ToolSet {
		t.Error("the same tools were prepared again")
	}
	a2 := &schemaTool{fakeTool: fakeTool{name: "a"}, schema: json.RawMessage(`{"type":"object","properties":{"x":{"type":"string"}}}`)}
	box.set(a2)
	changed := turn()
	if changed.ToolSet == first.ToolSet || string(changed.ToolSet.Tools()[0].Parameters) != string(a2.schema) {
		t.Errorf("after a schema change the request offers %v", changed.ToolSet.Tools())
	}
	box.set(a2, &fakeTool{name: "b"})
	if joined := turn(); joined.ToolSet.Len() != 2 {
		t.Errorf("after a tool joined the request offers %d tools", joined.ToolSet.Len())
	}
}

// TestInvalidSchemaStillSaysWhy checks that a tool whose schema does not
// validate is offered as it is, so that the request fails and says why.
func TestInvalidSchemaStillSaysWhy(t *testing.T) {
	m := &scriptModel{steps: []func(context.Context, llm.Request, func(llm.Delta)) (*llm.Response, error){text("ok")}}
	box := &listBox{}
	box.set(&schemaTool{fakeTool: fakeTool{name: "bad"}, schema: json.RawMessage(`{`)})
	e := New(m, box, Options{ModelName: "m", Limits: Limits{MaxSteps: 1}}, nil)
	if _, err := e.Run(t.Context(), Input{User: userMsg("hi")}); err != nil {
		t.Fatal(err)
	}
	if r := m.reqs[0]; r.ToolSet != nil || len(r.Tools) != 1 {
		t.Fatalf("request offers Tools %v, ToolSet %v; want the invalid tool as it is", r.Tools, r.ToolSet)
	}
}

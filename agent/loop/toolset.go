package loop

import (
	"encoding/json"
	"slices"
	"strings"

	"github.com/switchboard-chat/switchboard/llm"
	"github.com/switchboard-chat/switchboard/tools"
)

type cachedToolSet struct {
	key string
	ts  *toolSet
}

// toolSet is the tools offered during one run (a turn or a sub-agent). It
// is read-only once built.
type toolSet struct {
	specs    []llm.Tool
	names    map[string]bool
	required map[string][]string        // tool → required parameters
	parallel map[string]bool            // tool → parallel-safe
	schemas  map[string]json.RawMessage // tool → parameter schema
	aliases  map[string]map[string]string
	known    knower // answers calls to names the toolbox does not list; may be nil
}

// Aliased is implemented by tools that accept other names for their
// parameters (alias → parameter), e.g. {"file": "path"}.
type Aliased interface {
	Aliases() map[string]string
}

var subtaskSchema = json.RawMessage(`{"type":"object","properties":{"subtask":{"type":"string","description":"The subtask, clearly defined, with the background the sub-agent needs."}},"required":["subtask"]}`)

// isTool reports whether the model may call name in this run.
func (ts *toolSet) isTool(name string) bool {
	if ts.names[name] {
		return true
	}
	if ts.known != nil && !strings.HasPrefix(name, SubagentToolPrefix) {
		return ts.known.Known(name)
	}
	return false
}

// toolSet snapshots the toolbox for one run: the tools allow admits, plus
// the sub-agent tools when depth allows. The unfiltered top-level set is
// cached while the tools stay the same.
func (e *Executor) toolSet(allow func(string) bool, depth int) *toolSet {
	if allow != nil || depth != 0 {
		return e.buildToolSet(e.Tools(), allow, depth)
	}
	list := e.Tools()
	var kb strings.Builder
	for _, t := range list {
		kb.WriteString(t.Name())
		kb.WriteByte(0)
		kb.Write(t.Schema())
		kb.WriteByte(0)
	}
	key := kb.String()
	if c := e.topSet.Load(); c != nil && c.key == key {
		return c.ts
	}
	ts := e.buildToolSet(list, nil, 0)
	e.topSet.Store(&cachedToolSet{key: key, ts: ts})
	return ts
}

// buildToolSet parses the tools' schemas into a toolSet.
func (e *Executor) buildToolSet(list []tools.Tool, allow func(string) bool, depth int) *toolSet {
	ts := &toolSet{names: map[string]bool{}, required: map[string][]string{}, parallel: map[string]bool{},
		schemas: map[string]json.RawMessage{}, aliases: map[string]map[string]string{}}
	if k, ok := e.tools.(knower); ok && e.tools != nil {
		ts.known = k
	}
	add := func(name, desc string, schema json.RawMessage, parallel bool) {
		ts.specs = append(ts.specs, llm.Tool{Name: name, Description: desc, Parameters: schema})
		ts.names[name], ts.parallel[name], ts.schemas[name] = true, parallel, schema
		var s struct {
			Required []string `json:"required"`
		}
		if json.Unmarshal(schema, &s) == nil {
			ts.required[name] = s.Required
		}
	}
	for _, t := range list {
		if allow != nil && !allow(t.Name()) {
			continue
		}
		add(t.Name(), t.Description(), t.Schema(), t.ParallelSafe())
		if a, ok := t.(Aliased); ok {
			ts.aliases[t.Name()] = a.Aliases()
		}
	}
	if depth < e.opt.Subagents.Depth {
		agents := e.opt.Subagents.Agents
		names := make([]string, 0, len(agents))
		for name := range agents {
			names = append(names, name)
		}
		slices.Sort(names)
		for _, name := range names {
			add(SubagentToolPrefix+name, agents[name].Description, subtaskSchema, true)
		}
	}
	return ts
}

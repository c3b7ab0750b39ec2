package loop

import (
	"bytes"
	"encoding/json"
	"slices"
	"strings"

	"github.com/switchboard-chat/switchboard/llm"
	"github.com/switchboard-chat/switchboard/tools"
)

// cachedToolSet is the top-level tool set with the names and schemas it
// was built from.
type cachedToolSet struct {
	names   []string
	schemas []json.RawMessage
	ts      *toolSet
}

// matches reports whether list has the tools the set was built from (by
// name and schema; comparing slices that share memory costs nothing).
func (c *cachedToolSet) matches(list []tools.Tool) bool {
	if len(list) != len(c.names) {
		return false
	}
	for i, t := range list {
		if t.Name() != c.names[i] || !bytes.Equal(t.Schema(), c.schemas[i]) {
			return false
		}
	}
	return true
}

// toolSet is the tools offered during one run (a turn or a sub-agent). It
// is read-only once built.
type toolSet struct {
	specs []llm.Tool
	// wire is specs validated and encoded for requests; nil when they do
	// not validate (every request then fails and says why).
	wire     *llm.ToolSet
	tokens   int // the estimated tokens of specs
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
	if c := e.topSet.Load(); c != nil && c.matches(list) {
		return c.ts
	}
	ts := e.buildToolSet(list, nil, 0)
	c := &cachedToolSet{ts: ts, names: make([]string, len(list)), schemas: make([]json.RawMessage, len(list))}
	for i, t := range list {
		c.names[i], c.schemas[i] = t.Name(), t.Schema()
	}
	e.topSet.Store(c)
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
	ts.tokens = specTokens(ts.specs)
	if w, err := llm.NewToolSet(ts.specs); err == nil {
		ts.wire = w
	}
	return ts
}

// specTokens is the estimated tokens of the set's specs; 0 for no set.
func (ts *toolSet) specTokens() int {
	if ts == nil {
		return 0
	}
	return ts.tokens
}

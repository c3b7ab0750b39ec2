package memory

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/switchboard-chat/switchboard/memory/search"
	"github.com/switchboard-chat/switchboard/tools"
)

type searchTool struct{ base }

func (*searchTool) Name() string { return "memory_search" }

func (*searchTool) Description() string {
	return "Search long-term memory (MEMORY.md files and daily notes) for past facts, decisions and conversations. " +
		"Works with keywords in any language, including Chinese and Japanese. Returns the best matching passages " +
		"with their file and line numbers; read more around a hit with memory_get. Search before saying you do not know " +
		"something the user told you earlier."
}

// searchToolSchema is searchTool's argument schema, built once (Schema hands out the
// same bytes; callers must not modify them).
var searchToolSchema = json.RawMessage(`{"type":"object","properties":{` +
	`"query":{"type":"string","description":"Keywords or a question, e.g. \"flight to Tokyo\" or \"北京 出差\"."},` +
	`"max_results":{"type":"integer","minimum":1,"maximum":50,"description":"Most passages to return (default 10)."}` +
	`},"required":["query"],"additionalProperties":false}`)

func (*searchTool) Schema() json.RawMessage { return searchToolSchema }

func (*searchTool) Permission() string { return tools.PermRead }
func (*searchTool) ParallelSafe() bool { return true }

type searchArgs struct {
	Query      string `json:"query"`
	MaxResults int    `json:"max_results"`
}

func (t *searchTool) Run(ctx context.Context, call tools.Call) (tools.Result, error) {
	var a searchArgs
	if err := tools.DecodeArgs(call.Args, &a); err != nil {
		return tools.Result{}, err
	}
	if strings.TrimSpace(a.Query) == "" {
		return tools.Result{}, fmt.Errorf("%w: query is required", tools.ErrBadArgs)
	}
	switch {
	case a.MaxResults == 0:
		a.MaxResults = DefaultResults
	case a.MaxResults < 0 || a.MaxResults > MaxResults:
		return tools.Result{}, fmt.Errorf("%w: max_results must be between 1 and %d, got %d", tools.ErrBadArgs, MaxResults, a.MaxResults)
	}
	sc, err := scope(call.Session)
	if err != nil {
		return tools.Result{}, err
	}
	roots, err := t.notes.Readable(sc)
	if err != nil {
		return tools.Result{}, fmt.Errorf("memory_search: %w", err)
	}
	rs, err := t.idx.Search(ctx, search.Query{Text: a.Query, Roots: roots, Max: a.MaxResults})
	if err != nil {
		return tools.Result{}, fmt.Errorf("memory_search: %w", err)
	}
	if len(rs) == 0 {
		return tools.Result{Text: fmt.Sprintf("No memory matches %q. Try other keywords, or fewer of them.", a.Query)}, nil
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%d passage(s) for %q, best first:\n", len(rs), a.Query)
	for i, r := range rs {
		fmt.Fprintf(&b, "\n%d. %s lines %d-%d (score %.2f", i+1, r.Path, r.StartLine, r.EndLine, r.Score)
		if !r.Day.IsZero() {
			fmt.Fprintf(&b, ", notes of %s", r.Day.Format("2006-01-02 Monday"))
		}
		b.WriteString(")\n")
		b.WriteString(snippet(r.Text))
		b.WriteByte('\n')
	}
	b.WriteString("\nUse memory_get with a path and start_line to read more of a file.")
	return tools.Result{Text: b.String()}, nil
}

// snippet cuts a passage to snippetBytes at a rune boundary.
func snippet(s string) string {
	s = strings.TrimSpace(s)
	if len(s) <= snippetBytes {
		return s
	}
	cut := snippetBytes
	for cut > 0 && s[cut]&0xC0 == 0x80 {
		cut--
	}
	return s[:cut] + " …"
}

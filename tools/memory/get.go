package memory

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"strings"

	"github.com/switchboard-chat/switchboard/memory/notes"
	"github.com/switchboard-chat/switchboard/tools"
)

type getTool struct{ base }

func (*getTool) Name() string { return "memory_get" }

func (*getTool) Description() string {
	return "Read lines of a memory file found with memory_search (or your MEMORY.md). " +
		"Only the memory of this conversation can be read: in a private chat your notes about this user; in a group " +
		"the group's notes and your notes about the person speaking made in this group; and the shared notes."
}

// getToolSchema is getTool's argument schema, built once (Schema hands out the
// same bytes; callers must not modify them).
var getToolSchema = json.RawMessage(`{"type":"object","properties":{` +
	`"path":{"type":"string","description":"File path as memory_search shows it, relative to the workspace."},` +
	`"start_line":{"type":"integer","minimum":1,"description":"First line to read, 1-based (default 1)."},` +
	`"num_lines":{"type":"integer","minimum":1,"maximum":2000,"description":"How many lines to read (default 200)."}` +
	`},"required":["path"],"additionalProperties":false}`)

func (*getTool) Schema() json.RawMessage { return getToolSchema }

func (*getTool) Permission() string { return tools.PermRead }
func (*getTool) ParallelSafe() bool { return true }

type getArgs struct {
	Path      string `json:"path"`
	StartLine int    `json:"start_line"`
	NumLines  int    `json:"num_lines"`
}

func (t *getTool) Run(ctx context.Context, call tools.Call) (tools.Result, error) {
	var a getArgs
	if err := tools.DecodeArgs(call.Args, &a); err != nil {
		return tools.Result{}, err
	}
	switch {
	case strings.TrimSpace(a.Path) == "":
		return tools.Result{}, fmt.Errorf("%w: path is required", tools.ErrBadArgs)
	case a.StartLine < 0:
		return tools.Result{}, fmt.Errorf("%w: start_line must be >= 1, got %d", tools.ErrBadArgs, a.StartLine)
	case a.NumLines < 0 || a.NumLines > MaxGetLines:
		return tools.Result{}, fmt.Errorf("%w: num_lines must be between 1 and %d, got %d", tools.ErrBadArgs, MaxGetLines, a.NumLines)
	}
	if a.StartLine == 0 {
		a.StartLine = 1
	}
	if a.NumLines == 0 {
		a.NumLines = DefaultGetLines
	}
	sc, err := scope(call.Session)
	if err != nil {
		return tools.Result{}, err
	}
	f, rel, err := t.notes.Open(sc, a.Path)
	switch {
	case errors.Is(err, notes.ErrDenied):
		return tools.Result{}, fmt.Errorf("%w: %s is not part of the memory you can read here (%s)", tools.ErrDenied, a.Path, t.readableHere(sc))
	case errors.Is(err, fs.ErrNotExist):
		return tools.Result{}, fmt.Errorf("memory_get: %s does not exist", a.Path)
	case err != nil:
		return tools.Result{}, fmt.Errorf("memory_get: %w", err)
	}
	defer f.Close()
	sc2 := bufio.NewScanner(f)
	sc2.Buffer(make([]byte, 64*1024), MaxGetBytes)
	var b strings.Builder
	line, shown, more := 0, 0, false
	for sc2.Scan() {
		if err := ctx.Err(); err != nil {
			return tools.Result{}, err
		}
		line++
		if line < a.StartLine {
			continue
		}
		if shown == a.NumLines || b.Len()+len(sc2.Text()) > MaxGetBytes {
			more = true
			break
		}
		b.WriteString(sc2.Text())
		b.WriteByte('\n')
		shown++
	}
	if err := sc2.Err(); err != nil {
		return tools.Result{}, fmt.Errorf("memory_get: read %s: %w", rel, err)
	}
	switch {
	case line == 0:
		return tools.Result{Text: fmt.Sprintf("%s is empty.", rel)}, nil
	case shown == 0:
		return tools.Result{}, fmt.Errorf("memory_get: %s has %d lines; start_line %d is past the end", rel, line, a.StartLine)
	}
	header := fmt.Sprintf("%s, lines %d-%d:\n", rel, a.StartLine, a.StartLine+shown-1)
	text := header + b.String()
	if more {
		text += fmt.Sprintf("(more follows: call memory_get with start_line %d)", a.StartLine+shown)
	}
	return tools.Result{Text: text}, nil
}

package files

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/switchboard-chat/switchboard/tools"
)

type readFile struct{ guarded }

func (*readFile) Name() string { return "read_file" }

func (*readFile) Description() string {
	return "Read a text file in the workspace. Returns numbered lines (at most 2000 lines or 50 KB per call) " +
		"and says how to continue when more remains. Use offset to start at a line (1 = first line; " +
		"a negative offset counts from the end, e.g. -50 = the last 50 lines) and limit to read fewer lines."
}

// readFileSchema is readFile's argument schema, built once (Schema hands out the
// same bytes; callers must not modify them).
var readFileSchema = json.RawMessage(`{"type":"object","properties":{` +
	`"path":{"type":"string","description":"File path relative to the workspace (absolute paths inside the workspace also work)."},` +
	`"offset":{"type":"integer","description":"1-based line to start at; negative = that many lines from the end. Default 1."},` +
	`"limit":{"type":"integer","minimum":1,"maximum":2000,"description":"Maximum number of lines to return (default and maximum 2000)."}` +
	`},"required":["path"],"additionalProperties":false}`)

func (*readFile) Schema() json.RawMessage { return readFileSchema }

func (*readFile) Permission() string { return tools.PermRead }
func (*readFile) ParallelSafe() bool { return true }

type readArgs struct {
	Path   string `json:"path"`
	Offset int    `json:"offset"`
	Limit  int    `json:"limit"`
}

func (t *readFile) Run(ctx context.Context, call tools.Call) (tools.Result, error) {
	var a readArgs
	if err := tools.DecodeArgs(call.Args, &a); err != nil {
		return tools.Result{}, err
	}
	rel, err := t.resolve(call.Session, a.Path, true)
	if err != nil {
		return tools.Result{}, err
	}
	switch {
	case a.Limit < 0:
		return tools.Result{}, fmt.Errorf("%w: limit must be >= 1, got %d", tools.ErrBadArgs, a.Limit)
	case a.Limit == 0 || a.Limit > MaxReadLines:
		a.Limit = MaxReadLines
	}
	name := display(rel)

	f, _, err := t.fs(call.Session).Open(rel)
	if err != nil {
		return tools.Result{}, describe("read", name, err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return tools.Result{}, describe("read", name, err)
	}
	if fi.IsDir() {
		return tools.Result{}, fmt.Errorf("%s is a directory; use list_dir to see its contents", name)
	}
	if !fi.Mode().IsRegular() {
		return tools.Result{}, fmt.Errorf("%s is not a regular file", name)
	}
	size := fi.Size()
	if size == 0 {
		return tools.Result{Text: "(empty file)"}, nil
	}
	head := make([]byte, min(size, sniffLen))
	n, err := f.ReadAt(head, 0)
	if err != nil && !errors.Is(err, io.EOF) {
		return tools.Result{}, describe("read", name, err)
	}
	if looksBinary(head[:n]) {
		return tools.Result{}, fmt.Errorf("%s is a binary file (%d bytes); read_file reads only UTF-8 text", name, size)
	}

	start := a.Offset
	if start < 0 {
		total, err := countLines(ctx, io.NewSectionReader(f, 0, size))
		if err != nil {
			return tools.Result{}, describe("read", name, err)
		}
		start = max(1, total+start+1)
	} else if start == 0 {
		start = 1
	}
	text, err := readLines(ctx, io.NewSectionReader(f, 0, size), start, a.Limit)
	if err != nil {
		return tools.Result{}, describe("read", name, err)
	}
	return tools.Result{Text: text}, nil
}

// readLines formats lines [start, start+limit) of r, stopping early at
// MaxReadBytes, and tells how to continue.
func readLines(ctx context.Context, r io.Reader, start, limit int) (string, error) {
	lr := newLineReader(r, MaxReadBytes-128) // room for the line number and note
	var (
		b     strings.Builder
		shown int // lines written
		next  int // first line not shown, 0 while still showing
	)
	for {
		line, full, err := lr.next(ctx)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return "", err
		}
		n := lr.n
		if n < start || next != 0 {
			continue
		}
		entry := fmt.Sprintf("%6d\t%s", n, strings.ToValidUTF8(string(line), "\uFFFD"))
		if len(line) < full {
			entry += fmt.Sprintf(" [... line cut, %d bytes in total]", full)
		}
		if shown == limit || (shown > 0 && b.Len()+len(entry)+1 > MaxReadBytes) {
			next = n
			continue
		}
		b.WriteString(entry)
		b.WriteByte('\n')
		shown++
	}
	total := lr.n
	if start > total {
		return "", fmt.Errorf("%w: offset %d is past the end of the file (%d lines)", tools.ErrBadArgs, start, total)
	}
	if next != 0 {
		more, unit := total-next+1, "lines"
		if more == 1 {
			unit = "line"
		}
		fmt.Fprintf(&b, "... %d more %s; call again with offset=%d", more, unit, next)
	}
	return strings.TrimSuffix(b.String(), "\n"), nil
}

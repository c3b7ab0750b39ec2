package files

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/switchboard-chat/switchboard/tools"
	"github.com/switchboard-chat/switchboard/workspace"
)

type writeFile struct{ guarded }

func (*writeFile) Name() string { return "write_file" }

func (*writeFile) Description() string {
	return "Create or overwrite a file in the workspace with the given content, creating parent folders as needed. " +
		"Overwriting replaces the whole file; to change part of a file use edit_file."
}

// writeFileSchema is writeFile's argument schema, built once (Schema hands out the
// same bytes; callers must not modify them).
var writeFileSchema = json.RawMessage(`{"type":"object","properties":{` +
	`"path":{"type":"string","description":"File path relative to the workspace."},` +
	`"content":{"type":"string","description":"The complete new content of the file."}` +
	`},"required":["path","content"],"additionalProperties":false}`)

func (*writeFile) Schema() json.RawMessage { return writeFileSchema }

func (*writeFile) Permission() string { return tools.PermWrite }
func (*writeFile) ParallelSafe() bool { return false }

type writeArgs struct {
	Path    string  `json:"path"`
	Content *string `json:"content"`
}

func (t *writeFile) Run(ctx context.Context, call tools.Call) (tools.Result, error) {
	var a writeArgs
	if err := tools.DecodeArgs(call.Args, &a); err != nil {
		return tools.Result{}, err
	}
	rel, err := t.resolve(call.Session, a.Path, true)
	if err != nil {
		return tools.Result{}, err
	}
	if a.Content == nil {
		return tools.Result{}, fmt.Errorf("%w: content is required (use \"\" for an empty file)", tools.ErrBadArgs)
	}
	if rel == "." {
		return tools.Result{}, fmt.Errorf("%w: path must name a file, not the workspace folder", tools.ErrBadArgs)
	}
	if err := ctx.Err(); err != nil {
		return tools.Result{}, err
	}
	name := display(rel)
	existed, err := writeWhole(t.fs(call.Session), rel, []byte(*a.Content))
	if err != nil {
		return tools.Result{}, describe("write", name, err)
	}
	verb := "Created"
	if existed {
		verb = "Overwrote"
	}
	return tools.Result{Text: fmt.Sprintf("%s %s (%d bytes written)", verb, name, len(*a.Content))}, nil
}

// writeWhole replaces the content of rel, creating it and its parent
// folders if needed, and reports whether the file existed. Every step goes
// through the session's guard.
func writeWhole(g workspace.Guard, rel string, data []byte) (bool, error) {
	f, existed, err := openForWrite(g, rel, os.O_WRONLY|os.O_TRUNC)
	if err != nil {
		return false, err
	}
	_, err = f.Write(data)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return existed, err
}

// openForWrite opens the existing file rel with flag, or creates it (and
// its folders), and reports whether it existed.
func openForWrite(g workspace.Guard, rel string, flag int) (*os.File, bool, error) {
	f, _, err := g.OpenFile(rel, flag, 0)
	if err == nil {
		fi, serr := f.Stat()
		if serr == nil && fi.IsDir() {
			serr = errors.New("is a directory")
		}
		if serr != nil {
			_ = f.Close()
			return nil, false, serr
		}
		return f, true, nil
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return nil, false, err
	}
	if dir := filepath.Dir(rel); dir != "." {
		if err := g.MkdirAll(dir, 0o755); err != nil {
			return nil, false, err
		}
	}
	f, _, err = g.OpenFile(rel, flag|os.O_CREATE, 0o644)
	return f, false, err
}

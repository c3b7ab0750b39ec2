package files

import (
	"context"
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/switchboard-chat/switchboard/tools"
)

type listDir struct{ guarded }

func (*listDir) Name() string { return "list_dir" }

func (*listDir) Description() string {
	return "List a folder in the workspace: entries sorted by name, folders with a trailing \"/\", file sizes in bytes, " +
		"symlinks with their target. At most 500 entries are shown."
}

// listDirSchema is listDir's argument schema, built once (Schema hands out the
// same bytes; callers must not modify them).
var listDirSchema = json.RawMessage(`{"type":"object","properties":{` +
	`"path":{"type":"string","description":"Folder path relative to the workspace. Default \".\" (the workspace itself)."}` +
	`},"additionalProperties":false}`)

func (*listDir) Schema() json.RawMessage { return listDirSchema }

func (*listDir) Permission() string { return tools.PermRead }
func (*listDir) ParallelSafe() bool { return true }

type listArgs struct {
	Path string `json:"path"`
}

func (t *listDir) Run(ctx context.Context, call tools.Call) (tools.Result, error) {
	var a listArgs
	if err := tools.DecodeArgs(call.Args, &a); err != nil {
		return tools.Result{}, err
	}
	rel, err := t.resolve(call.Session, a.Path, false)
	if err != nil {
		return tools.Result{}, err
	}
	name := display(rel)
	g := t.fs(call.Session)
	f, _, err := g.Open(rel)
	if err != nil {
		return tools.Result{}, describe("list", name, err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return tools.Result{}, describe("list", name, err)
	}
	if !fi.IsDir() {
		return tools.Result{}, fmt.Errorf("%s is a file, not a directory; use read_file to read it", name)
	}
	entries, err := f.ReadDir(-1)
	if err != nil {
		return tools.Result{}, describe("list", name, err)
	}
	// Entries the session may not see, and links leading there, are left
	// out.
	entries = slices.DeleteFunc(entries, func(e fs.DirEntry) bool { return !g.Visible(filepath.Join(rel, e.Name())) })
	if len(entries) == 0 {
		return tools.Result{Text: "(empty directory)"}, nil
	}
	slices.SortFunc(entries, func(x, y fs.DirEntry) int { return strings.Compare(x.Name(), y.Name()) })
	var b strings.Builder
	for i, e := range entries {
		if i == MaxListEntries {
			fmt.Fprintf(&b, "... %d more entries not shown (%d in total); list a subfolder or narrow the path", len(entries)-i, len(entries))
			break
		}
		if i%100 == 99 {
			if err := ctx.Err(); err != nil {
				return tools.Result{}, err
			}
		}
		b.WriteString(formatEntry(t.ws.Root(), filepath.Join(rel, e.Name()), e))
		b.WriteByte('\n')
	}
	return tools.Result{Text: strings.TrimSuffix(b.String(), "\n")}, nil
}

// formatEntry renders one entry; rel is its root-relative path.
func formatEntry(root *os.Root, rel string, e fs.DirEntry) string {
	switch t := e.Type(); {
	case t.IsDir():
		return e.Name() + "/"
	case t&fs.ModeSymlink != 0:
		target, err := root.Readlink(rel)
		if err != nil {
			return e.Name() + " -> (unreadable link)"
		}
		return e.Name() + " -> " + target
	case t.IsRegular():
		info, err := e.Info()
		if err != nil {
			return e.Name() + "  (size unknown)"
		}
		return fmt.Sprintf("%s  (%d bytes)", e.Name(), info.Size())
	default:
		return e.Name() + "  (" + t.String() + ")"
	}
}

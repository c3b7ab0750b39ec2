// Package files provides the built-in file tools — read_file, write_file,
// edit_file and list_dir — confined to the agent's workspace.
//
// Every access goes through a [workspace.Guard] over the workspace's
// os.Root: paths that climb out with "..", absolute paths outside the
// workspace and symlinks leading outside are refused; absolute paths
// inside the workspace are accepted. The session's [tools.PathGuard]
// (WithGuard) is applied to the path as given and to its real path after
// symbolic links, so a link cannot lead into another user's private
// memory or another chat's inbox; hard-linked files are never read or
// written; listings and searches leave out what the session may not see.
// write_file and edit_file change the agent's shared prompt inputs
// (workspace.SharedInput: AGENT.md, USER.md, RULE.md, MEMORY.md,
// HEARTBEAT.md, skills/, the shared memory) only for an owner
// ([tools.SharedWrites]); anyone else is refused with the reason and
// where to write instead.
// The tools are safe for concurrent use; only the read-only ones report
// ParallelSafe, since writes to one file must not interleave.
package files

import (
	"bytes"
	"errors"
	"fmt"
	"path/filepath"
	"unicode/utf8"

	"github.com/switchboard-chat/switchboard/tools"
	"github.com/switchboard-chat/switchboard/workspace"
)

// Limits of the tools.
const (
	// MaxReadLines is the default and largest number of lines read_file
	// returns per call.
	MaxReadLines = 2000
	// MaxReadBytes bounds the text read_file returns per call.
	MaxReadBytes = 50 * 1024
	// MaxListEntries bounds the entries list_dir shows.
	MaxListEntries = 500
	// MaxEditBytes is the largest file edit_file loads.
	MaxEditBytes = 10 << 20
	// sniffLen is how much of a file is inspected to tell text from binary.
	sniffLen = 8192
)

// Guard reports whether the session may see a workspace path; see
// [tools.PathGuard].
type Guard = tools.PathGuard

// Option configures the file tools.
type Option func(*guarded)

// WithGuard hides the paths g refuses: reading, writing, editing, listing
// and searching them fail (or skip them) as if they were not there for
// that session. A nil g allows everything.
func WithGuard(g Guard) Option { return func(o *guarded) { o.guard = g } }

// guarded is embedded by every tool of this package.
type guarded struct {
	ws    *workspace.Workspace
	guard Guard
}

func newGuarded(ws *workspace.Workspace, opts []Option) guarded {
	g := guarded{ws: ws}
	for _, o := range opts {
		o(&g)
	}
	return g
}

// fs returns the workspace guard for the session: the path guard, and
// the write policy that keeps the shared prompt inputs the owners'
// ([tools.SharedWrites]).
func (g guarded) fs(s tools.Session) workspace.Guard {
	return g.ws.Guard(g.guard.For(s)).Writes(tools.SharedWrites(s))
}

// New returns the file tools bound to ws, in the order read_file,
// write_file, edit_file, list_dir. ws must stay open while they are used.
func New(ws *workspace.Workspace, opts ...Option) []tools.Tool {
	g := newGuarded(ws, opts)
	return []tools.Tool{
		&readFile{guarded: g},
		&writeFile{guarded: g},
		&editFile{guarded: g},
		&listDir{guarded: g},
	}
}

// resolve turns the model's path into a root-relative one the session may
// use; required reports whether an empty path is an argument error.
func (g guarded) resolve(s tools.Session, path string, required bool) (string, error) {
	if path == "" && required {
		return "", fmt.Errorf("%w: path is required", tools.ErrBadArgs)
	}
	rel, err := g.ws.Rel(path)
	if err != nil {
		if errors.Is(err, workspace.ErrOutside) {
			return "", fmt.Errorf("path %s is outside the workspace; use a path relative to the workspace", path)
		}
		return "", err
	}
	// Other errors (a link leading outside, a loop) are reported by the
	// open itself.
	if _, err := g.fs(s).Check(rel); errors.Is(err, workspace.ErrDenied) {
		return "", describe("", path, err)
	}
	return rel, nil
}

// describe makes file-system errors readable for the model.
func describe(op, path string, err error) error {
	if op == "" {
		// The path alone: "x: no such file or directory".
		return describePath(path, err)
	}
	return describePath(op+" "+path, err)
}

func describePath(where string, err error) error { return tools.PathError(where, err) }

// looksBinary reports whether the start of a file is not UTF-8 text.
func looksBinary(head []byte) bool {
	if bytes.IndexByte(head, 0) >= 0 {
		return true
	}
	// Ignore a rune cut at the end of the sample.
	for i := 0; i < utf8.UTFMax && len(head) > 0 && !utf8.Valid(head); i++ {
		head = head[:len(head)-1]
	}
	return !utf8.Valid(head)
}

// display is how a path is shown back to the model.
func display(rel string) string { return filepath.ToSlash(rel) }

package tools

import (
	"errors"
	"fmt"
	"io/fs"

	"github.com/switchboard-chat/switchboard/workspace"
)

// PathGuard reports whether session s may reach a workspace path rel
// (clean, slash-separated, relative to the workspace; "." is the
// workspace itself). The daemon composes it from memory privacy (another
// user's private memory folder) and the inbox rule (another chat's
// uploads). Tools that touch workspace files apply it through
// workspace.Guard, to the path as given and to its real path after
// symbolic links. It must be safe for concurrent use.
type PathGuard func(s Session, rel string) bool

// For binds g to s, as a workspace.Allow; a nil g gives nil (every path).
func (g PathGuard) For(s Session) func(rel string) bool {
	if g == nil {
		return nil
	}
	return func(rel string) bool { return g(s, rel) }
}

// SharedWrites is the write policy of session s, for workspace.Guard.Writes:
// nil (no limit beyond the path guard) for an owner ([Session.Owner]);
// for everyone else every path but the shared prompt inputs
// (workspace.SharedInput: AGENT.md, USER.md, RULE.md, MEMORY.md,
// HEARTBEAT.md, skills/, the shared memory in memory/), which enter every
// user's conversation. Every tool that writes workspace files applies it.
func SharedWrites(s Session) func(rel string) bool {
	if s.Owner {
		return nil
	}
	return func(rel string) bool { return !workspace.SharedInput(rel) }
}

// readOnlyReason says, for a refusal, why the shared prompt inputs are
// read-only and where the caller may write instead.
const readOnlyReason = "it is one of the agent's shared files (AGENT.md, USER.md, RULE.md, MEMORY.md, HEARTBEAT.md, skills/, " +
	"the shared notes in memory/), which shape every user's conversations, so only an owner (access.owners) " +
	"or the operator's console may change it; keep what concerns this person or chat in their own memory with memory_write, " +
	"or write files elsewhere in the workspace"

// PathError makes the error of a workspace file access readable for the
// model, starting with where (e.g. "read_file notes/a.md"): a path the
// guard refuses (workspace.ErrDenied, a hard-linked file, a shared file
// the caller may not change: workspace.ErrReadOnly) wraps ErrDenied and
// says why; a path changed while it was opened, a link leading
// outside, a missing file and a permission error are said in words; other
// file-system errors give their innermost cause (os.Root reports an escape
// as "path escapes from parent").
func PathError(where string, err error) error {
	switch {
	case errors.Is(err, workspace.ErrDenied):
		return fmt.Errorf("%s: %w: it is private to another user or chat, or leads there through a symbolic link", where, ErrDenied)
	case errors.Is(err, workspace.ErrReadOnly):
		return fmt.Errorf("%s: %w: %s", where, ErrDenied, readOnlyReason)
	case errors.Is(err, workspace.ErrHardLink):
		return fmt.Errorf("%s: %w: the file has more than one hard link, so it may be another user's private file "+
			"or lie outside the workspace; such files are never read, written or sent", where, ErrDenied)
	case errors.Is(err, workspace.ErrChanged):
		return fmt.Errorf("%s: the path changed while it was being opened (a file or folder on it was replaced); try again", where)
	case errors.Is(err, workspace.ErrOutside):
		return fmt.Errorf("%s: it leads outside the workspace through a symbolic link", where)
	case errors.Is(err, fs.ErrNotExist):
		return fmt.Errorf("%s: no such file or directory", where)
	case errors.Is(err, fs.ErrPermission):
		return fmt.Errorf("%s: permission denied", where)
	}
	var pe *fs.PathError
	if errors.As(err, &pe) {
		inner := pe.Err
		for errors.As(inner, &pe) {
			inner = pe.Err
		}
		return fmt.Errorf("%s: %v", where, inner)
	}
	return fmt.Errorf("%s: %w", where, err)
}

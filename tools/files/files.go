// Package files provides the built-in file tools — read_file, write_file,
// edit_file and list_dir — confined to the agent's workspace.
//
// Every access goes through the workspace's os.Root: paths that climb out
// with "..", absolute paths outside the workspace and symlinks leading
// outside are refused. Absolute paths inside the workspace are accepted.
// The tools are safe for concurrent use; only the read-only ones report
// ParallelSafe, since writes to one file must not interleave.
package files

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"unicode/utf8"

	"switchboard/tools"
	"switchboard/workspace"
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

// New returns the file tools bound to ws, in the order read_file,
// write_file, edit_file, list_dir. ws must stay open while they are used.
func New(ws *workspace.Workspace) []tools.Tool {
	return []tools.Tool{
		&readFile{ws: ws},
		&writeFile{ws: ws},
		&editFile{ws: ws},
		&listDir{ws: ws},
	}
}

// resolve turns the model's path into a root-relative one; required
// reports whether an empty path is an argument error.
func resolve(ws *workspace.Workspace, path string, required bool) (string, error) {
	if path == "" && required {
		return "", fmt.Errorf("%w: path is required", tools.ErrBadArgs)
	}
	rel, err := ws.Rel(path)
	if err != nil {
		if errors.Is(err, workspace.ErrOutside) {
			return "", fmt.Errorf("path %s is outside the workspace; use a path relative to the workspace", path)
		}
		return "", err
	}
	return rel, nil
}

// describe makes file-system errors readable for the model.
func describe(op, path string, err error) error {
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return fmt.Errorf("%s %s: no such file or directory", op, path)
	case errors.Is(err, fs.ErrPermission):
		return fmt.Errorf("%s %s: permission denied", op, path)
	}
	var pe *fs.PathError
	if errors.As(err, &pe) {
		// Report the innermost cause; os.Root reports an escape (e.g.
		// through a symlink leading outside) as "path escapes from parent".
		inner := pe.Err
		for errors.As(inner, &pe) {
			inner = pe.Err
		}
		return fmt.Errorf("%s %s: %v", op, path, inner)
	}
	return fmt.Errorf("%s %s: %w", op, path, err)
}

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

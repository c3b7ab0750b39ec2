package workspace

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"
)

// Limits applied to MEMORY.md when it enters the prompt: only its tail is
// shown.
const (
	MemoryMaxLines = 200
	MemoryMaxBytes = 25000
)

// ErrOutside is returned (wrapped) by [Workspace.Rel] for a path that
// leaves the workspace.
var ErrOutside = errors.New("workspace: path is outside the workspace")

// PromptFile is one prompt file as it enters the system prompt.
type PromptFile struct {
	Name    string // file name, e.g. "AGENT.md"
	Content string
	// Truncated is true when Content is only the tail of the file (MEMORY.md
	// beyond MemoryMaxLines lines or MemoryMaxBytes bytes).
	Truncated bool
}

// Workspace is the agent's working folder. It is safe for concurrent use.
// The caller owns it and must Close it.
type Workspace struct {
	dir  string // absolute
	real string // dir with symlinks resolved
	root *os.Root
	log  *slog.Logger

	reads     atomic.Int64
	closeOnce sync.Once
	closeErr  error

	mu    sync.Mutex // guards cache
	cache map[string]cachedFile
}

type cachedFile struct {
	stamp Stamp
	file  PromptFile
}

// Stamp identifies one version of a file without reading it: its size,
// modification time and inode (a file replaced by a rename has a new inode
// even when its size and time match). It is the one change stamp of the
// workspace's caches (prompt files, memory notes, skills, the search index);
// comparable with ==.
type Stamp struct {
	Size  int64
	MTime time.Time
	Inode uint64
}

// StampOf returns the stamp of fi.
func StampOf(fi fs.FileInfo) Stamp {
	return Stamp{Size: fi.Size(), MTime: fi.ModTime(), Inode: Inode(fi)}
}

// Open opens the workspace at dir, creating the folder and any missing
// prompt file (with default contents) first; existing files are never
// overwritten. A nil log discards.
func Open(dir string, log *slog.Logger) (*Workspace, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if dir == "" {
		return nil, errors.New("workspace: open: dir is empty")
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("workspace: open %s: %w", dir, err)
	}
	if err := os.MkdirAll(abs, 0o700); err != nil {
		return nil, fmt.Errorf("workspace: open %s: %w", abs, err)
	}
	real, err := filepath.EvalSymlinks(abs)
	if err != nil {
		return nil, fmt.Errorf("workspace: open %s: %w", abs, err)
	}
	root, err := os.OpenRoot(abs)
	if err != nil {
		return nil, fmt.Errorf("workspace: open %s: %w", abs, err)
	}
	w := &Workspace{dir: abs, real: real, root: root, log: log, cache: make(map[string]cachedFile)}
	for _, f := range defaultFiles {
		created, err := w.createIfMissing(f.name, f.content)
		if err != nil {
			_ = root.Close()
			return nil, fmt.Errorf("workspace: open %s: %w", abs, err)
		}
		if created {
			log.Info("created default workspace file", "file", f.name, "dir", abs)
		}
	}
	return w, nil
}

func (w *Workspace) createIfMissing(name, content string) (bool, error) {
	f, err := w.root.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if errors.Is(err, fs.ErrExist) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("create %s: %w", name, err)
	}
	_, err = f.WriteString(content)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return false, fmt.Errorf("write %s: %w", name, err)
	}
	return true, nil
}

// Dir returns the absolute path of the workspace folder.
func (w *Workspace) Dir() string { return w.dir }

// Root returns the os.Root confining access to the workspace. It is owned
// by the Workspace and closed by Close.
func (w *Workspace) Root() *os.Root { return w.root }

// Close releases the workspace's os.Root; later file access through Root
// fails. It is idempotent.
func (w *Workspace) Close() error {
	w.closeOnce.Do(func() {
		if err := w.root.Close(); err != nil {
			w.closeErr = fmt.Errorf("workspace: close: %w", err)
		}
	})
	return w.closeErr
}

// Reads returns how many prompt-file reads PromptFiles performed; a file
// whose size, modification time and inode are unchanged is not read again.
func (w *Workspace) Reads() int64 { return w.reads.Load() }

// PromptFiles returns AGENT.md, USER.md, RULE.md and MEMORY.md in that
// order, skipping files that are missing or empty (only whitespace).
// MEMORY.md is cut to its last MemoryMaxLines lines and MemoryMaxBytes
// bytes. Unchanged files are served from a cache; edits are picked up on the
// next call. Safe for concurrent use.
func (w *Workspace) PromptFiles() ([]PromptFile, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []PromptFile
	for _, name := range PromptFiles {
		f, ok, err := w.promptFile(name)
		// An editor saving by atomic replace swaps the file between the
		// lookup and the open: look again (a few times, not forever).
		for try := 1; errors.Is(err, ErrChanged) && try < promptFileTries; try++ {
			f, ok, err = w.promptFile(name)
		}
		if err != nil {
			return nil, fmt.Errorf("workspace: prompt file %s: %w", name, err)
		}
		if ok {
			out = append(out, f)
		}
	}
	return out, nil
}

// promptFileTries bounds the lookups of a prompt file replaced while it
// is being opened.
const promptFileTries = 5

// promptFile returns the current version of name; w.mu is held.
//
// The prompt files enter every user's prompt, so one that is a symbolic
// link or has another hard link (it could be someone's private memory file
// planted at the top of the workspace) is left out with a warning, as if it
// were missing: the files are opened through a [Guard] that accepts the
// file's own name only.
func (w *Workspace) promptFile(name string) (PromptFile, bool, error) {
	fi, err := w.root.Lstat(name)
	if errors.Is(err, fs.ErrNotExist) {
		delete(w.cache, name)
		return PromptFile{}, false, nil
	}
	if err != nil {
		return PromptFile{}, false, err
	}
	if fi.Mode()&fs.ModeSymlink != 0 || (fi.Mode().IsRegular() && linkCount(fi) > 1) {
		delete(w.cache, name)
		w.log.Warn("prompt file left out: it is a link, and may show another user's private file to everyone", "file", name)
		return PromptFile{}, false, nil
	}
	if !fi.Mode().IsRegular() {
		return PromptFile{}, false, fmt.Errorf("not a regular file (%s)", fi.Mode().Type())
	}
	if c, ok := w.cache[name]; ok && c.stamp == StampOf(fi) {
		return c.file, c.file.Content != "", nil
	}
	pf, stamp, err := w.readPromptFile(name)
	if err != nil {
		return PromptFile{}, false, err
	}
	w.cache[name] = cachedFile{stamp: stamp, file: pf}
	w.log.Debug("read prompt file", "file", name, "bytes", len(pf.Content), "truncated", pf.Truncated)
	return pf, pf.Content != "", nil
}

// readPromptFile reads name and stamps it with the stat of the open file,
// so a concurrent edit is at worst read again on the next call.
func (w *Workspace) readPromptFile(name string) (PromptFile, Stamp, error) {
	f, _, err := w.Guard(func(rel string) bool { return rel == name }).NoSymlinks().Open(name)
	if err != nil {
		return PromptFile{}, Stamp{}, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return PromptFile{}, Stamp{}, err
	}
	w.reads.Add(1)
	pf := PromptFile{Name: name}
	var data []byte
	if name == MemoryFile && fi.Size() > MemoryMaxBytes {
		data = make([]byte, MemoryMaxBytes)
		n, err := f.ReadAt(data, fi.Size()-MemoryMaxBytes)
		if err != nil && !errors.Is(err, io.EOF) {
			return PromptFile{}, Stamp{}, err
		}
		data = DropPartialLine(data[:n])
		pf.Truncated = true
	} else {
		data, err = io.ReadAll(f)
		if err != nil {
			return PromptFile{}, Stamp{}, err
		}
	}
	if name == MemoryFile {
		var cut bool
		data, cut = LastLines(data, MemoryMaxLines)
		pf.Truncated = pf.Truncated || cut
	}
	if len(bytes.TrimSpace(data)) > 0 {
		pf.Content = strings.ToValidUTF8(string(data), "\uFFFD")
	}
	return pf, StampOf(fi), nil
}

// DropPartialLine removes the (possibly cut) first line of a chunk read
// from the middle of a file. A chunk that is one long line keeps its text
// from the first whole rune.
func DropPartialLine(b []byte) []byte {
	if i := bytes.IndexByte(b, '\n'); i >= 0 && i+1 < len(b) {
		return b[i+1:]
	}
	for len(b) > 0 && !utf8.RuneStart(b[0]) {
		b = b[1:]
	}
	return b
}

// LastLines returns the last n lines of b (a trailing newline does not
// start a new line) and whether anything was cut.
func LastLines(b []byte, n int) ([]byte, bool) {
	end := len(b)
	if end > 0 && b[end-1] == '\n' {
		end--
	}
	count := 0
	for i := end - 1; i >= 0; i-- {
		if b[i] == '\n' {
			count++
			if count == n {
				return b[i+1:], true
			}
		}
	}
	return b, false
}

// Rel converts a path given by the model or a user into a clean path
// relative to the workspace, for use with Root. It accepts relative paths
// and absolute paths inside the workspace; "" and "." mean the workspace
// itself. Paths that climb out with ".." or absolute paths elsewhere return
// an error wrapping [ErrOutside]. Symlinks are not resolved here: os.Root
// refuses those that lead outside.
func (w *Workspace) Rel(path string) (string, error) {
	if strings.IndexByte(path, 0) >= 0 {
		return "", fmt.Errorf("workspace: path %q contains a NUL byte", path)
	}
	if path == "" {
		return ".", nil
	}
	p := filepath.Clean(path)
	if filepath.IsAbs(p) {
		rel, ok := within(w.dir, p)
		if !ok {
			rel, ok = within(w.real, p)
		}
		if !ok {
			return "", fmt.Errorf("%w: %s (the workspace is %s)", ErrOutside, path, w.dir)
		}
		return rel, nil
	}
	if p == "." {
		return p, nil
	}
	if !filepath.IsLocal(p) {
		return "", fmt.Errorf("%w: %s climbs out of the workspace", ErrOutside, path)
	}
	return p, nil
}

// within reports whether the absolute clean path p is base or below it,
// and returns it relative to base.
func within(base, p string) (string, bool) {
	rel, err := filepath.Rel(base, p)
	if err != nil {
		return "", false
	}
	if rel == "." || filepath.IsLocal(rel) {
		return rel, true
	}
	return "", false
}

// maxReadText bounds ReadText.
const maxReadText = 256 << 10

// ReadText returns the text of a file inside the workspace (a path
// relative to it, or absolute inside it), at most 256 KiB. It reads
// through the os.Root, so nothing outside the workspace is reachable.
// Safe for concurrent use.
func (w *Workspace) ReadText(name string) (string, error) {
	rel, err := w.Rel(name)
	if err != nil {
		return "", fmt.Errorf("workspace: read %s: %w", name, err)
	}
	f, err := w.Root().Open(rel)
	if err != nil {
		return "", fmt.Errorf("workspace: read %s: %w", name, err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxReadText+1))
	if err != nil {
		return "", fmt.Errorf("workspace: read %s: %w", name, err)
	}
	if len(data) > maxReadText {
		return "", fmt.Errorf("workspace: read %s: larger than %d bytes", name, maxReadText)
	}
	return string(data), nil
}

package notes

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"slices"
	"strings"
	"time"

	"github.com/switchboard-chat/switchboard/workspace"
)

// AppendDaily appends text to the daily notes of the day of t (in t's
// location) in s's write folder (see [Notes.WriteFolder]): a group's notes
// for a group chat, the user's for a private chat. A new file starts with
// a "# YYYY-MM-DD" title; entries are separated by a blank line. text
// (at most MaxAppendBytes, no NUL bytes) is written as given after trimming
// surrounding blank space, so callers add their own heading, e.g.
// "## Trimmed context (14:05)". It returns the file written. Safe for
// concurrent use; blocks until the data is written.
func (n *Notes) AppendDaily(s Scope, t time.Time, text string) (string, error) {
	f, err := n.WriteFolder(s)
	if err != nil {
		return "", fmt.Errorf("notes: append daily: %w", err)
	}
	text, err = checkText(text, MaxAppendBytes)
	if err != nil {
		return "", fmt.Errorf("notes: append daily: %w", err)
	}
	rel := f.Daily(t)
	if err := n.appendFile(rel, "# "+t.Format(DayLayout)+"\n\n", text+"\n", "\n"); err != nil {
		return "", fmt.Errorf("notes: append daily %s: %w", rel, err)
	}
	return rel, nil
}

// Write appends a note written for s (the memory_write tool) to s's write
// folder: kind "core" appends to its MEMORY.md, kind "daily" to the daily
// notes of now's day. A one-line text becomes a list item ("- text"; daily
// items are prefixed with the time "15:04"); a longer text is appended as
// a block. text must be non-blank, at most MaxWriteBytes bytes and free of
// NUL bytes. It returns the file written. Safe for concurrent use.
func (n *Notes) Write(s Scope, kind, text string, now time.Time) (string, error) {
	f, err := n.WriteFolder(s)
	if err != nil {
		return "", fmt.Errorf("notes: write: %w", err)
	}
	text, err = checkText(text, MaxWriteBytes)
	if err != nil {
		return "", fmt.Errorf("notes: write %s: %w", kind, err)
	}
	oneLine := !strings.Contains(text, "\n")
	var rel, header, entry, sep string
	switch kind {
	case KindCore:
		rel, header = f.Core(), "# Memory\n\n"
		entry, sep = text+"\n", "\n"
		if oneLine {
			sep = ""
			if !isListItem(text) {
				entry = "- " + entry
			}
		}
	case KindDaily:
		rel, header = f.Daily(now), "# "+now.Format(DayLayout)+"\n\n"
		entry, sep = "## "+now.Format("15:04")+"\n\n"+text+"\n", "\n"
		if oneLine {
			entry, sep = "- "+now.Format("15:04")+" "+strings.TrimLeft(text, "-* ")+"\n", ""
		}
	default:
		return "", fmt.Errorf("notes: write: kind must be %q or %q, got %q", KindCore, KindDaily, kind)
	}
	if err := n.appendFile(rel, header, entry, sep); err != nil {
		return "", fmt.Errorf("notes: write %s: %w", rel, err)
	}
	return rel, nil
}

func isListItem(s string) bool {
	return strings.HasPrefix(s, "- ") || strings.HasPrefix(s, "* ") || strings.HasPrefix(s, "#")
}

// checkText trims text and checks it is non-blank, small enough and free
// of NUL bytes.
func checkText(text string, limit int) (string, error) {
	text = strings.TrimSpace(text)
	switch {
	case text == "":
		return "", errors.New("text is empty")
	case len(text) > limit:
		return "", fmt.Errorf("text is %d bytes, more than %d", len(text), limit)
	case strings.IndexByte(text, 0) >= 0:
		return "", errors.New("text contains a NUL byte")
	}
	return text, nil
}

// appendFile appends entry to rel, creating it (and its folders) with
// header when it does not exist. When the file does not end with "\n" a
// newline is added first; sep is written between an existing entry and
// the new one.
func (n *Notes) appendFile(rel, header, entry, sep string) error {
	n.wmu.Lock()
	defer n.wmu.Unlock()
	if n.replica != nil {
		return n.replicate(rel, func(old []byte) ([]byte, error) { return appended(old, header, entry, sep), nil })
	}
	g := n.files()
	if err := g.MkdirAll(path.Dir(rel), 0o700); err != nil {
		return denied(err)
	}
	f, _, err := g.OpenFile(rel, os.O_RDWR|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return denied(err)
	}
	fi, err := f.Stat()
	if err != nil {
		_ = f.Close()
		return err
	}
	if !fi.Mode().IsRegular() {
		_ = f.Close()
		return fmt.Errorf("not a regular file (%s)", fi.Mode().Type())
	}
	var last []byte
	if fi.Size() > 0 {
		last = make([]byte, 1)
		if _, err := f.ReadAt(last, fi.Size()-1); err != nil {
			_ = f.Close()
			return err
		}
	}
	add := appended(last, header, entry, sep)[len(last):]
	_, err = f.Write(add)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	n.log.Debug("memory file appended", "file", rel, "bytes", len(add))
	n.wrote(rel)
	return nil
}

// appended is old with entry appended: header first when old is empty,
// else a newline when old does not end with one, then sep.
func appended(old []byte, header, entry, sep string) []byte {
	out := slices.Clip(old)
	if len(old) == 0 {
		out = append(out, header...)
	} else {
		if old[len(old)-1] != '\n' {
			out = append(out, '\n')
		}
		out = append(out, sep...)
	}
	return append(out, entry...)
}

// ReplaceCore replaces the folder's MEMORY.md with text (nightly
// consolidation). When MEMORY.md exists, its current content is first
// copied to MEMORY.md.bak-<suffix> next to it (suffix: e.g. the date; at
// most 64 bytes of [A-Za-z0-9_-]); the new content is written to a
// temporary file and renamed over MEMORY.md, so readers see the old or the
// new version, never a mix. It returns the backup's path ("" when there
// was nothing to back up). Safe for concurrent use.
func (n *Notes) ReplaceCore(f Folder, text, suffix string) (string, error) {
	if suffix == "" || len(suffix) > 64 || strings.Trim(suffix, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-") != "" {
		return "", fmt.Errorf("notes: replace core: backup suffix must be 1 to 64 characters of [A-Za-z0-9_-], got %q", suffix)
	}
	if strings.TrimSpace(text) == "" {
		return "", errors.New("notes: replace core: text is empty")
	}
	if strings.IndexByte(text, 0) >= 0 {
		return "", errors.New("notes: replace core: text contains a NUL byte")
	}
	core := f.Core()
	if !strings.HasSuffix(text, "\n") {
		text += "\n"
	}
	n.wmu.Lock()
	defer n.wmu.Unlock()
	if n.replica != nil {
		return n.replaceReplicated(core, text, suffix)
	}
	if err := n.files().MkdirAll(path.Dir(core), 0o700); err != nil {
		return "", fmt.Errorf("notes: replace core %s: %w", core, denied(err))
	}
	var backup string
	old, err := n.readLimited(core)
	switch {
	case errors.Is(err, fs.ErrNotExist):
	case err != nil:
		return "", fmt.Errorf("notes: replace core %s: %w", core, err)
	default:
		backup = core + ".bak-" + suffix
		if err := n.writeAtomic(backup, old); err != nil {
			return "", fmt.Errorf("notes: replace core %s: backup: %w", core, err)
		}
	}
	if err := n.writeAtomic(core, []byte(text)); err != nil {
		return "", fmt.Errorf("notes: replace core %s: %w", core, err)
	}
	n.log.Debug("memory file replaced", "file", core, "backup", backup)
	n.wrote(core)
	return backup, nil
}

// writeAtomic writes data to a hidden temporary file beside rel, syncs it
// and renames it over rel. n.wmu is held.
func (n *Notes) writeAtomic(rel string, data []byte) error {
	tmp := path.Join(path.Dir(rel), "."+path.Base(rel)+".tmp")
	g := n.files()
	// rel itself is replaced, not opened; it must not be reached through
	// a link either.
	if _, err := g.Check(rel); err != nil {
		return denied(err)
	}
	f, _, err := g.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return denied(err)
	}
	_, err = f.Write(data)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = n.root.Rename(tmp, rel)
	}
	if err != nil {
		_ = n.root.Remove(tmp)
	}
	return err
}

// ReadFile returns the content of the workspace-relative file rel (at most
// MaxReadBytes). It refuses paths that climb out, pass through a symbolic
// link, name something other than a regular file or a file with more than
// one hard link. It does not check who may read the file: see
// [Notes.Open] for that.
func (n *Notes) ReadFile(rel string) ([]byte, error) {
	clean, ok := Clean(rel)
	if !ok {
		return nil, fmt.Errorf("notes: read %q: not a relative path inside the workspace", rel)
	}
	data, err := n.readLimited(clean)
	if err != nil {
		return nil, fmt.Errorf("notes: read %s: %w", clean, err)
	}
	return data, nil
}

func (n *Notes) readLimited(rel string) ([]byte, error) {
	f, _, err := n.files().Open(rel)
	if err != nil {
		return nil, denied(err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("not a regular file (%s)", fi.Mode().Type())
	}
	data, err := io.ReadAll(io.LimitReader(f, MaxReadBytes+1))
	if err != nil {
		return nil, err
	}
	if len(data) > MaxReadBytes {
		return nil, fmt.Errorf("larger than %d bytes", MaxReadBytes)
	}
	return data, nil
}

// Open opens the memory file rel for s to read. It returns the cleaned
// path with the file. A path s may not read (see [Notes.Readable]) is an
// error wrapping [ErrDenied]; so is a path through a symbolic link, which
// could lead into another user's folder, and a file with more than one
// hard link, whose other name could be in one. The caller closes the file.
func (n *Notes) Open(s Scope, rel string) (*os.File, string, error) {
	clean, ok := Clean(rel)
	if !ok {
		return nil, "", fmt.Errorf("notes: open %q: %w: not a relative path inside the workspace", rel, ErrDenied)
	}
	if !n.CanRead(s, clean) {
		return nil, "", fmt.Errorf("notes: open %s: %w", clean, ErrDenied)
	}
	f, _, err := n.files().Open(clean)
	if err != nil {
		return nil, "", fmt.Errorf("notes: open %s: %w", clean, denied(err))
	}
	fi, err := f.Stat()
	if err == nil && !fi.Mode().IsRegular() {
		err = fmt.Errorf("not a regular file (%s)", fi.Mode().Type())
	}
	if err != nil {
		_ = f.Close()
		return nil, "", fmt.Errorf("notes: open %s: %w", clean, err)
	}
	return f, clean, nil
}

// files is the guard every memory file access goes through: no path
// through a symbolic link, no hard-linked file, no component swapped
// between the check and the open (see [workspace.Guard]).
func (n *Notes) files() workspace.Guard { return workspace.NewGuard(n.root, nil).NoSymlinks() }

// denied makes the guard's refusals (a symbolic link on the way, a hard
// link) errors wrapping [ErrDenied] too.
func denied(err error) error {
	if errors.Is(err, workspace.ErrDenied) || errors.Is(err, workspace.ErrHardLink) {
		return fmt.Errorf("%w: %w", ErrDenied, err)
	}
	return err
}

// Folders returns the memory folders that exist: the shared folder (always
// first), then with scope "user" every user folder and group chat folder
// found under memory/users and memory/chats, in path order. Symbolic links
// are skipped.
func (n *Notes) Folders() ([]Folder, error) {
	out := []Folder{SharedFolder()}
	if n.shared {
		return out, nil
	}
	for _, base := range []struct{ dir, kind string }{{UsersDir, FolderUser}, {ChatsDir, FolderChat}} {
		channels, err := n.subdirs(base.dir)
		if err != nil {
			return nil, fmt.Errorf("notes: folders: %w", err)
		}
		for _, c := range channels {
			ids, err := n.subdirs(base.dir + "/" + c)
			if err != nil {
				return nil, fmt.Errorf("notes: folders: %w", err)
			}
			for _, id := range ids {
				out = append(out, Folder{Kind: base.kind, Dir: base.dir + "/" + c + "/" + id})
			}
		}
	}
	return out, nil
}

// subdirs lists the real folders (not symbolic links, not hidden) in rel,
// sorted; a missing folder has none.
func (n *Notes) subdirs(rel string) ([]string, error) {
	entries, err := n.readDir(rel)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, e := range entries {
		if e.IsDir() && !strings.HasPrefix(e.Name(), ".") {
			out = append(out, e.Name())
		}
	}
	slices.Sort(out)
	return out, nil
}

func (n *Notes) readDir(rel string) ([]fs.DirEntry, error) {
	d, _, err := n.files().Open(rel)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, denied(err)
	}
	defer d.Close()
	entries, err := d.ReadDir(-1)
	if err != nil {
		return nil, fmt.Errorf("list %s: %w", rel, err)
	}
	return entries, nil
}

// DailyFile is one daily notes file of a folder.
type DailyFile struct {
	Path string    // relative to the workspace
	Day  time.Time // midnight of its day in the location asked for
}

// DailyFiles returns the folder's daily notes files (regular files named
// YYYY-MM-DD.md), oldest first, with their days in loc.
func (n *Notes) DailyFiles(f Folder, loc *time.Location) ([]DailyFile, error) {
	entries, err := n.readDir(f.DailyDir())
	if err != nil {
		return nil, fmt.Errorf("notes: daily files of %s: %w", f.DailyDir(), err)
	}
	var out []DailyFile
	for _, e := range entries {
		if !e.Type().IsRegular() {
			continue
		}
		rel := f.DailyDir() + "/" + e.Name()
		if day, ok := DayOf(rel, loc); ok {
			out = append(out, DailyFile{Path: rel, Day: day})
		}
	}
	slices.SortFunc(out, func(a, b DailyFile) int { return a.Day.Compare(b.Day) })
	return out, nil
}

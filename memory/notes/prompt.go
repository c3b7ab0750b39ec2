package notes

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"strings"
	"unicode/utf8"

	"github.com/switchboard-chat/switchboard/workspace"
)

// Section is one memory file as it enters the system prompt.
type Section struct {
	// Kind is the folder kind the file belongs to: FolderShared,
	// FolderUser, FolderChat or FolderMember.
	Kind string
	// Path is the file, relative to the workspace.
	Path string
	// Content is the file's tail: at most MaxLines lines and MaxBytes
	// bytes, invalid UTF-8 replaced.
	Content string
	// Truncated is true when Content is only the end of the file.
	Truncated bool
}

// Prompt is the memory that applies to one message.
type Prompt struct {
	// Memory holds the non-empty MEMORY.md files that apply, in prompt
	// order: the shared MEMORY.md; then, with scope "user", the sender's
	// own in a private chat, or in a group the group's and the speaker's
	// notes made in that group (never their direct-chat memory).
	Memory []Section
	// User is the sender's own USER.md (scope "user", private chats only),
	// which replaces the workspace's USER.md in the prompt; "" when there
	// is none or it is blank, and always in a group. UserPath is its path.
	User     string
	UserPath string
}

// Prompt returns the memory files that apply to s. Files that are missing
// or blank are left out; a path that exists but is not a regular file is
// an error naming it. Unchanged files (same size, modification time and
// inode) are served from a cache and not read again. Safe for concurrent
// use.
func (n *Notes) Prompt(s Scope) (Prompt, error) {
	if err := s.Validate(); err != nil {
		return Prompt{}, fmt.Errorf("notes: prompt: %w", err)
	}
	folders := []Folder{SharedFolder()}
	if !n.shared {
		folders = append(folders, n.ownFolders(s)...)
	}
	var p Prompt
	for _, f := range folders {
		t, ok, err := n.tail(f.Core(), true)
		if err != nil {
			return Prompt{}, fmt.Errorf("notes: prompt: %s: %w", f.Core(), err)
		}
		if ok {
			p.Memory = append(p.Memory, Section{Kind: f.Kind, Path: f.Core(), Content: t.content, Truncated: t.truncated})
		}
	}
	// The stat that finds USER.md is the one its cached content is checked
	// against: one stat of it per turn, not two.
	if rel, fi, err := n.userFile(s); err != nil {
		return Prompt{}, fmt.Errorf("notes: prompt: %w", err)
	} else if fi != nil {
		t, ok, err := n.tailOf(rel, fi, false)
		if err != nil {
			return Prompt{}, fmt.Errorf("notes: prompt: %s: %w", rel, err)
		}
		if ok {
			p.User, p.UserPath = t.content, rel
		}
	}
	return p, nil
}

// Reads returns how many file reads Prompt performed (cache misses).
func (n *Notes) Reads() int64 {
	n.cmu.Lock()
	defer n.cmu.Unlock()
	return n.reads
}

type cachedTail struct {
	stamp     workspace.Stamp
	content   string
	truncated bool
}

// tail returns the (cached) content of rel, cut to its tail when cut is
// set; ok is false when the file is missing or blank.
func (n *Notes) tail(rel string, cut bool) (cachedTail, bool, error) {
	fi, err := n.root.Stat(rel)
	if errors.Is(err, fs.ErrNotExist) {
		n.cmu.Lock()
		delete(n.cache, rel)
		n.cmu.Unlock()
		return cachedTail{}, false, nil
	}
	if err != nil {
		return cachedTail{}, false, err
	}
	if !fi.Mode().IsRegular() {
		return cachedTail{}, false, fmt.Errorf("not a regular file (%s)", fi.Mode().Type())
	}
	return n.tailOf(rel, fi, cut)
}

// tailOf is tail for the regular file rel that a stat just found as fi:
// the cached content when fi has its stamp, else the file read again.
func (n *Notes) tailOf(rel string, fi fs.FileInfo, cut bool) (cachedTail, bool, error) {
	n.cmu.Lock()
	c, hit := n.cache[rel]
	n.cmu.Unlock()
	if hit && c.stamp == workspace.StampOf(fi) {
		return c, c.content != "", nil
	}
	c, err := n.readTail(rel, cut)
	if err != nil {
		return cachedTail{}, false, err
	}
	n.cmu.Lock()
	if len(n.cache) >= maxCache {
		clear(n.cache)
	}
	n.cache[rel] = c
	n.reads++
	n.cmu.Unlock()
	return c, c.content != "", nil
}

// readTail reads rel and stamps it with the stat of the open file, so a
// concurrent edit is at worst read again next time.
func (n *Notes) readTail(rel string, cut bool) (cachedTail, error) {
	f, _, err := n.files().Open(rel)
	if err != nil {
		return cachedTail{}, denied(err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return cachedTail{}, err
	}
	var c cachedTail
	var data []byte
	switch {
	case fi.Size() > MaxBytes && cut:
		// MEMORY.md: its end matters most.
		data = make([]byte, MaxBytes)
		k, err := f.ReadAt(data, fi.Size()-MaxBytes)
		if err != nil && !errors.Is(err, io.EOF) {
			return cachedTail{}, err
		}
		data = workspace.DropPartialLine(data[:k])
		c.truncated = true
	case fi.Size() > MaxBytes:
		// A profile is shown from its start.
		data = make([]byte, MaxBytes)
		k, err := f.ReadAt(data, 0)
		if err != nil && !errors.Is(err, io.EOF) {
			return cachedTail{}, err
		}
		data = trimPartialRune(data[:k])
		c.truncated = true
	default:
		data, err = io.ReadAll(f)
		if err != nil {
			return cachedTail{}, err
		}
	}
	if cut {
		var more bool
		data, more = workspace.LastLines(data, MaxLines)
		c.truncated = c.truncated || more
	}
	if len(bytes.TrimSpace(data)) > 0 {
		c.content = strings.ToValidUTF8(string(data), "\uFFFD")
	}
	c.stamp = workspace.StampOf(fi)
	return c, nil
}

// trimPartialRune drops a rune cut at the end of b.
func trimPartialRune(b []byte) []byte {
	for i := 0; i < utf8.UTFMax && len(b) > 0 && !utf8.Valid(b); i++ {
		b = b[:len(b)-1]
	}
	return b
}

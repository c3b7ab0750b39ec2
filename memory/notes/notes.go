// Package notes keeps Switchboard's long-term memory files inside the
// agent's workspace and decides, for each caller, which of them apply.
//
// Layout (paths relative to the workspace, always slash-separated here):
//
//	MEMORY.md                              shared core memory
//	memory/YYYY-MM-DD.md                   shared daily notes
//	memory/users/<channel>/<user>/MEMORY.md      a user's core memory   (scope "user")
//	memory/users/<channel>/<user>/YYYY-MM-DD.md  a user's daily notes
//	memory/users/<channel>/<user>/USER.md        optional: replaces the workspace USER.md for that user
//	memory/chats/<channel>/<chat>/MEMORY.md      a group chat's core memory
//	memory/chats/<channel>/<chat>/YYYY-MM-DD.md  a group chat's daily notes
//
// With scope "shared" everybody reads and writes the shared files. With
// scope "user" (the default) a private chat writes to the user's folder and
// a group chat writes to the chat's folder, so what was said in a group
// never lands in a member's private memory; a caller reads their own
// folder, the folder of the group they are speaking in, and the shared
// files — never another user's folder.
//
// Channel, user and chat ids may contain anything; each becomes one path
// component through [bus.EncodeToken] ("." and "/" are escaped, so ".." or
// "a/b" cannot climb or nest), and a very long one is shortened with a
// hash. Every file access goes through the workspace's *os.Root.
package notes

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path"
	"strings"
	"sync"
	"time"

	"switchboard/bus"
	"switchboard/memory/memcfg"
	"switchboard/workspace"
)

// File and folder names.
const (
	// CoreName is the core memory file of a folder.
	CoreName = workspace.MemoryFile
	// UserName is the per-user profile that overrides the workspace's.
	UserName = workspace.UserFile
	// Dir is the folder holding daily notes and the per-user and per-chat
	// folders.
	Dir = "memory"
	// UsersDir and ChatsDir hold the per-user and per-chat folders.
	UsersDir = Dir + "/users"
	ChatsDir = Dir + "/chats"
	// DayLayout is the name (without ".md") of a daily notes file.
	DayLayout = "2006-01-02"
)

// Limits.
const (
	// MaxLines and MaxBytes bound the tail of a MEMORY.md shown in the
	// prompt (the same limits as the workspace's MEMORY.md).
	MaxLines = workspace.MemoryMaxLines
	MaxBytes = workspace.MemoryMaxBytes
	// MaxWriteBytes bounds one Write (a note written by the model).
	MaxWriteBytes = 16 << 10
	// MaxAppendBytes bounds one AppendDaily (e.g. a summary).
	MaxAppendBytes = 64 << 10
	// MaxReadBytes bounds ReadFile.
	MaxReadBytes = 4 << 20
	// maxComponent is the longest encoded id used as is; longer ones are
	// shortened and suffixed with a hash.
	maxComponent = 128
	// maxCache bounds the prompt cache (entries).
	maxCache = 4096
)

// Kinds of a write.
const (
	KindCore  = "core"
	KindDaily = "daily"
)

// Folder kinds.
const (
	FolderShared = "shared"
	FolderUser   = "user"
	FolderChat   = "chat"
)

// ErrScope is returned (wrapped) when a Scope lacks what the call needs:
// a channel and a user id, and a chat id in a group.
var ErrScope = errors.New("notes: incomplete scope")

// ErrDenied is returned (wrapped) when a caller asks for a file outside
// the memory it may read.
var ErrDenied = errors.New("notes: not readable for this caller")

// Scope is who a memory operation runs for: the chat message's channel,
// chat and sender, and whether the chat is a group.
type Scope struct {
	Channel string
	ChatID  string
	UserID  string
	IsGroup bool
}

// Validate reports whether s names a channel and a user, and a chat when
// it is a group. The error wraps [ErrScope] and names the missing field.
func (s Scope) Validate() error {
	switch {
	case s.Channel == "":
		return fmt.Errorf("%w: channel is empty", ErrScope)
	case s.UserID == "":
		return fmt.Errorf("%w: user id is empty", ErrScope)
	case s.IsGroup && s.ChatID == "":
		return fmt.Errorf("%w: chat id is empty in a group", ErrScope)
	}
	return nil
}

// Folder is one memory folder: the shared one, a user's or a group chat's.
type Folder struct {
	// Kind is FolderShared, FolderUser or FolderChat.
	Kind string
	// Dir is the folder, relative to the workspace: "" for the shared
	// folder (its core file is MEMORY.md at the top), else e.g.
	// "memory/users/telegram/42".
	Dir string
}

// Core returns the folder's MEMORY.md.
func (f Folder) Core() string {
	if f.Dir == "" {
		return CoreName
	}
	return f.Dir + "/" + CoreName
}

// DailyDir returns the folder holding the daily notes.
func (f Folder) DailyDir() string {
	if f.Dir == "" {
		return Dir
	}
	return f.Dir
}

// Daily returns the daily notes file of the day of t (in t's location).
func (f Folder) Daily(t time.Time) string {
	return f.DailyDir() + "/" + t.Format(DayLayout) + ".md"
}

// Options configure [New].
type Options struct {
	// Scope is memcfg.ScopeUser (the default when empty) or
	// memcfg.ScopeShared.
	Scope string
	// OnWrite, when set, is called after each file this package writes,
	// with its workspace-relative path (e.g. search.Index.Touch). It must
	// not block.
	OnWrite func(rel string)
	// Log receives debug lines; nil discards.
	Log *slog.Logger
}

// Notes reads and writes memory files. It is safe for concurrent use:
// writes are serialised, prompt reads are served from a stat-checked
// cache. It does not own the root.
type Notes struct {
	root    *os.Root
	shared  bool
	onWrite func(string)
	log     *slog.Logger

	wmu sync.Mutex // serialises writes

	cmu   sync.Mutex // guards cache
	cache map[string]cachedTail
	reads int64 // file reads for the prompt (under cmu)
}

// New returns Notes over the workspace root. The root must stay open
// while the Notes are used.
func New(root *os.Root, opts Options) (*Notes, error) {
	if root == nil {
		return nil, errors.New("notes: new: root is nil")
	}
	switch opts.Scope {
	case "", memcfg.ScopeUser, memcfg.ScopeShared:
	default:
		return nil, fmt.Errorf("notes: new: memory.scope must be user or shared, got %q", opts.Scope)
	}
	log := opts.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Notes{
		root:    root,
		shared:  opts.Scope == memcfg.ScopeShared,
		onWrite: opts.OnWrite,
		log:     log,
		cache:   make(map[string]cachedTail),
	}, nil
}

// Shared reports whether memory is shared by everybody (scope "shared").
func (n *Notes) Shared() bool { return n.shared }

// SharedFolder returns the shared folder (MEMORY.md, memory/*.md).
func SharedFolder() Folder { return Folder{Kind: FolderShared} }

// UserFolder returns the folder of a user of a channel.
func UserFolder(channel, userID string) (Folder, error) {
	dir, err := idDir(UsersDir, channel, userID)
	if err != nil {
		return Folder{}, err
	}
	return Folder{Kind: FolderUser, Dir: dir}, nil
}

// ChatFolder returns the folder of a group chat of a channel.
func ChatFolder(channel, chatID string) (Folder, error) {
	dir, err := idDir(ChatsDir, channel, chatID)
	if err != nil {
		return Folder{}, err
	}
	return Folder{Kind: FolderChat, Dir: dir}, nil
}

func idDir(base, channel, id string) (string, error) {
	c, err := Component(channel)
	if err != nil {
		return "", fmt.Errorf("channel: %w", err)
	}
	i, err := Component(id)
	if err != nil {
		return "", fmt.Errorf("id: %w", err)
	}
	return base + "/" + c + "/" + i, nil
}

// Component turns an id into one safe path component: [bus.EncodeToken]
// (every byte outside [A-Za-z0-9_-] as %XX, so "." and "/" cannot climb
// or nest), and an encoding longer than 128 bytes is cut to its first 80
// bytes plus "~" and 32 hex digits of the id's SHA-256. Distinct ids give
// distinct components. An empty id is an error wrapping [ErrScope].
func Component(id string) (string, error) {
	if id == "" {
		return "", fmt.Errorf("%w: empty id", ErrScope)
	}
	enc := bus.EncodeToken(id)
	if len(enc) <= maxComponent {
		return enc, nil
	}
	cut := 80
	// Do not split a %XX escape.
	if i := strings.LastIndexByte(enc[:cut], '%'); i >= cut-2 {
		cut = i
	}
	sum := sha256.Sum256([]byte(id))
	return enc[:cut] + "~" + hex.EncodeToString(sum[:16]), nil
}

// WriteFolder returns the folder that writes for s go to: the shared one
// with scope "shared"; else the chat's folder in a group and the user's
// folder in a private chat. It needs a channel, and a chat id in a group
// or a user id in a private chat (a group's notes belong to no member).
func (n *Notes) WriteFolder(s Scope) (Folder, error) {
	switch {
	case s.Channel == "":
		return Folder{}, fmt.Errorf("%w: channel is empty", ErrScope)
	case s.IsGroup && s.ChatID == "":
		return Folder{}, fmt.Errorf("%w: chat id is empty in a group", ErrScope)
	case !s.IsGroup && s.UserID == "":
		return Folder{}, fmt.Errorf("%w: user id is empty", ErrScope)
	}
	if n.shared {
		return SharedFolder(), nil
	}
	if s.IsGroup {
		return ChatFolder(s.Channel, s.ChatID)
	}
	return UserFolder(s.Channel, s.UserID)
}

// CoreFile returns the MEMORY.md that memory_write "core" appends to for
// s (see [Notes.WriteFolder]).
func (n *Notes) CoreFile(s Scope) (string, error) {
	f, err := n.WriteFolder(s)
	if err != nil {
		return "", err
	}
	return f.Core(), nil
}

// UserFile returns the sender's own USER.md (scope "user" only) and
// whether it exists as a regular file.
func (n *Notes) UserFile(s Scope) (string, bool, error) {
	if err := s.Validate(); err != nil {
		return "", false, err
	}
	if n.shared {
		return "", false, nil
	}
	f, err := UserFolder(s.Channel, s.UserID)
	if err != nil {
		return "", false, err
	}
	rel := f.Dir + "/" + UserName
	fi, err := n.root.Stat(rel)
	if err != nil || !fi.Mode().IsRegular() {
		return rel, false, nil
	}
	return rel, true, nil
}

// Root is a part of the workspace a caller may read: one file, or the
// files of a folder (and, when Recursive, of its subfolders). Paths are
// relative to the workspace and slash-separated.
type Root struct {
	Path      string
	Dir       bool
	Recursive bool
}

// Contains reports whether the clean, slash-separated relative path rel
// lies in r.
func (r Root) Contains(rel string) bool {
	if !r.Dir {
		return rel == r.Path
	}
	rest, ok := strings.CutPrefix(rel, r.Path+"/")
	if !ok || rest == "" {
		return false
	}
	return r.Recursive || !strings.Contains(rest, "/")
}

// Readable returns the roots s may search and read: MEMORY.md and the
// shared daily notes (memory/*.md) always; with scope "user" also the
// user's own folder and, in a group, the chat's folder. Never another
// user's folder.
func (n *Notes) Readable(s Scope) ([]Root, error) {
	if err := s.Validate(); err != nil {
		return nil, err
	}
	roots := []Root{{Path: CoreName}, {Path: Dir, Dir: true}}
	if n.shared {
		return roots, nil
	}
	u, err := UserFolder(s.Channel, s.UserID)
	if err != nil {
		return nil, err
	}
	roots = append(roots, Root{Path: u.Dir, Dir: true, Recursive: true})
	if s.IsGroup {
		c, err := ChatFolder(s.Channel, s.ChatID)
		if err != nil {
			return nil, err
		}
		roots = append(roots, Root{Path: c.Dir, Dir: true, Recursive: true})
	}
	return roots, nil
}

// CanRead reports whether s may read the workspace-relative path rel
// (cleaned and slash-separated first). A path that climbs out is never
// readable.
func (n *Notes) CanRead(s Scope, rel string) bool {
	rel, ok := Clean(rel)
	if !ok {
		return false
	}
	roots, err := n.Readable(s)
	if err != nil {
		return false
	}
	for _, r := range roots {
		if r.Contains(rel) {
			return true
		}
	}
	return false
}

// Visible reports whether a file tool (read_file, list_dir, a workspace
// search) may show the workspace-relative path rel to s: paths outside
// memory/users and memory/chats always; inside them (scope "user") only
// the caller's own folder and the folder of the group they speak in, and
// the parent folders themselves (whose other entries the tool must filter
// with Visible). The workspace itself (".") is visible; paths that climb
// out are not. File tools
// should apply it to keep one user's memory from another's turn.
func (n *Notes) Visible(s Scope, rel string) bool {
	if p := path.Clean(strings.ReplaceAll(rel, "\\", "/")); p == "." {
		return true // the workspace itself
	}
	rel, ok := Clean(rel)
	if !ok {
		return false
	}
	if n.shared {
		return true
	}
	private := false
	for _, base := range []string{UsersDir, ChatsDir} {
		if rel == base || rel == Dir {
			return true
		}
		if rest, ok := strings.CutPrefix(rel, base+"/"); ok {
			private = true
			// The channel level lists ids of others: show the caller's only.
			if !strings.Contains(rest, "/") {
				c, err := Component(s.Channel)
				return err == nil && rest == c
			}
		}
	}
	if !private {
		return true
	}
	if n.CanRead(s, rel) {
		return true
	}
	// The caller's own folders themselves (not only the files in them).
	for _, f := range n.ownFolders(s) {
		if rel == f {
			return true
		}
	}
	return false
}

// ownFolders returns the user's folder and, in a group, the chat's.
func (n *Notes) ownFolders(s Scope) []string {
	var out []string
	if u, err := UserFolder(s.Channel, s.UserID); err == nil {
		out = append(out, u.Dir)
	}
	if s.IsGroup {
		if c, err := ChatFolder(s.Channel, s.ChatID); err == nil {
			out = append(out, c.Dir)
		}
	}
	return out
}

// Clean returns rel cleaned and slash-separated, and false when it is
// empty, absolute, climbs out with "..", or holds a NUL byte.
func Clean(rel string) (string, bool) {
	rel = strings.ReplaceAll(rel, "\\", "/")
	if rel == "" || strings.IndexByte(rel, 0) >= 0 || strings.HasPrefix(rel, "/") {
		return "", false
	}
	rel = path.Clean(rel)
	if rel == "." || rel == ".." || strings.HasPrefix(rel, "../") {
		return "", false
	}
	return rel, true
}

// Indexable reports whether the clean relative path rel is a memory file
// that search indexes: MEMORY.md, or a .md file under memory/ with no
// path component starting with ".".
func Indexable(rel string) bool {
	if rel == CoreName {
		return true
	}
	rest, ok := strings.CutPrefix(rel, Dir+"/")
	if !ok || !strings.HasSuffix(rel, ".md") {
		return false
	}
	for c := range strings.SplitSeq(rest, "/") {
		if c == "" || strings.HasPrefix(c, ".") {
			return false
		}
	}
	return true
}

// DayOf returns the day of a daily notes file (a file named YYYY-MM-DD.md)
// at midnight in loc.
func DayOf(rel string, loc *time.Location) (time.Time, bool) {
	base := path.Base(rel)
	name, ok := strings.CutSuffix(base, ".md")
	if !ok || len(name) != len(DayLayout) {
		return time.Time{}, false
	}
	t, err := time.ParseInLocation(DayLayout, name, loc)
	if err != nil {
		return time.Time{}, false
	}
	return t, true
}

func (n *Notes) wrote(rel string) {
	if n.onWrite != nil {
		n.onWrite(rel)
	}
}

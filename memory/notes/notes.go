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
//	memory/chats/<channel>/<chat>/users/<user>/MEMORY.md      a member's notes made in that group
//	memory/chats/<channel>/<chat>/users/<user>/YYYY-MM-DD.md  a member's daily notes in that group
//
// With scope "shared" everybody reads and writes the shared files. With
// scope "user" (the default) memory follows how people talk:
//
//   - In a private chat the user's own folder (memory/users/<channel>/<user>/)
//     is read and written, with the shared files.
//   - In a group the speaker sees the group's notes (the files directly in
//     the chat's folder), their own notes made in that group (their member
//     folder under it) and the shared files. Writes go to the member folder
//     unless the caller asks for the group's notes ([Scope.GroupNotes]).
//     No direct-chat memory — the speaker's included, and no per-user
//     USER.md — is ever part of a group's view, and one member's in-group
//     notes are never part of another member's.
//
// What was said in a group therefore never lands in a member's direct-chat
// memory, and what was said in a direct chat never reaches a group.
//
// Channel, user and chat ids may contain anything; each becomes one path
// component through [workspace.Component] ("." and "/" are escaped, so ".."
// or "a/b" cannot climb or nest), and a very long one is shortened with a
// hash. Every file access goes through the workspace's path guard
// ([workspace.Guard]: real paths, no links, no hard links).
package notes

import (
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path"
	"strings"
	"sync"
	"time"

	"github.com/switchboard-chat/switchboard/bus"
	"github.com/switchboard-chat/switchboard/memory/memcfg"
	"github.com/switchboard-chat/switchboard/workspace"
)

// File and folder names.
const (
	// CoreName is the core memory file of a folder.
	CoreName = workspace.MemoryFile
	// UserName is the per-user profile that overrides the workspace's.
	UserName = workspace.UserFile
	// Dir is the folder holding daily notes and the per-user and per-chat
	// folders (the workspace names it: its shared part is one of the
	// shared prompt inputs, workspace.SharedInput).
	Dir = workspace.MemoryDir
	// UsersDir and ChatsDir hold the per-user and per-chat folders.
	UsersDir = workspace.UsersMemoryDir
	ChatsDir = workspace.ChatsMemoryDir
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
	// FolderMember is a member's own notes made in one group chat.
	FolderMember = "member"
)

// MembersDir is the folder of a chat folder that holds its members'
// folders: memory/chats/<channel>/<chat>/users/<user>/.
const MembersDir = "users"

// ErrScope is returned (wrapped) when a Scope lacks what the call needs:
// a channel and a user id, and a chat id in a group. It is
// [bus.ErrIncompleteSpeaker], what [bus.Speaker.Validate] wraps.
var ErrScope = bus.ErrIncompleteSpeaker

// ErrDenied is returned (wrapped) when a caller asks for a file outside
// the memory it may read.
var ErrDenied = errors.New("notes: not readable for this caller")

// Scope is who a memory operation runs for — the chat message's speaker
// (channel, chat, sender, whether the chat is a group; [bus.Speaker.Validate]
// says what a read needs) — and where a write goes.
type Scope struct {
	bus.Speaker
	// GroupNotes, in a group, sends writes to the group's notes (seen by
	// every member) instead of the speaker's own in-group notes. Summaries
	// of a group's conversation set it. It changes nothing else: not what
	// is read, not private chats, not scope "shared".
	GroupNotes bool
}

// Folder is one memory folder: the shared one, a user's, a group chat's or
// a member's in a group chat.
type Folder struct {
	// Kind is FolderShared, FolderUser, FolderChat or FolderMember.
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
	// Replica, when set, is where the memory files are written first
	// (memory.store jetstream: shared by the instances); see [Replica].
	Replica Replica
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

	wmu      sync.Mutex        // serialises writes
	replica  Replica           // nil: the workspace files only
	replicas map[string]uint64 // rel → revision of the replica's content in the file (under wmu)

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
		root:     root,
		shared:   opts.Scope == memcfg.ScopeShared,
		onWrite:  opts.OnWrite,
		log:      log,
		replica:  opts.Replica,
		replicas: make(map[string]uint64),
		cache:    make(map[string]cachedTail),
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

// MemberFolder returns the folder of a member's own notes made in a group
// chat of a channel: memory/chats/<channel>/<chat>/users/<user>, each id
// one path component through [Component].
func MemberFolder(channel, chatID, userID string) (Folder, error) {
	c, err := ChatFolder(channel, chatID)
	if err != nil {
		return Folder{}, err
	}
	u, err := Component(userID)
	if err != nil {
		return Folder{}, fmt.Errorf("user id: %w", err)
	}
	return Folder{Kind: FolderMember, Dir: c.Dir + "/" + MembersDir + "/" + u}, nil
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

// Component turns an id into one safe path component, the encoding every
// per-user and per-chat folder of the workspace uses ([workspace.Component]:
// "." and "/" cannot climb or nest, a very long id is shortened with a
// hash; distinct ids give distinct components). An empty id is an error
// wrapping [ErrScope].
func Component(id string) (string, error) {
	if id == "" {
		return "", fmt.Errorf("%w: empty id", ErrScope)
	}
	return workspace.Component(id)
}

// WriteFolder returns the folder that writes for s go to: the shared one
// with scope "shared"; else, in a private chat, the user's folder; in a
// group, the speaker's member folder, or the chat's folder when
// s.GroupNotes is set. It needs a channel; a user id in a private chat; a
// chat id in a group, and a user id there too unless s.GroupNotes is set
// (a group's notes belong to no member).
func (n *Notes) WriteFolder(s Scope) (Folder, error) {
	switch {
	case s.Channel == "":
		return Folder{}, fmt.Errorf("%w: channel is empty", ErrScope)
	case s.IsGroup && s.ChatID == "":
		return Folder{}, fmt.Errorf("%w: chat id is empty in a group", ErrScope)
	case (!s.IsGroup || !s.GroupNotes) && s.UserID == "":
		return Folder{}, fmt.Errorf("%w: user id is empty", ErrScope)
	}
	switch {
	case n.shared:
		return SharedFolder(), nil
	case s.IsGroup && s.GroupNotes:
		return ChatFolder(s.Channel, s.ChatID)
	case s.IsGroup:
		return MemberFolder(s.Channel, s.ChatID, s.UserID)
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

// UserFile returns the sender's own USER.md and whether it exists as a
// regular file. Only a private chat with scope "user" has one: the profile
// is direct-chat memory, so in a group (and with scope "shared") the path
// is "" and the workspace's USER.md applies.
func (n *Notes) UserFile(s Scope) (string, bool, error) {
	rel, fi, err := n.userFile(s)
	return rel, fi != nil, err
}

// userFile is UserFile with the stat that found the file (nil: none).
func (n *Notes) userFile(s Scope) (string, fs.FileInfo, error) {
	if err := s.Validate(); err != nil {
		return "", nil, err
	}
	if n.shared || s.IsGroup {
		return "", nil, nil
	}
	f, err := UserFolder(s.Channel, s.UserID)
	if err != nil {
		return "", nil, err
	}
	rel := f.Dir + "/" + UserName
	fi, err := n.root.Stat(rel)
	if err != nil || !fi.Mode().IsRegular() {
		return rel, nil, nil
	}
	return rel, fi, nil
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
// shared daily notes (memory/*.md) always; with scope "user" also, in a
// private chat, the user's own folder (with its subfolders), and in a
// group the chat's own files (not its subfolders, which hold the members'
// folders) and the speaker's member folder. Never another user's folder,
// never a direct-chat folder in a group, never another member's in-group
// notes.
func (n *Notes) Readable(s Scope) ([]Root, error) {
	if err := s.Validate(); err != nil {
		return nil, err
	}
	roots := []Root{{Path: CoreName}, {Path: Dir, Dir: true}}
	if n.shared {
		return roots, nil
	}
	for _, f := range n.ownFolders(s) {
		// A chat folder's subfolders are its members' folders.
		roots = append(roots, Root{Path: f.Dir, Dir: true, Recursive: f.Kind != FolderChat})
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
// memory/users and memory/chats always; inside them (scope "user") what
// [Notes.PrivateMask] leaves visible, and the folders above s's own
// folders (whose other entries the tool must filter with Visible). In a
// private chat that is the user's folder; in a group the chat's folder
// except its members' folders, and the speaker's member folder — never
// the speaker's direct-chat folder. The workspace itself (".") is
// visible; paths that climb out are not. File tools apply it to keep one
// person's memory out of another's turn; a sandbox applies PrivateMask,
// so both show the same.
func (n *Notes) Visible(s Scope, rel string) bool {
	if p := path.Clean(strings.ReplaceAll(rel, "\\", "/")); p == "." {
		return true // the workspace itself
	}
	rel, ok := Clean(rel)
	if !ok {
		return false
	}
	if n.shared || !IsPrivate(rel) || rel == UsersDir || rel == ChatsDir {
		return true
	}
	visible := true
	for _, st := range n.PrivateMask(s) {
		switch {
		case rel == st.Dir || strings.HasPrefix(rel, st.Dir+"/"):
			visible = st.Show
		case st.Show && strings.HasPrefix(st.Dir, rel+"/"):
			return true // a folder above one of s's own
		}
	}
	return visible
}

// IsPrivate reports whether the clean relative path rel lies in a private
// memory area: memory/users or memory/chats, or one of them itself.
func IsPrivate(rel string) bool {
	for _, base := range []string{UsersDir, ChatsDir} {
		if rel == base || strings.HasPrefix(rel, base+"/") {
			return true
		}
	}
	return false
}

// MaskStep is one step of building what a session may see of the private
// memory areas, for a sandbox that mounts the workspace: Dir (relative to
// the workspace) is hidden (an empty folder mounted over it) or, when
// Show, shown as it is in the workspace (bound over what earlier steps
// hid).
type MaskStep struct {
	Dir  string
	Show bool
}

// PrivateMask returns the steps that, applied in order over the whole
// workspace, leave visible exactly the private memory s may see (the same
// folders [Notes.Visible] shows): hide memory/users and memory/chats, then
// show s's own folder in a private chat; in a group show the chat's
// folder, hide its members' folder (memory/chats/<channel>/<chat>/users)
// and show the speaker's member folder. With scope "shared" nothing is
// private and it returns nil. A scope that names no user (or no chat in a
// group) sees no private folder. Each step's folder may not exist yet: a
// sandbox creates it (or an empty mount point) so that a file written there
// lands where the memory tools find it.
func (n *Notes) PrivateMask(s Scope) []MaskStep {
	if n.shared {
		return nil
	}
	steps := []MaskStep{{Dir: UsersDir}, {Dir: ChatsDir}}
	if s.Validate() != nil {
		return steps
	}
	for _, f := range n.ownFolders(s) {
		steps = append(steps, MaskStep{Dir: f.Dir, Show: true})
		if f.Kind == FolderChat {
			steps = append(steps, MaskStep{Dir: f.Dir + "/" + MembersDir})
		}
	}
	return steps
}

// PrivateFolders is [Notes.PrivateMask] as two lists, for a sandbox that
// mounts by depth: hide are the folders to hide, show the folders to show
// again inside them, and a deeper folder always overrides the one it lies
// in (every step of the mask lies inside an earlier one, so mounting by
// depth is mounting in mask order). In a group: hide memory/users,
// memory/chats and memory/chats/<channel>/<chat>/users; show
// memory/chats/<channel>/<chat> and .../users/<speaker>. In a private
// chat: show memory/users/<channel>/<user>. Both are nil with scope
// "shared".
func (n *Notes) PrivateFolders(s Scope) (hide, show []string) {
	for _, st := range n.PrivateMask(s) {
		if st.Show {
			show = append(show, st.Dir)
		} else {
			hide = append(hide, st.Dir)
		}
	}
	return hide, show
}

// ownFolders returns the private folders s reads: the user's folder in a
// private chat; the chat's folder and the speaker's member folder in a
// group. None when s is incomplete.
func (n *Notes) ownFolders(s Scope) []Folder {
	if s.Validate() != nil {
		return nil
	}
	if !s.IsGroup {
		if u, err := UserFolder(s.Channel, s.UserID); err == nil {
			return []Folder{u}
		}
		return nil
	}
	var out []Folder
	if c, err := ChatFolder(s.Channel, s.ChatID); err == nil {
		out = append(out, c)
	}
	if m, err := MemberFolder(s.Channel, s.ChatID, s.UserID); err == nil {
		out = append(out, m)
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

// AllFolders returns [Notes.Folders] followed, after each group chat's
// folder, by the member folders found in it
// (memory/chats/<channel>/<chat>/users/<user>), in path order: every
// folder that holds its own MEMORY.md and daily notes, e.g. for the
// nightly consolidation. Symbolic links are skipped.
func (n *Notes) AllFolders() ([]Folder, error) {
	folders, err := n.Folders()
	if err != nil {
		return nil, err
	}
	var out []Folder
	for _, f := range folders {
		out = append(out, f)
		if f.Kind != FolderChat {
			continue
		}
		dir := f.Dir + "/" + MembersDir
		ids, err := n.subdirs(dir)
		if err != nil {
			return nil, fmt.Errorf("notes: folders: %w", err)
		}
		for _, id := range ids {
			out = append(out, Folder{Kind: FolderMember, Dir: dir + "/" + id})
		}
	}
	return out, nil
}

package workspace

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"strings"
)

// Errors of a [Guard]. Each is returned wrapped, with the path.
var (
	// ErrDenied: the caller's policy refuses the path as given or its
	// real path (after symbolic links), e.g. another user's private
	// memory or another chat's inbox, or (with [Guard.NoSymlinks]) the
	// path passes through a symbolic link.
	ErrDenied = errors.New("workspace: path is private to another user or chat")
	// ErrHardLink: the path names a regular file with more than one hard
	// link. Such a file is never read or written: its other name may lie
	// in a private folder or outside the workspace, where the policy
	// cannot see it.
	ErrHardLink = errors.New("workspace: file has more than one hard link (it may be another user's private file or lie outside the workspace), so it is not opened")
	// ErrChanged: a component of the path was replaced (e.g. by a
	// symbolic link) between the check and the open.
	ErrChanged = errors.New("workspace: path changed while it was being opened")
	// ErrReadOnly: the caller may read the path but not create or change
	// it ([Guard.Writes]), e.g. a shared prompt input ([SharedInput]) for
	// someone who is not an owner.
	ErrReadOnly = errors.New("workspace: path is read-only for this caller")
)

// maxLinkHops bounds the symbolic links followed for one path.
const maxLinkHops = 40

// Allow reports whether a caller may reach rel: a clean, slash-separated
// path relative to the workspace ("." is the workspace itself). It must be
// safe for concurrent use.
type Allow func(rel string) bool

// Guard opens workspace files for one caller. It decides on real paths:
// a path is first resolved component by component through the os.Root
// (symbolic links inside the workspace are followed, at most 40 of them; a
// link that is absolute or climbs out is refused with [ErrOutside]), and
// both the path as given and its real path must pass the caller's
// [Allow]. The open then goes through the os.Root, and the opened file
// (and its folder) are compared by device and inode with what was
// resolved, so a component swapped for a symbolic link in between fails
// with [ErrChanged]. Regular files with more than one hard link are
// refused ([ErrHardLink]); folders are not subject to that rule.
//
// The zero Guard is not usable; get one from [Workspace.Guard] or
// [NewGuard]. A Guard is a small value, safe for concurrent use.
type Guard struct {
	root    *os.Root
	allow   Allow
	write   Allow // nil: every path allow accepts is writable
	noLinks bool
}

// NewGuard returns a guard over root (which the caller keeps open) that
// lets the caller reach what allow accepts; a nil allow accepts every
// path (the real-path, hard-link and swap checks still apply).
func NewGuard(root *os.Root, allow Allow) Guard { return Guard{root: root, allow: allow} }

// Guard returns a guard over the workspace for a caller limited by allow
// (nil: every path).
func (w *Workspace) Guard(allow Allow) Guard { return NewGuard(w.root, allow) }

// NoSymlinks returns a copy of g that refuses, with [ErrDenied], any path
// passing through a symbolic link (memory files are never reached through
// one).
func (g Guard) NoSymlinks() Guard { g.noLinks = true; return g }

// Writes returns a copy of g that creates and changes files, and makes
// folders, only where write also accepts the path as given and its real
// path: [Guard.OpenFile] with a flag that writes (O_WRONLY, O_RDWR,
// O_CREATE, O_TRUNC, O_APPEND) and [Guard.MkdirAll] (for the folder asked
// for; missing parents above it are made as needed) fail with
// [ErrReadOnly] elsewhere. Reading is unchanged. A nil write adds no
// limit.
func (g Guard) Writes(write Allow) Guard { g.write = write; return g }

// testHookResolved, when set (tests), runs after a path was resolved and
// allowed, before it is opened.
var testHookResolved func(real string)

// resolved is the outcome of resolving a path.
type resolved struct {
	real   string      // clean, slash-separated, relative to the root
	parent fs.FileInfo // the folder holding real's last component (Lstat); nil when it does not exist
	final  fs.FileInfo // real itself (Lstat); nil when it does not exist
}

// Resolve returns the real path of rel (a clean path relative to the
// workspace, as [Workspace.Rel] returns): every symbolic link on the way
// followed inside the workspace. Components that do not exist are kept as
// given, so the real path of a file still to be created is known too. It
// does not apply the policy; see [Guard.Check].
func (g Guard) Resolve(rel string) (string, error) {
	r, err := g.resolve(rel)
	return r.real, err
}

// Check resolves rel and applies the policy to the path as given and to
// its real path, which it returns. A refused path is an error wrapping
// [ErrDenied].
func (g Guard) Check(rel string) (string, error) {
	r, err := g.resolve(rel)
	if err != nil {
		return "", err
	}
	if err := g.decide(rel, r.real); err != nil {
		return "", err
	}
	return r.real, nil
}

// Visible reports whether a listing or search may show rel to the caller:
// the policy accepts rel, and rel is not a symbolic link (or a path
// through one) whose real path the policy refuses. An entry that cannot
// be resolved for another reason (a link leading outside, a loop) stays
// visible as a name; opening it fails.
func (g Guard) Visible(rel string) bool {
	if !g.allowed(path.Clean(toSlash(rel))) {
		return false
	}
	_, err := g.Check(rel)
	return !errors.Is(err, ErrDenied)
}

func (g Guard) allowed(rel string) bool { return g.allow == nil || g.allow(rel) }

func (g Guard) decide(given, real string) error {
	given = path.Clean(toSlash(given))
	if !g.allowed(given) || !g.allowed(real) {
		if real != given {
			return fmt.Errorf("%w: %s (it leads to %s)", ErrDenied, given, real)
		}
		return fmt.Errorf("%w: %s", ErrDenied, given)
	}
	return nil
}

// decideWrite applies the write policy to a path the policy allows.
func (g Guard) decideWrite(given, real string) error {
	given = path.Clean(toSlash(given))
	if g.write == nil || g.write(given) && g.write(real) {
		return nil
	}
	if real != given {
		return fmt.Errorf("%w: %s (it leads to %s)", ErrReadOnly, given, real)
	}
	return fmt.Errorf("%w: %s", ErrReadOnly, given)
}

// writes reports whether an open flag creates or changes the file.
func writes(flag int) bool {
	return flag&(os.O_WRONLY|os.O_RDWR|os.O_CREATE|os.O_TRUNC|os.O_APPEND) != 0
}

func toSlash(p string) string { return strings.ReplaceAll(p, string(os.PathSeparator), "/") }

// resolve walks rel component by component through the root.
func (g Guard) resolve(rel string) (resolved, error) {
	if g.root == nil {
		return resolved{}, errors.New("workspace: guard has no root")
	}
	given := path.Clean(toSlash(rel))
	if path.IsAbs(given) || given == ".." || strings.HasPrefix(given, "../") {
		return resolved{}, fmt.Errorf("%w: %s", ErrOutside, rel)
	}
	rootInfo, err := g.root.Stat(".")
	if err != nil {
		return resolved{}, fmt.Errorf("workspace: resolve %s: %w", given, err)
	}
	var (
		done    []string      // real components so far
		infos   []fs.FileInfo // Lstat of each of done; nil when missing
		missing = -1          // index in done of the first missing component
		hops    int
		todo    = split(given)
	)
	for len(todo) > 0 {
		c := todo[0]
		todo = todo[1:]
		switch c {
		case "", ".":
			continue
		case "..":
			if len(done) == 0 {
				return resolved{}, fmt.Errorf("%w: %s climbs out of the workspace through a symbolic link", ErrOutside, given)
			}
			done, infos = done[:len(done)-1], infos[:len(infos)-1]
			if missing >= len(done) {
				missing = -1
			}
			continue
		}
		if len(infos) > 0 && infos[len(infos)-1] != nil && !infos[len(infos)-1].IsDir() {
			return resolved{}, fmt.Errorf("workspace: resolve %s: %s is not a folder", given, strings.Join(done, "/"))
		}
		p := strings.Join(append(done[:len(done):len(done)], c), "/")
		if missing >= 0 {
			done, infos = append(done, c), append(infos, nil)
			continue
		}
		fi, err := g.root.Lstat(p)
		if errors.Is(err, fs.ErrNotExist) {
			missing = len(done)
			done, infos = append(done, c), append(infos, nil)
			continue
		}
		if err != nil {
			return resolved{}, fmt.Errorf("workspace: resolve %s: %w", given, err)
		}
		if fi.Mode()&fs.ModeSymlink == 0 {
			done, infos = append(done, c), append(infos, fi)
			continue
		}
		if g.noLinks {
			return resolved{}, fmt.Errorf("%w: %s passes through the symbolic link %s", ErrDenied, given, p)
		}
		if hops++; hops > maxLinkHops {
			return resolved{}, fmt.Errorf("workspace: resolve %s: too many symbolic links", given)
		}
		target, err := g.root.Readlink(p)
		if err != nil {
			return resolved{}, fmt.Errorf("workspace: resolve %s: %w", given, err)
		}
		target = toSlash(target)
		if target == "" || path.IsAbs(target) || strings.IndexByte(target, 0) >= 0 {
			return resolved{}, fmt.Errorf("%w: %s passes through the symbolic link %s, which leads outside", ErrOutside, given, p)
		}
		todo = append(split(target), todo...)
	}
	r := resolved{real: "."}
	if len(done) > 0 {
		r.real = strings.Join(done, "/")
		r.final = infos[len(infos)-1]
		r.parent = rootInfo
		if len(infos) > 1 {
			r.parent = infos[len(infos)-2]
		}
	} else {
		r.final = rootInfo
	}
	return r, nil
}

func split(p string) []string { return strings.Split(p, "/") }

// Open opens rel for reading (a file or a folder); see [Guard.OpenFile].
func (g Guard) Open(rel string) (*os.File, string, error) {
	return g.OpenFile(rel, os.O_RDONLY, 0)
}

// OpenFile opens rel (clean, relative to the workspace) like
// os.Root.OpenFile, after resolving it and applying the policy (see
// [Guard]) and, for a flag that writes, the write policy
// ([Guard.Writes]); it returns the file and its real path. The parent folder of a
// file to create must exist ([Guard.MkdirAll]). O_TRUNC is applied only
// after the opened file was verified, so a swapped path never truncates
// anything. Only regular files and folders are opened.
func (g Guard) OpenFile(rel string, flag int, perm fs.FileMode) (*os.File, string, error) {
	for attempt := 0; ; attempt++ {
		f, real, err := g.openOnce(rel, flag, perm)
		// A file created by someone else between the check and an
		// exclusive create is looked at again, once.
		if errors.Is(err, errRaced) && attempt == 0 {
			continue
		}
		if errors.Is(err, errRaced) {
			err = fmt.Errorf("%w: %s", ErrChanged, rel)
		}
		return f, real, err
	}
}

var errRaced = errors.New("created concurrently")

func (g Guard) openOnce(rel string, flag int, perm fs.FileMode) (*os.File, string, error) {
	r, err := g.resolve(rel)
	if err != nil {
		return nil, "", err
	}
	if err := g.decide(rel, r.real); err != nil {
		return nil, r.real, err
	}
	if writes(flag) {
		if err := g.decideWrite(rel, r.real); err != nil {
			return nil, r.real, err
		}
	}
	if r.final != nil {
		if err := openable(rel, r.final); err != nil {
			return nil, r.real, err
		}
	}
	if testHookResolved != nil {
		testHookResolved(r.real)
	}
	if r.real == "." {
		f, err := g.root.OpenFile(".", flag&^(os.O_CREATE|os.O_EXCL|os.O_TRUNC), perm)
		if err != nil {
			return nil, r.real, err
		}
		return g.verify(f, rel, r, flag)
	}
	if r.parent == nil {
		return nil, r.real, &fs.PathError{Op: "open", Path: rel, Err: fs.ErrNotExist}
	}
	dir, base := path.Split(r.real)
	sub, err := g.root.OpenRoot(cmpDot(strings.TrimSuffix(dir, "/")))
	if err != nil {
		return nil, r.real, err
	}
	defer sub.Close()
	st, err := sub.Stat(".")
	if err != nil {
		return nil, r.real, err
	}
	if !os.SameFile(st, r.parent) {
		return nil, r.real, fmt.Errorf("%w: %s", ErrChanged, rel)
	}
	if r.final == nil {
		if flag&os.O_CREATE == 0 {
			return nil, r.real, &fs.PathError{Op: "open", Path: rel, Err: fs.ErrNotExist}
		}
		// Create it in the verified folder; O_EXCL does not follow a
		// symbolic link put there meanwhile.
		f, err := sub.OpenFile(base, (flag|os.O_EXCL)&^os.O_TRUNC, perm)
		if errors.Is(err, fs.ErrExist) && flag&os.O_EXCL == 0 {
			return nil, r.real, errRaced
		}
		if err != nil {
			return nil, r.real, err
		}
		fi, err := f.Stat()
		if err == nil && !fi.Mode().IsRegular() {
			err = fmt.Errorf("workspace: open %s: not a regular file", rel)
		}
		if err != nil {
			_ = f.Close()
			return nil, r.real, err
		}
		return f, r.real, nil
	}
	if flag&(os.O_CREATE|os.O_EXCL) == os.O_CREATE|os.O_EXCL {
		return nil, r.real, &fs.PathError{Op: "open", Path: rel, Err: fs.ErrExist}
	}
	f, err := sub.OpenFile(base, flag&^(os.O_CREATE|os.O_EXCL|os.O_TRUNC), perm)
	if err != nil {
		// E.g. "path escapes from parent": the name became a link.
		if fi, lerr := sub.Lstat(base); lerr != nil || !sameEntry(fi, r.final) {
			err = fmt.Errorf("%w: %s", ErrChanged, rel)
		}
		return nil, r.real, err
	}
	return g.verify(f, rel, r, flag)
}

// openable refuses what is neither a regular file nor a folder (opening a
// FIFO could block) and hard-linked regular files.
func openable(rel string, fi fs.FileInfo) error {
	switch {
	case fi.IsDir():
		return nil
	case !fi.Mode().IsRegular():
		return fmt.Errorf("workspace: open %s: not a regular file (%s)", rel, fi.Mode().Type())
	case linkCount(fi) > 1:
		return fmt.Errorf("%w: %s has %d links", ErrHardLink, rel, linkCount(fi))
	}
	return nil
}

// verify compares the opened file with what was resolved, then applies
// O_TRUNC.
func (g Guard) verify(f *os.File, rel string, r resolved, flag int) (*os.File, string, error) {
	fi, err := f.Stat()
	if err == nil && !os.SameFile(fi, r.final) {
		err = fmt.Errorf("%w: %s", ErrChanged, rel)
	}
	if err == nil {
		err = openable(rel, fi)
	}
	if err == nil && flag&os.O_TRUNC != 0 && fi.Mode().IsRegular() {
		err = f.Truncate(0)
	}
	if err != nil {
		_ = f.Close()
		return nil, r.real, err
	}
	return f, r.real, nil
}

// sameEntry reports whether two Lstat results describe the same file of
// the same type (an inode number freed by a removal can be reused at once
// by the link that replaces it).
func sameEntry(a, b fs.FileInfo) bool {
	return os.SameFile(a, b) && a.Mode().Type() == b.Mode().Type()
}

func cmpDot(dir string) string {
	if dir == "" {
		return "."
	}
	return dir
}

// MkdirAll creates the folder rel and its missing parents (like
// os.Root.MkdirAll) after resolving it and applying the policy (and the
// write policy, [Guard.Writes]) to the path as given and to its real
// path. Folders are created on the real path, one at a time; an existing
// component must be a folder.
func (g Guard) MkdirAll(rel string, perm fs.FileMode) error {
	r, err := g.resolve(rel)
	if err != nil {
		return err
	}
	if err := g.decide(rel, r.real); err != nil {
		return err
	}
	if err := g.decideWrite(rel, r.real); err != nil {
		return err
	}
	if r.real == "." {
		return nil
	}
	p := ""
	for _, c := range split(r.real) {
		p = path.Join(p, c)
		fi, err := g.root.Lstat(p)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			if err := g.root.Mkdir(p, perm); err != nil && !errors.Is(err, fs.ErrExist) {
				return err
			}
			if fi, err = g.root.Lstat(p); err != nil {
				return err
			}
		case err != nil:
			return err
		}
		if !fi.IsDir() {
			if fi.Mode()&fs.ModeSymlink != 0 {
				return fmt.Errorf("%w: %s", ErrChanged, rel)
			}
			return &fs.PathError{Op: "mkdir", Path: p, Err: errors.New("not a directory")}
		}
	}
	return nil
}

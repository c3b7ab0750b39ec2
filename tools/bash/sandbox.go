package bash

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strings"

	"github.com/switchboard-chat/switchboard/tools"
	"github.com/switchboard-chat/switchboard/workspace"
)

// Sandbox modes (tools.bash.sandbox).
const (
	SandboxBwrap = "bwrap"
	SandboxNone  = "none"
)

// Private gives, for a session, the workspace folders a command of that
// session must not see (hide) and the session's own folders inside them
// that it may see and change (allow). Paths are relative to the
// workspace, slash-separated and clean ("memory/users",
// "memory/users/telegram/42"). A folder of both lists is allowed.
type Private func(tools.Session) (hide, allow []string)

// errNoBwrap explains how to get out of a missing bubblewrap.
const errNoBwrap = `bash: tools.bash.sandbox is "bwrap" (the default), but bwrap (bubblewrap) is not on PATH: ` +
	`install it (Debian/Ubuntu: apt-get install bubblewrap; Fedora: dnf install bubblewrap; Alpine: apk add bubblewrap), ` +
	`or set tools.bash.sandbox: none to run commands unconfined (they can then read every user's files and the daemon's data_dir)`

// CheckSandbox reports what cfg's sandbox needs and lacks, for
// `switchboard check`: an error when New would refuse to start (bwrap
// missing), a warning when commands would run unconfined. lookPath nil
// means exec.LookPath.
func CheckSandbox(cfg tools.BashConfig, lookPath func(string) (string, error)) (warning string, err error) {
	if lookPath == nil {
		lookPath = exec.LookPath
	}
	switch cfg.Sandbox {
	case SandboxNone:
		return noneWarning, nil
	case "", SandboxBwrap:
		if _, err := lookPath("bwrap"); err != nil {
			return "", errors.New(errNoBwrap)
		}
		return "", nil
	}
	return "", fmt.Errorf("bash: unknown tools.bash.sandbox %q (bwrap or none)", cfg.Sandbox)
}

const noneWarning = "tools.bash.sandbox is none: commands run unconfined as the daemon's user and can read every user's private memory, " +
	"every chat's inbox and data_dir (history.db, credentials), change the shared prompt files (AGENT.md, skills/...) and reach the network; " +
	"use sandbox: bwrap (the default) unless every allowed user is trusted with all of it"

// sandbox is the bubblewrap confinement of commands.
type sandbox struct {
	base    []string // bwrap and the mounts shared by every command, up to the workspace
	dir     string   // the workspace as commands see it (its path on the host)
	realDir string   // the workspace after symlinks
	hidden  []string // workspace-relative folders never visible (data_dir inside the workspace)
	private Private
	root    *os.Root
}

// etcFiles are the parts of /etc commands may read: name service, TLS
// roots, time zone, the dynamic linker and shell start-up files. The rest
// of /etc (the daemon's own config, /etc/shadow, ...) is not mounted.
var etcFiles = []string{
	"alternatives", "passwd", "group", "nsswitch.conf", "hosts", "host.conf", "resolv.conf", "gai.conf",
	"services", "protocols", "ssl", "ca-certificates", "ca-certificates.conf", "pki", "crypto-policies",
	"localtime", "timezone", "ld.so.cache", "ld.so.conf", "ld.so.conf.d", "bash.bashrc", "profile",
	"profile.d", "inputrc", "terminfo", "mime.types", "magic", "gitconfig", "os-release", "debian_version", "perl",
}

// newSandbox builds the bubblewrap confinement of workspace dir. hidden
// are host folders (data_dir) a command must never see; network keeps the
// host's network (tools.bash.network), else commands get a network
// namespace of their own with nothing but a loopback of their own.
func newSandbox(bwrap, dir string, root *os.Root, hidden []string, private Private, network bool) (*sandbox, error) {
	realDir, err := filepath.EvalSymlinks(dir)
	if err != nil {
		return nil, fmt.Errorf("bash: workspace: %w", err)
	}
	sb := &sandbox{dir: dir, realDir: realDir, private: private, root: root}
	for _, h := range hidden {
		if h == "" {
			continue
		}
		abs, err := filepath.Abs(h)
		if err != nil {
			return nil, fmt.Errorf("bash: %w", err)
		}
		if r, err := filepath.EvalSymlinks(abs); err == nil {
			abs = r
		}
		if rel, ok := inside(realDir, abs); ok {
			if rel == "." {
				return nil, fmt.Errorf("bash: the workspace %s is data_dir itself: the sandbox cannot hide data_dir from commands; "+
					"set agent.workspace to a folder of its own (the default is data_dir/workspace)", dir)
			}
			sb.hidden = append(sb.hidden, filepath.ToSlash(rel))
		}
	}
	args := []string{bwrap,
		"--die-with-parent", // the sandbox ends with the daemon
		"--new-session",     // no terminal to inject input into
		"--unshare-all"}     // own PID (a fresh /proc), mount, IPC, UTS, cgroup, user and network namespaces
	if network {
		// The host's network: commands fetch and install things, and can
		// reach what listens on the host's loopback.
		args = append(args, "--share-net")
	}
	args = append(args,
		"--cap-drop", "ALL", // no capability, even as root: no ptrace, no mount, no reading others' files
		"--ro-bind", "/usr", "/usr")
	for _, d := range []string{"/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"} {
		fi, err := os.Lstat(d)
		switch {
		case err != nil:
		case fi.Mode()&fs.ModeSymlink != 0:
			if target, err := os.Readlink(d); err == nil {
				args = append(args, "--symlink", target, d)
			}
		case fi.IsDir():
			args = append(args, "--ro-bind", d, d)
		}
	}
	args = append(args, "--dir", "/etc")
	for _, f := range etcFiles {
		args = append(args, "--ro-bind-try", "/etc/"+f, "/etc/"+f)
	}
	args = append(args, "--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp",
		"--bind", realDir, dir, "--chdir", dir)
	sb.base = args
	return sb, nil
}

// inside returns p relative to base when p is base or below it.
func inside(base, p string) (string, bool) {
	rel, err := filepath.Rel(base, p)
	if err != nil || !filepath.IsLocal(rel) && rel != "." {
		return "", false
	}
	return rel, true
}

// mountOp is one per-session mount, relative to the workspace.
type mountOp struct {
	rel  string
	kind int
}

const (
	opAnchor   = iota // bind a folder onto itself: it cannot be renamed away from under a hidden one
	opHide            // an empty read-only tmpfs over the folder
	opAllow           // bind the real folder back inside a hidden one
	opReadOnly        // bind the real file or folder onto itself read-only
)

// args returns the bwrap command line for a command of sess, up to and
// including "--". It creates the folders it mounts (hidden and allowed
// ones), so a command cannot create them in the open first. For a session
// that is not an owner ([tools.Session.Owner]) the shared prompt inputs
// (workspace.SharedFiles and SharedDirs) are bound read-only, the
// session's own memory folders inside memory/ read-write again; a shared
// file that is missing is created empty first, for the same reason.
func (sb *sandbox) args(sess tools.Session) ([]string, error) {
	hide := slices.Clone(sb.hidden)
	var allow []string
	if sb.private != nil {
		h, a := sb.private(sess)
		hide = append(hide, h...)
		allow = append(allow, a...)
	}
	ops := map[string]int{}
	if !sess.Owner {
		if err := sb.readOnly(ops); err != nil {
			return nil, err
		}
	}
	for _, h := range hide {
		if !validRel(h) {
			return nil, fmt.Errorf("bash: sandbox: bad private folder %q", h)
		}
		if err := sb.root.MkdirAll(h, 0o700); err != nil {
			return nil, fmt.Errorf("bash: sandbox: create %s: %w", h, err)
		}
		ops[h] = opHide
	}
	for _, a := range allow {
		if !validRel(a) {
			return nil, fmt.Errorf("bash: sandbox: bad private folder %q", a)
		}
		if slices.Contains(sb.hidden, a) {
			continue // data_dir stays hidden
		}
		if covering(a, ops, false) != opHide {
			continue // not inside a hidden folder: visible anyway
		}
		if err := sb.root.MkdirAll(a, 0o700); err != nil {
			return nil, fmt.Errorf("bash: sandbox: create %s: %w", a, err)
		}
		ops[a] = opAllow
	}
	// A folder that holds a hidden one and is itself visible becomes a
	// mount point: a command cannot rename it (EBUSY), so a hidden folder
	// never moves to a path that is not hidden.
	for rel, kind := range ops {
		if kind != opHide {
			continue
		}
		for p := path.Dir(rel); p != "."; p = path.Dir(p) {
			if _, ok := ops[p]; !ok && covering(p, ops, true) != opHide {
				ops[p] = opAnchor
			}
		}
	}
	list := make([]mountOp, 0, len(ops))
	for rel, kind := range ops {
		list = append(list, mountOp{rel, kind})
	}
	// Parents before children, so each mount lands on the one above it.
	slices.SortFunc(list, func(a, b mountOp) int {
		if d := strings.Count(a.rel, "/") - strings.Count(b.rel, "/"); d != 0 {
			return d
		}
		return strings.Compare(a.rel, b.rel)
	})
	out := slices.Clone(sb.base)
	var ro []string
	for _, op := range list {
		dest := filepath.Join(sb.dir, filepath.FromSlash(op.rel))
		switch op.kind {
		case opHide:
			out = append(out, "--tmpfs", dest)
			ro = append(ro, dest)
		case opAnchor, opAllow, opReadOnly:
			src, err := sb.source(op.rel)
			if err != nil {
				return nil, err
			}
			bind := "--bind"
			if op.kind == opReadOnly {
				bind = "--ro-bind"
			}
			out = append(out, bind, src, dest)
		}
	}
	for _, d := range ro {
		out = append(out, "--remount-ro", d)
	}
	return append(out, "--"), nil
}

// readOnly adds the shared prompt inputs to ops as read-only binds,
// creating those that are missing (an empty file, a folder).
func (sb *sandbox) readOnly(ops map[string]int) error {
	for _, f := range workspace.SharedFiles {
		fl, err := sb.root.OpenFile(f, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
		switch {
		case err == nil:
			err = fl.Close()
		case errors.Is(err, fs.ErrExist):
			err = nil
		}
		if err != nil {
			return fmt.Errorf("bash: sandbox: create %s: %w", f, err)
		}
		ops[f] = opReadOnly
	}
	for _, d := range workspace.SharedDirs {
		if err := sb.root.MkdirAll(d, 0o700); err != nil {
			return fmt.Errorf("bash: sandbox: create %s: %w", d, err)
		}
		ops[d] = opReadOnly
	}
	return nil
}

// source is the real folder on the host to bind at rel: it must lie in the
// workspace and outside every hidden folder, after symlinks.
func (sb *sandbox) source(rel string) (string, error) {
	real, err := filepath.EvalSymlinks(filepath.Join(sb.realDir, filepath.FromSlash(rel)))
	if err != nil {
		return "", fmt.Errorf("bash: sandbox: %w", err)
	}
	if _, ok := inside(sb.realDir, real); !ok {
		return "", fmt.Errorf("bash: sandbox: %s leads out of the workspace (to %s); the command was not run", rel, real)
	}
	for _, h := range sb.hidden {
		if _, ok := inside(filepath.Join(sb.realDir, filepath.FromSlash(h)), real); ok {
			return "", fmt.Errorf("bash: sandbox: %s leads into data_dir; the command was not run", rel)
		}
	}
	return real, nil
}

// covering returns the kind of the nearest op at or above rel (strictly
// above when strict), or -1 when none covers it.
func covering(rel string, ops map[string]int, strict bool) int {
	p := rel
	if strict {
		p = path.Dir(p)
	}
	for ; p != "."; p = path.Dir(p) {
		if k, ok := ops[p]; ok {
			return k
		}
	}
	return -1
}

func validRel(rel string) bool {
	return rel != "" && rel != "." && path.Clean(rel) == rel && filepath.IsLocal(filepath.FromSlash(rel))
}

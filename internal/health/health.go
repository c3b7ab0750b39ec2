// Package health is the shape every dependency check of `switchboard
// doctor` (`check`) returns, and the probes several of them share.
//
// A check lives in the package of what it checks (llm.Probe,
// telegram.Check, slack.Check, natsbus.Config.Check, admin.Check,
// boltstore.CheckDataDir, workspace.Check, mcp.Check, bash.Check;
// internal/doctor runs them and prints the lines) and returns a
// [Result]: the name of what was checked, a [Status] and one line of
// detail that says what was found and, when it is not OK, what to do. A
// check never panics nor returns an error: every outcome is a Result. It
// is bounded in time and leaves nothing behind (no file, no listener, no
// goroutine).
//
// The package imports nothing of the project, so every checked package
// may import it.
package health

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"syscall"
)

// Status is the outcome of one check.
type Status string

// The outcomes. `switchboard check` exits 1 when a check failed; warnings
// and skipped checks do not fail it.
const (
	OK   Status = "OK"
	Warn Status = "WARN"
	Fail Status = "FAIL"
	Skip Status = "SKIP" // not run: turned off, or an earlier check did not pass
)

// Result is one line of `switchboard check` output.
type Result struct {
	Name   string // what was checked: "NATS", "LLM", "data dir", ...
	Status Status
	Detail string // what was found; for WARN and FAIL, the hint to fix it
}

// Plural returns one when n is 1, else many.
func Plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

// Bindable reports whether a TCP listener can be opened on addr now; the
// error is the system's reason (address already in use, ...). The
// listener is closed before it returns.
func Bindable(ctx context.Context, addr string) error {
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", addr)
	if err != nil {
		var oe *net.OpError
		if errors.As(err, &oe) {
			return oe.Err
		}
		return err
	}
	return ln.Close()
}

// DirUsable reports whether dir is a writable directory, or can be created:
// when it does not exist, its nearest existing ancestor must be a writable
// directory (created is then true). It creates nothing but a temporary
// probe file, which it removes. The error names dir and says what is wrong.
func DirUsable(dir string) (created bool, err error) {
	info, err := os.Stat(dir)
	switch {
	case err == nil:
		if !info.IsDir() {
			return false, fmt.Errorf("%s is not a directory", dir)
		}
		if err := probeWrite(dir); err != nil {
			return false, fmt.Errorf("%s is not writable: %w", dir, err)
		}
		return false, nil
	case !notExist(err):
		return false, fmt.Errorf("%s: %w", dir, err)
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return false, fmt.Errorf("%s: %w", dir, err)
	}
	for parent := filepath.Dir(abs); ; parent = filepath.Dir(parent) {
		info, err := os.Stat(parent)
		if notExist(err) && parent != filepath.Dir(parent) {
			continue
		}
		if err != nil {
			return false, fmt.Errorf("%s cannot be created: %w", dir, err)
		}
		if !info.IsDir() {
			return false, fmt.Errorf("%s cannot be created: %s is not a directory", dir, parent)
		}
		if err := probeWrite(parent); err != nil {
			return false, fmt.Errorf("%s cannot be created: %s is not writable: %w", dir, parent, err)
		}
		return true, nil
	}
}

// CheckDir reports, as a `switchboard check` result named name, whether
// dir can hold the daemon's files: it exists and is writable, or can be
// created ([DirUsable]). It creates nothing.
func CheckDir(name, dir string) Result {
	if r, done := CheckDirFirst(name, dir); done {
		return r
	}
	return Result{Name: name, Status: OK, Detail: fmt.Sprintf("%s is writable", dir)}
}

// CheckDirFirst is the first step of a check of what lives in dir: done
// when dir is unusable (Fail) or does not exist yet (OK: it will be
// created, so there is nothing in it to check); otherwise the caller goes
// on to check its contents.
func CheckDirFirst(name, dir string) (r Result, done bool) {
	created, err := DirUsable(dir)
	switch {
	case err != nil:
		return Result{Name: name, Status: Fail, Detail: err.Error()}, true
	case created:
		return Result{Name: name, Status: OK, Detail: fmt.Sprintf("%s does not exist yet; it will be created", dir)}, true
	}
	return Result{Name: name}, false
}

// notExist reports whether a stat error means the path is absent, including
// a path that runs through a regular file.
func notExist(err error) bool {
	return errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENOTDIR)
}

// probeWrite creates and removes a temporary file in dir.
func probeWrite(dir string) error {
	f, err := os.CreateTemp(dir, ".switchboard-check-*")
	if err != nil {
		return err
	}
	name := f.Name()
	cerr := f.Close()
	rerr := os.Remove(name)
	return errors.Join(cerr, rerr)
}

package notes

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"strings"
	"time"
)

// replicaTimeout bounds one write to the [Replica] (the write methods
// take no context: they are called from the memory tool, the summaries and
// the nightly consolidation alike).
const replicaTimeout = 10 * time.Second

// Replica is where memory files are written first when several instances
// share them (memory.store jetstream: the daemon's memory bucket through
// memory/longterm). The workspace files stay what every reader uses (the
// prompt, memory_get, the search index, the file tools and bash): each
// write is a read-modify-write of the replica's copy of the file, checked
// on its revision so that two instances appending to one file keep both
// entries, and then the result is written to the workspace file.
// Changes made by other instances come in through [Notes.Install].
//
// Modify calls fn with the replica's content of the workspace path rel
// (ok false when it has none), stores fn's result unless another writer
// came first (then it calls fn again on the newer content) and returns
// what it stored and its revision.
type Replica interface {
	Modify(ctx context.Context, rel string, fn func(old []byte, ok bool) ([]byte, error)) ([]byte, uint64, error)
}

// replicate writes rel through the replica: fn gets its current content
// (the workspace file's when the replica has none yet, e.g. the first
// write after switching memory.store to jetstream), then the result is
// installed in the workspace. n.wmu is held.
func (n *Notes) replicate(rel string, fn func(old []byte) ([]byte, error)) error {
	ctx, cancel := context.WithTimeout(context.Background(), replicaTimeout)
	defer cancel()
	data, rev, err := n.replica.Modify(ctx, rel, func(old []byte, ok bool) ([]byte, error) {
		if !ok {
			local, err := n.readLimited(rel)
			if err != nil && !errors.Is(err, fs.ErrNotExist) {
				return nil, err
			}
			old = local
		}
		next, err := fn(old)
		if err == nil && len(next) > MaxReadBytes {
			err = fmt.Errorf("the file would grow past %d bytes", MaxReadBytes)
		}
		return next, err
	})
	if err != nil {
		return fmt.Errorf("shared memory: %w", err)
	}
	return n.install(rel, data, rev)
}

// replaceReplicated is ReplaceCore through the replica: the backup first,
// then the core file. n.wmu is held.
func (n *Notes) replaceReplicated(core, text, suffix string) (string, error) {
	var backup string
	err := n.replicate(core, func(old []byte) ([]byte, error) {
		if len(old) > 0 && backup == "" {
			backup = core + ".bak-" + suffix
			if err := n.replicate(backup, func([]byte) ([]byte, error) { return old, nil }); err != nil {
				return nil, fmt.Errorf("backup: %w", err)
			}
		}
		return []byte(text), nil
	})
	if err != nil {
		return "", fmt.Errorf("notes: replace core %s: %w", core, err)
	}
	n.log.Debug("memory file replaced", "file", core, "backup", backup)
	return backup, nil
}

// Install writes data, revision rev of the memory file rel in the replica
// (a change another instance made, or the replica's content at start),
// to the workspace file, unless the file already holds that revision or a
// later one. rel must be a memory file this package writes (under Dir,
// or the shared MEMORY.md): anything else is refused, so that the replica
// cannot write elsewhere in the workspace. Safe for concurrent use.
func (n *Notes) Install(rel string, data []byte, rev uint64) error {
	clean, ok := Clean(rel)
	if !ok || clean != rel || !replicable(rel) {
		return fmt.Errorf("notes: install %q: %w: not a memory file", rel, ErrDenied)
	}
	if len(data) > MaxReadBytes {
		return fmt.Errorf("notes: install %s: larger than %d bytes", rel, MaxReadBytes)
	}
	n.wmu.Lock()
	defer n.wmu.Unlock()
	return n.install(rel, data, rev)
}

// install writes data to rel unless it holds rev or later. n.wmu is held.
func (n *Notes) install(rel string, data []byte, rev uint64) error {
	if rev != 0 && n.replicas[rel] >= rev {
		return nil
	}
	if err := n.files().MkdirAll(path.Dir(rel), 0o700); err != nil {
		return fmt.Errorf("notes: install %s: %w", rel, denied(err))
	}
	if err := n.writeAtomic(rel, data); err != nil {
		return fmt.Errorf("notes: install %s: %w", rel, denied(err))
	}
	n.replicas[rel] = rev
	n.log.Debug("memory file written from the shared copy", "file", rel, "revision", rev, "bytes", len(data))
	n.wrote(rel)
	return nil
}

// replicable reports whether the clean workspace path rel is a file this
// package writes: the shared MEMORY.md or one of its backups, or a file
// under Dir with no path component starting with ".".
func replicable(rel string) bool {
	if rel == CoreName || strings.HasPrefix(rel, CoreName+".bak-") {
		return true
	}
	rest, ok := strings.CutPrefix(rel, Dir+"/")
	if !ok {
		return false
	}
	for c := range strings.SplitSeq(rest, "/") {
		if c == "" || strings.HasPrefix(c, ".") {
			return false
		}
	}
	return true
}

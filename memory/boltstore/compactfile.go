package boltstore

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	bolt "go.etcd.io/bbolt"
	bolterrors "go.etcd.io/bbolt/errors"
)

// compactTxSize bounds one transaction of the copy made by CompactFile.
const compactTxSize = 64 << 20

// CompactResult reports the file sizes around a CompactFile.
type CompactResult struct {
	Before, After int64 // bytes
}

// CompactFile rewrites the bbolt file at path into a compact copy and puts
// the copy in its place; bbolt files never shrink by themselves. It takes
// the file's lock for the whole operation, so it fails (after lockTimeout;
// 0 means 1s) while a daemon or another store has the file open, with an
// error saying the file is locked. Steps: copy every bucket into
// path+".compact" (bolt.Compact), sync it, rename it over path while still
// holding the old file's lock, sync the folder. A store opened meanwhile
// notices the replacement (see Open). On failure the original file is
// untouched and the partial copy removed. A missing file is an error.
func CompactFile(path string, lockTimeout time.Duration) (CompactResult, error) {
	if path == "" {
		return CompactResult{}, errors.New("boltstore: compact file: path is empty")
	}
	if lockTimeout <= 0 {
		lockTimeout = DefaultLockTimeout
	}
	fi, err := os.Stat(path)
	if err != nil {
		return CompactResult{}, fmt.Errorf("boltstore: compact %s: %w", path, err)
	}
	if !fi.Mode().IsRegular() {
		return CompactResult{}, fmt.Errorf("boltstore: compact %s: not a regular file", path)
	}
	src, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: lockTimeout})
	if errors.Is(err, bolterrors.ErrTimeout) {
		return CompactResult{}, &lockedError{path: path, wait: lockTimeout, err: err}
	}
	if err != nil {
		return CompactResult{}, fmt.Errorf("boltstore: compact %s: %w", path, err)
	}
	defer src.Close()
	res := CompactResult{Before: fi.Size()}

	tmp := path + ".compact"
	if err := os.Remove(tmp); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return res, fmt.Errorf("boltstore: compact %s: remove stale %s: %w", path, tmp, err)
	}
	ok := false
	defer func() {
		if !ok {
			_ = os.Remove(tmp)
		}
	}()
	dst, err := bolt.Open(tmp, fi.Mode().Perm(), &bolt.Options{Timeout: lockTimeout, NoSync: true, FreelistType: bolt.FreelistMapType})
	if err != nil {
		return res, fmt.Errorf("boltstore: compact %s: create %s: %w", path, tmp, err)
	}
	err = bolt.Compact(dst, src, compactTxSize)
	if err == nil {
		err = dst.Sync()
	}
	if cerr := dst.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return res, fmt.Errorf("boltstore: compact %s: %w", path, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return res, fmt.Errorf("boltstore: compact %s: replace: %w", path, err)
	}
	ok = true
	if d, err := os.Open(filepath.Dir(path)); err == nil {
		_ = d.Sync()
		_ = d.Close()
	}
	if fi, err := os.Stat(path); err == nil {
		res.After = fi.Size()
	}
	return res, nil
}

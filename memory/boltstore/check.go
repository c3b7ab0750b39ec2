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

	"github.com/switchboard-chat/switchboard/internal/health"
)

// FileName is the name of the history file inside data_dir.
const FileName = "history.db"

// checkLockTimeout bounds how long [CheckDataDir] waits for the file lock.
const checkLockTimeout = 200 * time.Millisecond

// CheckDataDir reports, for `switchboard check` (result name "data dir"),
// whether the daemon could keep its state in dir: dir exists or can be
// created, is writable, and [FileName] in it opens and is not held by a
// running daemon. It creates nothing (the write probe is removed) and
// opens the history read-only.
func CheckDataDir(dir string) health.Result {
	r, done := health.CheckDirFirst("data dir", dir)
	if done {
		return r
	}
	db := filepath.Join(dir, FileName)
	if _, err := os.Stat(db); errors.Is(err, fs.ErrNotExist) {
		r.Status, r.Detail = health.OK, fmt.Sprintf("%s is writable (no %s yet)", dir, FileName)
		return r
	}
	bdb, err := bolt.Open(db, 0o600, &bolt.Options{Timeout: checkLockTimeout, ReadOnly: true})
	if errors.Is(err, bolterrors.ErrTimeout) {
		r.Status, r.Detail = health.Fail, fmt.Sprintf("%s is locked by another process: is the daemon running? Stop it, or use another data_dir", db)
		return r
	}
	if err != nil {
		r.Status, r.Detail = health.Fail, fmt.Sprintf("%s cannot be opened: %v", db, err)
		return r
	}
	if err := bdb.Close(); err != nil {
		r.Status, r.Detail = health.Fail, fmt.Sprintf("%s: close: %v", db, err)
		return r
	}
	r.Status, r.Detail = health.OK, fmt.Sprintf("%s is writable; %s is not in use", dir, FileName)
	return r
}

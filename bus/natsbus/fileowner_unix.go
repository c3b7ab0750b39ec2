//go:build unix

package natsbus

import (
	"io/fs"
	"os"
	"syscall"
)

// fileOwner returns the owner's uid and the hard-link count of fi; ok is
// false where the platform has none.
func fileOwner(fi fs.FileInfo) (uid int, links uint64, ok bool) {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return 0, 0, false
	}
	return int(st.Uid), uint64(st.Nlink), true //nolint:unconvert // Nlink is not uint64 on every platform
}

// processUID is the effective uid of this process.
func processUID() int { return os.Geteuid() }

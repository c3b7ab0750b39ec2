//go:build unix

package workspace

import (
	"io/fs"
	"syscall"
)

// Inode returns the inode number of fi (0 where the platform has none).
func Inode(fi fs.FileInfo) uint64 {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return uint64(st.Ino) //nolint:unconvert // Ino is not uint64 on every platform
	}
	return 0
}

// linkCount returns the number of hard links of a file.
func linkCount(fi fs.FileInfo) uint64 {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return uint64(st.Nlink) //nolint:unconvert // Nlink is not uint64 on every platform
	}
	return 1
}

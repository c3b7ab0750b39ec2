//go:build !unix

package natsbus

import "io/fs"

// fileOwner reports no owner where the platform has none.
func fileOwner(fs.FileInfo) (uid int, links uint64, ok bool) { return 0, 0, false }

// processUID is -1 where the platform has no uids.
func processUID() int { return -1 }

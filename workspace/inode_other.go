//go:build !unix

package workspace

import "io/fs"

// Inode returns the inode number of fi (0 where the platform has none).
func Inode(fs.FileInfo) uint64 { return 0 }

func linkCount(fs.FileInfo) uint64 { return 1 }

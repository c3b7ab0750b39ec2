//go:build !unix

package search

import "io/fs"

func inodeOf(fs.FileInfo) uint64 { return 0 }

//go:build !unix

package skills

import "io/fs"

func inodeOf(fs.FileInfo) uint64 { return 0 }

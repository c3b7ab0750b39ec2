//go:build unix

package httpserve

import "syscall"

// openFileLimit is the process's soft RLIMIT_NOFILE (Go raises it to the
// hard limit at start), 0 when it cannot be read or is unlimited.
func openFileLimit() int {
	var r syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &r); err != nil || r.Cur > 1<<40 {
		return 0
	}
	return int(r.Cur)
}

//go:build !linux

package tools

// ProtectProcess does nothing outside Linux: there is no
// prctl(PR_SET_DUMPABLE); the bash sandbox (bubblewrap) is Linux-only too.
func ProtectProcess() error { return nil }

// Dumpable reports true outside Linux.
func Dumpable() (bool, error) { return true, nil }

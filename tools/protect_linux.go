package tools

import (
	"fmt"

	"golang.org/x/sys/unix"
)

// ProtectProcess makes the calling process non-dumpable
// (prctl(PR_SET_DUMPABLE, 0)): processes running as the same user — bash
// commands, stdio MCP servers and whatever they start — can then neither
// read its /proc/<pid>/environ, mem or fd/ nor ptrace it, and a crash
// leaves no core dump holding its secrets. A process with CAP_SYS_PTRACE
// (root) keeps that power; the bash sandbox takes it away with a PID
// namespace and no capabilities. The daemon calls it once at start.
func ProtectProcess() error {
	if err := unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0); err != nil {
		return fmt.Errorf("prctl(PR_SET_DUMPABLE, 0): %w", err)
	}
	return nil
}

// Dumpable reports whether the calling process is dumpable (for tests and
// diagnostics).
func Dumpable() (bool, error) {
	v, err := unix.PrctlRetInt(unix.PR_GET_DUMPABLE, 0, 0, 0, 0)
	if err != nil {
		return false, fmt.Errorf("prctl(PR_GET_DUMPABLE): %w", err)
	}
	return v != 0, nil
}

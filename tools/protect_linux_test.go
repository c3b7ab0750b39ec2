package tools

import (
	"testing"

	"golang.org/x/sys/unix"
)

func TestProtectProcess(t *testing.T) {
	// Start dumpable (an earlier run in this process may have protected it),
	// and leave the process as the test found it.
	if err := unix.Prctl(unix.PR_SET_DUMPABLE, 1, 0, 0, 0); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = unix.Prctl(unix.PR_SET_DUMPABLE, 1, 0, 0, 0) })
	if d, err := Dumpable(); err != nil || !d {
		t.Fatalf("dumpable before ProtectProcess = %v, %v", d, err)
	}
	if err := ProtectProcess(); err != nil {
		t.Fatal(err)
	}
	if d, err := Dumpable(); err != nil || d {
		t.Errorf("after ProtectProcess: dumpable = %v, %v", d, err)
	}
}

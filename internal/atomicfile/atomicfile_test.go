package atomicfile_test

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/switchboard-chat/switchboard/internal/atomicfile"
)

func TestReplace(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "out.json")
	write := func(s string) func(io.Writer) error {
		return func(w io.Writer) error { _, err := io.WriteString(w, s); return err }
	}
	if err := atomicfile.Replace(file, write("one")); err != nil {
		t.Fatal(err)
	}
	if err := atomicfile.Replace(file, write("two")); err != nil {
		t.Fatal(err)
	}
	if data, _ := os.ReadFile(file); string(data) != "two" {
		t.Fatalf("file holds %q, want two", data)
	}
	if st, err := os.Stat(file); err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("stat = %v, %v; want mode 0600", st, err)
	}

	// A failed write leaves the old file and no temporary file.
	boom := errors.New("boom")
	err := atomicfile.Replace(file, func(w io.Writer) error {
		_, _ = io.WriteString(w, "partial")
		return boom
	})
	if !errors.Is(err, boom) {
		t.Fatalf("Replace = %v, want boom", err)
	}
	if data, _ := os.ReadFile(file); string(data) != "two" {
		t.Fatalf("after a failed write the file holds %q, want two", data)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 1 {
		t.Fatalf("left behind: %v", entries)
	}
	// A failed first write creates nothing under the name.
	fresh := filepath.Join(dir, "fresh")
	if err := atomicfile.Replace(fresh, func(io.Writer) error { return boom }); !errors.Is(err, boom) {
		t.Fatalf("Replace(fresh) = %v", err)
	}
	if _, err := os.Stat(fresh); !os.IsNotExist(err) {
		t.Fatalf("failed write created %s (stat: %v)", fresh, err)
	}
}

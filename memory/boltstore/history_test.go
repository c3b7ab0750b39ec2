package boltstore_test

import (
	"bytes"
	"path/filepath"
	"strings"
	"testing"

	"github.com/switchboard-chat/switchboard/memory/boltstore"
)

func TestByteSize(t *testing.T) {
	for n, want := range map[int64]string{0: "0 B", 812: "812 B", 1023: "1023 B", 1024: "1.0 KB", 3482: "3.4 KB", 12 << 20: "12.0 MB", 5 << 30: "5.0 GB"} {
		if got := boltstore.ByteSize(n); got != want {
			t.Errorf("ByteSize(%d) = %q, want %q", n, got, want)
		}
	}
}

// TestHistoryWithoutFile: a verb on a data_dir without history says so
// and creates nothing.
func TestHistoryWithoutFile(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	var out bytes.Buffer
	err := boltstore.History(t.Context(), dir, boltstore.HistoryRequest{Verb: "list"}, &out)
	if err == nil || !strings.HasPrefix(err.Error(), "history list: ") || !strings.Contains(err.Error(), "no history has been stored under data_dir "+dir) {
		t.Fatalf("History(list) = %v", err)
	}
	if out.Len() != 0 {
		t.Fatalf("output: %q", out.String())
	}
}

package search_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/switchboard-chat/switchboard/memory/search"
)

// Finding 8: a hard link in the shared notes to Alice's private memory
// must not be indexed under the shared path, where every user's
// memory_search would find it.
func TestHardLinkNotIndexed(t *testing.T) {
	f := newFixture(t, map[string]string{
		"memory/users/telegram/100/MEMORY.md": "- Alice: the vault code is 4711\n",
		"memory/2025-03-08.md":                "- shared: the vault is in the basement\n",
	}, nil)
	if err := os.Link(filepath.Join(f.dir, "memory/users/telegram/100/MEMORY.md"), filepath.Join(f.dir, "memory/2025-03-09.md")); err != nil {
		t.Fatal(err)
	}
	if _, err := f.idx.Sync(t.Context()); err != nil {
		t.Fatal(err)
	}
	rs, err := f.idx.Search(t.Context(), search.Query{Text: "vault", Roots: everything})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rs {
		if r.Path == "memory/2025-03-09.md" {
			t.Errorf("the hard link to Alice's memory was indexed as shared notes: %+v", r)
		}
	}
	if len(rs) != 2 {
		t.Errorf("found %v, want Alice's own file and the shared note", paths(rs))
	}
}

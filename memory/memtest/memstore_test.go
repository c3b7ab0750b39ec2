package memtest_test

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/switchboard-chat/switchboard/memory"
	"github.com/switchboard-chat/switchboard/memory/memtest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestMemStore(t *testing.T) {
	memtest.Run(t, func(t *testing.T) memory.Store { return memtest.NewMemStore() })
}

func TestMemStoreCommits(t *testing.T) {
	s := memtest.NewMemStore()
	if err := s.CommitTurn(t.Context(), memtest.Turn("a/1", "1", "u", "r")); err != nil {
		t.Fatal(err)
	}
	_ = s.CommitTurn(t.Context(), memtest.Turn("a/1", "1", "u", "r")) // duplicate
	if got := s.Commits(); got != 1 {
		t.Errorf("Commits() = %d, want 1", got)
	}
}

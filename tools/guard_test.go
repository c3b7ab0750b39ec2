package tools_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/switchboard-chat/switchboard/bus"
	"github.com/switchboard-chat/switchboard/tools"
	"github.com/switchboard-chat/switchboard/workspace"
)

// TestSharedWrites: an owner's write policy adds no limit; anyone else's
// refuses the shared prompt inputs only, and PathError says why and where
// to write instead, as a denial.
func TestSharedWrites(t *testing.T) {
	bob := tools.Session{Key: "telegram/2", Speaker: bus.Speaker{Channel: "telegram", ChatID: "2", UserID: "bob"}}
	owner := bob
	owner.Owner = true
	if tools.SharedWrites(owner) != nil {
		t.Error("an owner's write policy limits something")
	}
	w := tools.SharedWrites(bob)
	for rel, want := range map[string]bool{"AGENT.md": false, "skills/x/SKILL.md": false, "memory/2025-01-01.md": false,
		"memory/users/telegram/bob/MEMORY.md": true, "pub/notes.md": true} {
		if got := w(rel); got != want {
			t.Errorf("SharedWrites(bob)(%q) = %t, want %t", rel, got, want)
		}
	}
	err := tools.PathError("write AGENT.md", fmt.Errorf("%w: AGENT.md", workspace.ErrReadOnly))
	if !errors.Is(err, tools.ErrDenied) || !strings.Contains(err.Error(), "only an owner") || !strings.Contains(err.Error(), "memory_write") {
		t.Errorf("PathError(ErrReadOnly) = %v", err)
	}
}

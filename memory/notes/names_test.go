package notes_test

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"
	"testing"

	"github.com/switchboard-chat/switchboard/bus"
	"github.com/switchboard-chat/switchboard/memory/memcfg"
	"github.com/switchboard-chat/switchboard/memory/notes"
)

// oldComponent is how memory folder names were made before the notes had
// their own file-name codec: the bus's subject token encoding, cut with a
// hash past 128 bytes. It stays here, in a test, to prove the names on
// disk did not move.
func oldComponent(id string) string {
	enc := bus.EncodeToken(id)
	if len(enc) <= 128 {
		return enc
	}
	cut := 80
	if i := strings.LastIndexByte(enc[:cut], '%'); i >= cut-2 {
		cut = i
	}
	sum := sha256.Sum256([]byte(id))
	return enc[:cut] + "~" + hex.EncodeToString(sum[:16])
}

// TestOldFileNamesResolve: every id — each single byte, odd and long ids —
// still names the folder it named before, and notes written under the old
// names (literal paths, as an older daemon left them) are found.
func TestOldFileNamesResolve(t *testing.T) {
	ids := []string{"42", "-100123", "..", "a/b", `a\b`, "wxid_abc@chatroom", "U0ABC", "é",
		strings.Repeat("é", 100), strings.Repeat("a", 127) + "%", strings.Repeat("%", 200), strings.Repeat("x", 300)}
	for c := range 256 {
		ids = append(ids, string([]byte{byte(c)}), "a"+string([]byte{byte(c)})+"b")
	}
	for _, id := range ids {
		got, err := notes.Component(id)
		if err != nil || got != oldComponent(id) {
			t.Errorf("Component(%q) = %q, %v; the folder on disk is %q", id, got, err, oldComponent(id))
		}
	}

	n, dir := newNotes(t, memcfg.ScopeUser)
	writeFile(t, dir, "memory/users/wechat/wxid_abc%40chatroom/MEMORY.md", "- likes tea\n")
	writeFile(t, dir, "memory/users/slack/%2E%2E%2F%2E%2E%2Fetc/MEMORY.md", "- odd id\n")
	writeFile(t, dir, "memory/chats/telegram/-100123/users/%C3%A9/MEMORY.md", "- in-group note\n")
	for _, tt := range []struct {
		s    bus.Speaker
		want string
	}{
		{bus.Speaker{Channel: "wechat", ChatID: "wxid_abc@chatroom", UserID: "wxid_abc@chatroom"}, "likes tea"},
		{bus.Speaker{Channel: "slack", ChatID: "D1", UserID: "../../etc"}, "odd id"},
		{bus.Speaker{Channel: "telegram", ChatID: "-100123", UserID: "é", IsGroup: true}, "in-group note"},
	} {
		p, err := n.Prompt(notes.Scope{Speaker: tt.s})
		if err != nil {
			t.Fatal(err)
		}
		var found bool
		for _, sec := range p.Memory {
			found = found || strings.Contains(sec.Content, tt.want)
		}
		if !found {
			t.Errorf("Prompt(%+v) = %+v: the note under the old file name is not found", tt.s, p.Memory)
		}
	}
}

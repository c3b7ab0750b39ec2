package message_test

import (
	"encoding/base64"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/switchboard-chat/switchboard/bus"
	"github.com/switchboard-chat/switchboard/memory/notes"
	"github.com/switchboard-chat/switchboard/tools"
	"github.com/switchboard-chat/switchboard/tools/message"
	"github.com/switchboard-chat/switchboard/workspace"
)

// Findings 1, 7 and 8: Bob's session must not have Alice's private memory
// or her chat's upload sent to his chat, directly, through a symbolic
// link or through a hard link; nothing is published. The guard is the
// daemon's: memory privacy (notes.Visible) and the inbox rule.
func TestAttackSendOtherUsersFiles(t *testing.T) {
	dir := t.TempDir()
	ws, err := workspace.Open(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ws.Close() })
	n, err := notes.New(ws.Root(), notes.Options{})
	if err != nil {
		t.Fatal(err)
	}
	db := openDB(t, filepath.Join(t.TempDir(), "tools.db"))
	t.Cleanup(func() { _ = db.Close() })
	chats, err := message.NewChats(db)
	if err != nil {
		t.Fatal(err)
	}
	pub := &fakePub{}
	guard := message.WithGuard(func(s tools.Session, rel string) bool {
		return n.Visible(notes.Scope{Speaker: s.Speaker}, rel) &&
			workspace.InboxVisible(s.Channel, s.ChatID, rel)
	})
	reg, err := tools.NewRegistry(message.New(ws, chats, pub, bus.Subjects{Prefix: "chat"}, tools.SendMessageConfig{MaxFileBytes: 1 << 20}, guard))
	if err != nil {
		t.Fatal(err)
	}
	for rel, content := range map[string]string{
		"memory/users/telegram/alice/MEMORY.md": "alice secret memory\n",
		"inbox/telegram/100/passport.txt":       "alice secret upload\n",
		"pub/doc.txt":                           "public\n",
	} {
		p := filepath.Join(dir, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink("../memory/users/telegram/alice", filepath.Join(dir, "pub/link")); err != nil {
		t.Fatal(err)
	}
	if err := os.Link(filepath.Join(dir, "memory/users/telegram/alice/MEMORY.md"), filepath.Join(dir, "pub/hard.md")); err != nil {
		t.Fatal(err)
	}
	send := func(s tools.Session, args string) tools.Result {
		return reg.Run(t.Context(), "send_message", tools.Call{Args: []byte(args), Session: s})
	}
	for args, why := range map[string]string{
		`{"file":"memory/users/telegram/alice/MEMORY.md"}`:                 "private to another user or chat",
		`{"file":"` + dir + `/memory/users/telegram/alice/MEMORY.md"}`:     "private to another user or chat",
		`{"file":"pub/link/MEMORY.md","text":"look"}`:                      "private to another user or chat",
		`{"file":"pub/hard.md"}`:                                           "more than one hard link",
		`{"file":"inbox/telegram/100/passport.txt"}`:                       "private to another user or chat",
		`{"file":"inbox/telegram/100/../100/passport.txt","text":"again"}`: "private to another user or chat",
	} {
		r := send(bobDM, args)
		if !r.IsError || !r.Denied || !strings.Contains(r.Text, why) || !strings.Contains(r.Text, "nothing was sent") {
			t.Errorf("Bob sends %s: %+v, want a denial saying %q", args, r, why)
		}
	}
	if msgs := pub.all(); len(msgs) != 0 {
		t.Fatalf("%d messages published for Bob, want none: %+v", len(msgs), msgs)
	}
	// Public files and Alice's own upload in her own chat still go out.
	if r := send(bobDM, `{"file":"pub/doc.txt"}`); r.IsError {
		t.Errorf("Bob sends a public file: %+v", r)
	}
	if r := send(aliceDM, `{"file":"inbox/telegram/100/passport.txt"}`); r.IsError {
		t.Errorf("Alice sends her upload in her chat: %+v", r)
	}
	msgs := pub.all()
	if len(msgs) != 2 || msgs[1].subject != "chat.out.telegram.100" {
		t.Fatalf("published %+v", msgs)
	}
	if data, _ := base64.StdEncoding.DecodeString(msgs[1].out.Attachments[0].Data); string(data) != "alice secret upload\n" {
		t.Errorf("Alice's attachment = %q", data)
	}
}

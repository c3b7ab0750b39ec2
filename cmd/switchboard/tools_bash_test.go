package main

import (
	"slices"
	"testing"

	"github.com/switchboard-chat/switchboard/memory/memcfg"
	"github.com/switchboard-chat/switchboard/memory/notes"
	"github.com/switchboard-chat/switchboard/tools"
	"github.com/switchboard-chat/switchboard/workspace"
)

// TestBashPrivate: the folders the wiring hides from a bash command, per
// chat kind and memory scope (the sandbox itself is tested in tools/bash):
// the memory system's notes.PrivateFolders and the inbox rule of
// workspace.InboxFolder.
func TestBashPrivate(t *testing.T) {
	direct := tools.Session{Channel: "telegram", ChatID: "42", UserID: "42"}
	group := tools.Session{Channel: "telegram", ChatID: "-100", UserID: "7", IsGroup: true}
	odd := tools.Session{Channel: "wechat", ChatID: "room/1", UserID: "../alice", IsGroup: true}
	tests := []struct {
		name        string
		shared      bool
		s           tools.Session
		hide, allow []string
	}{
		{"direct", false, direct, []string{"inbox", "memory/users", "memory/chats"},
			[]string{"inbox/telegram/42", "memory/users/telegram/42"}},
		{"group", false, group, []string{"inbox", "memory/users", "memory/chats", "memory/chats/telegram/-100/users"},
			[]string{"inbox/telegram/-100", "memory/chats/telegram/-100", "memory/chats/telegram/-100/users/7"}},
		{"ids are one path component", false, odd, []string{"inbox", "memory/users", "memory/chats", "memory/chats/wechat/room%2F1/users"},
			[]string{"inbox/wechat/room%2F1", "memory/chats/wechat/room%2F1", "memory/chats/wechat/room%2F1/users/%2E%2E%2Falice"}},
		{"shared memory", true, group, []string{"inbox"}, []string{"inbox/telegram/-100"}},
		{"no session", false, tools.Session{}, []string{"inbox", "memory/users", "memory/chats"}, nil},
	}
	ws, err := workspace.Open(t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer ws.Close()
	for _, tt := range tests {
		scope := memcfg.ScopeUser
		if tt.shared {
			scope = memcfg.ScopeShared
		}
		n, err := notes.New(ws.Root(), notes.Options{Scope: scope})
		if err != nil {
			t.Fatal(err)
		}
		m := &memorySystem{notes: n}
		hide, allow := m.privacy().private(tt.s)
		if !slices.Equal(hide, tt.hide) || !slices.Equal(allow, tt.allow) {
			t.Errorf("%s: hide %q allow %q, want %q %q", tt.name, hide, allow, tt.hide, tt.allow)
		}
	}
}

package notes_test

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/switchboard-chat/switchboard/bus"
	"github.com/switchboard-chat/switchboard/memory/memcfg"
	"github.com/switchboard-chat/switchboard/memory/notes"
)

// groupWorkspace holds Alice's direct-chat memory and profile, the
// group's notes and each member's notes made in the group.
func groupWorkspace(t *testing.T) (*notes.Notes, string) {
	t.Helper()
	n, dir := newNotes(t, memcfg.ScopeUser)
	writeFile(t, dir, "MEMORY.md", "shared: office closes at 6\n")
	writeFile(t, dir, "memory/users/telegram/100/MEMORY.md", "alice dm secret: surprise party for Bob\n")
	writeFile(t, dir, "memory/users/telegram/100/2025-03-04.md", "alice dm daily: surprise party venue booked\n")
	writeFile(t, dir, "memory/users/telegram/100/USER.md", "# User\nAlice's private profile\n")
	writeFile(t, dir, "memory/chats/telegram/-500/MEMORY.md", "group: sprint ends Friday\n")
	writeFile(t, dir, "memory/chats/telegram/-500/users/100/MEMORY.md", "alice in group: prefers async standups\n")
	writeFile(t, dir, "memory/chats/telegram/-500/users/200/MEMORY.md", "bob in group: owes the team pizza\n")
	return n, dir
}

// TestGroupPromptHoldsNoDirectChatMemory: in a group, the speaker's
// prompt holds the group's notes and their own in-group notes — not
// their direct-chat memory or profile, and not another member's notes.
func TestGroupPromptHoldsNoDirectChatMemory(t *testing.T) {
	n, _ := groupWorkspace(t)
	text := func(s notes.Scope) (string, []string) {
		p, err := n.Prompt(s)
		if err != nil {
			t.Fatal(err)
		}
		var b strings.Builder
		var kinds []string
		for _, sec := range p.Memory {
			b.WriteString(sec.Content)
			kinds = append(kinds, sec.Kind)
		}
		return b.String() + "USER:" + p.User + p.UserPath, kinds
	}
	for _, tt := range []struct {
		name          string
		s             notes.Scope
		want, mustNot []string
		kinds         []string
	}{
		{"alice in group", aliceInGroup, []string{"office closes", "sprint", "async standups"},
			[]string{"surprise party", "private profile", "USER.md", "pizza"},
			[]string{notes.FolderShared, notes.FolderChat, notes.FolderMember}},
		{"bob in group", bobInGroup, []string{"office closes", "sprint", "pizza"},
			[]string{"surprise party", "private profile", "async standups"},
			[]string{notes.FolderShared, notes.FolderChat, notes.FolderMember}},
		{"alice private", alicePrivate, []string{"office closes", "surprise party", "private profile"},
			[]string{"sprint", "async standups", "pizza"},
			[]string{notes.FolderShared, notes.FolderUser}},
	} {
		got, kinds := text(tt.s)
		for _, w := range tt.want {
			if !strings.Contains(got, w) {
				t.Errorf("%s: prompt lacks %q: %s", tt.name, w, got)
			}
		}
		for _, w := range tt.mustNot {
			if strings.Contains(got, w) {
				t.Errorf("%s: prompt holds %q: %s", tt.name, w, got)
			}
		}
		if !slices.Equal(kinds, tt.kinds) {
			t.Errorf("%s: sections %v, want %v", tt.name, kinds, tt.kinds)
		}
	}
	if rel, ok, err := n.UserFile(aliceInGroup); rel != "" || ok || err != nil {
		t.Errorf("UserFile in a group = %q, %v, %v; want no profile", rel, ok, err)
	}
}

// TestGroupReadsAndWrites: what the memory tools may read and where they
// write, per chat kind.
func TestGroupReadsAndWrites(t *testing.T) {
	n, dir := groupWorkspace(t)
	for _, tt := range []struct {
		s    notes.Scope
		rel  string
		want bool
	}{
		{aliceInGroup, "MEMORY.md", true},
		{aliceInGroup, "memory/2025-03-04.md", true},
		{aliceInGroup, "memory/chats/telegram/-500/MEMORY.md", true},
		{aliceInGroup, "memory/chats/telegram/-500/2025-03-04.md", true},
		{aliceInGroup, "memory/chats/telegram/-500/users/100/MEMORY.md", true},
		{aliceInGroup, "memory/chats/telegram/-500/users/100/2025-03-04.md", true},
		{aliceInGroup, "memory/users/telegram/100/MEMORY.md", false},
		{aliceInGroup, "memory/users/telegram/100/2025-03-04.md", false},
		{aliceInGroup, "memory/users/telegram/100/USER.md", false},
		{aliceInGroup, "memory/chats/telegram/-500/users/200/MEMORY.md", false},
		{aliceInGroup, "memory/chats/telegram/-500/users/100/../200/MEMORY.md", false},
		{aliceInGroup, "memory/chats/telegram/-600/users/100/MEMORY.md", false},
		{bobInGroup, "memory/chats/telegram/-500/users/100/MEMORY.md", false},
		{alicePrivate, "memory/users/telegram/100/MEMORY.md", true},
		{alicePrivate, "memory/chats/telegram/-500/users/100/MEMORY.md", false},
		{alicePrivate, "memory/chats/telegram/-500/MEMORY.md", false},
	} {
		if got := n.CanRead(tt.s, tt.rel); got != tt.want {
			t.Errorf("CanRead(user %s group %v, %q) = %v, want %v", tt.s.UserID, tt.s.IsGroup, tt.rel, got, tt.want)
		}
	}

	now := time.Date(2025, 3, 4, 9, 15, 0, 0, time.UTC)
	groupNotes := aliceInGroup
	groupNotes.GroupNotes = true
	for _, tt := range []struct {
		s          notes.Scope
		kind, want string
	}{
		{aliceInGroup, notes.KindCore, "memory/chats/telegram/-500/users/100/MEMORY.md"},
		{aliceInGroup, notes.KindDaily, "memory/chats/telegram/-500/users/100/2025-03-04.md"},
		{groupNotes, notes.KindCore, "memory/chats/telegram/-500/MEMORY.md"},
		{groupNotes, notes.KindDaily, "memory/chats/telegram/-500/2025-03-04.md"},
		{notes.Scope{GroupNotes: true, Speaker: bus.Speaker{Channel: "telegram", ChatID: "-500", IsGroup: true}}, notes.KindDaily, "memory/chats/telegram/-500/2025-03-04.md"},
	} {
		rel, err := n.Write(tt.s, tt.kind, "note", now)
		if err != nil || rel != tt.want {
			t.Errorf("Write(%+v, %s) = %q, %v; want %q", tt.s, tt.kind, rel, err, tt.want)
		}
	}
	if _, err := n.Write(notes.Scope{Speaker: bus.Speaker{Channel: "telegram", ChatID: "-500", IsGroup: true}}, notes.KindCore, "x", now); err == nil {
		t.Error("an in-group note without a speaker was written")
	}
	// Nothing written in the group reached Alice's direct-chat folder.
	if got := readFile(t, dir, "memory/users/telegram/100/MEMORY.md"); got != "alice dm secret: surprise party for Bob\n" {
		t.Errorf("Alice's direct-chat memory changed: %q", got)
	}
	// GroupNotes means nothing in a private chat.
	dm := alicePrivate
	dm.GroupNotes = true
	if rel, err := n.CoreFile(dm); rel != "memory/users/telegram/100/MEMORY.md" || err != nil {
		t.Errorf("CoreFile(private, GroupNotes) = %q, %v", rel, err)
	}

	shared, _ := newNotes(t, memcfg.ScopeShared)
	for _, s := range []notes.Scope{aliceInGroup, groupNotes, alicePrivate} {
		if rel, err := shared.CoreFile(s); rel != "MEMORY.md" || err != nil {
			t.Errorf("shared CoreFile(%+v) = %q, %v", s, rel, err)
		}
	}
}

// TestVisibleFollowsThePrivateMask: the file tools' Visible and the
// sandbox's PrivateMask show the same private memory.
func TestVisibleFollowsThePrivateMask(t *testing.T) {
	n, _ := groupWorkspace(t)
	paths := []string{
		"AGENT.md", "memory", "memory/2025-03-04.md", "memory/users", "memory/chats",
		"memory/users/telegram", "memory/users/telegram/100", "memory/users/telegram/100/MEMORY.md",
		"memory/users/telegram/100/USER.md", "memory/users/telegram/200/MEMORY.md", "memory/users/slack/100/MEMORY.md",
		"memory/chats/telegram", "memory/chats/telegram/-500", "memory/chats/telegram/-500/MEMORY.md",
		"memory/chats/telegram/-500/notes/x.md", "memory/chats/telegram/-500/users",
		"memory/chats/telegram/-500/users/100", "memory/chats/telegram/-500/users/100/MEMORY.md",
		"memory/chats/telegram/-500/users/200", "memory/chats/telegram/-500/users/200/MEMORY.md",
		"memory/chats/telegram/-600/MEMORY.md", "memory/chats/telegram/-600/users/100/MEMORY.md",
	}
	want := map[string][]string{
		"alice in group": {"AGENT.md", "memory", "memory/2025-03-04.md", "memory/users", "memory/chats",
			"memory/chats/telegram", "memory/chats/telegram/-500", "memory/chats/telegram/-500/MEMORY.md",
			"memory/chats/telegram/-500/notes/x.md", "memory/chats/telegram/-500/users",
			"memory/chats/telegram/-500/users/100", "memory/chats/telegram/-500/users/100/MEMORY.md"},
		"alice private": {"AGENT.md", "memory", "memory/2025-03-04.md", "memory/users", "memory/chats",
			"memory/users/telegram", "memory/users/telegram/100", "memory/users/telegram/100/MEMORY.md",
			"memory/users/telegram/100/USER.md"},
	}
	for name, s := range map[string]notes.Scope{"alice in group": aliceInGroup, "alice private": alicePrivate} {
		var got []string
		mask := n.PrivateMask(s)
		for _, p := range paths {
			v := n.Visible(s, p)
			if v {
				got = append(got, p)
			}
			// Apply the mask: the last step covering p decides; a
			// folder above a shown one stays listable.
			m := true
			for _, st := range mask {
				if p == st.Dir || strings.HasPrefix(p, st.Dir+"/") {
					m = st.Show
				}
			}
			above := false
			for _, st := range mask {
				above = above || (st.Show && strings.HasPrefix(st.Dir, p+"/"))
			}
			if p != "memory/users" && p != "memory/chats" && !above && m != v {
				t.Errorf("%s: %s: Visible %v, mask %v", name, p, v, m)
			}
		}
		if !slices.Equal(got, want[name]) {
			t.Errorf("%s: visible\n%v\nwant\n%v", name, got, want[name])
		}
	}
	if got := n.PrivateMask(aliceInGroup); !slices.Equal(got, []notes.MaskStep{
		{Dir: "memory/users"}, {Dir: "memory/chats"},
		{Dir: "memory/chats/telegram/-500", Show: true}, {Dir: "memory/chats/telegram/-500/users"},
		{Dir: "memory/chats/telegram/-500/users/100", Show: true},
	}) {
		t.Errorf("PrivateMask(alice in group) = %+v", got)
	}
	hide, show := n.PrivateFolders(aliceInGroup)
	if !slices.Equal(hide, []string{"memory/users", "memory/chats", "memory/chats/telegram/-500/users"}) ||
		!slices.Equal(show, []string{"memory/chats/telegram/-500", "memory/chats/telegram/-500/users/100"}) {
		t.Errorf("PrivateFolders(alice in group) = %v, %v", hide, show)
	}
	if _, show := n.PrivateFolders(alicePrivate); !slices.Equal(show, []string{"memory/users/telegram/100"}) {
		t.Errorf("PrivateFolders(alice private) shows %v", show)
	}
	if got := n.PrivateMask(notes.Scope{Speaker: bus.Speaker{Channel: "telegram"}}); !slices.Equal(got, []notes.MaskStep{{Dir: "memory/users"}, {Dir: "memory/chats"}}) {
		t.Errorf("PrivateMask(no user) = %+v", got)
	}
	shared, _ := newNotes(t, memcfg.ScopeShared)
	if got := shared.PrivateMask(aliceInGroup); got != nil {
		t.Errorf("shared PrivateMask = %+v", got)
	}
}

func TestAllFoldersHasMemberFolders(t *testing.T) {
	n, dir := groupWorkspace(t)
	writeFile(t, dir, "memory/chats/telegram/-500/users/.hidden/MEMORY.md", "x")
	fs, err := n.AllFolders()
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, f := range fs {
		got = append(got, f.Kind+":"+f.Dir)
	}
	want := []string{"shared:", "user:memory/users/telegram/100", "chat:memory/chats/telegram/-500",
		"member:memory/chats/telegram/-500/users/100", "member:memory/chats/telegram/-500/users/200"}
	if !slices.Equal(got, want) {
		t.Errorf("AllFolders = %v, want %v", got, want)
	}
	f, err := notes.MemberFolder("telegram", "-500", "../x")
	if err != nil || f.Dir != "memory/chats/telegram/-500/users/%2E%2E%2Fx" || f.Kind != notes.FolderMember {
		t.Errorf("MemberFolder = %+v, %v", f, err)
	}
}

package telegram

import (
	"strings"
	"testing"

	pairing "github.com/switchboard-chat/switchboard/access"
)

// TestDMPolicies: with the gate, access.dm_policy decides for users not
// on allow_users in private chats: allowlist refuses as before (the
// allow_users note, no code), open lets everyone in, pairing answers with
// a code and publishes nothing; an owner is let in under any policy.
func TestDMPolicies(t *testing.T) {
	for _, tc := range []struct {
		policy    pairing.Policy
		published []string // texts published, in order
		reply     string   // what user 9 is told ("" when nothing)
	}{
		{pairing.Allowlist, []string{"owner here"}, "channels.telegram.allow_users"},
		{pairing.Open, []string{"stranger", "owner here"}, ""},
		{pairing.Pairing, []string{"owner here"}, "pairing code is "},
	} {
		t.Run(string(tc.policy), func(t *testing.T) {
			e := newEnv(t)
			cfg := e.config()
			cfg.AllowUsers = nil
			gate := pairing.New(pairing.Config{DMPolicy: map[string]pairing.Policy{Name: tc.policy}, Owners: []string{"telegram:1"}}, t.TempDir(), pairing.Options{})
			run(t, e.newAdapter(t, cfg, Deps{Gate: gate}))
			e.bot.addUpdate(1, privateMsg(1, user(9, "Eve", ""), "stranger"))
			e.bot.addUpdate(2, privateMsg(2, user(1, "Olga", ""), "owner here"))
			getUpdatesWithOffset(t, e, 3)
			ins := e.waitPublished(t, len(tc.published))
			var got []string
			for _, in := range ins {
				got = append(got, in.Text)
			}
			if strings.Join(got, "|") != strings.Join(tc.published, "|") {
				t.Fatalf("published %q, want %q", got, tc.published)
			}
			if tc.reply == "" {
				if n := len(e.bot.all("sendMessage")); n != 0 {
					t.Fatalf("%d messages sent, want none", n)
				}
				return
			}
			sent := e.bot.waitN(t, "sendMessage", 1)
			if sent[0].params.Get("chat_id") != "9" || !strings.Contains(sent[0].params.Get("text"), tc.reply) {
				t.Fatalf("reply = %v, want %q to chat 9", sent[0].params, tc.reply)
			}
		})
	}
}

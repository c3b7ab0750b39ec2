package slack

import (
	"regexp"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/switchboard-chat/switchboard/access"
)

var codeRe = regexp.MustCompile(`pairing code is ([A-Z2-9]{8}) `)

// TestPairingGate: under access.dm_policy pairing (the default for
// Slack), an unknown user's direct message gets one private message with a
// code and nothing is published; after approval their next message is
// published; in a channel an unknown user still gets the allow_users
// refusal, without a code.
func TestPairingGate(t *testing.T) {
	e := newEnv(t)
	in := e.collectIn()
	cfg := e.config()
	cfg.AllowUsers = []string{"U2"}
	gate := access.New(access.Config{}, t.TempDir(), access.Options{})
	a := e.adapter(cfg)
	a.opts.Gate = gate
	e.start(a)

	e.send("a", dm("U1", "D1", "60.1", "my secret"))
	eph := e.slack.waitCalls(t, "chat.postEphemeral", 1)[0].form
	m := codeRe.FindStringSubmatch(eph.Get("text"))
	if m == nil || eph.Get("user") != "U1" || eph.Get("channel") != "D1" {
		t.Fatalf("ephemeral = %v, want a pairing code to U1 in D1", eph)
	}
	e.send("b", dm("U1", "D1", "60.2", "again"))
	e.send("c", mention("U3", "C1", "60.3", "", "<@UBOT> stranger in a channel"))
	group := e.slack.waitCalls(t, "chat.postEphemeral", 2)[1].form
	if group.Get("user") != "U3" || !strings.Contains(group.Get("text"), "channels.slack.allow_users") || strings.Contains(group.Get("text"), "pairing code") {
		t.Fatalf("channel refusal = %v, want the allow_users note without a code", group)
	}
	// A message of an allowed user in the same channel is handled after
	// "again" (one worker per channel): then "again" was decided.
	e.send("s", dm("U2", "D1", "60.35", "sentinel"))
	waitInbound(t, in, "sentinel")
	if who, err := gate.Approve(m[1], "test"); err != nil || who != "slack:U1" {
		t.Fatalf("Approve = %q, %v", who, err)
	}
	e.send("d", dm("U1", "D1", "60.4", "approved now"))
	waitInbound(t, in, "approved now")
	if got := texts(t, in); !cmp.Equal(got, []string{"sentinel", "approved now"}) {
		t.Errorf("inbound texts = %q, want only the message after approval", got)
	}
	if n := len(e.slack.callsOf("chat.postEphemeral")); n != 2 {
		t.Errorf("%d ephemeral messages, want 2 (one code, one channel refusal)", n)
	}
}

// TestAllowUsersFromTheGate: the adapter reads allow_users from the gate at
// each message, so a configuration reload (access.Store.SetConfig) lets an
// added user in and refuses a removed one (told why), without a restart.
func TestAllowUsersFromTheGate(t *testing.T) {
	e := newEnv(t)
	in := e.collectIn()
	cfg := e.config()
	cfg.AllowUsers = []string{"U2"}
	lists := func(users ...string) access.Config {
		return access.Config{DMPolicy: map[string]access.Policy{ChannelName: access.Allowlist}, AllowUsers: map[string][]string{ChannelName: users}}
	}
	gate := access.New(lists("U2"), t.TempDir(), access.Options{})
	a := e.adapter(cfg)
	a.opts.Gate = gate
	e.start(a)

	e.send("a", dm("U2", "D2", "70.1", "u2 before"))
	waitInbound(t, in, "u2 before")
	if lines := gate.SetConfig(lists("U1")); len(lines) != 1 {
		t.Fatalf("reload lines %q", lines)
	}
	e.send("b", dm("U1", "D1", "70.2", "u1 after"))
	waitInbound(t, in, "u1 after")
	e.send("c", dm("U2", "D2", "70.3", "u2 after removal"))
	eph := e.slack.waitCalls(t, "chat.postEphemeral", 1)[0].form
	if eph.Get("user") != "U2" || !strings.Contains(eph.Get("text"), "channels.slack.allow_users") {
		t.Fatalf("removed user told %v, want the allow_users note", eph)
	}
	e.send("s", dm("U1", "D2", "70.4", "sentinel")) // after "u2 after removal" in D2's worker
	waitInbound(t, in, "sentinel")
	if got := texts(t, in); !cmp.Equal(got, []string{"u2 before", "u1 after", "sentinel"}) {
		t.Errorf("inbound texts = %q, want nothing of the removed user after the reload", got)
	}
}

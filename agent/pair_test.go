package agent

import (
	"errors"
	"strings"
	"testing"

	"github.com/switchboard-chat/switchboard/bus"
)

type fakePairing struct{ approved []string }

func (f *fakePairing) Owner(channel, user string) bool { return channel+":"+user == "telegram:1" }
func (f *fakePairing) Approve(code, by string) (string, error) {
	if code != "K7PQ2MXA" {
		return "", errors.New("this pairing code is unknown")
	}
	f.approved = append(f.approved, by)
	return "telegram:7", nil
}

func TestPairCommand(t *testing.T) {
	owner := &bus.Inbound{Channel: "telegram", UserID: "1"}
	other := &bus.Inbound{Channel: "telegram", UserID: "8"}
	p := &fakePairing{}
	for _, tc := range []struct {
		p    Pairing
		in   *bus.Inbound
		arg  string
		want string
	}{
		{p, other, "approve K7PQ2MXA", "Only the owners listed in access.owners may approve pairing codes; you are telegram:8."},
		{p, owner, "", "Usage: /pair approve <code>"},
		{p, owner, "list", "Usage: /pair approve <code>"},
		{p, owner, "approve NOPE2345", "Not approved: this pairing code is unknown"},
		{p, owner, "approve  K7PQ2MXA ", "Approved telegram:7: their next message goes through."},
		{nil, owner, "approve K7PQ2MXA", "Pairing is not available"},
	} {
		if got := pairCommand(tc.p, tc.in, tc.arg); !strings.HasPrefix(got, tc.want) {
			t.Errorf("pairCommand(%q) by %s = %q, want %q", tc.arg, tc.in.UserID, got, tc.want)
		}
	}
	if len(p.approved) != 1 || p.approved[0] != "telegram:1" {
		t.Fatalf("approvals = %v, want one by telegram:1", p.approved)
	}
	if c := parseCommand("/pair@good_bot approve X"); c.name != cmdPair || c.arg != "approve X" {
		t.Fatalf("parseCommand = %+v", c)
	}
}

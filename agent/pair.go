package agent

import (
	"strings"

	"github.com/switchboard-chat/switchboard/bus"
)

// Pairing approves pairing codes (package access's Store). Safe for
// concurrent use.
type Pairing interface {
	// Owner reports whether channel:user is an owner (access.owners, or
	// the operator's console); a turn's tool calls run with
	// tools.Session.Owner set from it.
	Owner(channel, user string) bool
	// Approve admits the user who got code and returns them as
	// <channel>:<user_id>; by names the approver.
	Approve(code, by string) (string, error)
}

// pairCommand answers /pair approve CODE: only an owner (access.owners)
// may approve; everyone else is told so. It never reaches the model.
func pairCommand(p Pairing, in *bus.Inbound, arg string) string {
	who := in.Channel + ":" + in.UserID
	verb, code, _ := strings.Cut(strings.TrimSpace(arg), " ")
	switch {
	case p == nil:
		return "Pairing is not available on this daemon."
	case !p.Owner(in.Channel, in.UserID):
		return "Only the owners listed in access.owners may approve pairing codes; you are " + who + "."
	case !strings.EqualFold(verb, "approve") || strings.TrimSpace(code) == "":
		return "Usage: /pair approve <code> (the code the new user got from me)."
	}
	user, err := p.Approve(strings.TrimSpace(code), who)
	if err != nil {
		return "Not approved: " + err.Error()
	}
	return "Approved " + user + ": their next message goes through."
}

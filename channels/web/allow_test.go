package web

import (
	"net/http"
	"strings"
	"testing"

	"github.com/switchboard-chat/switchboard/access"
	"github.com/switchboard-chat/switchboard/bus"
)

// TestAllowUsersFromTheGate: the console reads channels.web.allow_users
// from the access gate at each request, so a configuration reload
// (access.Store.SetConfig) logs a removed user's session out at its next
// request, with nothing published, and lets an added user log in.
func TestAllowUsersFromTheGate(t *testing.T) {
	e := newEnv(t)
	cfg := e.config()
	cfg.AllowUsers = UserList{"ann"}
	lists := func(users ...string) access.Config {
		return access.Config{AllowUsers: map[string][]string{Name: users}}
	}
	gate := access.New(lists("ann"), t.TempDir(), access.Options{})
	r := e.start(t, cfg, func(d *Deps) { d.Allow = gate })
	ann := r.browser(t)
	ann.login("ann", e.logCode(t))
	if resp, body := ann.send("c1", "m1", "hello", nil); resp.StatusCode >= 300 {
		t.Fatalf("ann before the reload: %d %s", resp.StatusCode, body)
	}
	e.agent.WaitInbound(t, "ann's message", func(in bus.Inbound) bool { return in.Text == "hello" })

	if lines := gate.SetConfig(lists("bob")); len(lines) != 1 {
		t.Fatalf("reload lines %q", lines)
	}
	if resp, _ := ann.send("c1", "m2", "still me", nil); resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("ann after her removal: %d, want 401 (logged out)", resp.StatusCode)
	}
	var out strings.Builder
	bobCfg := cfg
	bobCfg.AllowUsers = UserList{"bob"} // the edited file `switchboard web pair` reads
	if err := Pair(&out, strings.TrimSuffix(e.pairDir, "/web-pair"), &bobCfg, "bob", "config.yaml"); err != nil {
		t.Fatal(err)
	}
	code := strings.TrimSpace(strings.TrimPrefix(strings.SplitN(out.String(), "\n", 2)[0], "Pairing code: "))
	bob := r.browser(t)
	bob.login("bob", code)
	if resp, body := bob.send("c2", "m3", "hi, bob here", nil); resp.StatusCode >= 300 {
		t.Fatalf("bob after the reload: %d %s", resp.StatusCode, body)
	}
	e.agent.WaitInbound(t, "bob's message", func(in bus.Inbound) bool { return in.Text == "hi, bob here" })
	if n := e.agent.Count(); n != 2 {
		t.Fatalf("%d messages published, want ann's first and bob's (none after ann's removal)", n)
	}
}

package web

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/switchboard-chat/switchboard/internal/observe"
	"github.com/switchboard-chat/switchboard/internal/reqlog"
)

// pairCode mints a code for user as `switchboard web pair --user` does.
func (e *env) pairCode(t *testing.T, cfg Config, user string) string {
	t.Helper()
	var out strings.Builder
	if err := Pair(&out, strings.TrimSuffix(e.pairDir, "/web-pair"), &cfg, user, "config.yaml"); err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(strings.TrimPrefix(strings.SplitN(out.String(), "\n", 2)[0], "Pairing code: "))
}

// TestDashboardForOperatorsOnly: with channels.web.operators [ann], bob,
// logged in, gets 403 saying why on the dashboard page and every
// dashboard API (none of the other channels' sessions, traces, model
// requests or configuration), and his /api/me tells the chat page not to
// link it; his chat works. Ann, the operator, gets all of it.
func TestDashboardForOperatorsOnly(t *testing.T) {
	e := newEnv(t)
	cfg := e.config()
	// As the file says it (the key is decoded, not set in code).
	if err := yaml.Unmarshal([]byte("operators: [ann]"), &cfg); err != nil {
		t.Fatal(err)
	}
	const private = "telegram/carol-dm"
	r := e.start(t, cfg, func(d *Deps) {
		d.Dash.Sessions = func() []observe.Session {
			return []observe.Session{{Key: private, State: "idle", LastActivity: time.Now()}}
		}
		d.Dash.Config = map[string]any{"llm": map[string]string{"model": "secret-model-name"}}
		d.Dash.Requests = func(string) []reqlog.Record {
			return []reqlog.Record{{Request: json.RawMessage(`{"messages":[{"role":"user","content":"carol's diary"}]}`)}}
		}
	})
	ann := r.browser(t)
	ann.login("ann", e.logCode(t))
	bob := r.browser(t)
	bob.login("bob", e.pairCode(t, cfg, "bob"))
	for _, rt := range protected {
		if rt.path != "/dashboard" && !strings.HasPrefix(rt.path, "/api/dash/") {
			continue
		}
		resp, body := bob.do(rt.method, rt.path, "", nil, nil)
		if resp.StatusCode != http.StatusForbidden || !strings.Contains(string(body), "channels.web.operators") {
			t.Errorf("bob: %s %s = %d %s, want 403 naming channels.web.operators", rt.method, rt.path, resp.StatusCode, body)
		}
		for _, leak := range []string{private, "carol's diary", "secret-model-name"} {
			if strings.Contains(string(body), leak) {
				t.Errorf("bob: %s %s shows %q", rt.method, rt.path, leak)
			}
		}
		if resp, body := ann.do(rt.method, rt.path, "", nil, nil); resp.StatusCode != http.StatusOK {
			t.Errorf("ann (operator): %s %s = %d %s, want 200", rt.method, rt.path, resp.StatusCode, body)
		}
	}
	for who, want := range map[*browser]string{bob: `"dashboard":false`, ann: `"dashboard":true`} {
		if _, body := who.do("GET", "/api/me", "", nil, nil); !strings.Contains(string(body), want) {
			t.Errorf("/api/me = %s, want %s", body, want)
		}
	}
	if resp, body := bob.send("c1", "m1", "hello", nil); resp.StatusCode != http.StatusAccepted {
		t.Fatalf("bob's chat: %d %s", resp.StatusCode, body)
	}
}

// TestOperatorsValidate: operators must be allowed users, named once.
func TestOperatorsValidate(t *testing.T) {
	c := DefaultConfig()
	c.AllowUsers = UserList{"ann"}
	c.Operators = UserList{"ann", "carl", "ann", "bad name"}
	err := c.Validate()
	for _, want := range []string{`channels.web.operators[1]: "carl" is not in channels.web.allow_users`, "channels.web.operators[2]", "channels.web.operators[3]"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Validate = %v, want it to name %s", err, want)
		}
	}
	c.Operators = UserList{"ann"}
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
}

// TestLoginFloodFromOneAddress: a flood of logins with made-up names from
// one address is rate limited, and that address's limit only: a valid
// login from another address, and from another client of a reverse proxy
// on the host (X-Forwarded-For), still works. Wrong codes for one user
// from many addresses lock that user's logins, not another user's.
func TestLoginFloodFromOneAddress(t *testing.T) {
	e := newEnv(t)
	frozen := time.Now()
	e.now = func() time.Time { return frozen } // no bucket refills during the test
	cfg := e.config()
	r := e.start(t, cfg)
	code := e.logCode(t)
	try := func(b *browser, user, code string, hdr map[string]string) (int, string) {
		resp, body := b.do("POST", "/api/login", "application/json", strings.NewReader(fmt.Sprintf(`{"user":%q,"code":%q}`, user, code)), hdr)
		return resp.StatusCode, string(body)
	}
	flood := func(b *browser, hdr map[string]string) {
		t.Helper()
		limited := 0
		for i := range 3 * addrBurst {
			if st, _ := try(b, fmt.Sprintf("mallory%d", i), "AAAA-AAAA", hdr); st == http.StatusTooManyRequests {
				limited++
			}
		}
		if limited != 2*addrBurst {
			t.Fatalf("%d of %d flooding logins limited, want %d", limited, 3*addrBurst, 2*addrBurst)
		}
	}
	flood(r.browserFrom(t, "127.0.0.2"), nil)
	r.browserFrom(t, "127.0.0.3").login("ann", code)
	if st, body := try(r.browserFrom(t, "127.0.0.2"), "ann", e.pairCode(t, cfg, "ann"), nil); st != http.StatusTooManyRequests || !strings.Contains(body, "your address") {
		t.Fatalf("the flooding address itself: %d %s, want 429", st, body)
	}

	// Behind a reverse proxy on the host every request comes from
	// loopback; X-Forwarded-For names the client.
	proxy := r.browserFrom(t, "127.0.0.1")
	flood(proxy, map[string]string{"X-Forwarded-For": "198.51.100.7"})
	if st, body := try(proxy, "bob", e.pairCode(t, cfg, "bob"), map[string]string{"X-Forwarded-For": "203.0.113.9, 198.51.100.8"}); st != http.StatusOK {
		t.Fatalf("bob through the proxy after another client's flood: %d %s", st, body)
	}

	// Guessing bob's codes from many addresses: his bucket empties.
	limited := 0
	for i := range userBurst + 5 {
		b := r.browserFrom(t, fmt.Sprintf("127.0.1.%d", 1+i/5))
		if st, body := try(b, "bob", "BBBB-BBBB", nil); st == http.StatusTooManyRequests && strings.Contains(body, "this user") {
			limited++
		}
	}
	if want := 6; limited != want { // bob's login above spent one of his userBurst
		t.Errorf("%d of %d guesses of bob's code limited, want %d", limited, userBurst+5, want)
	}
	if st, body := try(r.browserFrom(t, "127.0.2.1"), "ann", e.pairCode(t, cfg, "ann"), nil); st != http.StatusOK {
		t.Fatalf("ann while bob's logins are limited: %d %s", st, body)
	}
}

// TestLoginLimitsBounded: a flood from ever new addresses keeps at most
// maxLimited buckets; the least recently used is forgotten first. An
// IPv6 client counts by its /64.
func TestLoginLimitsBounded(t *testing.T) {
	l := newLoginLimits()
	now := time.Now()
	for i := range maxLimited + 100 {
		l.allowAddr(fmt.Sprintf("addr-%d", i), now)
	}
	if n := len(l.addrs.byKey); n != maxLimited || l.addrs.lru.Len() != maxLimited {
		t.Fatalf("%d buckets kept, want %d", n, maxLimited)
	}
	if _, ok := l.addrs.byKey["addr-0"]; ok {
		t.Fatal("the oldest bucket was kept")
	}
	for _, tc := range []struct{ remote, xff, want string }{
		{"[2001:db8::1]:5000", "", "2001:db8::/64"},
		{"[2001:db8::2]:5000", "", "2001:db8::/64"},
		{"192.0.2.1:5000", "198.51.100.1", "192.0.2.1"}, // not from loopback: the header is not trusted
		{"127.0.0.1:5000", "203.0.113.1, 198.51.100.2", "198.51.100.2"},
		{"[::1]:5000", "2001:db8:1::5", "2001:db8:1::/64"},
		{"127.0.0.1:5000", "not an address", "127.0.0.1"},
	} {
		r, _ := http.NewRequest("POST", "/api/login", nil)
		r.RemoteAddr = tc.remote
		if tc.xff != "" {
			r.Header.Set("X-Forwarded-For", tc.xff)
		}
		if got := clientAddr(r); got != tc.want {
			t.Errorf("clientAddr(%s, X-Forwarded-For %q) = %s, want %s", tc.remote, tc.xff, got, tc.want)
		}
	}
}

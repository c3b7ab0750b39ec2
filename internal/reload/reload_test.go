package reload

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

type conf struct {
	Listen   string   `yaml:"listen"`
	Bindings []string `yaml:"bindings"`
	Level    string   `yaml:"level"`
}

// fixture is a reloader over a configuration the test sets.
type fixture struct {
	mu      sync.Mutex
	next    conf
	err     error
	applied []conf
}

func (f *fixture) load() (conf, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.next, f.err
}

func (f *fixture) apply(c conf) []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.applied = append(f.applied, c)
	return []string{"bindings: applied"}
}

func (f *fixture) set(c conf, err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.next, f.err = c, err
}

func (f *fixture) count() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.applied)
}

// TestReloadAppliesRefusesAndKeeps: a valid configuration is applied and
// its non-live changes reported kept; an invalid one is refused whole
// with every problem, and nothing is applied.
func TestReloadAppliesRefusesAndKeeps(t *testing.T) {
	start := conf{Listen: ":1", Bindings: []string{"a"}, Level: "info"}
	f := &fixture{}
	r := New(start, f.load, f.apply, nil, "bindings", "level")
	f.set(conf{Listen: ":2", Bindings: []string{"b"}, Level: "debug"}, nil)
	res := r.Reload()
	if res.Err != nil || strings.Join(res.Changes, "|") != "bindings: applied|listen: changed, kept until restart" {
		t.Fatalf("reload = %+v", res)
	}
	f.set(conf{}, errors.Join(errors.New("bindings[0].agent: no agent \"x\""), errors.New("log.levle (line 3): unknown key")))
	res = r.Reload()
	if res.Err == nil || f.count() != 1 {
		t.Fatalf("a broken configuration was applied: %+v, applied %d", res, f.count())
	}
	out := res.String()
	for _, want := range []string{"refused", `bindings[0].agent: no agent "x"`, "log.levle (line 3): unknown key"} {
		if !strings.Contains(out, want) {
			t.Errorf("refusal %q does not say %q", out, want)
		}
	}

	srv := httptest.NewServer(r)
	defer srv.Close()
	resp, err := http.Post(srv.URL, "", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnprocessableEntity {
		t.Errorf("POST /reload of a broken configuration: %s, want 422", resp.Status)
	}
}

// TestSIGHUPReloads: Run reloads on SIGHUP.
func TestSIGHUPReloads(t *testing.T) {
	// The test's own handler keeps a SIGHUP that arrives before Run's from
	// ending the test binary.
	mine := make(chan os.Signal, 16)
	signal.Notify(mine, syscall.SIGHUP)
	defer signal.Stop(mine)
	f := &fixture{}
	f.set(conf{Bindings: []string{"b"}}, nil)
	r := New(conf{}, f.load, f.apply, nil, "bindings")
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	deadline := time.Now().Add(20 * time.Second)
	for f.count() == 0 {
		if time.Now().After(deadline) {
			t.Fatal("no reload after SIGHUP")
		}
		if err := syscall.Kill(os.Getpid(), syscall.SIGHUP); err != nil {
			t.Fatal(err)
		}
		<-mine // delivered (to Run too once it listens)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

type chanConf struct {
	Token      string   `yaml:"token"`
	AllowUsers []string `yaml:"allow_users"`
}

type nested struct {
	Channels struct {
		Telegram *chanConf `yaml:"telegram"`
		Web      *chanConf `yaml:"web"`
	} `yaml:"channels"`
}

// TestNestedLiveKey: a live key inside a section (channels.telegram.
// allow_users) is left to apply; the section's other changes are reported
// kept one by one.
func TestNestedLiveKey(t *testing.T) {
	var start, next nested
	start.Channels.Telegram = &chanConf{Token: "a", AllowUsers: []string{"1"}}
	start.Channels.Web = &chanConf{AllowUsers: []string{"ann"}}
	next.Channels.Telegram = &chanConf{Token: "a", AllowUsers: []string{"2"}}
	next.Channels.Web = &chanConf{AllowUsers: []string{"ann"}}
	var applied int
	apply := func(nested) []string { applied++; return []string{"channels.telegram.allow_users: applied"} }
	r := New(start, func() (nested, error) { return next, nil }, apply, nil, "channels.telegram.allow_users")
	if res := r.Reload(); res.Err != nil || strings.Join(res.Changes, "|") != "channels.telegram.allow_users: applied" {
		t.Fatalf("allow_users only: %+v", res)
	}
	next.Channels.Telegram = &chanConf{Token: "b", AllowUsers: []string{"2"}}
	next.Channels.Web = &chanConf{AllowUsers: []string{"bob"}}
	want := "channels.telegram.allow_users: applied|channels.telegram.token: changed, kept until restart|channels.web: changed, kept until restart"
	if res := r.Reload(); strings.Join(res.Changes, "|") != want {
		t.Fatalf("token and web changed too: %q, want %q", res.Changes, want)
	}
	next.Channels.Telegram = nil // the section removed: kept whole
	if res := r.Reload(); !strings.Contains(strings.Join(res.Changes, "|"), "channels.telegram: changed, kept until restart") {
		t.Fatalf("section removed: %q", res.Changes)
	}
}

package doctor

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"go.uber.org/goleak"

	"github.com/switchboard-chat/switchboard/admin"
	"github.com/switchboard-chat/switchboard/internal/health"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// stopped is a Setup whose daemon cannot be running (no admin listener,
// in-process bus) and whose offline checks return rs.
func stopped(rs ...health.Result) Load {
	return func(path string) (Setup, error) {
		return Setup{ConfigFile: path, Offline: []Check{func(context.Context) []health.Result { return rs }}}, nil
	}
}

func TestRunOffline(t *testing.T) {
	var out bytes.Buffer
	code := Run(t.Context(), []string{"--config", "c.yaml"}, &out, "./config.yaml", stopped(
		health.Result{Name: "NATS", Status: health.OK, Detail: "fine"},
		health.Result{Name: "LLM", Status: health.Warn, Detail: "model missing: check llm.model"},
		health.Result{Name: "a-very-long-name", Status: health.Fail, Detail: "broken: fix it"},
		health.Result{Name: "bash", Status: health.Skip, Detail: "off"},
	))
	want := `✓ config        c.yaml is valid
- daemon        not running (no admin listener to ask): checking what it needs to start
✓ NATS          fine
! LLM           model missing: check llm.model
✗ a-very-long-name  broken: fix it
- bash          off

1 warning, 1 failure
`
	if code != 1 || out.String() != want {
		t.Fatalf("Run = %d:\n%s\nwant 1:\n%s", code, out.String(), want)
	}
}

func TestRunJSON(t *testing.T) {
	var out bytes.Buffer
	code := Run(t.Context(), []string{"--json"}, &out, "./config.yaml", stopped(health.Result{Name: "LLM", Status: health.Warn, Detail: "w"}))
	var rep struct {
		Mode     string
		Checks   []struct{ Name, Status, Detail string }
		Warnings int
		Failures int
	}
	if err := json.Unmarshal(out.Bytes(), &rep); err != nil || code != 0 {
		t.Fatalf("Run --json = %d, %v:\n%s", code, err, out.String())
	}
	if rep.Mode != "offline" || len(rep.Checks) != 3 || rep.Checks[2].Status != "warn" || rep.Warnings != 1 || rep.Failures != 0 {
		t.Fatalf("--json = %+v", rep)
	}
}

func TestRunBadConfig(t *testing.T) {
	invalid := func(string) (Setup, error) {
		return Setup{}, &InvalidConfig{Err: errors.Join(errors.New("llm.model: must not be empty"), errors.New("admin.listen: bad")), Source: "./config.yaml"}
	}
	var out bytes.Buffer
	if code := Run(t.Context(), nil, &out, "./config.yaml", invalid); code != 2 ||
		!strings.Contains(out.String(), "✗ config        ./config.yaml: 2 problems\n      - llm.model: must not be empty\n      - admin.listen: bad\n") {
		t.Fatalf("invalid config: %d\n%s", code, out.String())
	}
	out.Reset()
	missing := func(string) (Setup, error) { return Setup{}, errors.New("config: file x does not exist") }
	if code := Run(t.Context(), nil, &out, "x", missing); code != 2 || !strings.Contains(out.String(), "✗ config        config: file x does not exist") {
		t.Fatalf("missing config: %d\n%s", code, out.String())
	}
	out.Reset()
	if code := Run(t.Context(), []string{"extra"}, &out, "x", missing); code != 2 || !strings.Contains(out.String(), `unexpected argument "extra"`) {
		t.Fatalf("extra argument: %d\n%s", code, out.String())
	}
	out.Reset()
	if code := Run(t.Context(), []string{"-h"}, &out, "x", missing); code != 0 || !strings.Contains(out.String(), "Usage: switchboard doctor [--config FILE] [--json]") || !strings.Contains(out.String(), "Examples:") {
		t.Fatalf("-h: %d\n%s", code, out.String())
	}
}

func TestAdminBase(t *testing.T) {
	for listen, want := range map[string]string{
		"127.0.0.1:9090": "http://127.0.0.1:9090",
		"0.0.0.0:9090":   "http://127.0.0.1:9090",
		":9090":          "http://127.0.0.1:9090",
		"[::]:9090":      "http://[::1]:9090",
		"127.0.0.1:0":    "",
		"":               "",
	} {
		if got := (Live{Admin: admin.Config{Listen: listen}}).adminBase(); got != want {
			t.Errorf("adminBase(%q) = %q, want %q", listen, got, want)
		}
	}
}

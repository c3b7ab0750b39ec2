package web

import (
	"encoding/json"
	"strings"
	"testing"
)

// selfRedacting is a section that knows its secrets, as mcp.Config does.
type selfRedacting struct {
	Env map[string]string `yaml:"env"`
}

func (s selfRedacting) Redacted() selfRedacting {
	out := selfRedacting{Env: map[string]string{}}
	for k := range s.Env {
		out.Env[k] = "(redacted)"
	}
	return out
}

// TestRedactConfigSelfRedacting: a section with a Redacted method is
// shown as it returns it, wherever it sits (a field, a pointer, a map
// value), and secret key names are matched in any case (env names such as
// GITHUB_PERSONAL_ACCESS_TOKEN).
func TestRedactConfigSelfRedacting(t *testing.T) {
	type cfg struct {
		MCP     selfRedacting            `yaml:"mcp"`
		Ptr     *selfRedacting           `yaml:"ptr"`
		Agents  map[string]selfRedacting `yaml:"agents"`
		Env     map[string]string        `yaml:"env"`
		Counter int                      `yaml:"max_tokens"`
	}
	v := cfg{
		MCP:     selfRedacting{Env: map[string]string{"GH": "ghp_one"}},
		Ptr:     &selfRedacting{Env: map[string]string{"PLAIN": "plain-two"}},
		Agents:  map[string]selfRedacting{"a": {Env: map[string]string{"X": "three-x"}}},
		Env:     map[string]string{"GITHUB_PERSONAL_ACCESS_TOKEN": "ghp_four", "API_KEY": "five-k", "HOME": "/home/ann"},
		Counter: 7,
	}
	b, _ := json.Marshal(RedactConfig(v))
	got := string(b)
	for _, secret := range []string{"ghp_one", "plain-two", "three-x", "ghp_four", "five-k"} {
		if strings.Contains(got, secret) {
			t.Errorf("redacted config shows %q: %s", secret, got)
		}
	}
	for _, want := range []string{`"GH":"(redacted)"`, `"GITHUB_PERSONAL_ACCESS_TOKEN":"(redacted)"`, `"HOME":"/home/ann"`, `"max_tokens":7`} {
		if !strings.Contains(got, want) {
			t.Errorf("redacted config %s lacks %s", got, want)
		}
	}
}

package natsbus_test

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/switchboard-chat/switchboard/bus/natsbus"
)

func TestCheckContextName(t *testing.T) {
	for _, ok := range []string{"switchboard", "ops.prod", "a_b-c", strings.Repeat("x", 64)} {
		if err := natsbus.CheckContextName(ok); err != nil {
			t.Errorf("CheckContextName(%q) = %v", ok, err)
		}
	}
	for _, bad := range []string{"", ".hidden", "../evil", "a/b", "a..b", strings.Repeat("x", 65)} {
		if err := natsbus.CheckContextName(bad); err == nil || !strings.Contains(err.Error(), "must be 1 to 64 of [A-Za-z0-9_.-]") {
			t.Errorf("CheckContextName(%q) = %v", bad, err)
		}
	}
}

// TestWriteContext: without XDG_CONFIG_HOME the context goes to
// ~/.config/nats/context, private; without HOME either it is refused.
func TestWriteContext(t *testing.T) {
	home := t.TempDir()
	env := map[string]string{"HOME": home}
	lookup := func(k string) (string, bool) { v, ok := env[k]; return v, ok }
	cfg := natsbus.Config{Listen: "127.0.0.1:5222", Admin: natsbus.AdminConfig{Token: "s3cret-token"}}
	var out bytes.Buffer
	if err := cfg.WriteContext(t.TempDir(), "ops", "/etc/switchboard.yaml", lookup, &out); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(home, ".config", "nats", "context", "ops.json")
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var got natsbus.CLIContext
	if err := json.Unmarshal(data, &got); err != nil {
		t.Fatal(err)
	}
	want := natsbus.CLIContext{
		Description: "Switchboard bus operator (written by switchboard bus context from /etc/switchboard.yaml)",
		URL:         "nats://127.0.0.1:5222", Token: "s3cret-token",
	}
	if got != want {
		t.Errorf("context = %+v, want %+v", got, want)
	}
	if st, _ := os.Stat(filepath.Dir(file)); st == nil || st.Mode().Perm() != 0o700 {
		t.Errorf("context folder = %v, want mode 0700", st)
	}
	if s := out.String(); strings.Contains(s, "s3cret") || !strings.Contains(s, file) || !strings.Contains(s, "credentials from bus.admin") {
		t.Errorf("output:\n%s", s)
	}
	if err := cfg.WriteContext(t.TempDir(), "../evil", "c", lookup, &out); err == nil {
		t.Error("WriteContext(../evil) passed")
	}
	delete(env, "HOME")
	if err := cfg.WriteContext(t.TempDir(), "ops", "c", lookup, &out); err == nil || !strings.Contains(err.Error(), "set HOME or XDG_CONFIG_HOME") {
		t.Errorf("WriteContext without HOME = %v", err)
	}
}

package natsbus_test

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/switchboard-chat/switchboard/bus/natsbus"
)

// TestOperatorTokenFile: the credential is created once, private (0600),
// as 64 hex digits and a newline, and the same token is returned after.
func TestOperatorTokenFile(t *testing.T) {
	dir := t.TempDir()
	if _, err := natsbus.ReadOperatorToken(dir); !errors.Is(err, fs.ErrNotExist) || !strings.Contains(err.Error(), "the daemon creates it when it first starts") {
		t.Fatalf("ReadOperatorToken before the first start = %v, want a not-exist error that says why", err)
	}
	token, created, err := natsbus.OperatorToken(dir)
	if err != nil || !created {
		t.Fatalf("OperatorToken = %q, %v, %v", token, created, err)
	}
	path := filepath.Join(dir, natsbus.OperatorTokenFile)
	if path != natsbus.OperatorTokenPath(dir) || natsbus.OperatorTokenFile != "bus-operator.token" {
		t.Fatalf("credential path = %s", natsbus.OperatorTokenPath(dir))
	}
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode().Perm() != 0o600 {
		t.Errorf("mode = %04o, want 0600", st.Mode().Perm())
	}
	data, _ := os.ReadFile(path)
	if !regexp.MustCompile(`^[0-9a-f]{64}\n$`).Match(data) || string(data) != token+"\n" {
		t.Errorf("file = %q, want the token %q as 64 hex digits and a newline", data, token)
	}
	again, created, err := natsbus.OperatorToken(dir)
	if err != nil || created || again != token {
		t.Fatalf("second OperatorToken = %q, %v, %v; want the same token, not created", again, created, err)
	}
	if read, err := natsbus.ReadOperatorToken(dir); err != nil || read != token {
		t.Fatalf("ReadOperatorToken = %q, %v", read, err)
	}
	other, _, _ := natsbus.OperatorToken(t.TempDir())
	if other == token {
		t.Fatal("two data_dirs got the same token")
	}
}

// TestOperatorTokenRefusesUnsafeFiles: a credential others can read, a
// symbolic link, a folder or an empty file is refused with a clear error,
// by the daemon (OperatorToken) and by clients (ReadOperatorToken).
func TestOperatorTokenRefusesUnsafeFiles(t *testing.T) {
	tests := []struct {
		name    string
		make    func(t *testing.T, path string)
		wantErr string
	}{
		{"world readable", func(t *testing.T, path string) {
			writeFile(t, path, strings.Repeat("a", 64)+"\n", 0o644)
		}, "has mode 0644: group and others must not read or write it (chmod 600 "},
		{"group writable", func(t *testing.T, path string) {
			writeFile(t, path, strings.Repeat("a", 64)+"\n", 0o620)
		}, "has mode 0620"},
		{"symbolic link", func(t *testing.T, path string) {
			target := filepath.Join(t.TempDir(), "elsewhere")
			writeFile(t, target, strings.Repeat("a", 64)+"\n", 0o600)
			if err := os.Symlink(target, path); err != nil {
				t.Fatal(err)
			}
		}, "is not a regular file"},
		{"folder", func(t *testing.T, path string) {
			if err := os.Mkdir(path, 0o700); err != nil {
				t.Fatal(err)
			}
		}, "is not a regular file"},
		{"empty", func(t *testing.T, path string) { writeFile(t, path, "\n", 0o600) }, "must hold one token on one line"},
		{"two lines", func(t *testing.T, path string) { writeFile(t, path, "a\nb\n", 0o600) }, "must hold one token on one line"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			tt.make(t, natsbus.OperatorTokenPath(dir))
			if tok, _, err := natsbus.OperatorToken(dir); err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("OperatorToken = %q, %v; want an error with %q", tok, err, tt.wantErr)
			}
			if tok, err := natsbus.ReadOperatorToken(dir); err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("ReadOperatorToken = %q, %v; want an error with %q", tok, err, tt.wantErr)
			}
		})
	}
}

func writeFile(t *testing.T, path, data string, mode os.FileMode) {
	t.Helper()
	if err := os.WriteFile(path, []byte(data), mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, mode); err != nil { // past the umask
		t.Fatal(err)
	}
}

// TestWithOperatorToken: the daemon's embedded TCP listener without
// bus.admin gets the generated credential; an in-process bus, an external
// bus and a configured bus.admin are left as they are.
func TestWithOperatorToken(t *testing.T) {
	dir := t.TempDir()
	cfg := natsbus.DefaultConfig()
	cfg.Listen = "127.0.0.1:4222"
	got, path, created, err := cfg.WithOperatorToken(dir)
	if err != nil || !created || path != natsbus.OperatorTokenPath(dir) {
		t.Fatalf("WithOperatorToken = %q, %v, %v", path, created, err)
	}
	token, err := natsbus.ReadOperatorToken(dir)
	if err != nil || got.Admin.Token != token {
		t.Fatalf("bus.admin.token = %q, want the file's %q (%v)", got.Admin.Token, token, err)
	}
	if again, _, created, err := cfg.WithOperatorToken(dir); err != nil || created || again.Admin.Token != token {
		t.Errorf("second start: created %v, token %q, %v; want the same token", created, again.Admin.Token, err)
	}
	for name, c := range map[string]natsbus.Config{
		"in-process": func() natsbus.Config { c := cfg; c.Listen = ""; return c }(),
		"external":   func() natsbus.Config { c := cfg; c.URL = "nats://example.net:4222"; return c }(),
		"bus.admin":  func() natsbus.Config { c := cfg; c.Admin.Token = "mine"; return c }(),
	} {
		out, path, created, err := c.WithOperatorToken(t.TempDir())
		if err != nil || path != "" || created || out.Admin != c.Admin {
			t.Errorf("%s: WithOperatorToken changed the config (admin %+v, path %q, created %v, %v)", name, out.Admin, path, created, err)
		}
	}
}

package health_test

import (
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/switchboard-chat/switchboard/internal/health"
)

func TestBindable(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	if err := health.Bindable(t.Context(), addr); !errors.Is(err, syscall.EADDRINUSE) {
		t.Fatalf("Bindable(busy %s) = %v, want address in use", addr, err)
	}
	if err := ln.Close(); err != nil {
		t.Fatal(err)
	}
	if err := health.Bindable(t.Context(), addr); err != nil {
		t.Fatalf("Bindable(free %s) = %v", addr, err)
	}
	// The probe's listener is closed: the address is free again.
	if err := health.Bindable(t.Context(), addr); err != nil {
		t.Fatalf("Bindable(%s) a second time = %v", addr, err)
	}
}

func TestDirUsable(t *testing.T) {
	dir := t.TempDir()
	if created, err := health.DirUsable(dir); err != nil || created {
		t.Fatalf("DirUsable(existing) = %v, %v", created, err)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Fatalf("DirUsable left files behind: %v", entries)
	}
	missing := filepath.Join(dir, "a", "b")
	if created, err := health.DirUsable(missing); err != nil || !created {
		t.Fatalf("DirUsable(missing) = %v, %v", created, err)
	}
	if _, err := os.Stat(filepath.Join(dir, "a")); !os.IsNotExist(err) {
		t.Fatalf("DirUsable created %s (stat: %v)", filepath.Join(dir, "a"), err)
	}
	file := filepath.Join(dir, "f")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := health.DirUsable(file); err == nil || err.Error() != file+" is not a directory" {
		t.Fatalf("DirUsable(file) = %v", err)
	}
	if _, err := health.DirUsable(filepath.Join(file, "sub")); err == nil || !strings.Contains(err.Error(), "cannot be created: "+file+" is not a directory") {
		t.Fatalf("DirUsable(file/sub) = %v", err)
	}
}

func TestPlural(t *testing.T) {
	for n, want := range map[int]string{0: "problems", 1: "problem", 2: "problems"} {
		if got := health.Plural(n, "problem", "problems"); got != want {
			t.Errorf("Plural(%d) = %q, want %q", n, got, want)
		}
	}
}

func TestCheckDir(t *testing.T) {
	dir := t.TempDir()
	if r := health.CheckDir("data dir", dir); r.Status != health.OK || r.Name != "data dir" || r.Detail != dir+" is writable" {
		t.Errorf("existing dir: %+v", r)
	}
	missing := filepath.Join(dir, "a", "b")
	if r := health.CheckDir("data dir", missing); r.Status != health.OK || r.Detail != missing+" does not exist yet; it will be created" {
		t.Errorf("missing dir: %+v", r)
	}
	file := filepath.Join(dir, "f")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if r := health.CheckDir("data dir", file); r.Status != health.Fail || r.Detail != file+" is not a directory" {
		t.Errorf("file: %+v", r)
	}
}

package boltstore_test

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	bolt "go.etcd.io/bbolt"

	"github.com/switchboard-chat/switchboard/internal/health"
	"github.com/switchboard-chat/switchboard/memory/boltstore"
)

func TestCheckDataDir(t *testing.T) {
	t.Run("missing is created later, not now", func(t *testing.T) {
		dir := filepath.Join(t.TempDir(), "a", "b")
		r := boltstore.CheckDataDir(dir)
		if r.Status != health.OK || !strings.Contains(r.Detail, "does not exist yet; it will be created") {
			t.Fatalf("CheckDataDir = %+v", r)
		}
		if _, err := os.Stat(filepath.Dir(dir)); !os.IsNotExist(err) {
			t.Fatalf("check created %s (stat: %v)", filepath.Dir(dir), err)
		}
	})
	t.Run("empty dir", func(t *testing.T) {
		dir := t.TempDir()
		r := boltstore.CheckDataDir(dir)
		if r.Status != health.OK || r.Detail != dir+" is writable (no history.db yet)" || r.Name != "data dir" {
			t.Fatalf("CheckDataDir = %+v", r)
		}
		if entries, _ := os.ReadDir(dir); len(entries) != 0 {
			t.Fatalf("check left files behind: %v", entries)
		}
	})
	t.Run("not a directory", func(t *testing.T) {
		file := filepath.Join(t.TempDir(), "f")
		if err := os.WriteFile(file, nil, 0o600); err != nil {
			t.Fatal(err)
		}
		if r := boltstore.CheckDataDir(file); r.Status != health.Fail || r.Detail != file+" is not a directory" {
			t.Fatalf("CheckDataDir(file) = %+v", r)
		}
		if r := boltstore.CheckDataDir(filepath.Join(file, "sub")); r.Status != health.Fail || !strings.Contains(r.Detail, "cannot be created: "+file+" is not a directory") {
			t.Fatalf("CheckDataDir(file/sub) = %+v", r)
		}
	})
	t.Run("not writable", func(t *testing.T) {
		if os.Geteuid() == 0 {
			t.Skip("root can write to any directory")
		}
		dir := filepath.Join(t.TempDir(), "ro")
		if err := os.Mkdir(dir, 0o500); err != nil {
			t.Fatal(err)
		}
		if r := boltstore.CheckDataDir(dir); r.Status != health.Fail || !strings.Contains(r.Detail, "is not writable") {
			t.Fatalf("CheckDataDir(read-only) = %+v", r)
		}
		if r := boltstore.CheckDataDir(filepath.Join(dir, "sub")); r.Status != health.Fail || !strings.Contains(r.Detail, "cannot be created") {
			t.Fatalf("CheckDataDir(read-only/sub) = %+v", r)
		}
	})
	t.Run("history.db free", func(t *testing.T) {
		dir := t.TempDir()
		db, err := bolt.Open(filepath.Join(dir, boltstore.FileName), 0o600, nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := db.Close(); err != nil {
			t.Fatal(err)
		}
		if r := boltstore.CheckDataDir(dir); r.Status != health.OK || r.Detail != dir+" is writable; history.db is not in use" {
			t.Fatalf("CheckDataDir = %+v", r)
		}
	})
	t.Run("history.db locked", func(t *testing.T) {
		dir := t.TempDir()
		db, err := bolt.Open(filepath.Join(dir, boltstore.FileName), 0o600, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		r := boltstore.CheckDataDir(dir)
		if r.Status != health.Fail || !strings.Contains(r.Detail, "history.db is locked by another process: is the daemon running?") {
			t.Fatalf("CheckDataDir(locked) = %+v", r)
		}
	})
	t.Run("history.db corrupt", func(t *testing.T) {
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, boltstore.FileName), bytes.Repeat([]byte("x"), 8192), 0o600); err != nil {
			t.Fatal(err)
		}
		if r := boltstore.CheckDataDir(dir); r.Status != health.Fail || !strings.Contains(r.Detail, "history.db cannot be opened: ") {
			t.Fatalf("CheckDataDir(corrupt) = %+v", r)
		}
	})
}

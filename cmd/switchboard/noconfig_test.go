package main

import (
	"bytes"
	"context"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/switchboard-chat/switchboard/internal/polltest"
	"github.com/switchboard-chat/switchboard/internal/syncbuf"
)

// TestExplicitMissingConfigIsAnError (issue 21): --config FILE that does
// not exist stops every verb that reads the configuration with a message
// naming the file, before anything else happens.
func TestExplicitMissingConfigIsAnError(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "nope.yaml")
	for _, args := range [][]string{
		{"serve", "--config", missing},
		{"check", "--config", missing},
		{"chat", "--config", missing},
		{"history", "list", "--config", missing},
		{"bus", "tail", "--config", missing},
	} {
		var out bytes.Buffer
		ctx, cancel := context.WithTimeout(t.Context(), wait)
		code := run(ctx, args, strings.NewReader(""), &out, &out)
		cancel()
		if code == 0 || !strings.Contains(out.String(), "config: file "+missing+" does not exist") {
			t.Errorf("%v: exit %d, output:\n%s\nwant an error naming the missing file", args, code, out.String())
		}
	}
}

// TestHistoryWithoutConfigFileUsesDefaults (issue 21): in a folder
// without config.yaml `history` reads the default data_dir (./data)
// instead of refusing; `check` is TestCheckDefaultConfigPath.
func TestHistoryWithoutConfigFileUsesDefaults(t *testing.T) {
	t.Chdir(t.TempDir())
	var out bytes.Buffer
	if code := run(t.Context(), []string{"history", "list"}, strings.NewReader(""), &out, &out); strings.Contains(out.String(), "config") {
		t.Fatalf("history without config.yaml: exit %d:\n%s", code, out.String())
	}
}

// TestServeWithoutConfigFile (issue 21): the real binary started in a
// folder without config.yaml runs on the built-in defaults (embedded NATS
// on 127.0.0.1:4222, admin on 127.0.0.1:9090, bbolt in ./data, workspace
// created) and says so. The defaults' fixed ports are taken in a network
// namespace of its own (unshare), so nothing else on the machine can be in
// the way; without unshare the test needs both ports free.
func TestServeWithoutConfigFile(t *testing.T) {
	bin := buildBinary(t)
	dir := t.TempDir()
	cmd := exec.Command(bin, "serve")
	if exec.Command("unshare", "-rn", "ip", "link", "set", "lo", "up").Run() == nil {
		cmd = exec.Command("unshare", "-rn", "sh", "-c", `ip link set lo up && exec "$0" serve`, bin)
	} else if !portFree("127.0.0.1:4222") || !portFree("127.0.0.1:9090") {
		t.Skip("no unshare, and the default ports 4222 and 9090 are in use")
	}
	cmd.Dir = dir
	logs := &syncbuf.Buffer{}
	cmd.Stdout, cmd.Stderr = logs, logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	exited := false
	t.Cleanup(func() {
		if !exited {
			_ = cmd.Process.Kill()
			<-done
		}
	})
	polltest.Until(t, 2*time.Minute, 20*time.Millisecond, func() bool {
		select {
		case err := <-done:
			exited = true
			t.Fatalf("daemon exited: %v\n%s", err, logs.String())
		default:
		}
		return strings.Contains(logs.String(), "switchboard is running")
	}, func() string { return "daemon not running:\n" + logs.String() })
	for _, want := range []string{"running on the built-in defaults", "looked_for=./config.yaml"} {
		if !strings.Contains(logs.String(), want) {
			t.Errorf("log lacks %q:\n%s", want, logs.String())
		}
	}
	for _, p := range []string{"data/history.db", "data/workspace"} {
		if _, err := os.Stat(filepath.Join(dir, p)); err != nil {
			t.Errorf("built-in defaults: %v", err)
		}
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		exited = true
		if err != nil {
			t.Fatalf("daemon exit: %v\n%s", err, logs.String())
		}
	case <-time.After(time.Minute):
		t.Fatal("daemon did not stop after SIGTERM")
	}
}

func portFree(addr string) bool {
	ln, err := (&net.ListenConfig{}).Listen(context.Background(), "tcp", addr)
	if err != nil {
		return false
	}
	_ = ln.Close()
	return true
}

// TestNoConfigFileReadsTheEnvironment: without a file the daemon runs on
// the shipped config.yaml, so the environment variables the docs name
// (OPENAI_MODEL, OPENAI_API_KEY, ...) still apply.
func TestNoConfigFileReadsTheEnvironment(t *testing.T) {
	t.Chdir(t.TempDir())
	t.Setenv("OPENAI_MODEL", "qwen-from-env")
	t.Setenv("OPENAI_API_KEY", "sk-from-env")
	cfg, src, err := LoadConfig("")
	if err != nil || src.Found || cfg.LLM.Model != "qwen-from-env" || cfg.LLM.APIKey != "sk-from-env" || cfg.DataDir != "./data" {
		t.Fatalf("LoadConfig without a file = model %q, data_dir %q, %+v, %v", cfg.LLM.Model, cfg.DataDir, src, err)
	}
}

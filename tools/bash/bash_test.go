package bash

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/switchboard-chat/switchboard/bus"
	"github.com/switchboard-chat/switchboard/tools"
	"github.com/switchboard-chat/switchboard/workspace"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var (
	alice = tools.Session{Key: "console/a", Speaker: bus.Speaker{Channel: "console", ChatID: "a", UserID: "alice"}}
	bob   = tools.Session{Key: "console/b", Speaker: bus.Speaker{Channel: "console", ChatID: "b", UserID: "bob"}}
)

type env struct {
	dir   string
	shell *Shell
	reg   *tools.Registry
}

func newEnv(t *testing.T, cfg tools.BashConfig) *env {
	t.Helper()
	dir := t.TempDir()
	ws, err := workspace.Open(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ws.Close() })
	if cfg.AllowUsers == nil {
		cfg.AllowUsers = []string{"console:alice", "console:bob"}
	}
	if cfg.MaxJobs == 0 {
		cfg.MaxJobs = 2
	}
	cfg.Enabled = true
	sh, err := New(ws, cfg, Options{})
	if err != nil {
		t.Fatal(err)
	}
	reg, err := tools.NewRegistry(sh.Tool())
	if err != nil {
		t.Fatal(err)
	}
	return &env{dir: dir, shell: sh, reg: reg}
}

// serve runs the shell's lifecycle until the test ends.
func (e *env) serve(t *testing.T) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- e.shell.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run = %v", err)
		}
	})
}

func (e *env) run(t *testing.T, s tools.Session, args string) tools.Result {
	t.Helper()
	return e.reg.Run(t.Context(), "bash", tools.Call{ID: "c", Args: json.RawMessage(args), Session: s})
}

func cmdArgs(command string, extra string) string {
	b, _ := json.Marshal(command)
	return `{"command":` + string(b) + extra + `}`
}

// processGone waits until pid has exited (gone or a zombie), up to a
// deadline: another process (init) reaps it, so this is external state.
func processGone(t *testing.T, pid int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
		if err != nil {
			return
		}
		if f := strings.Fields(string(data)); len(f) > 2 && f[2] == "Z" {
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatalf("process %d is still alive", pid)
}

func readPID(t *testing.T, path string) int {
	t.Helper()
	var data []byte
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		data, _ = os.ReadFile(path)
		if len(data) > 0 && data[len(data)-1] == '\n' {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(data)))
	if err != nil {
		t.Fatalf("pid file %s: %q", path, data)
	}
	return pid
}

func TestBashDeniedForOtherUsers(t *testing.T) {
	e := newEnv(t, tools.BashConfig{AllowUsers: []string{"telegram:42"}})
	marker := filepath.Join(e.dir, "ran")
	for _, s := range []tools.Session{alice, {Speaker: bus.Speaker{Channel: "slack", UserID: "42"}}, {}} {
		r := e.run(t, s, cmdArgs("touch "+marker, ""))
		if !r.IsError || !r.Denied || !strings.Contains(r.Text, "not allowed") {
			t.Errorf("session %+v: %+v, want a denial", s, r)
		}
	}
	if _, err := os.Stat(marker); err == nil {
		t.Fatal("a denied command ran")
	}
	ok := e.run(t, tools.Session{Speaker: bus.Speaker{Channel: "telegram", UserID: "42"}}, cmdArgs("echo fine", ""))
	if ok.IsError || ok.Text != "fine\n" {
		t.Errorf("allowed user: %+v", ok)
	}
}

func TestBashRunsInWorkspace(t *testing.T) {
	e := newEnv(t, tools.BashConfig{})
	r := e.run(t, alice, cmdArgs("pwd; echo out; echo err >&2", ""))
	want := e.dir + "\nout\nerr\n"
	if r.IsError || r.Text != want {
		t.Errorf("got %+v, want %q", r, want)
	}
	r = e.run(t, alice, cmdArgs("echo partial; exit 3", ""))
	if !r.IsError || r.Text != "Error: partial\n[exit code 3]" {
		t.Errorf("exit 3: %+v", r)
	}
	r = e.run(t, alice, cmdArgs("true", ""))
	if r.IsError || r.Text != "(no output)" {
		t.Errorf("true: %+v", r)
	}
	r = e.run(t, alice, cmdArgs("kill -9 $$", ""))
	// Unconfined the shell's death by signal shows as such; bwrap reports
	// it as exit code 128+9.
	if !r.IsError || !strings.Contains(r.Text, "killed by signal killed") && !strings.Contains(r.Text, "[exit code 137]") {
		t.Errorf("killed: %+v", r)
	}
	r = e.run(t, alice, cmdArgs("cat", "")) // stdin is /dev/null: no hang
	if r.IsError || r.Text != "(no output)" {
		t.Errorf("cat: %+v", r)
	}
}

func TestBashEnvironmentScrubbed(t *testing.T) {
	t.Setenv("SWITCHBOARD_TEST_API_KEY", "sk-secret-1")
	t.Setenv("SWITCHBOARD_TEST_PLAIN", "plain-value")
	t.Setenv("SWITCHBOARD_TEST_PASSED", "passed-value")
	e := newEnv(t, tools.BashConfig{PassEnv: []string{"SWITCHBOARD_TEST_PASSED"}})
	r := e.run(t, alice, cmdArgs("env", ""))
	if r.IsError {
		t.Fatal(r.Text)
	}
	for _, leaked := range []string{"sk-secret-1", "plain-value"} {
		if strings.Contains(r.Text, leaked) {
			t.Errorf("environment leaked %q:\n%s", leaked, r.Text)
		}
	}
	for _, want := range []string{"PATH=", "SWITCHBOARD_TEST_PASSED=passed-value"} {
		if !strings.Contains(r.Text, want) {
			t.Errorf("environment lacks %q:\n%s", want, r.Text)
		}
	}
}

func TestBashTimeoutKillsProcessGroup(t *testing.T) {
	e := newEnv(t, tools.BashConfig{Sandbox: SandboxNone}) // host PIDs: no PID namespace
	pidFile := filepath.Join(e.dir, "child.pid")
	r := e.run(t, alice, cmdArgs("sleep 1000 & echo $! > child.pid; echo started; wait", `,"timeout":1`))
	if !r.IsError || !strings.Contains(r.Text, "started\n[timed out after 1s; the command and its child processes were killed]") {
		t.Fatalf("timeout result: %+v", r)
	}
	processGone(t, readPID(t, pidFile))
}

func TestBashCancelKillsProcessGroup(t *testing.T) {
	e := newEnv(t, tools.BashConfig{Sandbox: SandboxNone}) // host PIDs: no PID namespace
	pidFile := filepath.Join(e.dir, "child.pid")
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan tools.Result, 1)
	go func() {
		done <- e.reg.Run(ctx, "bash", tools.Call{Args: json.RawMessage(cmdArgs("sleep 1000 & echo $! > child.pid; wait", "")), Session: alice})
	}()
	pid := readPID(t, pidFile)
	cancel()
	r := <-done
	if !r.IsError || !strings.Contains(r.Text, "cancelled") {
		t.Errorf("cancelled result: %+v", r)
	}
	processGone(t, pid)
}

func TestBashStrayProcessKilledAfterExit(t *testing.T) {
	e := newEnv(t, tools.BashConfig{Sandbox: SandboxNone}) // host PIDs: no PID namespace
	r := e.run(t, alice, cmdArgs("sleep 1000 & echo $! > stray.pid; echo done", ""))
	if r.IsError || r.Text != "done\n" {
		t.Fatalf("result: %+v", r)
	}
	processGone(t, readPID(t, filepath.Join(e.dir, "stray.pid")))
}

func TestBashOutputTail(t *testing.T) {
	e := newEnv(t, tools.BashConfig{})
	// 200,000 bytes of numbered lines; the last line must survive.
	r := e.run(t, alice, cmdArgs(`for i in $(seq 1 20000); do printf '%09d\n' $i; done`, ""))
	if r.IsError {
		t.Fatal(r.Text)
	}
	if !strings.HasPrefix(r.Text, "[... 148800 bytes of output cut; the last 51200 bytes follow]\n") {
		t.Errorf("head: %q", r.Text[:100])
	}
	if !strings.HasSuffix(r.Text, "000020000\n") || len(r.Text) > tools.DefaultMaxOutputBytes+100 {
		t.Errorf("tail: %d bytes ending %q", len(r.Text), r.Text[len(r.Text)-20:])
	}
}

func TestBashBadArgs(t *testing.T) {
	e := newEnv(t, tools.BashConfig{MaxTimeout: 5 * time.Second, Timeout: 2 * time.Second})
	tests := []struct{ args, want string }{
		{`{}`, "command is required"},
		{`{"command":"  "}`, "command is required"},
		{`{"command":"ls","job_id":"job1"}`, "not both"},
		{`{"kill":true}`, "kill needs job_id"},
		{`{"command":"ls","wait":3}`, "wait applies to job_id"},
		{`{"job_id":"job1","wait":999}`, "wait must be between"},
		{`{"command":"ls","timeout":-1}`, "timeout must be >= 1"},
		{`{"command":"ls","timeout":6}`, "at most 5 seconds"},
		{`{"command":"ls","shell":"zsh"}`, `unknown field "shell"`},
		{`{"command":1}`, `"command" must be a string`},
		{`{"job_id":"job9"}`, `no background job "job9"`},
	}
	for _, tt := range tests {
		r := e.run(t, alice, tt.args)
		if !r.IsError || !strings.Contains(r.Text, tt.want) {
			t.Errorf("%s: %+v, want error %q", tt.args, r, tt.want)
		}
	}
}

func TestBashBackgroundJobs(t *testing.T) {
	e := newEnv(t, tools.BashConfig{MaxJobs: 2, Sandbox: SandboxNone}) // host PIDs
	e.serve(t)

	r := e.run(t, alice, cmdArgs("echo one; sleep 0.2; echo two", `,"background":true`))
	if r.IsError || !strings.Contains(r.Text, "started background job job1") {
		t.Fatalf("start: %+v", r)
	}
	if r := e.run(t, bob, `{"job_id":"job1"}`); !r.Denied {
		t.Errorf("another user polled the job: %+v", r)
	}
	r = e.run(t, alice, `{"job_id":"job1","wait":60}`)
	if r.IsError || !strings.Contains(r.Text, "job job1 finished after") || !strings.Contains(r.Text, "[exit code 0]\none\ntwo\n") {
		t.Fatalf("poll: %+v", r)
	}
	if r := e.run(t, alice, `{"job_id":"job1"}`); !r.IsError || !strings.Contains(r.Text, "no background job") {
		t.Errorf("finished job not forgotten after its output was read: %+v", r)
	}

	// Two long jobs fill the table; a third is refused; killing one frees room.
	pids := make([]int, 2)
	for i := range 2 {
		r := e.run(t, alice, cmdArgs("echo started; sleep 1000 & echo $! > job"+strconv.Itoa(i)+".pid; wait", `,"background":true`))
		if r.IsError {
			t.Fatalf("start %d: %+v", i, r)
		}
		pids[i] = readPID(t, filepath.Join(e.dir, "job"+strconv.Itoa(i)+".pid"))
	}
	r = e.run(t, alice, cmdArgs("echo three", `,"background":true`))
	if !r.IsError || !strings.Contains(r.Text, "too many background jobs (2 running: job2, job3)") {
		t.Errorf("third job: %+v", r)
	}
	// The job's output is read asynchronously: poll until it has arrived
	// (each poll returns only the output new since the previous one).
	seen := ""
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(seen, "started\n") {
		r = e.run(t, alice, `{"job_id":"job2"}`)
		if r.IsError || !strings.Contains(r.Text, "job job2 is still running") {
			t.Fatalf("running poll: %+v", r)
		}
		seen += r.Text
		if time.Now().After(deadline) {
			t.Fatalf("no output from the running job: %q", seen)
		}
	}
	r = e.run(t, alice, `{"job_id":"job2"}`)
	if !strings.Contains(r.Text, "(no new output)") {
		t.Errorf("second poll should have no new output: %+v", r)
	}
	r = e.run(t, alice, `{"job_id":"job2","kill":true}`)
	if r.IsError || !strings.Contains(r.Text, "job job2 finished") || !strings.Contains(r.Text, "cancelled") {
		t.Errorf("kill: %+v", r)
	}
	processGone(t, pids[0])
	if r := e.run(t, alice, cmdArgs("echo four", `,"background":true`)); r.IsError {
		t.Errorf("start after kill: %+v", r)
	}
	// job3 is left running: the lifecycle's end (test cleanup) kills it;
	// TestBashShutdownKillsJobs checks that directly.
}

func TestBashShutdownKillsJobs(t *testing.T) {
	e := newEnv(t, tools.BashConfig{Sandbox: SandboxNone}) // host PIDs: no PID namespace
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- e.shell.Run(ctx) }()
	r := e.run(t, alice, cmdArgs("sleep 1000 & echo $! > bg.pid; wait", `,"background":true`))
	if r.IsError {
		t.Fatalf("start: %+v", r)
	}
	pid := readPID(t, filepath.Join(e.dir, "bg.pid"))
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	processGone(t, pid)
	if r := e.run(t, alice, cmdArgs("echo x", `,"background":true`)); !r.IsError || !strings.Contains(r.Text, "not available") {
		t.Errorf("job started after shutdown: %+v", r)
	}
}

func TestBashJobsOff(t *testing.T) {
	e := newEnv(t, tools.BashConfig{MaxJobs: -1})
	e.shell.cfg.MaxJobs = 0
	r := e.run(t, alice, cmdArgs("echo x", `,"background":true`))
	if !r.Denied || !strings.Contains(r.Text, "turned off") {
		t.Errorf("background with max_jobs 0: %+v", r)
	}
}

func TestNewErrors(t *testing.T) {
	ws, err := workspace.Open(t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer ws.Close()
	if _, err := New(ws, tools.BashConfig{Sandbox: "docker"}, Options{}); err == nil {
		t.Error("unknown sandbox accepted")
	}
	t.Setenv("PATH", t.TempDir())
	if _, err := New(ws, tools.BashConfig{}, Options{}); err == nil || !strings.Contains(err.Error(), "neither bash nor sh") {
		t.Errorf("New without a shell = %v", err)
	}
}

func TestTail(t *testing.T) {
	tl := newTail(10)
	_, _ = tl.Write([]byte("hello"))
	if got := tl.Unread(); got != "hello" {
		t.Errorf("Unread = %q", got)
	}
	_, _ = tl.Write([]byte(" world, and more"))
	if got := tl.String(); got != "[... 11 bytes of output cut; the last 10 bytes follow]\n, and more" {
		t.Errorf("String = %q", got)
	}
	if got := tl.Unread(); got != "[... 6 bytes of new output cut; the last 10 bytes follow]\n, and more" {
		t.Errorf("Unread = %q", got)
	}
	if got := tl.Unread(); got != "" {
		t.Errorf("Unread again = %q", got)
	}
	_, _ = tl.Write([]byte("0123456789ABC"))
	if got := tl.String(); !strings.HasSuffix(got, "3456789ABC") {
		t.Errorf("String after a big write = %q", got)
	}
}

package bash

import (
	"bytes"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/switchboard-chat/switchboard/bus"
	"github.com/switchboard-chat/switchboard/tools"
	"github.com/switchboard-chat/switchboard/workspace"
)

// Sessions of a group chat "console/g" with two members.
var (
	aliceInGroup = tools.Session{Key: "console/g", Speaker: bus.Speaker{Channel: "console", ChatID: "g", UserID: "alice", IsGroup: true}}
	bobInGroup   = tools.Session{Key: "console/g", Speaker: bus.Speaker{Channel: "console", ChatID: "g", UserID: "bob", IsGroup: true}}
)

// needBwrap fails the test when bubblewrap is missing: the sandbox is the
// default, so its tests must run (CI installs bubblewrap, see .ci/run).
func needBwrap(t *testing.T) {
	t.Helper()
	if _, err := exec.LookPath("bwrap"); err != nil {
		t.Fatal("bwrap (bubblewrap) is not installed; the bash sandbox is the default and its tests need it: apt-get install bubblewrap")
	}
}

// TestHelperSandboxedCommand is no test of its own: TestSandboxHides-
// DaemonEnvironment runs the test binary again with it, so that the
// "daemon" (the helper process) starts with a secret in its environment as
// the real daemon does (/proc/<pid>/environ shows the environment a
// process started with, not what os.Setenv did later).
func TestHelperSandboxedCommand(t *testing.T) {
	command := os.Getenv("SWITCHBOARD_BASH_HELPER")
	if command == "" {
		t.Skip("runs only as the helper process of TestSandboxHidesDaemonEnvironment")
	}
	e := newEnv(t, tools.BashConfig{Sandbox: os.Getenv("SWITCHBOARD_BASH_HELPER_SANDBOX")})
	r := e.run(t, alice, cmdArgs(command, ""))
	fmt.Printf("RESULT<<%s>>RESULT\n", r.Text)
}

func runHelper(t *testing.T, sandbox, command string, env ...string) string {
	t.Helper()
	cmd := exec.CommandContext(t.Context(), os.Args[0], "-test.run=^TestHelperSandboxedCommand$", "-test.count=1")
	cmd.Env = append(os.Environ(), append(env, "SWITCHBOARD_BASH_HELPER="+command, "SWITCHBOARD_BASH_HELPER_SANDBOX="+sandbox)...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("helper process: %v\n%s", err, out)
	}
	_, rest, ok := bytes.Cut(out, []byte("RESULT<<"))
	res, _, ok2 := bytes.Cut(rest, []byte(">>RESULT"))
	if !ok || !ok2 {
		t.Fatalf("helper process printed no result:\n%s", out)
	}
	return string(res)
}

// TestSandboxHidesDaemonEnvironment: the attack of issue 13 (finding 9),
// reading the daemon's environment through /proc, finds nothing in the
// sandbox: the command's parent and PID 1 are the sandbox's own processes
// (a PID namespace, so the daemon is not in /proc at all), and they hold
// only the scrubbed environment. This holds for root too (no capability
// is left to ptrace anything). Unconfined, the same command prints the
// key: that is the old behaviour, and the proof that the probe works.
func TestSandboxHidesDaemonEnvironment(t *testing.T) {
	needBwrap(t)
	const secret = "sk-daemon-secret-0042"
	// Every process's environment first, the parent's and PID 1's last:
	// unconfined on a busy machine the first part is long, and a result
	// keeps only its last 50 KB.
	attack := `for f in /proc/[0-9]*/environ /proc/[0-9]*/task/*/environ; do tr '\0' '\n' <"$f"; done 2>/dev/null; ` +
		`cat /proc/$PPID/cmdline /proc/1/cmdline; echo; ls /proc | grep -E '^[0-9]+$' | tr '\n' ' '; echo; ` +
		`echo "ppid=$PPID"; tr '\0' '\n' </proc/$PPID/environ; echo; tr '\0' '\n' </proc/1/environ; echo`
	out := runHelper(t, SandboxNone, attack, "OPENAI_API_KEY="+secret)
	if !strings.Contains(out, secret) {
		t.Fatalf("unconfined, the probe did not find the key in the parent's environment; the test proves nothing:\n%s", out)
	}
	out = runHelper(t, SandboxBwrap, attack, "OPENAI_API_KEY="+secret, "SWITCHBOARD_TEST_PLAIN=plain-value")
	if strings.Contains(out, secret) || strings.Contains(out, "plain-value") {
		t.Errorf("a sandboxed command read the daemon's environment:\n%s", out)
	}
	if !strings.Contains(out, "PATH=") {
		t.Errorf("the probe read no environment at all, so it proves nothing:\n%s", out)
	}
}

// TestSandboxHidesDataDir: with the workspace inside data_dir (the
// default layout), history.db, the tools' database and credentials next to
// it are out of reach; with data_dir inside the workspace it is hidden and
// cannot be moved out from under the sandbox.
func TestSandboxHidesDataDir(t *testing.T) {
	needBwrap(t)
	t.Run("workspace inside data_dir", func(t *testing.T) {
		data := t.TempDir()
		for name, content := range map[string]string{"history.db": "HISTORY-ROWS", "tools.db": "TOOLS-ROWS", "bus-admin.creds": "BUS-CREDENTIAL"} {
			writeFile(t, filepath.Join(data, name), content)
		}
		dir := filepath.Join(data, "workspace")
		e := newEnvAt(t, dir, tools.BashConfig{}, Options{Hidden: []string{data}})
		r := e.run(t, alice, cmdArgs(`cat ../history.db ../tools.db ../bus-admin.creds; ls -la ..; ls -la /; find "$(dirname "$PWD")" /tmp /etc 2>/dev/null | grep -E 'history|creds|tools.db'; echo end`, ""))
		for _, leak := range []string{"HISTORY-ROWS", "TOOLS-ROWS", "BUS-CREDENTIAL", "history.db", "bus-admin.creds"} {
			if strings.Contains(r.Text, leak) && !strings.Contains(r.Text, "cat: ../"+leak) {
				t.Errorf("data_dir is visible (%s):\n%s", leak, r.Text)
			}
		}
		if !strings.Contains(r.Text, "No such file or directory") || !strings.HasSuffix(r.Text, "end\n") {
			t.Errorf("unexpected output:\n%s", r.Text)
		}
	})
	t.Run("data_dir inside the workspace", func(t *testing.T) {
		dir := t.TempDir()
		data := filepath.Join(dir, "data")
		writeFile(t, filepath.Join(data, "history.db"), "HISTORY-ROWS")
		e := newEnvAt(t, dir, tools.BashConfig{}, Options{Hidden: []string{data}})
		r := e.run(t, alice, cmdArgs(`cat data/*; ls -la data; mv data d2; echo x > data/new; ls d2; grep -r HISTORY . ; echo end`, ""))
		if strings.Contains(r.Text, "HISTORY-ROWS") || strings.Contains(r.Text, "history.db") {
			t.Errorf("data_dir inside the workspace is visible:\n%s", r.Text)
		}
		if b, err := os.ReadFile(filepath.Join(data, "history.db")); err != nil || string(b) != "HISTORY-ROWS" {
			t.Errorf("data_dir changed: %q, %v", b, err)
		}
		if _, err := os.Stat(filepath.Join(dir, "d2")); err == nil {
			t.Error("data_dir was renamed from inside the sandbox")
		}
	})
	t.Run("data_dir is the workspace", func(t *testing.T) {
		dir := t.TempDir()
		ws, err := workspace.Open(dir, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer ws.Close()
		if _, err := New(ws, tools.BashConfig{}, Options{Hidden: []string{dir}}); err == nil || !strings.Contains(err.Error(), "agent.workspace") {
			t.Errorf("New with the workspace = data_dir: %v", err)
		}
	})
}

// testPrivate are the folder rules the daemon wires in (memory scope
// "user"): every inbox and every user's and chat's memory is private; a
// direct chat gets its user's folder and its inbox back, a group its
// notes without the members' folders, the speaker's in-group folder and
// its inbox.
func testPrivate(s tools.Session) (hide, allow []string) {
	hide = []string{"inbox", "memory/users", "memory/chats"}
	if s.Channel == "" || s.ChatID == "" || s.UserID == "" {
		return hide, nil
	}
	allow = []string{"inbox/" + s.Channel + "/" + s.ChatID}
	if !s.IsGroup {
		return hide, append(allow, "memory/users/"+s.Channel+"/"+s.UserID)
	}
	g := "memory/chats/" + s.Channel + "/" + s.ChatID
	return append(hide, g+"/users"), append(allow, g, g+"/users/"+s.UserID)
}

// TestSandboxPrivateFolders: from bash, another user's memory and another
// chat's inbox are not there, the session's own are readable and
// writable, and the usual ways around (renaming a parent folder, a
// symlink, writing into the hidden path) do not reach them.
func TestSandboxPrivateFolders(t *testing.T) {
	needBwrap(t)
	dir := t.TempDir()
	files := map[string]string{
		"memory/users/console/alice/USER.md":      "ALICE-PRIVATE",
		"memory/users/console/bob/USER.md":        "BOB-PRIVATE",
		"inbox/console/a/photo.txt":               "ALICE-INBOX",
		"inbox/console/b/doc.txt":                 "BOB-INBOX",
		"inbox/console/g/shared.txt":              "GROUP-INBOX",
		"memory/chats/console/g/MEMORY.md":        "GROUP-NOTES",
		"memory/chats/console/g/users/alice/a.md": "ALICE-IN-GROUP",
		"memory/chats/console/g/users/bob/b.md":   "BOB-IN-GROUP",
		"memory/chats/console/other/MEMORY.md":    "OTHER-GROUP",
		"memory/2025-01-01.md":                    "SHARED-DAILY",
		"pub/readme.txt":                          "PUBLIC",
	}
	for rel, content := range files {
		writeFile(t, filepath.Join(dir, rel), content)
	}
	e := newEnvAt(t, dir, tools.BashConfig{}, Options{Private: testPrivate})
	everything := `grep -rs . . | sort; echo end`
	tests := []struct {
		who       string
		s         tools.Session
		sees, not []string
	}{
		{"alice direct", alice, []string{"ALICE-PRIVATE", "ALICE-INBOX", "PUBLIC", "SHARED-DAILY"},
			[]string{"BOB-PRIVATE", "BOB-INBOX", "GROUP-NOTES", "ALICE-IN-GROUP", "BOB-IN-GROUP", "GROUP-INBOX", "OTHER-GROUP"}},
		{"bob direct", bob, []string{"BOB-PRIVATE", "BOB-INBOX", "PUBLIC"},
			[]string{"ALICE-PRIVATE", "ALICE-INBOX", "GROUP-NOTES", "ALICE-IN-GROUP", "BOB-IN-GROUP", "GROUP-INBOX", "OTHER-GROUP"}},
		{"bob in the group", bobInGroup, []string{"GROUP-NOTES", "BOB-IN-GROUP", "GROUP-INBOX", "PUBLIC"},
			[]string{"ALICE-PRIVATE", "BOB-PRIVATE", "ALICE-INBOX", "BOB-INBOX", "ALICE-IN-GROUP", "OTHER-GROUP"}},
		{"alice in the group", aliceInGroup, []string{"GROUP-NOTES", "ALICE-IN-GROUP", "GROUP-INBOX"},
			[]string{"ALICE-PRIVATE", "BOB-PRIVATE", "BOB-IN-GROUP", "OTHER-GROUP"}},
	}
	for _, tt := range tests {
		r := e.run(t, tt.s, cmdArgs(everything, ""))
		for _, want := range tt.sees {
			if !strings.Contains(r.Text, want) {
				t.Errorf("%s does not see %s:\n%s", tt.who, want, r.Text)
			}
		}
		for _, leak := range tt.not {
			if strings.Contains(r.Text, leak) {
				t.Errorf("%s sees %s:\n%s", tt.who, leak, r.Text)
			}
		}
	}

	// Bob's own folders are writable; Alice's cannot be created or written.
	r := e.run(t, bob, cmdArgs(`echo bob-wrote >> memory/users/console/bob/USER.md && echo bob-file > inbox/console/b/new.txt && echo ok; `+
		`echo evil > memory/users/console/alice/USER.md; mkdir -p memory/users/console/alice/x; echo evil > inbox/console/a/evil.txt; true`, ""))
	if !strings.HasPrefix(r.Text, "ok\n") {
		t.Errorf("bob could not write his own folders:\n%s", r.Text)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "memory/users/console/bob/USER.md")); string(b) != "BOB-PRIVATEbob-wrote\n" {
		t.Errorf("bob's USER.md = %q", b)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "inbox/console/b/new.txt")); string(b) != "bob-file\n" {
		t.Errorf("bob's inbox file = %q", b)
	}
	// Moving a hidden folder, or a folder above one, out of the way (so
	// that a later command sees it at a path that is not hidden) fails;
	// what mv copies instead is only what bob could see anyway.
	r = e.run(t, bob, cmdArgs(`mv memory m2; mv inbox i2; mv memory/users u2; mv memory/chats c2; mv memory/users/console uc; `+
		`ln -s ../memory/users/console/alice pub/alice; ln -s ../inbox/console/a pub/inbox-a; true`, ""))
	for _, moved := range []string{"Device or resource busy"} {
		if !strings.Contains(r.Text, moved) {
			t.Errorf("rename attack: %s", r.Text)
		}
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "memory/users/console/alice/USER.md")); string(b) != "ALICE-PRIVATE" {
		t.Errorf("alice's USER.md = %q", b)
	}
	for _, gone := range []string{"memory/users/console/alice/x", "inbox/console/a/evil.txt", "m2", "i2"} {
		if _, err := os.Lstat(filepath.Join(dir, gone)); err == nil {
			t.Errorf("%s exists on the host", gone)
		}
	}
	for _, copied := range []string{"u2", "c2", "uc"} {
		_ = filepath.WalkDir(filepath.Join(dir, copied), func(p string, d os.DirEntry, err error) error {
			if err == nil && !d.IsDir() {
				if b, _ := os.ReadFile(p); !strings.HasPrefix(string(b), "BOB-") {
					t.Errorf("mv copied %s (%q) out of a hidden folder", p, b)
				}
			}
			return nil
		})
	}
	// The symlinks exist, but lead nowhere in bob's next command.
	r = e.run(t, bob, cmdArgs(`cat pub/alice/USER.md pub/inbox-a/photo.txt; ls pub/alice/ pub/inbox-a/; grep -rs . . | sort`, ""))
	if strings.Contains(r.Text, "ALICE-") {
		t.Errorf("bob reached alice's folders through a symlink:\n%s", r.Text)
	}
	// A background job is confined the same way.
	e.serve(t)
	r = e.run(t, bob, cmdArgs(`cat memory/users/console/alice/USER.md inbox/console/a/photo.txt; cat inbox/console/b/doc.txt`, `,"background":true`))
	if r.IsError {
		t.Fatal(r.Text)
	}
	r = e.run(t, bob, `{"job_id":"job1","wait":60}`)
	if strings.Contains(r.Text, "ALICE-") || !strings.Contains(r.Text, "BOB-INBOX") {
		t.Errorf("background job: %s", r.Text)
	}
}

// TestSandboxEnvironment: only the scrubbed environment reaches the
// command, HOME is the workspace, nothing of /etc but the listed files
// (no /etc/shadow), no capability, a read-only system.
func TestSandboxEnvironment(t *testing.T) {
	needBwrap(t)
	t.Setenv("SWITCHBOARD_TEST_API_KEY", "sk-secret-1")
	t.Setenv("SWITCHBOARD_TEST_PASSED", "passed-value")
	e := newEnv(t, tools.BashConfig{PassEnv: []string{"SWITCHBOARD_TEST_PASSED"}})
	r := e.run(t, alice, cmdArgs(`env; cat /etc/shadow; ls /etc; echo home=$HOME pwd=$(pwd); grep Cap[EP] /proc/self/status; `+
		`ls /home /root /opt /var /srv /run 2>&1 | head -3; echo x > /usr/x`, ""))
	for _, leak := range []string{"sk-secret-1", "root:", "shadow\n"} {
		if strings.Contains(r.Text, leak) {
			t.Errorf("leaked %q:\n%s", leak, r.Text)
		}
	}
	for _, want := range []string{"SWITCHBOARD_TEST_PASSED=passed-value", "home=" + e.dir + " pwd=" + e.dir,
		"CapPrm:\t0000000000000000", "CapEff:\t0000000000000000", "/usr/x: Read-only file system"} {
		if !strings.Contains(r.Text, want) {
			t.Errorf("output lacks %q:\n%s", want, r.Text)
		}
	}
}

// TestSandboxKillsProcessTree: a killed or timed-out sandboxed command
// leaves no process behind on the host.
func TestSandboxKillsProcessTree(t *testing.T) {
	needBwrap(t)
	e := newEnv(t, tools.BashConfig{})
	e.serve(t)
	marker := fmt.Sprintf("sbx-marker-%d", time.Now().UnixNano())
	r := e.run(t, alice, cmdArgs(`(exec -a `+marker+`-job sleep 1000) & echo started; wait`, `,"background":true`))
	if r.IsError {
		t.Fatal(r.Text)
	}
	waitProcs(t, marker+"-job", true)
	if r := e.run(t, alice, `{"job_id":"job1","kill":true}`); !strings.Contains(r.Text, "cancelled") {
		t.Errorf("kill: %+v", r)
	}
	waitProcs(t, marker+"-job", false)

	r = e.run(t, alice, cmdArgs(`(exec -a `+marker+`-fg sleep 1000) & wait`, `,"timeout":1`))
	if !strings.Contains(r.Text, "timed out") {
		t.Errorf("timeout: %+v", r)
	}
	waitProcs(t, marker+"-fg", false)
}

// waitProcs waits until a host process whose command line starts with
// name exists (or none does), up to a deadline.
func waitProcs(t *testing.T, name string, exist bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		found := false
		cmdlines, _ := filepath.Glob("/proc/[0-9]*/cmdline")
		for _, f := range cmdlines {
			if b, err := os.ReadFile(f); err == nil && bytes.HasPrefix(b, []byte(name+"\x00")) {
				found = true
				break
			}
		}
		if found == exist {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("process %s: exists = %v after 10s, want %v", name, found, exist)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestSandboxNoneWarns: sandbox none is allowed, with a warning in the log.
func TestSandboxNoneWarns(t *testing.T) {
	var logs bytes.Buffer
	ws, err := workspace.Open(t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer ws.Close()
	sh, err := New(ws, tools.BashConfig{Sandbox: SandboxNone}, Options{Log: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	if sh.sandbox != nil || !strings.Contains(logs.String(), "level=WARN") || !strings.Contains(logs.String(), "tools.bash.sandbox is none") {
		t.Errorf("no warning for sandbox none: %q", logs.String())
	}
	if w, err := CheckSandbox(tools.BashConfig{Sandbox: SandboxNone}, nil); err != nil || !strings.Contains(w, "unconfined") {
		t.Errorf("CheckSandbox(none) = %q, %v", w, err)
	}
}

// TestNoBwrapRefusesToStart: without bwrap the default sandbox cannot be
// had, and the tool does not start unconfined instead.
func TestNoBwrapRefusesToStart(t *testing.T) {
	ws, err := workspace.Open(t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer ws.Close()
	noBwrap := func(name string) (string, error) {
		if name == "bwrap" {
			return "", exec.ErrNotFound
		}
		return exec.LookPath(name)
	}
	for _, mode := range []string{"", SandboxBwrap} {
		_, err := New(ws, tools.BashConfig{Sandbox: mode}, Options{LookPath: noBwrap})
		if err == nil || !strings.Contains(err.Error(), "tools.bash.sandbox") || !strings.Contains(err.Error(), "apt-get install bubblewrap") {
			t.Errorf("New(sandbox %q) without bwrap = %v", mode, err)
		}
		if _, err := CheckSandbox(tools.BashConfig{Sandbox: mode}, noBwrap); err == nil {
			t.Errorf("CheckSandbox(%q) without bwrap passed", mode)
		}
	}
	// A bwrap that cannot create a sandbox stops the start too.
	fake := filepath.Join(t.TempDir(), "bwrap")
	writeFile(t, fake, "#!/bin/sh\necho 'bwrap: No permissions to create new namespace' >&2\nexit 1\n")
	if err := os.Chmod(fake, 0o755); err != nil {
		t.Fatal(err)
	}
	broken := func(name string) (string, error) {
		if name == "bwrap" {
			return fake, nil
		}
		return exec.LookPath(name)
	}
	if _, err := New(ws, tools.BashConfig{}, Options{LookPath: broken}); err == nil || !strings.Contains(err.Error(), "No permissions to create new namespace") {
		t.Errorf("New with a failing bwrap = %v", err)
	}
}

func TestSandboxBadPrivate(t *testing.T) {
	needBwrap(t)
	for _, bad := range []string{"../x", "/etc", "a/../b", ""} {
		dir := t.TempDir()
		ws, err := workspace.Open(dir, nil)
		if err != nil {
			t.Fatal(err)
		}
		_, err = New(ws, tools.BashConfig{}, Options{Private: func(tools.Session) ([]string, []string) { return []string{bad}, nil }})
		if err == nil || !strings.Contains(err.Error(), "bad private folder") {
			t.Errorf("private %q: %v", bad, err)
		}
		_ = ws.Close()
	}
}

func newEnvAt(t *testing.T, dir string, cfg tools.BashConfig, opts Options) *env {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	ws, err := workspace.Open(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ws.Close() })
	cfg.AllowUsers = []string{"console:*"}
	cfg.MaxJobs = 2
	sh, err := New(ws, cfg, opts)
	if err != nil {
		t.Fatal(err)
	}
	reg, err := tools.NewRegistry(sh.Tool())
	if err != nil {
		t.Fatal(err)
	}
	return &env{dir: dir, shell: sh, reg: reg}
}

func writeFile(t *testing.T, p, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestSandboxSharedInputsReadOnly: Bob, who is not an owner, cannot change
// the shared prompt inputs from bash — writing, appending, replacing,
// removing or renaming AGENT.md and the other prompt files, creating the
// missing HEARTBEAT.md, changing skills/ or the shared daily notes, or
// going through a symbolic link or a hard link — while his own memory
// folder, his inbox and the rest of the workspace stay writable. An owner
// changes them.
func TestSandboxSharedInputsReadOnly(t *testing.T) {
	needBwrap(t)
	dir := t.TempDir()
	files := map[string]string{
		"skills/deploy/SKILL.md": "SKILL",
		"memory/2025-01-01.md":   "SHARED-DAILY",
		"pub/readme.txt":         "PUBLIC",
	}
	for rel, content := range files {
		writeFile(t, filepath.Join(dir, rel), content)
	}
	e := newEnvAt(t, dir, tools.BashConfig{}, Options{Private: testPrivate})
	before := map[string]string{}
	for _, rel := range append([]string{"AGENT.md", "USER.md", "RULE.md", "MEMORY.md"}, "skills/deploy/SKILL.md", "memory/2025-01-01.md") {
		b, err := os.ReadFile(filepath.Join(dir, rel))
		if err != nil {
			t.Fatal(err)
		}
		before[rel] = string(b)
	}
	attack := `for f in AGENT.md USER.md RULE.md MEMORY.md HEARTBEAT.md skills/deploy/SKILL.md memory/2025-01-01.md; do echo EVIL > $f; echo EVIL >> $f; done; ` +
		`mv AGENT.md pub/a.md; rm -f RULE.md; mv pub/readme.txt USER.md; mkdir skills/evil; echo EVIL > memory/2025-01-02.md; ` +
		`ln -s ../AGENT.md pub/link.md; echo EVIL >> pub/link.md; ln AGENT.md pub/hard.md; mv skills sk2; mv memory m2; ` +
		`echo mine > memory/users/console/bob/MEMORY.md && echo mine > pub/bob.txt && echo mine > inbox/console/b/x.txt && echo own-ok; ` +
		`cat AGENT.md | head -1; true`
	r := e.run(t, bob, cmdArgs(attack, ""))
	if !strings.Contains(r.Text, "own-ok") || !strings.Contains(r.Text, "# Agent") || !strings.Contains(r.Text, "Read-only file system") {
		t.Errorf("bob's command:\n%s", r.Text)
	}
	for rel, want := range before {
		if b, err := os.ReadFile(filepath.Join(dir, rel)); err != nil || string(b) != want {
			t.Errorf("%s = %q, %v; want it unchanged", rel, b, err)
		}
	}
	if b, err := os.ReadFile(filepath.Join(dir, "HEARTBEAT.md")); err != nil || len(b) != 0 {
		t.Errorf("HEARTBEAT.md = %q, %v; want the empty file the sandbox made before mounting it", b, err)
	}
	for _, gone := range []string{"pub/a.md", "skills/evil", "memory/2025-01-02.md", "pub/hard.md", "sk2", "m2"} {
		if _, err := os.Lstat(filepath.Join(dir, gone)); err == nil {
			t.Errorf("%s exists on the host", gone)
		}
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "pub/readme.txt")); string(b) != "PUBLIC" {
		t.Errorf("pub/readme.txt = %q", b)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "memory/users/console/bob/MEMORY.md")); string(b) != "mine\n" {
		t.Errorf("bob's own memory = %q", b)
	}
	// A group member's in-group folder is his too.
	r = e.run(t, bobInGroup, cmdArgs(`echo mine > memory/chats/console/g/users/bob/MEMORY.md && echo group-ok; echo EVIL > MEMORY.md; true`, ""))
	if !strings.Contains(r.Text, "group-ok") {
		t.Errorf("bob in the group:\n%s", r.Text)
	}
	owner := bob
	owner.Owner = true
	r = e.run(t, owner, cmdArgs(`echo "# owner's" > AGENT.md && mkdir -p skills/new && echo ok`, ""))
	if b, _ := os.ReadFile(filepath.Join(dir, "AGENT.md")); string(b) != "# owner's\n" || !strings.Contains(r.Text, "ok") {
		t.Errorf("the owner's write: AGENT.md = %q\n%s", b, r.Text)
	}
}

// TestSandboxNoNetwork: a sandboxed command has a network of its own, so
// it cannot reach what listens on the host's loopback (the daemon's bus,
// its APIs); with tools.bash.network it can.
func TestSandboxNoNetwork(t *testing.T) {
	needBwrap(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			_, _ = c.Write([]byte("HELLO-FROM-HOST\n"))
			_ = c.Close()
		}
	}()
	_, port, _ := net.SplitHostPort(ln.Addr().String())
	probe := `exec 3<>/dev/tcp/127.0.0.1/` + port + ` && head -1 <&3 || echo unreachable`
	for _, tc := range []struct {
		network bool
		want    string
	}{{false, "unreachable"}, {true, "HELLO-FROM-HOST"}} {
		e := newEnvAt(t, t.TempDir(), tools.BashConfig{Network: tc.network}, Options{})
		if r := e.run(t, alice, cmdArgs(probe, "")); !strings.Contains(r.Text, tc.want) || (!tc.network && strings.Contains(r.Text, "HELLO")) {
			t.Errorf("network %t: %q, want %q", tc.network, r.Text, tc.want)
		}
	}
}

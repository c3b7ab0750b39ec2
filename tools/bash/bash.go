// Package bash provides the bash tool: shell commands run with the
// workspace as working directory.
//
// Safety: the tool exists only when tools.bash.enabled is set, and runs
// commands only for the users in tools.bash.allow_users (others get a
// refusal wrapping [tools.ErrDenied]). Commands get a scrubbed environment
// ([tools.ScrubEnv]: PATH, HOME, LANG... and the names in
// tools.bash.pass_env, nothing that looks like a credential), run in their
// own process group, and the whole group is killed on timeout,
// cancellation or when the command ends (so stray background processes do
// not outlive it). Output keeps its last 50 KB.
//
// With tools.bash.sandbox: bwrap, the default, commands run under
// bubblewrap, and [New] fails when bwrap is missing or cannot create a
// sandbox: their own PID namespace (the daemon's process and its
// environment are not in /proc) and no capabilities even as root; a
// read-only /usr, /bin, /lib*, and of /etc only what programs need; a
// private /tmp; the workspace at its real path as the only folder of the
// host's data, with $HOME set to it; the folders of [Options.Hidden]
// (data_dir) never visible; and the folders [Options.Private] names for
// the session covered by empty read-only folders, with the session's own
// folders bound back read-write. Folders above a covered one are mount
// points, so a command cannot rename them to move a covered folder out
// from under its cover. For a session that is not an owner's
// ([tools.Session.Owner]) the shared prompt inputs (workspace.SharedFiles,
// workspace.SharedDirs) are bound read-only. Commands have a network
// namespace of their own (nothing outside, none of the daemon's listeners
// on the host's loopback) unless tools.bash.network is set. The scrubbed environment is bwrap's own too, so
// the sandbox's PID 1 holds nothing else. sandbox: none runs commands
// unconfined and logs a warning.
//
// Background jobs (background: true) run up to tools.bash.job_timeout; the
// model polls them by id (new output since the last poll) or kills them.
// At most tools.bash.max_jobs are kept, and only the user who started a
// job may poll or kill it. When [Shell.Run] returns, every job has been
// killed and reaped.
//
// [Check] reports, for `switchboard check`, whether the configured sandbox
// can be had.
package bash

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/switchboard-chat/switchboard/tools"
	"github.com/switchboard-chat/switchboard/workspace"
)

// maxWait bounds how long one poll may wait for a job to finish.
const maxWait = 120 * time.Second

// Shell runs commands for the bash tool and owns its background jobs. It is
// safe for concurrent use.
type Shell struct {
	cfg     tools.BashConfig
	dir     string
	shell   string   // bash, or sh where bash is missing
	sandbox *sandbox // nil with tools.bash.sandbox: none
	environ func() []string
	log     *slog.Logger

	mu      sync.Mutex // guards the fields below
	jobs    map[string]*job
	order   []string // job ids, oldest first
	next    int
	stopped bool // Run has returned (or is returning)
	wg      sync.WaitGroup
}

// Options are what a Shell gets from the wiring besides its config.
type Options struct {
	// Log receives the warnings (sandbox none) and job events; nil
	// discards.
	Log *slog.Logger
	// Hidden are host folders a sandboxed command never sees, even where
	// they lie inside the workspace: data_dir.
	Hidden []string
	// Private hides other users' and chats' folders from a session's
	// commands; nil hides nothing but Hidden.
	Private Private
	// LookPath finds bwrap and the shell; nil means exec.LookPath.
	LookPath func(string) (string, error)
}

// New returns a Shell for ws. It fails when no shell is installed, or
// when the sandbox is bwrap (the default) and bwrap is missing or cannot
// create a sandbox here. With tools.bash.sandbox: none it logs a warning.
func New(ws *workspace.Workspace, cfg tools.BashConfig, opts Options) (*Shell, error) {
	log := opts.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	lookPath := opts.LookPath
	if lookPath == nil {
		lookPath = exec.LookPath
	}
	def := tools.DefaultConfig().Bash
	if cfg.Timeout <= 0 {
		cfg.Timeout = def.Timeout
	}
	if cfg.MaxTimeout < cfg.Timeout {
		cfg.MaxTimeout = max(def.MaxTimeout, cfg.Timeout)
	}
	if cfg.JobTimeout <= 0 {
		cfg.JobTimeout = def.JobTimeout
	}
	if cfg.Sandbox == "" {
		cfg.Sandbox = def.Sandbox
	}
	s := &Shell{cfg: cfg, dir: ws.Dir(), environ: os.Environ, log: log, jobs: make(map[string]*job)}
	sh, err := lookPath("bash")
	if err != nil {
		if sh, err = lookPath("sh"); err != nil {
			return nil, errors.New("bash: neither bash nor sh is on PATH")
		}
	}
	s.shell = sh
	switch cfg.Sandbox {
	case SandboxBwrap:
		bw, err := lookPath("bwrap")
		if err != nil {
			return nil, errors.New(errNoBwrap)
		}
		if s.sandbox, err = newSandbox(bw, s.dir, ws.Root(), opts.Hidden, opts.Private, cfg.Network); err != nil {
			return nil, err
		}
		if err := s.probe(); err != nil {
			return nil, err
		}
	case SandboxNone:
		log.Warn(noneWarning)
	default:
		return nil, fmt.Errorf("bash: unknown tools.bash.sandbox %q (bwrap or none)", cfg.Sandbox)
	}
	return s, nil
}

// probe runs one empty command in the sandbox, so that a bwrap that cannot
// create namespaces here stops the daemon at start with its reason rather
// than failing every command.
func (s *Shell) probe() error {
	// As an owner: nothing of the workspace is created for the probe.
	args, err := s.sandbox.args(tools.Session{Owner: true})
	if err != nil {
		return err
	}
	cmd := exec.Command(args[0], append(args[1:], s.shell, "-c", "true")...)
	cmd.Env = s.env()
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("bash: bwrap (tools.bash.sandbox) cannot create a sandbox here: %v: %s "+
			"(in a container it needs user namespaces or the daemon running as root; tools.bash.sandbox: none runs commands unconfined)",
			err, strings.TrimSpace(string(out)))
	}
	return nil
}

// Tool returns the bash tool.
func (s *Shell) Tool() tools.Tool { return &bashTool{s: s, desc: s.description()} }

// Run blocks until ctx is cancelled, then kills every background job,
// waits for them and returns nil; no job starts afterwards. Call it once,
// for as long as the tool is in use: jobs started without it running are
// still bounded by tools.bash.job_timeout, but nobody waits for them.
func (s *Shell) Run(ctx context.Context) error {
	<-ctx.Done()
	s.mu.Lock()
	s.stopped = true
	for _, j := range s.jobs {
		j.cancel()
	}
	s.mu.Unlock()
	s.wg.Wait()
	return nil
}

// command builds the exec.Cmd of script for sess under ctx.
func (s *Shell) command(ctx context.Context, sess tools.Session, script string) (*exec.Cmd, error) {
	var argv []string
	if s.sandbox != nil {
		var err error
		if argv, err = s.sandbox.args(sess); err != nil {
			return nil, err
		}
	}
	argv = append(argv, s.shell, "-c", script)
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Dir = s.dir
	cmd.Env = s.env()
	return cmd, nil
}

// env is the environment of a command: the scrubbed daemon environment
// ([tools.ScrubEnv]), with HOME the workspace and TMPDIR the private /tmp
// in the sandbox. It is bwrap's own environment too, so the sandbox's
// PID 1 (whose /proc/1/environ a command can read) holds nothing else,
// and no value appears on bwrap's command line.
func (s *Shell) env() []string {
	env := tools.ScrubEnv(s.environ(), s.cfg.PassEnv)
	if s.sandbox == nil {
		return env
	}
	env = slices.DeleteFunc(env, func(kv string) bool {
		return strings.HasPrefix(kv, "HOME=") || strings.HasPrefix(kv, "TMPDIR=")
	})
	return append(env, "HOME="+s.dir, "TMPDIR=/tmp")
}

type bashTool struct {
	s    *Shell
	desc string
}

func (*bashTool) Name() string { return "bash" }

// Description is built once, with the tool: it is asked for every turn.
func (t *bashTool) Description() string { return t.desc }

func (s *Shell) description() string {
	c := s.cfg
	d := fmt.Sprintf("Run a shell command (bash -c) with the workspace as working directory. Foreground commands time out after %s by default "+
		"(timeout: up to %d seconds); the last 50 KB of stdout and stderr are returned with the exit code. ",
		c.Timeout, int(c.MaxTimeout/time.Second))
	if c.MaxJobs > 0 {
		d += fmt.Sprintf("For long tasks set background: true and get a job id; then call with job_id to read new output (wait: seconds to wait for it to finish) "+
			"or with job_id and kill: true to stop it. At most %d jobs; a job is killed after %s. ", c.MaxJobs, c.JobTimeout)
	}
	d += "No input can be typed into commands. Only some users may run commands."
	if s.sandbox != nil {
		d += " Commands run in a sandbox: only the workspace is visible and writable (other users' private folders are not, and the shared files " +
			"AGENT.md, USER.md, RULE.md, MEMORY.md, HEARTBEAT.md, skills/ and the shared notes in memory/ are read-only except for an owner), and files outside it are not visible."
		if !c.Network {
			d += " There is no network."
		}
	}
	return d
}

// bashToolSchema is bashTool's argument schema, built once (Schema hands out the
// same bytes; callers must not modify them).
var bashToolSchema = json.RawMessage(`{"type":"object","properties":{` +
	`"command":{"type":"string","description":"The shell command to run."},` +
	`"timeout":{"type":"integer","minimum":1,"description":"Seconds before the command is killed."},` +
	`"background":{"type":"boolean","description":"Run as a background job and return its id at once."},` +
	`"job_id":{"type":"string","description":"A background job to read new output from (or to kill)."},` +
	`"kill":{"type":"boolean","description":"With job_id: kill the job."},` +
	`"wait":{"type":"integer","minimum":0,"maximum":120,"description":"With job_id: seconds to wait for the job to finish before answering."}` +
	`},"additionalProperties":false}`)

func (*bashTool) Schema() json.RawMessage { return bashToolSchema }

func (*bashTool) Permission() string { return tools.PermExec }
func (*bashTool) ParallelSafe() bool { return false }

type bashArgs struct {
	Command    string `json:"command"`
	Timeout    int    `json:"timeout"`
	Background bool   `json:"background"`
	JobID      string `json:"job_id"`
	Kill       bool   `json:"kill"`
	Wait       int    `json:"wait"`
}

func (t *bashTool) Run(ctx context.Context, call tools.Call) (tools.Result, error) {
	s := t.s
	if !tools.UserAllowed(s.cfg.AllowUsers, call.Session) {
		return tools.Result{}, fmt.Errorf("%w: bash is not allowed for user %q on channel %q (the operator can add \"%s:%s\" to tools.bash.allow_users)",
			tools.ErrDenied, call.Session.UserID, call.Session.Channel, call.Session.Channel, call.Session.UserID)
	}
	var a bashArgs
	if err := tools.DecodeArgs(call.Args, &a); err != nil {
		return tools.Result{}, err
	}
	switch {
	case a.JobID != "" && a.Command != "":
		return tools.Result{}, fmt.Errorf("%w: give either command (to run something) or job_id (to poll or kill a job), not both", tools.ErrBadArgs)
	case a.Kill && a.JobID == "":
		return tools.Result{}, fmt.Errorf("%w: kill needs job_id", tools.ErrBadArgs)
	case a.Wait != 0 && a.JobID == "":
		return tools.Result{}, fmt.Errorf("%w: wait applies to job_id polls", tools.ErrBadArgs)
	case a.JobID == "" && strings.TrimSpace(a.Command) == "":
		return tools.Result{}, fmt.Errorf("%w: command is required", tools.ErrBadArgs)
	case a.Wait < 0 || a.Wait > int(maxWait/time.Second):
		return tools.Result{}, fmt.Errorf("%w: wait must be between 0 and %d, got %d", tools.ErrBadArgs, int(maxWait/time.Second), a.Wait)
	case a.Timeout < 0:
		return tools.Result{}, fmt.Errorf("%w: timeout must be >= 1, got %d", tools.ErrBadArgs, a.Timeout)
	case strings.IndexByte(a.Command, 0) >= 0:
		return tools.Result{}, fmt.Errorf("%w: command contains a NUL byte", tools.ErrBadArgs)
	}
	if a.JobID != "" {
		return s.poll(ctx, call.Session, a.JobID, a.Kill, time.Duration(a.Wait)*time.Second)
	}
	if a.Background {
		return s.startJob(call.Session, a.Command, time.Duration(a.Timeout)*time.Second)
	}
	limit := s.cfg.Timeout
	if a.Timeout > 0 {
		if a.Timeout > int(s.cfg.MaxTimeout/time.Second) {
			return tools.Result{}, fmt.Errorf("%w: timeout must be at most %d seconds, got %d", tools.ErrBadArgs, int(s.cfg.MaxTimeout/time.Second), a.Timeout)
		}
		limit = time.Duration(a.Timeout) * time.Second
	}
	return s.foreground(ctx, call.Session, a.Command, limit)
}

// foreground runs script and waits for it.
func (s *Shell) foreground(ctx context.Context, sess tools.Session, script string, limit time.Duration) (tools.Result, error) {
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	cmd, err := s.command(ctx, sess, script)
	if err != nil {
		return tools.Result{}, err
	}
	p, err := start(ctx, cmd, tools.DefaultMaxOutputBytes)
	if err != nil {
		return tools.Result{}, err
	}
	werr := p.wait()
	st, failed := status(werr, ctx.Err(), limit)
	return tools.Result{Text: joinOutput(p.out.String(), st), IsError: failed}, nil
}

// joinOutput puts the output and the status line together.
func joinOutput(out, st string) string {
	switch {
	case out == "" && st == "":
		return "(no output)"
	case out == "":
		return "(no output)\n" + st
	case st == "":
		return out
	}
	return strings.TrimSuffix(out, "\n") + "\n" + st
}

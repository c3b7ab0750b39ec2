package bash

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"time"
)

// drainTimeout bounds the wait for the output pipe after the command and
// its process group are gone (a process that left the group may hold it).
const drainTimeout = time.Second

// tail keeps the last max bytes written to it and counts all of them. It
// is safe for concurrent use.
type tail struct {
	mu    sync.Mutex
	max   int
	buf   []byte
	total int64 // bytes ever written
	read  int64 // offset up to which Unread has returned
}

func newTail(max int) *tail { return &tail{max: max} }

func (t *tail) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.total += int64(len(p))
	if len(p) >= t.max {
		t.buf = append(t.buf[:0], p[len(p)-t.max:]...)
		return len(p), nil
	}
	if over := len(t.buf) + len(p) - t.max; over > 0 {
		t.buf = append(t.buf[:0], t.buf[over:]...)
	}
	t.buf = append(t.buf, p...)
	return len(p), nil
}

// String returns the kept output with a note when the start was cut.
func (t *tail) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.render(0, "output")
}

// Unread returns the output written since the previous Unread, with a note
// for any part of it that was no longer kept.
func (t *tail) Unread() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	from := t.read
	t.read = t.total
	return t.render(from, "new output")
}

// render formats buf from absolute offset from on; t.mu is held.
func (t *tail) render(from int64, what string) string {
	start := t.total - int64(len(t.buf)) // absolute offset of buf[0]
	var note string
	if from < start {
		note = fmt.Sprintf("[... %d bytes of %s cut; the last %d bytes follow]\n", start-from, what, len(t.buf))
		from = start
	}
	return note + string(t.buf[from-start:])
}

// process is a started command.
type process struct {
	cmd    *exec.Cmd
	out    *tail
	pipe   *os.File      // read end of the output pipe
	copied chan struct{} // closed when the output is drained
}

// start starts cmd in its own process group with stdin from /dev/null and
// stdout and stderr into one pipe read into a tail of max bytes. When ctx
// ends the whole group is killed. Call wait exactly once.
func start(ctx context.Context, cmd *exec.Cmd, max int) (*process, error) {
	pr, pw, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("bash: pipe: %w", err)
	}
	cmd.Stdin = nil
	cmd.Stdout, cmd.Stderr = pw, pw
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return killGroup(cmd) }
	if err := cmd.Start(); err != nil {
		pr.Close()
		pw.Close()
		return nil, fmt.Errorf("bash: start: %w", err)
	}
	pw.Close() // the child holds its own copy
	p := &process{cmd: cmd, out: newTail(max), pipe: pr, copied: make(chan struct{})}
	go func() {
		defer close(p.copied)
		_, _ = io.Copy(p.out, pr)
	}()
	_ = ctx // cmd was made with exec.CommandContext(ctx, ...)
	return p, nil
}

// wait waits for the command, kills what is left of its process group,
// drains the output and returns the command's error.
func (p *process) wait() error {
	err := p.cmd.Wait()
	_ = killGroup(p.cmd)
	_ = p.pipe.SetReadDeadline(time.Now().Add(drainTimeout))
	<-p.copied
	p.pipe.Close()
	return err
}

// killGroup sends SIGKILL to the command's process group.
func killGroup(cmd *exec.Cmd) error {
	if cmd.Process == nil {
		return nil
	}
	err := syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	if errors.Is(err, syscall.ESRCH) {
		return nil
	}
	return err
}

// status describes how a command ended, given its error and its context's
// error.
func status(err, ctxErr error, limit time.Duration) (text string, failed bool) {
	switch {
	case errors.Is(ctxErr, context.DeadlineExceeded):
		return fmt.Sprintf("[timed out after %s; the command and its child processes were killed]", limit), true
	case ctxErr != nil:
		return "[cancelled; the command and its child processes were killed]", true
	case err == nil:
		return "", false
	}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return fmt.Sprintf("[killed by signal %s]", ws.Signal()), true
		}
		return fmt.Sprintf("[exit code %d]", ee.ExitCode()), true
	}
	return fmt.Sprintf("[failed: %v]", err), true
}

package bash

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/switchboard-chat/switchboard/tools"
)

// job is a background command.
type job struct {
	id      string
	owner   string // "<channel>:<user_id>"
	command string
	started time.Time
	limit   time.Duration
	cancel  context.CancelFunc
	proc    *process
	done    chan struct{} // closed when the job ended and its output is drained

	// Set before done is closed.
	status string
	ended  time.Time
}

func ownerOf(s tools.Session) string { return s.Channel + ":" + s.UserID }

// startJob starts script as a background job owned by the session's user.
func (s *Shell) startJob(sess tools.Session, script string, limit time.Duration) (tools.Result, error) {
	if s.cfg.MaxJobs == 0 {
		return tools.Result{}, fmt.Errorf("%w: background jobs are turned off (tools.bash.max_jobs is 0); run the command in the foreground", tools.ErrDenied)
	}
	if limit <= 0 || limit > s.cfg.JobTimeout {
		limit = s.cfg.JobTimeout
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopped {
		return tools.Result{}, fmt.Errorf("background jobs are not available: the daemon is stopping")
	}
	if len(s.jobs) >= s.cfg.MaxJobs && !s.evictFinished() {
		return tools.Result{}, fmt.Errorf("too many background jobs (%d running: %s); wait for one to finish or kill one", len(s.jobs), strings.Join(s.order, ", "))
	}
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	cmd, err := s.command(ctx, sess, script)
	if err != nil {
		cancel()
		return tools.Result{}, err
	}
	p, err := start(ctx, cmd, tools.DefaultMaxOutputBytes)
	if err != nil {
		cancel()
		return tools.Result{}, err
	}
	s.next++
	j := &job{id: fmt.Sprintf("job%d", s.next), owner: ownerOf(sess), command: script, started: time.Now(),
		limit: limit, cancel: cancel, proc: p, done: make(chan struct{})}
	s.jobs[j.id] = j
	s.order = append(s.order, j.id)
	s.wg.Go(func() {
		defer cancel()
		werr := p.wait()
		st, _ := status(werr, ctx.Err(), limit)
		if st == "" {
			st = "[exit code 0]"
		}
		j.status, j.ended = st, time.Now()
		close(j.done)
		s.log.Debug("background job ended", "job", j.id, "status", st)
	})
	s.log.Debug("background job started", "job", j.id, "owner", j.owner)
	return tools.Result{Text: fmt.Sprintf("started background job %s (it is killed after %s); call bash with job_id %q to read its output, add kill: true to stop it",
		j.id, limit, j.id)}, nil
}

// evictFinished drops the oldest finished job to make room; s.mu is held.
func (s *Shell) evictFinished() bool {
	for i, id := range s.order {
		select {
		case <-s.jobs[id].done:
			delete(s.jobs, id)
			s.order = append(s.order[:i], s.order[i+1:]...)
			return true
		default:
		}
	}
	return false
}

// poll reports a job's new output, waiting up to wait for it to finish,
// or kills it. A finished job is forgotten once its final output has been
// returned.
func (s *Shell) poll(ctx context.Context, sess tools.Session, id string, kill bool, wait time.Duration) (tools.Result, error) {
	s.mu.Lock()
	j, ok := s.jobs[id]
	s.mu.Unlock()
	if !ok {
		return tools.Result{}, fmt.Errorf("no background job %q (finished jobs are forgotten once their output was read)", id)
	}
	if j.owner != ownerOf(sess) {
		return tools.Result{}, fmt.Errorf("%w: job %s belongs to another user", tools.ErrDenied, id)
	}
	if kill {
		j.cancel()
		wait = maxWait
	}
	if wait > 0 {
		timer := time.NewTimer(wait)
		select {
		case <-j.done:
		case <-timer.C:
		case <-ctx.Done():
		}
		timer.Stop()
	}
	var head string
	select {
	case <-j.done:
		head = fmt.Sprintf("job %s finished after %s %s", j.id, j.ended.Sub(j.started).Round(time.Millisecond), j.status)
		s.mu.Lock()
		if s.jobs[id] == j {
			delete(s.jobs, id)
			for i, oid := range s.order {
				if oid == id {
					s.order = append(s.order[:i], s.order[i+1:]...)
					break
				}
			}
		}
		s.mu.Unlock()
	default:
		head = fmt.Sprintf("job %s is still running (%s so far)", j.id, time.Since(j.started).Round(time.Second))
	}
	out := j.proc.out.Unread()
	if out == "" {
		out = "(no new output)"
	}
	return tools.Result{Text: head + "\n" + out}, nil
}

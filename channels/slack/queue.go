package slack

import (
	"context"
	"sync"
)

// serial runs jobs one at a time, in submission order, per key, and jobs
// of different keys concurrently, at most workers at once. Inbound events
// of one Slack channel are processed in order this way, while a slow file
// download in one channel does not hold up the others. It is safe for
// concurrent use; wait joins every goroutine it started.
type serial struct {
	workers chan struct{} // semaphore
	max     int           // bound on queued jobs

	mu     sync.Mutex
	queues map[string][]func(context.Context)
	queued int
	wg     sync.WaitGroup
}

func newSerial(workers, maxQueued int) *serial {
	return &serial{workers: make(chan struct{}, workers), max: maxQueued, queues: make(map[string][]func(context.Context))}
}

// submit queues job under key and reports whether it was accepted (false
// when the queue is full or ctx is done). The job runs with ctx; a job
// still queued when ctx is cancelled is dropped.
func (s *serial) submit(ctx context.Context, key string, job func(context.Context)) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if ctx.Err() != nil || s.queued >= s.max {
		return false
	}
	q, running := s.queues[key]
	s.queues[key] = append(q, job)
	s.queued++
	if !running {
		s.wg.Go(func() { s.run(ctx, key) })
	}
	return true
}

// run serves key's queue until it is empty.
func (s *serial) run(ctx context.Context, key string) {
	select {
	case s.workers <- struct{}{}:
		defer func() { <-s.workers }()
	case <-ctx.Done():
		s.drop(key)
		return
	}
	for {
		s.mu.Lock()
		q := s.queues[key]
		if len(q) == 0 || ctx.Err() != nil {
			s.queued -= len(q)
			delete(s.queues, key)
			s.mu.Unlock()
			return
		}
		job := q[0]
		q[0] = nil
		s.queues[key] = q[1:]
		s.queued--
		s.mu.Unlock()
		job(ctx)
	}
}

// drop forgets key's queue.
func (s *serial) drop(key string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.queued -= len(s.queues[key])
	delete(s.queues, key)
}

// wait blocks until every worker has returned. Call it after cancelling
// the context the jobs were submitted with.
func (s *serial) wait() { s.wg.Wait() }

package jsstore

import (
	"context"
	"sync"

	"github.com/nats-io/nats.go"
)

// maxGroupMsgs bounds the messages of one group batch (the server takes
// up to 1000 per atomic batch).
const maxGroupMsgs = 500

// grouper is the group commit: commits that arrive while a batch is in
// flight queue up and go to the server together as one atomic batch, so
// concurrent sessions share one round trip and, on one node, one staging
// file and its syncs. One batch is in flight per store at a time; the
// first waiter of the queue sends the next one.
type grouper struct {
	mu      sync.Mutex
	queue   []*pendingCommit
	running bool
}

// pendingCommit is one commit's batch waiting in the group.
type pendingCommit struct {
	msgs []*nats.Msg
	wake chan struct{} // signalled when done or when it is its turn to lead
	done bool
	seq  uint64 // stream sequence of its last message, on success
	err  error
}

// commit sends msgs as one atomic batch, alone or with the commits queued
// beside it, and returns the stream sequence of its last message. When a
// group batch fails, every commit of it is sent again alone, so each gets
// its own outcome (a conflict or a duplicate key fails only its own).
func (s *Store) commit(ctx context.Context, msgs []*nats.Msg) (uint64, error) {
	p := &pendingCommit{msgs: msgs, wake: make(chan struct{}, 1)}
	g := &s.group
	g.mu.Lock()
	g.queue = append(g.queue, p)
	if g.running {
		g.mu.Unlock()
		<-p.wake
		g.mu.Lock()
		if p.done {
			g.mu.Unlock()
			return p.seq, p.err
		}
		// Its turn to lead: it is first in the queue.
	}
	g.running = true
	n, total := 0, 0
	for n < len(g.queue) && (n == 0 || total+len(g.queue[n].msgs) <= maxGroupMsgs) {
		total += len(g.queue[n].msgs)
		n++
	}
	group := g.queue[:n:n]
	g.queue = g.queue[n:]
	g.mu.Unlock()

	s.flushGroup(ctx, group)

	g.mu.Lock()
	for _, q := range group {
		q.done = true
		if q != p {
			q.wake <- struct{}{}
		}
	}
	if len(g.queue) > 0 {
		g.queue[0].wake <- struct{}{}
	} else {
		g.running = false
	}
	g.mu.Unlock()
	return p.seq, p.err
}

// flushGroup publishes the group's commits as one batch, or each alone
// when there is one or the joint batch fails.
func (s *Store) flushGroup(ctx context.Context, group []*pendingCommit) {
	if len(group) > 1 {
		var all []*nats.Msg
		for _, q := range group {
			all = append(all, q.msgs...)
		}
		ack, err := s.publishBatch(ctx, all)
		if err == nil {
			// A batch is stored at consecutive sequences.
			seq := ack.Sequence
			for i := len(group) - 1; i >= 0; i-- {
				group[i].seq = seq
				seq -= uint64(len(group[i].msgs))
			}
			return
		}
	}
	for _, q := range group {
		ack, err := s.publishBatch(ctx, q.msgs)
		if err != nil {
			q.err = err
			continue
		}
		q.seq = ack.Sequence
	}
}

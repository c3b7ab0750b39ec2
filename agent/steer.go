package agent

import (
	"context"
	"sync"

	"github.com/switchboard-chat/switchboard/agent/loop"
)

// Results of steerBox.offer.
const (
	steerNotRunning = iota
	steerAccepted
	steerFull
)

// steerBox is a session's handle on its running turn: the turn's cancel
// function (for /stop) and its /steer inbox (loop.Steering). Safe for
// concurrent use.
type steerBox struct {
	mu     sync.Mutex
	cancel context.CancelCauseFunc // of the running turn; nil when idle
	items  []string                // pending /steer texts of the running turn
	open   bool                    // the running turn still accepts /steer
}

// begin opens the inbox for a turn that cancel stops.
func (b *steerBox) begin(cancel context.CancelCauseFunc) {
	b.mu.Lock()
	b.cancel, b.items, b.open = cancel, nil, true
	b.mu.Unlock()
}

// end closes the inbox when the turn is over and returns how many /steer
// texts arrived too late to be applied.
func (b *steerBox) end() (late int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	late = len(b.items)
	b.cancel, b.items, b.open = nil, nil, false
	return late
}

// offer queues a /steer text for the running turn.
func (b *steerBox) offer(text string) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	switch {
	case !b.open:
		return steerNotRunning
	case len(b.items) >= maxSteerItems:
		return steerFull
	}
	b.items = append(b.items, text)
	return steerAccepted
}

// Take implements loop.Steering.
func (b *steerBox) Take() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	items := b.items
	b.items = nil
	return items
}

// TakeOrClose implements loop.Steering.
func (b *steerBox) TakeOrClose() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	items := b.items
	b.items = nil
	if len(items) == 0 {
		b.open = false
	}
	return items
}

// stop cancels the running turn; false when none is running.
func (b *steerBox) stop() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.cancel == nil {
		return false
	}
	b.cancel(loop.ErrStopped)
	return true
}

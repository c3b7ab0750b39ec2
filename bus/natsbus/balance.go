package natsbus

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// Balancing the partitions. The server pins a partition to the first
// instance that pulls when a message arrives, so the instance that started
// first would hold them all. Every [balanceEvery] each instance counts the
// instances pulling on the partitions (the median of the partition
// consumers' waiting pull requests: every instance keeps one on each) and,
// when it holds more than its share (ceil(partitions/instances)), releases
// the excess, and only partitions of which it
// holds no message (none delivered to it and not yet acknowledged, retried
// or terminated): it stops taking the partition's messages (one that
// still reaches it is handed back at once with a Nak), unpins the
// consumer (UnpinConsumer), and the server pins the next waiting
// instance. A session therefore never runs on two instances at once
// because of a release; nothing is decided by Switchboard beyond "I hold
// too many".
const balanceEvery = 3 * time.Second // on average; jittered by ±50 %

// settle counts a part's messages held by this instance: delivered and not
// yet acknowledged, retried or terminated.
type settle struct {
	once sync.Once
	held *atomic.Int64
}

func (s *settle) done() {
	if s != nil {
		s.once.Do(func() { s.held.Add(-1) })
	}
}

// releasing is the state of a part being released: the pin id given up.
// Messages delivered under it are handed back.
type releasing struct{ pin string }

// accept decides, under the handler's lock, whether this instance takes
// m (of part p) now.
//
//   - While p is being released, a message under the pin given up is
//     handed back at once; a message under a new pin ends the release.
//   - When the pin has just come to this instance and messages delivered
//     elsewhere are not acknowledged, p holds (see takeover.go): m is kept
//     until they are all back, then the kept ones go on in stream order.
func (p *part) accept(ctx context.Context, m jetstream.Msg, log *slog.Logger) bool {
	id := m.Headers().Get(pinIDHeader)
	if r := p.release.Load(); r != nil {
		if id == "" || id == r.pin {
			_ = m.Nak()
			return false
		}
		p.release.Store(nil)
	}
	md, err := m.Metadata()
	if old := p.pin.Load(); id != "" && (old == nil || *old != id) {
		p.pin.Store(&id)
		if err == nil && p.hold == nil && !p.allMine(ctx, 1) {
			now := time.Now()
			p.hold = &takeover{until: now.Add(holdLimit), seqs: map[uint64]int{}, progress: now}
			log.Info("took a partition over: its new messages wait for those delivered elsewhere before", "consumer", p.name)
		}
	}
	if err == nil && p.hold != nil {
		p.keep(m, md)
		return false
	}
	p.held.Add(1)
	return true
}

// balance releases partitions this instance holds beyond its share, every
// balanceEvery until ctx ends. one is the handler's lock.
func (b *Bus) balance(ctx context.Context, parts []*part, one *sync.Mutex) {
	t := time.NewTimer(balanceEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		// Jittered, so that rounds do not keep meeting periodic traffic.
		t.Reset(balanceEvery/2 + rand.N(balanceEvery))
		if err := b.rebalance(ctx, parts, one); err != nil && ctx.Err() == nil {
			b.log.Debug("partition balance skipped", "err", err)
		}
	}
}

// rebalance is one round of balance.
func (b *Bus) rebalance(ctx context.Context, parts []*part, one *sync.Mutex) error {
	var owned []*part
	var waiting []int
	total := 0
	for _, p := range parts {
		if p.k < 0 {
			continue
		}
		total++
		info, err := p.cons.Info(ctx)
		if err != nil {
			return fmt.Errorf("consumer %s info: %w", p.name, err)
		}
		waiting = append(waiting, info.NumWaiting)
		if p.pinned(info) {
			owned = append(owned, p)
		}
	}
	if len(waiting) == 0 {
		return nil
	}
	slices.Sort(waiting)
	instances := max(1, waiting[len(waiting)/2])
	share := (total + instances - 1) / instances
	if len(owned) <= share {
		return nil
	}
	excess := len(owned) - share
	for _, p := range owned {
		if excess == 0 {
			break
		}
		if b.release(ctx, p, one) {
			excess--
			b.log.Info("released a partition to balance the instances", "consumer", p.name,
				"owned", len(owned), "share", share, "instances", instances)
		}
	}
	return nil
}

// release gives up p when this instance holds none of its messages.
func (b *Bus) release(ctx context.Context, p *part, one *sync.Mutex) bool {
	pin := p.pin.Load()
	if pin == nil {
		return false
	}
	one.Lock()
	if p.held.Load() > 0 {
		one.Unlock()
		return false
	}
	p.release.Store(&releasing{pin: *pin})
	one.Unlock()
	s, err := b.js.Stream(ctx, b.streams.In)
	if err == nil {
		err = s.UnpinConsumer(ctx, p.name, PriorityGroup)
	}
	if err != nil {
		p.release.Store(nil)
		b.log.Debug("could not unpin a partition", "consumer", p.name, "err", err)
		return false
	}
	return true
}

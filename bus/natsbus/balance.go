package natsbus

import (
	"context"
	"fmt"
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
//   - Taking a partition over keeps its order: when the pin comes to this
//     instance while messages delivered to another one are not
//     acknowledged (it died holding them; the server redelivers them after
//     [PartitionedAckWait]), the partition holds off: a first delivery is
//     handed back for [holdOffRetry] until every one of those has come
//     back as a redelivery (taken at once, ahead of the later messages),
//     or for PartitionedAckWait and holdOffRetry at most.
func (p *part) accept(ctx context.Context, m jetstream.Msg) bool {
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
		if err == nil {
			p.startHoldOff(ctx, md)
		}
	}
	if err == nil && time.Now().Before(p.holdUntil) {
		seq := md.Sequence.Stream
		if md.NumDelivered == 1 || p.handedBack[seq] {
			if p.handedBack == nil {
				p.handedBack = map[uint64]bool{}
			}
			p.handedBack[seq] = true
			_ = m.NakWithDelay(holdOffRetry)
			return false
		}
		if p.foreign--; p.foreign <= 0 {
			p.holdUntil = time.Time{}
		}
	}
	if err == nil && p.handedBack != nil {
		delete(p.handedBack, md.Sequence.Stream)
		if len(p.handedBack) == 0 {
			p.handedBack = nil
		}
	}
	p.held.Add(1)
	return true
}

// holdOffRetry is how soon a message handed back while a partition holds
// off comes again.
const holdOffRetry = time.Second

// startHoldOff counts, when the pin has just come to this instance with
// m, the partition's messages delivered to other instances and not
// acknowledged: every delivery since m's went to this instance, the ones
// before to others (one API call). With some, the partition holds off.
func (p *part) startHoldOff(ctx context.Context, md *jetstream.MsgMetadata) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	info, err := p.cons.Info(ctx)
	if err != nil || info.Delivered.Consumer < md.Sequence.Consumer {
		// Not known (a slow or stale answer on a busy server): hold off as
		// if one message were out, until the first redelivery or
		// PartitionedAckWait; waiting costs less than answering out of
		// order.
		p.foreign, p.holdUntil = 1, time.Now().Add(PartitionedAckWait+holdOffRetry)
		return
	}
	mine := int(info.Delivered.Consumer - md.Sequence.Consumer + 1)
	if p.foreign = info.NumAckPending - mine; p.foreign > 0 {
		p.holdUntil = time.Now().Add(PartitionedAckWait + holdOffRetry)
	}
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

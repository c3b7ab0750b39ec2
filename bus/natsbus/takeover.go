package natsbus

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// Taking a partition over in order. When the pin of a partition comes to
// this instance while messages the server delivered to another one are
// not acknowledged (that instance died holding them; the server redelivers
// them after [PartitionedAckWait]), answering the partition's new messages
// at once would let them overtake those. So the partition holds: every
// message it delivers meanwhile, new or redelivered, is kept here (not
// handed back: a message handed back with a delay returns when its own
// timer says, which is no order at all; and the server redelivers each
// message when its own AckWait ends, which is not stream order either).
// The hold ends, and the kept messages go to the handler in stream order,
// as soon as every message the server counts as unacknowledged on the
// partition is kept here (nothing is out elsewhere any more), or after
// [holdLimit] at most. Kept messages are marked in progress so
// the server does not redeliver them meanwhile, and count as held, so the
// balance does not release a partition in the middle of its takeover.

const (
	// holdLimit bounds a takeover's hold: the dead holder's messages are
	// redelivered within PartitionedAckWait.
	holdLimit = PartitionedAckWait + time.Second
	// holdCheck is how often a holding partition asks the server whether
	// anything is still out elsewhere.
	holdCheck = 200 * time.Millisecond
	// maxKept bounds the messages a hold keeps; one more is handed back
	// (and kept when it comes again, if there is room then).
	maxKept = 1024
	// keptProgress is how often kept messages are marked in progress
	// (well under PartitionedAckWait).
	keptProgress = 2 * time.Second
)

// takeover is a partition's hold (see above), under the handler's lock.
type takeover struct {
	until    time.Time
	kept     []jetstream.Msg
	seqs     map[uint64]int // stream sequence -> index in kept
	progress time.Time      // when kept was last marked in progress
}

// allMine reports whether every message the server counts as delivered
// and unacknowledged on p is held by this instance, plus extra delivered
// ones not yet counted. It must be called under the handler's lock, so
// that nothing is added to p.held meanwhile: held is read after the
// server's count, so it can only have dropped (an acknowledgement), and
// the answer can only err towards holding longer.
func (p *part) allMine(ctx context.Context, extra int) bool {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	info, err := p.cons.Info(ctx)
	if err != nil {
		return false
	}
	return info.NumAckPending <= int(p.held.Load())+extra
}

// keep keeps m while p holds; a message kept already and redelivered
// replaces its earlier delivery. Redeliveries are kept too: the server
// redelivers a message when its own AckWait ends, which is not stream
// order (a message the dead holder marked in progress later comes back
// later), so nothing of the partition goes on before the hold ends.
func (p *part) keep(m jetstream.Msg, md *jetstream.MsgMetadata) {
	h := p.hold
	seq := md.Sequence.Stream
	if i, ok := h.seqs[seq]; ok {
		h.kept[i] = m
		return
	}
	if len(h.kept) >= maxKept {
		_ = m.NakWithDelay(time.Second)
		return
	}
	p.held.Add(1)
	h.seqs[seq] = len(h.kept)
	h.kept = append(h.kept, m)
}

// endHold returns p's kept messages in stream order and ends the hold.
func (p *part) endHold() []jetstream.Msg {
	kept := p.hold.kept
	p.hold = nil
	slices.SortFunc(kept, func(a, b jetstream.Msg) int {
		return compareSeq(streamSeq(a), streamSeq(b))
	})
	return kept
}

func compareSeq(a, b uint64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

func streamSeq(m jetstream.Msg) uint64 {
	md, err := m.Metadata()
	if err != nil {
		return 0
	}
	return md.Sequence.Stream
}

// dropHold hands p's kept messages back (the consume loop stopped), so
// that whoever takes the partition next has them at once.
func (p *part) dropHold() {
	if p.hold == nil {
		return
	}
	for _, m := range p.hold.kept {
		_ = m.Nak()
		p.held.Add(-1)
	}
	p.hold = nil
}

// holds ends the partitions' holds every holdCheck until ctx ends: a
// hold whose partition has nothing out elsewhere any more, or that
// reached holdLimit, hands its kept messages to dispatch (under one, in
// stream order); the others' kept messages are marked in progress every
// keptProgress.
func (b *Bus) holds(ctx context.Context, parts []*part, one *sync.Mutex, dispatch func(*part, jetstream.Msg)) {
	t := time.NewTicker(holdCheck)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		for _, p := range parts {
			one.Lock()
			if h := p.hold; h != nil {
				now := time.Now()
				switch {
				case !now.Before(h.until) || p.allMine(ctx, 0):
					kept := p.endHold()
					b.log.Debug("partition takeover done", "consumer", p.name, "kept", len(kept), "timed_out", !now.Before(h.until))
					for _, m := range kept {
						dispatch(p, m)
					}
				case now.Sub(h.progress) >= keptProgress:
					h.progress = now
					for _, m := range h.kept {
						_ = m.InProgress()
					}
				}
			}
			one.Unlock()
		}
	}
}

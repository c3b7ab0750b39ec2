package bridge

import (
	"context"
	"sync"
	"time"

	"github.com/switchboard-chat/switchboard/bus"
)

// Outbound de-duplication bounds (see [Options.SeenTTL], [Options.SeenMax]).
const (
	// DefaultSeenTTL is how long a shown outbound id is remembered by
	// default: twice the daemon's default bus.out_retention (24 h), the
	// span over which the outbound stream keeps and de-duplicates a
	// message.
	DefaultSeenTTL = 48 * time.Hour
	// DefaultSeenMax bounds the outbound ids remembered in memory by
	// default. Only envelopes that show something lasting are remembered
	// (finals, replies, notices, errors; see [Remembered]), at most 256
	// bytes of id each: 100,000 ids are a few tens of MB at worst and about
	// 10 MB with the daemon's 20-character ids.
	DefaultSeenMax = 100_000
)

// SeenStore persists the ids of the outbound envelopes a bridge has shown,
// so that an envelope the daemon publishes again with the same id (after a
// crash between its publish and its acknowledgement; docs/bus-protocol.md
// §5) is dropped after a restart of the bridge too. Set it in
// [Options.SeenStore]; the kit keeps its own bounded in-memory set in
// front of it.
//
// The kit calls Seen before it hands a remembered envelope ([Remembered])
// to the handler, and Record after the handler succeeded and before the
// message is acknowledged. An error from Seen shows the envelope (at least
// once beats never); an error from Record is logged and the id stays
// remembered in memory. Implementations must be safe for concurrent use and
// forget ids only after they are older than the retention they promise
// (at least the daemon's bus.out_retention). The kit's bbolt
// implementation is [github.com/switchboard-chat/switchboard/bus/bridge/boltseen].
type SeenStore interface {
	// Seen reports whether id was recorded and is still remembered.
	Seen(ctx context.Context, id string) (bool, error)
	// Record remembers that id was shown at time at.
	Record(ctx context.Context, id string, at time.Time) error
}

// Remembered reports whether the kit remembers out's id once it is shown:
// a final envelope, or a reply, notice or error (what a platform shows as
// a message of its own). Typing indicators and deltas are not: they are
// never published again with the same id, and the protocol's seq rule
// covers their repeats.
func Remembered(out *bus.Outbound) bool {
	if out.Final {
		return true
	}
	switch out.Kind {
	case bus.KindReply, bus.KindNotice, bus.KindError:
		return true
	}
	return false
}

// SeenSet is a bounded in-memory set of outbound ids, each remembered for a
// time: the first in is forgotten first, when the set is full or its time
// is up. `switchboard chat` and the kit use it; it is safe for concurrent
// use.
type SeenSet struct {
	ttl time.Duration
	max int
	now func() time.Time

	mu    sync.Mutex
	at    map[string]time.Time
	order []seenEntry // insertion order, a queue
	head  int         // first live entry of order
}

type seenEntry struct {
	id string
	at time.Time
}

// NewSeenSet returns a set of at most max ids (max ≤ 0: [DefaultSeenMax]),
// each remembered for ttl (ttl ≤ 0: [DefaultSeenTTL]).
func NewSeenSet(max int, ttl time.Duration) *SeenSet {
	if max <= 0 {
		max = DefaultSeenMax
	}
	if ttl <= 0 {
		ttl = DefaultSeenTTL
	}
	return &SeenSet{ttl: ttl, max: max, now: time.Now, at: make(map[string]time.Time)}
}

// Has reports whether id is remembered.
func (s *SeenSet) Has(id string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.expire(s.now())
	_, ok := s.at[id]
	return ok
}

// Add remembers id (a second Add of the same id keeps the first time) and
// reports whether it was new.
func (s *SeenSet) Add(id string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	s.expire(now)
	if _, ok := s.at[id]; ok {
		return false
	}
	s.at[id] = now
	s.order = append(s.order, seenEntry{id: id, at: now})
	for len(s.at) > s.max {
		s.drop()
	}
	return true
}

// Len returns the number of ids remembered.
func (s *SeenSet) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.at)
}

// expire forgets the ids older than the ttl. Called with s.mu held.
func (s *SeenSet) expire(now time.Time) {
	for s.head < len(s.order) && now.Sub(s.order[s.head].at) > s.ttl {
		s.drop()
	}
}

// drop forgets the oldest id and compacts the queue now and then. Called
// with s.mu held.
func (s *SeenSet) drop() {
	e := s.order[s.head]
	s.order[s.head] = seenEntry{}
	s.head++
	if t, ok := s.at[e.id]; ok && t.Equal(e.at) {
		delete(s.at, e.id)
	}
	if s.head > len(s.order)/2 && s.head > 1024 {
		s.order = append([]seenEntry(nil), s.order[s.head:]...)
		s.head = 0
	}
	if s.head == len(s.order) {
		s.order, s.head = s.order[:0], 0
	}
}

// dedup is a Client's memory of the outbound ids it has shown, and of the
// turns (in_reply_to) whose final it has handed over.
type dedup struct {
	mem   *SeenSet
	ended *SeenSet  // in_reply_to of the finals handed over (this run only)
	store SeenStore // nil: memory only
	onDup func(bus.Outbound)
	now   func() time.Time
}

func newDedup(o Options) *dedup {
	return &dedup{mem: NewSeenSet(o.SeenMax, o.SeenTTL), ended: NewSeenSet(o.SeenMax, o.SeenTTL), store: o.SeenStore,
		onDup: o.OnDuplicate, now: time.Now}
}

// afterFinal reports whether out is a typing or delta message of a turn
// whose final was handed over already: nothing follows a final
// (docs/bus-protocol.md §4.2). A durable consumer delivers such a message
// again when the server lost the acknowledgement it had for it (a crash of
// the daemon's embedded server), after the final.
func (d *dedup) afterFinal(out *bus.Outbound) bool {
	return !out.Final && out.InReplyTo != "" && (out.Kind == bus.KindTyping || out.Kind == bus.KindDelta) && d.ended.Has(out.InReplyTo)
}

// end remembers that out, when it is a final, ended its turn.
func (d *dedup) end(out *bus.Outbound) {
	if out.Final && out.InReplyTo != "" {
		d.ended.Add(out.InReplyTo)
	}
}

// shown reports whether out was shown before (and counts it then).
func (d *dedup) shown(ctx context.Context, c *Client, out *bus.Outbound) bool {
	if !Remembered(out) {
		return false
	}
	seen := d.mem.Has(out.ID)
	if !seen && d.store != nil {
		ok, err := d.store.Seen(ctx, out.ID)
		if err != nil {
			c.log.Warn("outbound id store lookup failed; showing the message", "id", out.ID, "err", err)
		}
		if ok {
			d.mem.Add(out.ID)
		}
		seen = ok
	}
	if seen {
		d.end(out)
		c.log.Info("outbound message already shown; dropping the copy", "chat_id", out.ChatID, "id", out.ID,
			"kind", out.Kind, "in_reply_to", out.InReplyTo)
		if d.onDup != nil {
			d.onDup(*out)
		}
	}
	return seen
}

// record remembers that out was shown.
func (d *dedup) record(ctx context.Context, c *Client, out *bus.Outbound) {
	d.end(out)
	if !Remembered(out) {
		return
	}
	d.mem.Add(out.ID)
	if d.store == nil {
		return
	}
	if err := d.store.Record(context.WithoutCancel(ctx), out.ID, d.now()); err != nil {
		c.log.Warn("could not persist a shown outbound id; it is remembered until the bridge restarts", "id", out.ID, "err", err)
	}
}

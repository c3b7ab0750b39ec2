package web

import (
	"encoding/json"
	"sync"

	"github.com/switchboard-chat/switchboard/bus"
)

// frame is one server-sent event for a browser.
type frame struct {
	Event string // out (an outbound envelope), ev (an agent event), msg (a user's message)
	Data  any
}

// subBuffer is how many frames a browser may lag behind; one that lags
// more is disconnected (its EventSource reconnects and reloads the
// history, so nothing stored is lost).
const subBuffer = 256

// subscriber is one browser's event stream.
type subscriber struct {
	ch   chan frame
	done chan struct{} // closed when the hub drops it
	once sync.Once
}

func (s *subscriber) drop() { s.once.Do(func() { close(s.done) }) }

// hub fans frames out to the browsers of each chat. Safe for concurrent
// use; send never blocks.
type hub struct {
	mu     sync.Mutex
	chats  map[string]map[*subscriber]struct{}
	closed bool
}

func newHub() *hub { return &hub{chats: map[string]map[*subscriber]struct{}{}} }

// join adds a browser for chat; leave must be called when it goes.
func (h *hub) join(chat string) *subscriber {
	s := &subscriber{ch: make(chan frame, subBuffer), done: make(chan struct{})}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		s.drop()
		return s
	}
	if h.chats[chat] == nil {
		h.chats[chat] = map[*subscriber]struct{}{}
	}
	h.chats[chat][s] = struct{}{}
	return s
}

func (h *hub) leave(chat string, s *subscriber) {
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.chats[chat], s)
	if len(h.chats[chat]) == 0 {
		delete(h.chats, chat)
	}
	s.drop()
}

func (h *hub) send(chat string, f frame) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for s := range h.chats[chat] {
		select {
		case s.ch <- f:
		default:
			s.drop()
		}
	}
}

// closeAll ends every stream (shutdown).
func (h *hub) closeAll() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.closed = true
	for _, subs := range h.chats {
		for s := range subs {
			s.drop()
		}
	}
}

// traceSize is how many agent events the dashboard's trace keeps.
const traceSize = 1000

// traced is one agent event in the trace ring, numbered.
type traced struct {
	N int64 `json:"n"`
	bus.Event
}

// ring keeps the last events, bounded.
type ring struct {
	mu   sync.Mutex
	buf  []traced
	size int
	next int64
}

func newRing(size int) *ring { return &ring{size: size} }

func (r *ring) add(ev bus.Event) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.next++
	if len(r.buf) == r.size {
		copy(r.buf, r.buf[1:])
		r.buf = r.buf[:len(r.buf)-1]
	}
	r.buf = append(r.buf, traced{N: r.next, Event: ev})
}

// after returns the events numbered above n, oldest first.
func (r *ring) after(n int64) []traced {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := []traced{}
	for _, t := range r.buf {
		if t.N > n {
			out = append(out, t)
		}
	}
	return out
}

func decodeEvent(data []byte) (bus.Event, error) {
	var ev bus.Event
	err := json.Unmarshal(data, &ev)
	return ev, err
}

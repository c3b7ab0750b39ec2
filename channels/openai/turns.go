package openai

import (
	"encoding/json"
	"sync"

	"github.com/switchboard-chat/switchboard/bus"
)

// metaAnsweredBy is the outbound meta key naming the inbound message whose
// final carries the answer, when the agent answered several messages of a
// session with one turn (docs/bus-protocol.md §4.2).
const metaAnsweredBy = "answered_by"

// usage is the token usage of a turn: the sum of its model calls' usage
// events.
type usage struct {
	PromptTokens     int `json:"prompt_tokens"`
	CompletionTokens int `json:"completion_tokens"`
	TotalTokens      int `json:"total_tokens"`
}

// turn is what the requests waiting for one inbound message see of its
// turn: the streamed text so far, progress notes, and the final. Fields
// after mu are guarded by it; changed is closed (and replaced) at every
// change.
type turn struct {
	id string

	mu       sync.Mutex
	text     string   // the whole text so far (the latest delta)
	seq      int      // seq of the latest delta
	progress []string // progress notes, in order (SSE comments)
	use      usage
	final    *answer
	waiters  int
	changed  chan struct{}
}

// snapshot is a consistent copy of a turn's state.
type snapshot struct {
	text     string
	progress []string
	use      usage
	final    *answer
	changed  <-chan struct{}
}

func (t *turn) snapshot(fromProgress int) snapshot {
	t.mu.Lock()
	defer t.mu.Unlock()
	s := snapshot{text: t.text, use: t.use, final: t.final, changed: t.changed}
	if fromProgress < len(t.progress) {
		s.progress = append([]string(nil), t.progress[fromProgress:]...)
	}
	return s
}

// update applies f under the lock and wakes the waiters.
func (t *turn) update(f func()) {
	t.mu.Lock()
	defer t.mu.Unlock()
	f()
	close(t.changed)
	t.changed = make(chan struct{})
}

// turns are the turns some request waits for, by inbound id. Safe for
// concurrent use.
type turns struct {
	mu sync.Mutex
	m  map[string]*turn
}

func newTurns() *turns { return &turns{m: map[string]*turn{}} }

// join registers one more waiter for inbound id.
func (r *turns) join(id string) *turn {
	t, _ := r.joinNew(id)
	return t
}

// joinNew is join, also reporting whether the turn had no waiter before.
func (r *turns) joinNew(id string) (*turn, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	t := r.m[id]
	fresh := t == nil
	if fresh {
		t = &turn{id: id, changed: make(chan struct{})}
		r.m[id] = t
	}
	t.mu.Lock()
	t.waiters++
	t.mu.Unlock()
	return t, fresh
}

// leave removes a waiter and reports how many remain; the last one
// forgets the turn.
func (r *turns) leave(t *turn) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	t.mu.Lock()
	t.waiters--
	n := t.waiters
	t.mu.Unlock()
	if n == 0 && r.m[t.id] == t {
		delete(r.m, t.id)
	}
	return n
}

// get returns the turn of inbound id when a request waits for it.
func (r *turns) get(id string) *turn {
	if id == "" {
		return nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.m[id]
}

// outbound applies one outbound envelope that is not a final (finals go
// through [turns.finish] once stored).
func (r *turns) outbound(out bus.Outbound) {
	t := r.get(out.InReplyTo)
	if t == nil {
		return
	}
	switch out.Kind {
	case bus.KindDelta:
		t.update(func() {
			if t.final == nil && out.Seq > t.seq {
				t.text, t.seq = out.Text, out.Seq
			}
		})
	case bus.KindTyping:
		t.update(func() { t.progress = append(t.progress, "typing") })
	}
}

// finish hands the stored final of inbound id to its waiters.
func (r *turns) finish(id string, a answer) {
	if t := r.get(id); t != nil {
		t.update(func() { t.final = &a })
	}
}

// event applies one agent event: a tool call becomes a progress note, a
// model call's usage is added to the turn's.
func (r *turns) event(ev bus.Event) {
	t := r.get(ev.InReplyTo)
	if t == nil {
		return
	}
	switch ev.Type {
	case bus.EventToolCall:
		var d struct {
			Name string `json:"name"`
		}
		if json.Unmarshal(ev.Data, &d) == nil && d.Name != "" {
			t.update(func() { t.progress = append(t.progress, "tool "+d.Name) })
		}
	case bus.EventUsage:
		var u usage
		if json.Unmarshal(ev.Data, &u) == nil {
			t.update(func() {
				t.use.PromptTokens += u.PromptTokens
				t.use.CompletionTokens += u.CompletionTokens
				t.use.TotalTokens += u.TotalTokens
			})
		}
	}
}

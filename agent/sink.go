package agent

import (
	"sync"
	"time"

	"github.com/switchboard-chat/switchboard/bus"
)

// turnSink publishes a turn's typing signal, throttled deltas and events.
type turnSink struct {
	env        *sessionEnv
	in         *bus.Inbound
	out        string // outbound subject
	evt        string // event subject
	session    string // in's session key
	start      time.Time
	mu         sync.Mutex
	seq        int
	lastSent   time.Time
	lastText   string
	firstDelta time.Time
}

// firstDeltaAfter is the time from the turn's start to its first streamed
// delta, or zero when none was sent.
func (k *turnSink) firstDeltaAfter() time.Duration {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.firstDelta.IsZero() {
		return 0
	}
	return k.firstDelta.Sub(k.start)
}

func newTurnSink(env *sessionEnv, in *bus.Inbound, start time.Time) *turnSink {
	return &turnSink{env: env, in: in, start: start,
		out: env.opt.Subjects.Out(in.Channel, in.ChatID), evt: env.opt.Subjects.Event(in.Channel, in.ChatID),
		session: in.SessionKey()}
}

func (k *turnSink) nextSeq() int {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.seq++
	return k.seq
}

// Typing publishes a typing signal.
func (k *turnSink) Typing() {
	k.publish(newOutbound(k.in, bus.KindTyping, "", k.nextSeq(), false))
}

// Delta publishes the text so far at most once per DeltaInterval, and not
// before DeltaInterval has passed since the turn started.
func (k *turnSink) Delta(text string) {
	now := k.env.opt.Now()
	iv := k.env.cfg.DeltaInterval
	k.mu.Lock()
	if now.Sub(k.start) < iv || now.Sub(k.lastSent) < iv || text == k.lastText {
		k.mu.Unlock()
		return
	}
	k.lastSent, k.lastText = now, text
	if k.firstDelta.IsZero() {
		k.firstDelta = now
	}
	k.seq++
	seq := k.seq
	k.mu.Unlock()
	k.publish(newOutbound(k.in, bus.KindDelta, text, seq, false))
	k.Event(bus.EventLLMDelta, deltaData{Text: text})
}

// envelopes holds the buffers typing signals, deltas and events are
// encoded into; the publisher copies what it sends before it returns.
var envelopes = sync.Pool{New: func() any { b := make([]byte, 0, 1024); return &b }}

// maxPooledEnvelope bounds the buffers kept in envelopes: a long delta's
// buffer is left to the garbage collector.
const maxPooledEnvelope = 64 << 10

func (k *turnSink) publish(o bus.Outbound) {
	buf := envelopes.Get().(*[]byte)
	data := bus.AppendOutbound((*buf)[:0], &o)
	err := k.env.deps.Publisher.PublishCore(k.out, data)
	putEnvelope(buf, data)
	if err != nil {
		k.env.log.Debug("outbound publish failed", "subject", k.out, "kind", o.Kind, "err", err)
	}
}

// Event publishes an agent event on chat.event.<channel>.<chat>; data is
// encoded into the envelope once.
func (k *turnSink) Event(typ string, data any) {
	ev := bus.Event{V: bus.Version, Type: typ, Session: k.session, Channel: k.in.Channel, ChatID: k.in.ChatID,
		ThreadID: k.in.ThreadID, InReplyTo: k.in.ID, Agent: k.env.agent, Time: k.env.opt.Now().UTC()}
	buf := envelopes.Get().(*[]byte)
	b, err := bus.AppendEvent((*buf)[:0], &ev, data)
	if err != nil {
		putEnvelope(buf, b)
		return
	}
	err = k.env.deps.Publisher.PublishCore(k.evt, b)
	putEnvelope(buf, b)
	if err != nil {
		k.env.log.Debug("event publish failed", "subject", k.evt, "err", err)
	}
}

// putEnvelope returns buf, grown to b, to envelopes unless it got too big.
func putEnvelope(buf *[]byte, b []byte) {
	if cap(b) > maxPooledEnvelope {
		return
	}
	if b != nil {
		*buf = b[:0]
	}
	envelopes.Put(buf)
}

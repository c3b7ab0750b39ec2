package agent

import (
	"encoding/json"
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
		out: env.opt.Subjects.Out(in.Channel, in.ChatID), evt: env.opt.Subjects.Event(in.Channel, in.ChatID)}
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
	k.Event(bus.EventLLMDelta, map[string]any{"text": text})
}

func (k *turnSink) publish(o bus.Outbound) {
	data, err := json.Marshal(o)
	if err == nil {
		err = k.env.deps.Publisher.PublishCore(k.out, data)
	}
	if err != nil {
		k.env.log.Debug("outbound publish failed", "subject", k.out, "kind", o.Kind, "err", err)
	}
}

// Event publishes an agent event on chat.event.<channel>.<chat>.
func (k *turnSink) Event(typ string, data any) {
	raw, err := json.Marshal(data)
	if err != nil {
		return
	}
	ev := bus.Event{V: bus.Version, Type: typ, Session: k.in.SessionKey(), Channel: k.in.Channel, ChatID: k.in.ChatID,
		ThreadID: k.in.ThreadID, InReplyTo: k.in.ID, Agent: k.env.agent, Time: k.env.opt.Now().UTC(), Data: raw}
	b, err := json.Marshal(ev)
	if err == nil {
		err = k.env.deps.Publisher.PublishCore(k.evt, b)
	}
	if err != nil {
		k.env.log.Debug("event publish failed", "subject", k.evt, "err", err)
	}
}

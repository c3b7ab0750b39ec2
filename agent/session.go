package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"mime"
	"runtime/debug"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/switchboard-chat/switchboard/agent/loop"
	"github.com/switchboard-chat/switchboard/bus"
	"github.com/switchboard-chat/switchboard/memory"
	"github.com/switchboard-chat/switchboard/tools"
)

// item is one queued inbound message.
type item struct {
	in *bus.Inbound
	d  bus.Delivery
}

// session is one active chat session: a goroutine that processes its queue
// in order. The queue, the deferred set and the running turn's cancel
// function are guarded by mu; the history cache is owned by the session
// goroutine.
type session struct {
	m    *Manager
	key  string
	wake chan struct{}

	mu sync.Mutex
	// queue holds at most maxHeldPerSession messages, in stream order.
	queue []item
	// deferred are the stream sequences of messages handed back to the bus
	// (NakWithDelay) because the queue was full, with when; while one is
	// outstanding, later messages are handed back too, so the chat's order
	// holds.
	deferred  map[uint64]time.Time
	cancel    context.CancelCauseFunc // of the running turn; nil when idle
	steer     []string                // pending /steer texts of the running turn
	steerOpen bool                    // the running turn still accepts /steer

	// summaryShared is the running summary of turns dropped from the
	// context; guarded by mu because the background summariser updates it.
	summaryShared string

	loaded  bool
	history []memory.Message // context cache, oldest first
	speaker Speaker          // who the last turn was for (session goroutine only)
	// unnoted are the turns answered since the conversation was last
	// written to the daily notes (session goroutine only).
	unnoted []memory.Message
}

func (s *session) summary() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.summaryShared
}

func (s *session) setSummary(v string) {
	s.mu.Lock()
	s.summaryShared = v
	s.mu.Unlock()
}

// Results of offerSteer.
const (
	steerNotRunning = iota
	steerAccepted
	steerFull
)

// offerSteer queues a /steer text for the running turn.
func (s *session) offerSteer(text string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case !s.steerOpen:
		return steerNotRunning
	case len(s.steer) >= maxSteerItems:
		return steerFull
	}
	s.steer = append(s.steer, text)
	return steerAccepted
}

// Take implements Steering.
func (s *session) Take() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	items := s.steer
	s.steer = nil
	return items
}

// TakeOrClose implements Steering.
func (s *session) TakeOrClose() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	items := s.steer
	s.steer = nil
	if len(items) == 0 {
		s.steerOpen = false
	}
	return items
}

func newSession(m *Manager, key string) *session {
	return &session{m: m, key: key, wake: make(chan struct{}, 1), deferred: map[uint64]time.Time{}}
}

// nudge wakes the session goroutine (e.g. to notice a shutdown).
func (s *session) nudge() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// offered is what offer did with a message.
type offered struct {
	held  bool          // in the queue; else hand it back after delay
	delay time.Duration // for a message not held
	back  bool          // the message is one this session handed back earlier
}

// offer puts it into the queue, in stream order, when the queue has room
// and no earlier message of the session is still with the bus; otherwise
// the caller hands it back to the bus (bus.Delivery.NakWithDelay) with the
// returned delay, which grows with the messages ahead of it. base is
// Options.DeferDelay. The caller holds m.mu.
func (s *session) offer(it item, now time.Time, base time.Duration) offered {
	s.mu.Lock()
	defer s.mu.Unlock()
	seq := it.d.Info().Sequence
	_, back := s.deferred[seq]
	ahead := 0
	for q, at := range s.deferred {
		switch {
		case now.Sub(at) > deferExpiry(base):
			// Never came back (another instance took it, or it was
			// removed): stop waiting for it.
			delete(s.deferred, q)
		case q < seq:
			ahead++
		}
	}
	if len(s.queue) < maxHeldPerSession && (seq == 0 || ahead == 0) {
		delete(s.deferred, seq)
		i := len(s.queue)
		for seq != 0 && i > 0 && s.queue[i-1].d.Info().Sequence > seq {
			i--
		}
		s.queue = slices.Insert(s.queue, i, it)
		select {
		case s.wake <- struct{}{}:
		default:
		}
		return offered{held: true, back: back}
	}
	if seq != 0 {
		s.deferred[seq] = now
	}
	steps := 1 + (ahead+len(s.queue))/maxHeldPerSession
	return offered{delay: base * time.Duration(min(steps, maxDeferSteps)), back: back}
}

// deferExpiry is how long a handed-back message may stay away before the
// session stops holding later messages back for it.
func deferExpiry(base time.Duration) time.Duration { return 3 * maxDeferSteps * base }

// collectable reports whether in may be answered together with other
// messages: commands and scheduled tasks always get a turn of their own.
func collectable(in *bus.Inbound) bool {
	return parseCommand(in.Text).name == cmdNone && in.Meta["scheduled_task"] == ""
}

// next removes and returns the messages of the next turn: the oldest one
// and, in collect mode, the collectable ones after it from the same
// speaker, as long as their texts together stay within limit bytes.
func (s *session) next(collect bool, limit int) []item {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.queue) == 0 {
		return nil
	}
	n, size := 1, len(s.queue[0].in.Text)
	if first := s.queue[0].in; collect && collectable(first) {
		for n < len(s.queue) {
			in := s.queue[n].in
			if !collectable(in) || in.UserID != first.UserID || size+len(in.Text) > limit {
				break
			}
			size += len(in.Text)
			n++
		}
	}
	batch := slices.Clone(s.queue[:n])
	clear(s.queue[:n])
	s.queue = s.queue[n:]
	return batch
}

func (s *session) queued() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.queue)
}

// stop cancels the running turn; false when none is running.
func (s *session) stop() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cancel == nil {
		return false
	}
	s.cancel(loop.ErrStopped)
	return true
}

// run processes the queue until ctx ends or the session stays idle for
// Config.SessionIdle, when it removes itself from the manager.
func (s *session) run(ctx context.Context) {
	idle := time.NewTimer(s.m.cfg.SessionIdle)
	defer idle.Stop()
	collect := s.m.cfg.QueueMode == QueueCollect
	for {
		if ctx.Err() != nil || s.m.draining.Load() {
			return
		}
		if batch := s.next(collect, s.m.opt.MaxTextBytes); len(batch) > 0 {
			s.process(ctx, batch)
			continue
		}
		idle.Reset(s.m.cfg.SessionIdle)
		select {
		case <-ctx.Done():
			return
		case <-s.wake:
		case <-idle.C:
			s.m.mu.Lock()
			if s.queued() == 0 {
				delete(s.m.sessions, s.key)
				s.m.mu.Unlock()
				s.noteConversation(ctx)
				return
			}
			s.m.mu.Unlock()
		}
	}
}

// process handles the messages of one turn (one message, or several
// collected ones); a panic in it answers the users with an error instead
// of killing the daemon. Before anything is published for a message, its
// receipt is looked up: an answered message only gets its stored final
// again (or nothing, when that was published), never a typing signal, a
// delta or a second answer.
func (s *session) process(ctx context.Context, batch []item) {
	m := s.m
	defer func() {
		if r := recover(); r != nil {
			m.log.Error("turn panicked", "session", s.key, "panic", r, "stack", string(debug.Stack()))
			s.loaded = false // the cache may be inconsistent: reload next time
			for _, it := range batch {
				m.finishSimple(ctx, it.in, it.d, bus.KindError, "Sorry, something went wrong inside Switchboard while answering. The operator can find details in the log.", false)
			}
		}
	}()
	var fresh, again []item
	seen := map[string]bool{}
	for _, it := range batch {
		switch {
		case seen[it.in.DedupKey()]:
			again = append(again, it) // a second copy: answered by the first
		case m.answered(ctx, it.in, it.d):
		default:
			seen[it.in.DedupKey()] = true
			fresh = append(fresh, it)
		}
	}
	batch = fresh
	defer func() {
		for _, it := range again {
			if !m.answered(ctx, it.in, it.d) {
				m.untrack(it.d) // its first copy was not answered either
			}
		}
	}()
	if len(batch) == 0 {
		return
	}
	for _, it := range batch {
		m.deps.Observer.Inbound(it.in.Channel, "accepted")
	}
	if len(batch) == 1 {
		it := batch[0]
		switch cmd := parseCommand(it.in.Text); cmd.name {
		case cmdNew:
			s.history, s.loaded = nil, true
			s.setSummary("")
			m.finishSimple(ctx, it.in, it.d, bus.KindNotice, "Started a new conversation. Earlier messages stay on disk but are no longer part of the context.", true)
			return
		case cmdHelp:
			m.finishSimple(ctx, it.in, it.d, bus.KindNotice, helpText, false)
			return
		case cmdCompact:
			if !s.load(ctx) {
				m.untrack(it.d)
				return
			}
			m.finishSimple(ctx, it.in, it.d, bus.KindNotice, s.compactNow(ctx), false)
			return
		case cmdStatus:
			s.load(ctx)
			m.finishSimple(ctx, it.in, it.d, bus.KindNotice, s.status(), false)
			return
		}
	}
	select {
	case m.sem <- struct{}{}:
	case <-ctx.Done():
		return
	}
	defer func() { <-m.sem }()
	s.turn(ctx, batch)
}

// turn runs the model loop for one or more user messages (collected ones,
// oldest first) and delivers the answer: the reply answers the last
// message; each earlier one gets an empty final pointing at it
// (collectedFinal), all committed together.
func (s *session) turn(ctx context.Context, batch []item) {
	m := s.m
	last := batch[len(batch)-1]
	in := last.in
	log := m.log.With("channel", in.Channel, "session", s.key, "msg_id", in.ID, "turn", m.turnSeq.Add(1))
	if !s.load(ctx) {
		for _, it := range batch {
			m.untrack(it.d)
		}
		return
	}
	now := m.opt.Now()
	sink := newTurnSink(m, in, now)
	sink.Typing()
	start := map[string]any{"id": in.ID}
	if len(batch) > 1 {
		ids := make([]string, len(batch))
		for i, it := range batch {
			ids[i] = it.in.ID
		}
		start["collected"] = ids
		log.Info("messages collected into one turn", "messages", len(batch))
	}
	sink.Event(bus.EventTurnStart, start)
	facts := turnFacts{Now: now, Model: m.opt.ModelName, Channel: in.Channel, IsGroup: in.IsGroup, Speaker: SpeakerLabel(in.Channel, in.UserID, in.UserName)}

	// Scoped long-term memory for this speaker.
	var mem *MemoryView
	speaker := Speaker{Channel: in.Channel, ChatID: in.ChatID, UserID: in.UserID, IsGroup: in.IsGroup}
	if m.deps.Memory != nil {
		if v, err := m.deps.Memory.View(speaker); err != nil {
			log.Warn("long-term memory unavailable for this turn", "err", err)
		} else {
			mem = &v
		}
	}
	s.speaker = speaker

	// Fit the context once, before the loop, by whole turns.
	users := make([]memory.Message, len(batch))
	userTokens := 0
	for i, it := range batch {
		users[i] = userMessage(it.in, now)
		users[i].TurnStart = i == 0 // one turn answers them all
		userTokens += loop.EstimateTokens(&users[i])
	}
	system, err := buildPrompt(m.deps.Prompts, m.exec.Tools(), s.summary(), m.skillsSection(), mem, facts)
	if err != nil {
		log.Error("system prompt failed", "err", err)
		m.deliver(ctx, s.key, collectedFinals(batch, bus.KindError, "Sorry, I could not read my workspace files. The operator can find details in the log.", 1), nil, false)
		return
	}
	b := budget(m.cfg.MaxContextTokens, m.opt.ContextWindow, m.opt.MaxOutputTokens, loop.TextTokens(system)+userTokens)
	kept, dropped := fitContext(s.history, m.cfg.MaxContextTurns-1, b)
	if len(dropped) > 0 {
		s.history = kept
		s.summarize(ctx, dropped)
		if system, err = buildPrompt(m.deps.Prompts, m.exec.Tools(), s.summary(), m.skillsSection(), mem, facts); err != nil {
			log.Error("system prompt failed", "err", err)
		}
	}

	tctx, cancel := context.WithCancelCause(ctx)
	s.mu.Lock()
	s.cancel, s.steer, s.steerOpen = cancel, nil, true
	s.mu.Unlock()
	res, err := m.exec.Run(tctx, loop.Input{
		System:    system,
		History:   kept,
		User:      users[0],
		More:      users[1:],
		Session:   tools.Session{Key: s.key, Channel: in.Channel, ChatID: in.ChatID, ThreadID: in.ThreadID, UserID: in.UserID, IsGroup: in.IsGroup},
		Proactive: in.Meta["scheduled_task"] != "",
		Sink:      sink,
		Steer:     s,
		Log:       log,
	})
	s.mu.Lock()
	late := len(s.steer)
	s.cancel, s.steer, s.steerOpen = nil, nil, false
	s.mu.Unlock()
	cancel(nil)
	if errors.Is(err, loop.ErrAborted) {
		log.Info("turn aborted; the message will be redelivered", "err", err)
		for _, it := range batch {
			m.untrack(it.d)
		}
		return
	}
	if late > 0 {
		res.Text += fmt.Sprintf("\n\n(%d steering message(s) arrived after the task had ended and were not applied; please send them again.)", late)
	}
	msgs, fresh := res.Messages, false
	if res.ResetContext {
		// Keep the requests and the explanation; the context starts afresh.
		msgs = append(slices.Clone(res.Messages[:len(users)]), memory.Message{Role: memory.RoleAssistant, Time: now.UTC(), Blocks: []memory.Block{{Type: memory.BlockText, Text: res.Text}}})
		fresh = true
	}
	if !m.deliver(ctx, s.key, collectedFinals(batch, res.Kind, res.Text, sink.nextSeq()), msgs, fresh) {
		s.loaded = false
		return
	}
	if len(batch) > 1 {
		m.deps.Observer.Collected(in.Channel, len(batch))
	}
	m.turns.Add(1)
	s.unnoted = append(s.unnoted, msgs...)
	switch {
	case fresh:
		s.history = msgs
		s.setSummary("")
	default:
		s.history = res.History
		if len(res.Dropped) > 0 {
			s.summarize(ctx, res.Dropped)
		}
		if len(dropped) > 0 || len(res.Dropped) > 0 {
			s.compact(ctx)
		}
	}
	log.Info("turn done", "stop_reason", res.StopReason, "steps", res.Steps, "tokens", res.Usage.TotalTokens)
	m.deps.Observer.TurnDone(res.StopReason, sink.firstDeltaAfter(), m.opt.Now().Sub(now))
	sink.Event(bus.EventTurnEnd, map[string]any{"id": in.ID, "steps": res.Steps, "kind": res.Kind,
		"stop_reason": res.StopReason, "usage": res.Usage})
}

// collectedFinals are the finals of one turn's messages: the answer (kind,
// text, seq) for the last; for each earlier, collected one an empty final
// notice (a bridge shows nothing for it and closes its turn) whose meta
// "answered_by" names the message whose final holds the answer.
func collectedFinals(batch []item, kind, text string, seq int) []answered {
	last := batch[len(batch)-1]
	out := make([]answered, len(batch))
	for i, it := range batch[:len(batch)-1] {
		o := newOutbound(it.in, bus.KindNotice, "", 1, true)
		if o.Meta == nil {
			o.Meta = map[string]string{}
		}
		o.Meta[MetaAnsweredBy] = last.in.ID
		out[i] = answered{in: it.in, d: it.d, out: o}
	}
	out[len(batch)-1] = answered{in: last.in, d: last.d, out: newOutbound(last.in, kind, text, seq, true)}
	return out
}

// load fills the session's context cache from the store on first use.
func (s *session) load(ctx context.Context) bool {
	if s.loaded {
		return true
	}
	snap, err := s.m.deps.Store.Load(ctx, s.key, s.m.cfg.MaxContextTurns)
	if err != nil {
		s.m.log.Error("history load failed; message left for redelivery", "session", s.key, "err", err)
		return false
	}
	s.history, s.loaded = snap.Messages, true
	s.setSummary(snap.Summary)
	return true
}

// summarize folds dropped turns into the running summary at once with a
// rule-based digest (so the context stays within budget whatever happens
// next) and, with a Summarizer, queues a model-written summary to replace
// the digest in the background. It never blocks on the model.
func (s *session) summarize(_ context.Context, dropped []memory.Message) {
	prev := s.summary()
	base := digest(prev, dropped)
	s.setSummary(base)
	if mem := s.m.deps.Memory; mem != nil && s.speaker.Channel != "" {
		// The daily notes keep what left the context (dated, searchable).
		if err := mem.NoteSummary(s.speaker, s.m.opt.Now(), "Trimmed from the conversation", digest("", dropped)); err != nil {
			s.m.log.Warn("could not write the daily note", "session", s.key, "err", err)
		}
	}
	if s.m.deps.Summarizer != nil {
		s.m.enqueueSummary(summaryJob{s: s, base: base, previous: prev, dropped: append([]memory.Message(nil), dropped...)})
	}
}

// noteConversation writes a summary of the turns answered since the last
// note into the daily notes when the session goes idle (model-written
// when a Summarizer is set, else the digest), in the background: the
// session goroutine has already left.
func (s *session) noteConversation(ctx context.Context) {
	mem := s.m.deps.Memory
	turns := s.unnoted
	s.unnoted = nil
	if mem == nil || len(loop.TurnStarts(turns)) == 0 || s.speaker.Channel == "" {
		return
	}
	speaker, m := s.speaker, s.m
	m.wg.Go(func() {
		text := ""
		if sm := m.deps.Summarizer; sm != nil {
			sctx, cancel := context.WithTimeout(ctx, summaryTimeout)
			sum, err := sm.Summarize(sctx, s.key, "", turns)
			cancel()
			if err == nil {
				text = sum
			} else {
				m.log.Warn("conversation summary failed; writing a plain digest", "session", s.key, "err", err)
			}
		}
		if text == "" {
			text = digest("", turns)
		}
		if err := mem.NoteSummary(speaker, m.opt.Now(), "Conversation", text); err != nil {
			m.log.Warn("could not write the conversation to the daily notes", "session", s.key, "err", err)
		}
	})
}

// compact makes the trimmed context durable: the store's context start
// moves to the cached history and the summary is saved, so a restart
// loads what this session sees now.
func (s *session) compact(ctx context.Context) {
	c, ok := s.m.deps.Store.(memory.Compactor)
	if !ok {
		return
	}
	if err := c.Compact(ctx, s.key, s.summary(), len(loop.TurnStarts(s.history))); err != nil {
		s.m.log.Warn("could not store the compacted context", "session", s.key, "err", err)
	}
}

// userMessage converts an inbound envelope into the stored user message. In
// groups the sender's label ([SpeakerLabel]: name and a short id from the
// user id) prefixes the text.
func userMessage(in *bus.Inbound, now time.Time) memory.Message {
	text := in.Text
	if in.IsGroup {
		text = "[" + SpeakerLabel(in.Channel, in.UserID, in.UserName) + "]: " + text
	}
	msg := memory.Message{Role: memory.RoleUser, TurnStart: true, InboundID: in.DedupKey(), Time: now.UTC()}
	var notes []string
	for _, a := range in.Attachments {
		if a.Kind == bus.AttachImage && (a.URL != "" || a.Data != "") {
			msg.Blocks = append(msg.Blocks, memory.Block{Type: memory.BlockImage, MIME: imageMIME(a), URL: a.URL, Data: a.Data})
			continue
		}
		note := fmt.Sprintf("[attachment: %s %q (%s, %d bytes)", a.Kind, a.Name, a.MIME, a.Size)
		if a.URL != "" {
			note += " " + a.URL
		}
		notes = append(notes, note+"]")
	}
	if len(notes) > 0 {
		text = strings.TrimSpace(text + "\n" + strings.Join(notes, "\n"))
	}
	if text != "" {
		msg.Blocks = append([]memory.Block{{Type: memory.BlockText, Text: text}}, msg.Blocks...)
	}
	return msg
}

// imageMIME is an image attachment's MIME type: as sent, else guessed from
// its name or URL, else a generic image type.
func imageMIME(a bus.Attachment) string {
	if a.MIME != "" {
		return a.MIME
	}
	for _, name := range []string{a.Name, a.URL} {
		if i := strings.LastIndexByte(name, '.'); i >= 0 {
			if t := mime.TypeByExtension(strings.ToLower(strings.SplitN(name[i:], "?", 2)[0])); strings.HasPrefix(t, "image/") {
				return t
			}
		}
	}
	return "image/jpeg"
}

// turnSink publishes a turn's typing signal, throttled deltas and events.
type turnSink struct {
	m          *Manager
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

func newTurnSink(m *Manager, in *bus.Inbound, start time.Time) *turnSink {
	return &turnSink{m: m, in: in, start: start,
		out: m.opt.Subjects.Out(in.Channel, in.ChatID), evt: m.opt.Subjects.Event(in.Channel, in.ChatID)}
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
	now := k.m.opt.Now()
	iv := k.m.cfg.DeltaInterval
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
		err = k.m.deps.Publisher.PublishCore(k.out, data)
	}
	if err != nil {
		k.m.log.Debug("outbound publish failed", "subject", k.out, "kind", o.Kind, "err", err)
	}
}

// Event publishes an agent event on chat.event.<channel>.<chat>.
func (k *turnSink) Event(typ string, data any) {
	raw, err := json.Marshal(data)
	if err != nil {
		return
	}
	ev := bus.Event{V: bus.Version, Type: typ, Session: k.in.SessionKey(), Channel: k.in.Channel, ChatID: k.in.ChatID,
		ThreadID: k.in.ThreadID, InReplyTo: k.in.ID, Time: k.m.opt.Now().UTC(), Data: raw}
	b, err := json.Marshal(ev)
	if err == nil {
		err = k.m.deps.Publisher.PublishCore(k.evt, b)
	}
	if err != nil {
		k.m.log.Debug("event publish failed", "subject", k.evt, "err", err)
	}
}

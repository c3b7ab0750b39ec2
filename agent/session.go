package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"mime"
	"runtime/debug"
	"strings"
	"sync"
	"time"

	"switchboard/bus"
	"switchboard/memory"
	"switchboard/tools"
)

// item is one queued inbound message.
type item struct {
	in *bus.Inbound
	d  bus.Delivery
}

// session is one active chat session: a goroutine that processes its queue
// in order. The queue and the running turn's cancel function are guarded by
// mu; the history cache is owned by the session goroutine.
type session struct {
	m    *Manager
	key  string
	wake chan struct{}

	mu        sync.Mutex
	queue     []item
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
	return &session{m: m, key: key, wake: make(chan struct{}, 1)}
}

// nudge wakes the session goroutine (e.g. to notice a shutdown).
func (s *session) nudge() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// enqueue adds it to the queue; false when the queue is full. The caller
// holds m.mu.
func (s *session) enqueue(it item) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.queue) >= maxQueuedPerSession {
		return false
	}
	s.queue = append(s.queue, it)
	select {
	case s.wake <- struct{}{}:
	default:
	}
	return true
}

func (s *session) pop() (item, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.queue) == 0 {
		return item{}, false
	}
	it := s.queue[0]
	s.queue[0] = item{}
	s.queue = s.queue[1:]
	return it, true
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
	s.cancel(errUserStop)
	return true
}

// run processes the queue until ctx ends or the session stays idle for
// Config.SessionIdle, when it removes itself from the manager.
func (s *session) run(ctx context.Context) {
	idle := time.NewTimer(s.m.cfg.SessionIdle)
	defer idle.Stop()
	for {
		if ctx.Err() != nil || s.m.draining.Load() {
			return
		}
		if it, ok := s.pop(); ok {
			s.process(ctx, it)
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

// process handles one message; a panic in it answers the user with an
// error instead of killing the daemon.
func (s *session) process(ctx context.Context, it item) {
	m := s.m
	defer func() {
		if r := recover(); r != nil {
			m.log.Error("turn panicked", "session", s.key, "panic", r, "stack", string(debug.Stack()))
			s.loaded = false // the cache may be inconsistent: reload next time
			m.finishSimple(ctx, it.in, it.d, bus.KindError, "Sorry, something went wrong inside Switchboard while answering. The operator can find details in the log.", false)
		}
	}()
	r, ok, err := m.deps.Store.Receipt(ctx, it.in.DedupKey())
	if err != nil {
		m.log.Error("receipt lookup failed; message left for redelivery", "key", it.in.DedupKey(), "err", err)
		m.untrack(it.d)
		return
	}
	if ok {
		m.deps.Observer.Inbound(it.in.Channel, "duplicate")
		if err := m.replayReceipt(ctx, r, it.d); err != nil {
			m.log.Error("replay failed", "key", it.in.DedupKey(), "err", err)
		}
		return
	}
	m.deps.Observer.Inbound(it.in.Channel, "accepted")
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
	select {
	case m.sem <- struct{}{}:
	case <-ctx.Done():
		return
	}
	defer func() { <-m.sem }()
	s.turn(ctx, it)
}

// turn runs the model loop for one user message and delivers its answer.
func (s *session) turn(ctx context.Context, it item) {
	m, in := s.m, it.in
	log := m.log.With("channel", in.Channel, "session", s.key, "msg_id", in.ID, "turn", m.turnSeq.Add(1))
	if !s.load(ctx) {
		m.untrack(it.d)
		return
	}
	now := m.opt.Now()
	sink := newTurnSink(m, in, now)
	sink.Typing()
	sink.Event(bus.EventTurnStart, map[string]any{"id": in.ID})
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
	user := userMessage(in, now)
	system, err := buildPrompt(m.deps.Prompts, m.exec.Tools(), s.summary(), m.skillsSection(), mem, facts)
	if err != nil {
		log.Error("system prompt failed", "err", err)
		m.finishSimple(ctx, in, it.d, bus.KindError, "Sorry, I could not read my workspace files. The operator can find details in the log.", false)
		return
	}
	b := budget(m.cfg.MaxContextTokens, m.opt.ContextWindow, m.opt.MaxOutputTokens, textTokens(system)+estimateTokens(&user))
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
	res, err := m.exec.Run(tctx, TurnInput{
		System:    system,
		History:   kept,
		User:      user,
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
	if errors.Is(err, ErrAborted) {
		log.Info("turn aborted; the message will be redelivered", "err", err)
		m.untrack(it.d)
		return
	}
	if late > 0 {
		res.Text += fmt.Sprintf("\n\n(%d steering message(s) arrived after the task had ended and were not applied; please send them again.)", late)
	}
	msgs, fresh := res.Messages, false
	if res.ResetContext {
		// Keep the request and the explanation; the context starts afresh.
		msgs = []memory.Message{res.Messages[0], {Role: memory.RoleAssistant, Time: now.UTC(), Blocks: []memory.Block{{Type: memory.BlockText, Text: res.Text}}}}
		fresh = true
	}
	out := newOutbound(in, res.Kind, res.Text, sink.nextSeq(), true)
	if err := m.deliverFinal(ctx, in, it.d, out, msgs, fresh); err != nil {
		m.logUndelivered(log, err)
		s.loaded = false
		return
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
	if mem == nil || len(turnStarts(turns)) == 0 || s.speaker.Channel == "" {
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
	if err := c.Compact(ctx, s.key, s.summary(), len(turnStarts(s.history))); err != nil {
		s.m.log.Warn("could not store the compacted context", "session", s.key, "err", err)
	}
}

func toolList(tb Toolbox) []tools.Tool {
	if tb == nil {
		return nil
	}
	return tb.List()
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

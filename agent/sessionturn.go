package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"mime"
	"slices"
	"strings"
	"time"

	"github.com/switchboard-chat/switchboard/agent/heartbeat"
	"github.com/switchboard-chat/switchboard/agent/loop"
	"github.com/switchboard-chat/switchboard/bus"
	"github.com/switchboard-chat/switchboard/internal/logging"
	"github.com/switchboard-chat/switchboard/memory"
	"github.com/switchboard-chat/switchboard/tools"
)

// turnPlan is one turn as the session prepared it for the loop.
type turnPlan struct {
	batch   []item
	in      *bus.Inbound // the last message: the reply answers it
	log     *slog.Logger
	now     time.Time
	sink    *turnSink
	users   []memory.Message // the batch as user messages
	system  systemPrompt
	kept    []memory.Message // the fitted history
	dropped []memory.Message // what fitting dropped
}

// turn runs the model loop for one or more user messages (collected ones,
// oldest first) and delivers the answer: the reply answers the last
// message; each earlier one gets an empty final pointing at it
// (collectedFinal), all committed together.
func (s *session) turn(ctx context.Context, batch []item) {
	p, ok := s.beginTurn(ctx, batch)
	if !ok {
		return
	}
	res, err := s.runLoop(ctx, p)
	if errors.Is(err, loop.ErrAborted) {
		p.log.Info("turn aborted; the message will be redelivered", "err", err)
		for _, it := range batch {
			s.env.courier.untrack(it.d)
		}
		return
	}
	s.finishTurn(ctx, p, res)
}

// beginTurn loads the history, tells the chat the agent is working and
// prepares the loop's input; false when the turn cannot run (the messages
// are left for redelivery or answered with an error).
func (s *session) beginTurn(ctx context.Context, batch []item) (*turnPlan, bool) {
	env := s.env
	last := batch[len(batch)-1]
	in := last.in
	p := &turnPlan{batch: batch, in: in,
		log: logging.With(env.log, slog.String("channel", in.Channel), slog.String("session", s.key), slog.String("msg_id", in.ID),
			slog.Int64("turn", env.stats.seq.Add(1)))}
	if err := s.load(ctx); err != nil {
		for _, it := range batch {
			env.courier.fail(ctx, it.d, err)
		}
		return nil, false
	}
	p.now = env.opt.Now()
	p.sink = newTurnSink(env, in, p.now)
	p.sink.Typing()
	var start any = turnStartData{ID: in.ID}
	if len(batch) > 1 {
		ids := make([]string, len(batch))
		for i, it := range batch {
			ids[i] = it.in.ID
		}
		start = map[string]any{"id": in.ID, "collected": ids}
		p.log.Info("messages collected into one turn", "messages", len(batch))
	}
	p.sink.Event(bus.EventTurnStart, start)
	if !s.fit(ctx, p) {
		env.courier.deliver(ctx, s.key, collectedFinals(batch, bus.KindError, "Sorry, I could not read my workspace files. The operator can find details in the log.", 1), nil, false)
		return nil, false
	}
	return p, true
}

// memoryView is the speaker's scoped long-term memory, nil without one.
func (s *session) memoryView(speaker bus.Speaker, log *slog.Logger) *memory.View {
	if s.env.prof.Memory == nil {
		return nil
	}
	v, err := s.env.prof.Memory.View(speaker)
	if err != nil {
		log.Warn("long-term memory unavailable for this turn", "err", err)
		return nil
	}
	return &v
}

// fit builds the system prompt and fits the history to the budget, once,
// before the loop, by whole turns; what is dropped goes into the summary
// and the prompt is built again with it. False when the prompt failed.
func (s *session) fit(ctx context.Context, p *turnPlan) bool {
	env, in := s.env, p.in
	facts := turnFacts{Now: p.now, Model: env.opt.ModelName, Channel: in.Channel, IsGroup: in.IsGroup, Speaker: SpeakerLabel(in.Channel, in.UserID, in.UserName)}
	speaker := in.Speaker()
	mem := s.memoryView(speaker, p.log)
	s.conv.speaker = speaker

	p.users = make([]memory.Message, len(p.batch))
	userTokens := 0
	for i, it := range p.batch {
		p.users[i] = userMessage(it.in, p.now)
		p.users[i].TurnStart = i == 0 // one turn answers them all
		userTokens += loop.EstimateTokens(&p.users[i])
	}
	system, err := buildPrompt(env.heads, env.prof.Prompts, env.exec.Tools(), s.summary(), s.skillsSection(), mem, facts)
	if err != nil {
		p.log.Error("system prompt failed", "err", err)
		return false
	}
	b := budget(env.cfg.MaxContextTokens, env.opt.ContextWindow, env.opt.MaxOutputTokens, system.tokens()+userTokens)
	p.kept, p.dropped = fitContext(s.conv.history, s.contextTurns()-1, b)
	if len(p.dropped) > 0 {
		s.conv.history = p.kept
		s.summarize(ctx, p.dropped)
		system.tail = buildTail(s.summary(), mem, facts) // the head is the same
	}
	p.system = system
	return true
}

func (s *session) skillsSection() string {
	if s.env.prof.Skills == nil {
		return ""
	}
	return s.env.prof.Skills.PromptSection()
}

// runLoop runs the tool-calling loop with the turn's /steer inbox open; a
// /stop cancels it with loop.ErrStopped. Steering that came too late is
// mentioned in the reply.
func (s *session) runLoop(ctx context.Context, p *turnPlan) (loop.Result, error) {
	in := p.in
	tctx, cancel := context.WithCancelCause(ctx)
	s.steer.begin(cancel)
	res, err := s.env.exec.Run(tctx, loop.Input{
		Prefix:    p.system.head,
		System:    p.system.tail,
		History:   p.kept,
		User:      p.users[0],
		More:      p.users[1:],
		Session:   tools.Session{Key: s.key, Speaker: in.Speaker(), Owner: s.env.deps.Pairing != nil && s.env.deps.Pairing.Owner(in.Channel, in.UserID)},
		Proactive: in.Meta["scheduled_task"] != "" || in.Channel == heartbeat.Channel,
		Sink:      p.sink,
		Steer:     &s.steer,
		Log:       p.log,
	})
	late := s.steer.end()
	cancel(nil)
	if err == nil && late > 0 {
		res.Text += fmt.Sprintf("\n\n(%d steering message(s) arrived after the task had ended and were not applied; please send them again.)", late)
	}
	return res, err
}

// finishTurn delivers the loop's answer and, once delivered, makes the
// turn the session's context.
func (s *session) finishTurn(ctx context.Context, p *turnPlan, res loop.Result) {
	env := s.env
	msgs, fresh := res.Messages, false
	if res.ResetContext {
		// Keep the requests and the explanation; the context starts afresh.
		msgs = append(slices.Clone(res.Messages[:len(p.users)]), memory.Message{Role: memory.RoleAssistant, Time: p.now.UTC(), Blocks: []memory.Block{{Type: memory.BlockText, Text: res.Text}}})
		fresh = true
	}
	if !env.courier.deliver(ctx, s.key, collectedFinals(p.batch, res.Kind, res.Text, p.sink.nextSeq()), msgs, fresh) {
		s.conv.loaded = false
		return
	}
	if len(p.batch) > 1 {
		env.deps.Observer.Collected(p.in.Channel, len(p.batch))
	}
	env.stats.answered.Add(1)
	s.remember(ctx, p, res, msgs, fresh)
	p.log.LogAttrs(ctx, slog.LevelInfo, "turn done", slog.String("stop_reason", res.StopReason), slog.Int("steps", res.Steps),
		slog.Int("tokens", res.Usage.TotalTokens))
	env.deps.Observer.TurnDone(env.agent, res.StopReason, p.sink.firstDeltaAfter(), env.opt.Now().Sub(p.now))
	p.sink.Event(bus.EventTurnEnd, turnEndData{ID: p.in.ID, Steps: res.Steps, Kind: res.Kind, StopReason: res.StopReason, Usage: res.Usage})
}

// remember makes a delivered turn's messages the session's context: a
// fresh one after a reset, else the loop's history, with what overflow
// recovery dropped summarised and the trimmed context made durable.
func (s *session) remember(ctx context.Context, p *turnPlan, res loop.Result, msgs []memory.Message, fresh bool) {
	s.keepForNote(msgs)
	if fresh {
		s.conv.history = msgs
		s.setSummary("")
		return
	}
	s.conv.history = res.History
	if len(res.Dropped) > 0 {
		s.summarize(ctx, res.Dropped)
	}
	if len(p.dropped) > 0 || len(res.Dropped) > 0 {
		s.compact(ctx)
	}
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

// contextTurns bounds the turns of the session's context: a heartbeat
// session (agent/heartbeat) keeps only its last heartbeat.KeepTurns.
func (s *session) contextTurns() int {
	if strings.HasPrefix(s.key, heartbeat.Channel+"/") {
		return min(s.env.cfg.MaxContextTurns, heartbeat.KeepTurns)
	}
	return s.env.cfg.MaxContextTurns
}

// load fills the session's context cache from the store on first use.
func (s *session) load(ctx context.Context) error {
	if s.conv.loaded {
		return nil
	}
	snap, err := s.env.deps.Store.Load(ctx, s.key, s.contextTurns())
	if err != nil {
		s.env.log.Error("history load failed", "session", s.key, "err", err)
		return fmt.Errorf("agent: load history: %w", err)
	}
	s.conv.history, s.conv.loaded = snap.Messages, true
	s.setSummary(snap.Summary)
	return nil
}

// summarize folds dropped turns into the running summary at once with a
// rule-based digest (so the context stays within budget whatever happens
// next) and, with a Summarizer, queues a model-written summary to replace
// the digest in the background. It never blocks on the model.
func (s *session) summarize(_ context.Context, dropped []memory.Message) {
	prev := s.summary()
	base := digest(prev, dropped)
	s.setSummary(base)
	if mem := s.env.prof.Memory; mem != nil && s.conv.speaker.Channel != "" {
		// The daily notes keep what left the context (dated, searchable).
		if err := mem.NoteSummary(s.conv.speaker, s.env.opt.Now(), "Trimmed from the conversation", digest("", dropped)); err != nil {
			s.env.log.Warn("could not write the daily note", "session", s.key, "err", err)
		}
	}
	if s.env.prof.Summarizer != nil {
		s.host.enqueueSummary(summaryJob{s: s, agent: s.conv.agent, base: base, previous: prev, dropped: append([]memory.Message(nil), dropped...)})
	}
}

// keepForNote keeps a turn's messages for the daily note written when the
// session goes quiet — without long-term memory there is none. The note
// covers no more than the last maxUnnotedTurns turns (older ones have long
// left the context, and the note of what was trimmed from it holds them);
// the older turns are dropped in bulk once twice as many have gathered, so
// a long chat does not copy its last hundred turns on every turn.
func (s *session) keepForNote(msgs []memory.Message) {
	if s.env.prof.Memory == nil {
		return
	}
	s.conv.unnoted = append(s.conv.unnoted, msgs...)
	if turnCount(s.conv.unnoted) > 2*maxUnnotedTurns {
		// Copy so the dropped ones can be freed.
		cut := lastTurns(s.conv.unnoted, maxUnnotedTurns)
		s.conv.unnoted = append(make([]memory.Message, 0, 2*(len(s.conv.unnoted)-cut)), s.conv.unnoted[cut:]...)
	}
}

// lastTurns is the index in msgs where its last n turns begin (0 when it
// holds n turns or fewer).
func lastTurns(msgs []memory.Message, n int) int {
	seen := 0
	for i := len(msgs) - 1; i >= 0; i-- {
		if msgs[i].TurnStart {
			if seen++; seen == n {
				return i
			}
		}
	}
	return 0
}

// turnCount is the number of turns msgs holds.
func turnCount(msgs []memory.Message) int {
	n := 0
	for i := range msgs {
		if msgs[i].TurnStart {
			n++
		}
	}
	return n
}

// noteConversation writes a summary of the turns answered since the last
// note into the daily notes when the session goes idle (model-written
// when a Summarizer is set, else the digest), in the background: the
// session goroutine has already left.
func (s *session) noteConversation(ctx context.Context) {
	turns := s.conv.unnoted[lastTurns(s.conv.unnoted, maxUnnotedTurns):]
	s.conv.unnoted = nil
	if len(loop.TurnStarts(turns)) == 0 || s.conv.speaker.Channel == "" {
		return
	}
	speaker, name := s.conv.speaker, s.conv.agent
	s.host.background(func() {
		g, ok := s.host.acquireAgent(ctx, name)
		if !ok {
			return
		}
		defer s.host.releaseAgent(g)
		env := g.env
		mem := env.prof.Memory
		if mem == nil || env.agent != name {
			return // no long-term memory, or the agent was removed
		}
		text := ""
		if sm := env.prof.Summarizer; sm != nil {
			sctx, cancel := context.WithTimeout(ctx, summaryTimeout)
			sum, err := sm.Summarize(sctx, s.key, "", turns)
			cancel()
			if err == nil {
				text = sum
			} else {
				env.log.Warn("conversation summary failed; writing a plain digest", "session", s.key, "err", err)
			}
		}
		if text == "" {
			text = digest("", turns)
		}
		if err := mem.NoteSummary(speaker, env.opt.Now(), "Conversation", text); err != nil {
			env.log.Warn("could not write the conversation to the daily notes", "session", s.key, "err", err)
		}
	})
}

// compact makes the trimmed context durable: the store's context start
// moves to the cached history and the summary is saved, so a restart
// loads what this session sees now.
func (s *session) compact(ctx context.Context) {
	c, ok := s.env.deps.Store.(memory.Compactor)
	if !ok {
		return
	}
	if err := c.Compact(ctx, s.key, s.summary(), len(loop.TurnStarts(s.conv.history))); err != nil {
		s.env.log.Warn("could not store the compacted context", "session", s.key, "err", err)
	}
}

// applySummary replaces the digest base with the model's summary when the
// session's summary still starts with it (digests appended after it are
// kept), and stores it. The store write happens under the session's lock so
// that a newer summary is never overwritten by an older one.
func (s *session) applySummary(ctx context.Context, base, sum string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	cur := s.summaryShared
	if base == "" || !strings.HasPrefix(cur, base) {
		return // a /new or a reset happened meanwhile
	}
	s.summaryShared = strings.TrimSpace(sum + cur[len(base):])
	if st, ok := s.base.deps.Store.(summaryStore); ok {
		if err := st.SetSummary(ctx, s.key, s.summaryShared); err != nil {
			s.base.log.Warn("could not store the summary", "session", s.key, "err", err)
		}
	}
}

// compactNow answers /compact: every turn but the last two goes into the
// summary (model-written when a Summarizer is set, within a minute, else
// the digest), durably. It returns the text for the user.
func (s *session) compactNow(ctx context.Context) string {
	const keep = 2
	starts := loop.TurnStarts(s.conv.history)
	if len(starts) <= keep {
		return fmt.Sprintf("Nothing to compact: the context holds %d turn(s).", len(starts))
	}
	cut := starts[len(starts)-keep]
	dropped := s.conv.history[:cut]
	prev := s.summary()
	sum := ""
	if sm := s.env.prof.Summarizer; sm != nil {
		sctx, cancel := context.WithTimeout(ctx, time.Minute)
		var err error
		sum, err = sm.Summarize(sctx, s.key, prev, dropped)
		cancel()
		if err != nil {
			s.env.log.Warn("summary for /compact failed; using a plain digest", "session", s.key, "err", err)
		}
	}
	if sum == "" {
		sum = digest(prev, dropped)
	}
	s.conv.history = append([]memory.Message(nil), s.conv.history[cut:]...)
	s.setSummary(sum)
	s.compact(ctx)
	return fmt.Sprintf("Compacted %d earlier turn(s) into the summary; the last %d stay as they are.", len(starts)-keep, keep)
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

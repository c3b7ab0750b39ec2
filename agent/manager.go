package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/nats-io/nuid"

	"github.com/switchboard-chat/switchboard/agent/loop"
	"github.com/switchboard-chat/switchboard/bus"
	"github.com/switchboard-chat/switchboard/internal/failpoint"
	"github.com/switchboard-chat/switchboard/memory"
)

// Defaults of the manager's timing knobs.
const (
	defaultHeartbeat       = 10 * time.Second
	defaultShutdownTimeout = 30 * time.Second
	defaultDeferDelay      = time.Second
	commitTimeout          = 30 * time.Second
	// maxHeldPerSession bounds the messages one session holds in memory;
	// later ones wait in the bus (handed back with NakWithDelay).
	maxHeldPerSession = 64
	// maxDeferSteps caps a hand-back's delay at this many DeferDelays.
	maxDeferSteps = 30
	// A running turn's /steer inbox holds at most maxSteerItems texts of
	// at most maxSteerChars characters each.
	maxSteerItems = 16
	maxSteerChars = 8000
)

// MetaAnsweredBy is the outbound meta key of the empty final of a message
// answered together with later ones (agent.queue_mode collect): the id of
// the inbound message whose final holds the answer.
const MetaAnsweredBy = "answered_by"

// Deps are the manager's collaborators. All are required except Tools.
type Deps struct {
	Source    Source
	Publisher Publisher
	Store     memory.Store
	Model     Model
	Tools     Toolbox
	Prompts   PromptFiles
	Log       *slog.Logger
	// Summarizer, when set, writes the summary of turns dropped from the
	// context; without it (or when it fails) a rule-based digest is used.
	Summarizer Summarizer
	// Observer, when set, receives measurements for metrics.
	Observer Observer
	// Skills, when set, adds the skills section to the system prompt.
	Skills SkillsSection
	// Memory, when set, gives each turn its scoped long-term memory in
	// place of the workspace MEMORY.md.
	Memory Memory
}

// SkillsSection renders the prompt's list of skills (name, description,
// where to read it); "" when there are none. Safe for concurrent use.
type SkillsSection interface {
	PromptSection() string
}

// Summarizer condenses turns dropped from a session's context into its
// running summary. Safe for concurrent use.
type Summarizer interface {
	Summarize(ctx context.Context, session, previous string, dropped []memory.Message) (string, error)
}

// Options are the manager's settings beyond Config.
type Options struct {
	Subjects     bus.Subjects
	MaxTextBytes int
	ModelName    string
	// ContextWindow and MaxOutputTokens are the model's window and the
	// reply's token reserve (llm.context_window, llm.max_tokens); with
	// agent.max_context_tokens they bound each request's history.
	ContextWindow   int
	MaxOutputTokens int
	// ToolTimeout bounds one tool call (default 120 s).
	ToolTimeout time.Duration
	// Temperature is the configured sampling temperature (llm.temperature);
	// resampling after a rollback raises it.
	Temperature float32
	// ReadFile reads a workspace file (sub-agents' prompt_file); required
	// when a sub-agent uses prompt_file.
	ReadFile func(name string) (string, error)
	// Heartbeat is how often queued and running messages are marked in
	// progress on the bus so they are not redelivered (must be well under
	// the consumer's AckWait).
	Heartbeat time.Duration
	// Now returns the current time (tests inject a fixed clock).
	Now func() time.Time
	// ShutdownTimeout is how long running turns may go on after shutdown
	// begins before they are cancelled (default 30 s).
	ShutdownTimeout time.Duration
	// DeferDelay is the least delay of a message handed back to the bus
	// because its session holds maxHeldPerSession messages already
	// (default 1 s); it grows with the messages waiting ahead of it.
	DeferDelay time.Duration
}

// Manager runs the sessions: it consumes inbound messages, rejects invalid
// ones to the DLQ, routes valid ones to one goroutine per session (in order
// within a session, concurrently across sessions up to
// Config.MaxConcurrentTurns), answers commands, and acknowledges a message
// only once its final outbound message is persisted and published.
//
// Create it with NewManager and call Run once.
type Manager struct {
	cfg   Config
	opt   Options
	deps  Deps
	exec  *loop.Executor
	log   *slog.Logger
	sem   chan struct{}
	start time.Time

	mu       sync.Mutex // guards sessions, pending; taken before session.mu
	sessions map[string]*session
	pending  map[bus.Delivery]struct{}

	wg          sync.WaitGroup // heartbeat, summaries, command goroutines
	sessWG      sync.WaitGroup // session goroutines
	draining    atomic.Bool    // shutting down: no new turns
	turns       atomic.Int64
	turnSeq     atomic.Int64 // numbers turns in logs
	summaryJobs chan summaryJob
}

// NewManager validates its arguments and returns a manager. It does no I/O.
func NewManager(cfg Config, opt Options, deps Deps) (*Manager, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("agent: %w", err)
	}
	if deps.Source == nil || deps.Publisher == nil || deps.Store == nil || deps.Model == nil || deps.Prompts == nil {
		return nil, errors.New("agent: NewManager: Source, Publisher, Store, Model and Prompts are required")
	}
	if opt.Subjects.Prefix == "" {
		opt.Subjects.Prefix = "chat"
	}
	if opt.MaxTextBytes <= 0 {
		opt.MaxTextBytes = 65536
	}
	if opt.Heartbeat <= 0 {
		opt.Heartbeat = defaultHeartbeat
	}
	if opt.Now == nil {
		opt.Now = time.Now
	}
	if opt.ShutdownTimeout <= 0 {
		opt.ShutdownTimeout = defaultShutdownTimeout
	}
	if opt.DeferDelay <= 0 {
		opt.DeferDelay = defaultDeferDelay
	}
	log := deps.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if deps.Observer == nil {
		deps.Observer = nopObserver{}
	}
	return &Manager{
		cfg:         cfg,
		opt:         opt,
		deps:        deps,
		exec:        loop.New(deps.Model, deps.Tools, loopOptions(cfg, opt, deps.Observer), log),
		log:         log.With("component", "agent"),
		sem:         make(chan struct{}, cfg.MaxConcurrentTurns),
		start:       opt.Now(),
		sessions:    map[string]*session{},
		pending:     map[bus.Delivery]struct{}{},
		summaryJobs: make(chan summaryJob, summaryQueue),
	}, nil
}

// Run consumes until ctx is cancelled, then shuts down gracefully: it
// takes no new messages and starts no new turns (queued messages stay
// unacknowledged, so the bus redelivers them after a restart), lets running
// turns finish for up to Options.ShutdownTimeout, then cancels the rest
// (also redelivered, never half-answered), waits for every goroutine and
// returns. It returns the source's error if consuming fails.
func (m *Manager) Run(ctx context.Context) error {
	runCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	defer cancel()
	m.wg.Go(func() { m.heartbeat(runCtx) })
	if m.deps.Summarizer != nil {
		m.summaries(runCtx)
	}
	err := m.deps.Source.Consume(ctx, func(d bus.Delivery) { m.dispatch(runCtx, d) })
	m.draining.Store(true)
	m.mu.Lock()
	for _, s := range m.sessions {
		s.nudge()
	}
	m.mu.Unlock()
	drained := make(chan struct{})
	go func() { m.sessWG.Wait(); close(drained) }() // joined below: ends once sessions exit
	timer := time.NewTimer(m.opt.ShutdownTimeout)
	select {
	case <-drained:
	case <-timer.C:
		m.log.Warn("shutdown timeout: cancelling running turns; their messages will be redelivered", "timeout", m.opt.ShutdownTimeout)
	}
	timer.Stop()
	cancel()
	<-drained
	m.wg.Wait()
	if err != nil {
		return fmt.Errorf("agent: consume: %w", err)
	}
	return nil
}

// loopOptions are the loop's settings from the agent's.
func loopOptions(cfg Config, opt Options, obs Observer) loop.Options {
	return loop.Options{
		ModelName: opt.ModelName, Temperature: opt.Temperature,
		Limits: loop.Limits{MaxSteps: cfg.MaxSteps, ExtraAttempts: cfg.ExtraAttempts, MaxRollbacks: cfg.MaxConsecutiveRollbacks,
			KeepToolResults: cfg.KeepToolResults, ToolTimeout: opt.ToolTimeout,
			ContextWindow: opt.ContextWindow, MaxOutputTokens: opt.MaxOutputTokens},
		Subagents: loop.Subagents{Agents: subagents(cfg.Subagents, opt.ReadFile), Depth: cfg.SubagentDepth, Concurrency: cfg.SubagentConcurrency},
		Observer:  obs,
	}
}

// subagents resolves the configured sub-agents for the loop.
func subagents(cfgs map[string]SubagentConfig, read func(string) (string, error)) map[string]loop.Subagent {
	out := make(map[string]loop.Subagent, len(cfgs))
	for name, sc := range cfgs {
		prompt := func() (string, error) { return sc.Prompt, nil }
		if sc.PromptFile != "" {
			file := sc.PromptFile
			prompt = func() (string, error) {
				if read == nil {
					return "", fmt.Errorf("agent: no workspace to read %s from", file)
				}
				return read(file)
			}
		}
		out[name] = loop.Subagent{Description: sc.Description, Prompt: prompt, Tools: sc.Tools, MaxSteps: sc.MaxSteps, Model: sc.Model, Timeout: sc.Timeout}
	}
	return out
}

func (m *Manager) skillsSection() string {
	if m.deps.Skills == nil {
		return ""
	}
	return m.deps.Skills.PromptSection()
}

// Queued returns the number of messages waiting in session queues.
func (m *Manager) Queued() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	n := 0
	for _, s := range m.sessions {
		n += s.queued()
	}
	return n
}

// ActiveSessions returns the number of live session goroutines.
func (m *Manager) ActiveSessions() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.sessions)
}

// dispatch is called by the source, one message at a time; it never blocks
// on a turn. A session holds at most maxHeldPerSession messages; beyond
// that a message is handed back to the bus to be delivered again later, so
// a flooding chat costs memory for a bounded number of messages only and
// never refuses one.
func (m *Manager) dispatch(ctx context.Context, d bus.Delivery) {
	if m.draining.Load() {
		return // not acknowledged: redelivered after the restart
	}
	in, err := bus.ParseInbound(m.opt.Subjects, d.Subject(), d.Data(), m.opt.MaxTextBytes)
	if err != nil {
		m.reject(ctx, d, err)
		return
	}
	failpoint.Hit(failpoint.Received)
	redelivered := d.Info().NumDelivered > 1
	m.mu.Lock()
	key := in.SessionKey()
	cmd := parseCommand(in.Text)
	if cmd.name == cmdStop {
		m.pending[d] = struct{}{}
		s := m.sessions[key]
		m.mu.Unlock()
		m.countRedelivery(in, redelivered)
		m.wg.Go(func() { m.handleStop(ctx, s, in, d) })
		return
	}
	if cmd.name == cmdSteer {
		m.mu.Unlock()
		// A /steer already answered must not reach the running turn again.
		r, found, err := m.deps.Store.Receipt(ctx, in.DedupKey())
		m.mu.Lock()
		m.pending[d] = struct{}{}
		switch {
		case err != nil:
			m.mu.Unlock()
			m.countRedelivery(in, redelivered)
			m.log.Error("receipt lookup failed; message left for redelivery", "key", in.DedupKey(), "err", err)
			m.untrack(d)
			return
		case found:
			m.mu.Unlock()
			m.countRedelivery(in, redelivered)
			m.wg.Go(func() { m.suppress(ctx, in, r, d) })
			return
		}
		if reply, handled := m.steer(m.sessions[key], cmd.arg); handled {
			m.mu.Unlock()
			m.countRedelivery(in, redelivered)
			m.wg.Go(func() { m.finishSimple(ctx, in, d, reply.kind, reply.text, false) })
			return
		}
		delete(m.pending, d)
		// No running turn: /steer behaves like a normal message.
		c := *in
		c.Text = cmd.arg
		in = &c
	}
	s := m.sessions[key]
	if s == nil {
		s = newSession(m, key)
		m.sessions[key] = s
		m.sessWG.Go(func() { s.run(ctx) })
	}
	o := s.offer(item{in: in, d: d}, m.opt.Now(), m.opt.DeferDelay)
	if o.held {
		m.pending[d] = struct{}{}
	}
	m.mu.Unlock()
	m.countRedelivery(in, redelivered && !o.back)
	if !o.held {
		if err := d.NakWithDelay(o.delay); err != nil {
			m.log.Warn("could not hand a message of a busy chat back to the bus; it is redelivered after the ack wait", "subject", d.Subject(), "err", err)
		}
	}
}

// countRedelivery reports a redelivery to the observer.
func (m *Manager) countRedelivery(in *bus.Inbound, redelivered bool) {
	if redelivered {
		m.deps.Observer.Redelivered(in.Channel)
	}
}

// reject sends an invalid message to the DLQ and removes it from the stream.
// Garbage never stops the daemon and never reaches the model.
func (m *Manager) reject(ctx context.Context, d bus.Delivery, reason error) {
	outcome := "rejected_invalid"
	if errors.Is(reason, bus.ErrTooLarge) {
		outcome = "rejected_too_large"
	}
	channel := bus.InvalidChannel
	if ch, _, err := m.opt.Subjects.ParseIn(d.Subject()); err == nil && bus.ValidChannel(ch) {
		channel = ch
	}
	m.deps.Observer.Inbound(channel, outcome)
	rec := bus.NewDLQRecord(d.Subject(), d.Data(), reason, m.opt.Now().UTC())
	data, err := json.Marshal(rec)
	if err == nil {
		pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		err = m.deps.Publisher.Publish(pctx, m.opt.Subjects.DLQFor(d.Subject()), data, "")
		cancel()
	}
	if err != nil {
		m.log.Error("dead-letter publish failed; dropping invalid message", "subject", d.Subject(), "reason", reason, "err", err)
	} else {
		m.log.Warn("invalid inbound message sent to the DLQ", "subject", d.Subject(), "reason", reason)
	}
	if err := d.Term(); err != nil {
		m.log.Warn("term failed", "subject", d.Subject(), "err", err)
	}
}

// heartbeat marks every tracked message in progress so the bus does not
// redeliver messages that wait in a session queue or run a long turn.
func (m *Manager) heartbeat(ctx context.Context) {
	t := time.NewTicker(m.opt.Heartbeat)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		m.mu.Lock()
		ds := make([]bus.Delivery, 0, len(m.pending))
		for d := range m.pending {
			ds = append(ds, d)
		}
		m.mu.Unlock()
		for _, d := range ds {
			if err := d.InProgress(); err != nil {
				m.log.Debug("in-progress failed", "subject", d.Subject(), "err", err)
			}
		}
	}
}

// done acknowledges d and stops tracking it.
func (m *Manager) done(d bus.Delivery) {
	m.mu.Lock()
	delete(m.pending, d)
	m.mu.Unlock()
	if err := d.Ack(); err != nil {
		m.log.Warn("ack failed; the message may be redelivered and will be answered from its receipt", "subject", d.Subject(), "err", err)
	}
}

// untrack stops tracking d without acknowledging it: it will be redelivered,
// soon when the delivery can be retried (the bus's backoff), else after the
// bus's ack wait. While draining it is left for the next start.
func (m *Manager) untrack(d bus.Delivery) {
	m.mu.Lock()
	delete(m.pending, d)
	m.mu.Unlock()
	if r, ok := d.(retrier); ok && !m.draining.Load() {
		if err := r.Retry(); err != nil {
			m.log.Debug("retry request failed; the message is redelivered after the ack wait", "subject", d.Subject(), "err", err)
		}
	}
}

// retrier is a delivery that can ask to be redelivered soon (natsbus).
type retrier interface{ Retry() error }

// errStore marks an answer not delivered because the history store failed.
// The store's owner logs such failures once per interval and counts them,
// so the per-message line is a debug line.
var errStore = errors.New("history store failed")

// logUndelivered logs an answer that was not delivered and will be
// redelivered.
func (m *Manager) logUndelivered(log *slog.Logger, err error) {
	level := slog.LevelError
	if errors.Is(err, errStore) {
		level = slog.LevelDebug
	}
	log.Log(context.Background(), level, "answer not delivered; the message will be redelivered", "err", err)
}

// newOutbound starts an outbound envelope answering in.
func newOutbound(in *bus.Inbound, kind, text string, seq int, final bool) bus.Outbound {
	o := bus.ReplyTo(in)
	o.ID = nuid.Next()
	o.Kind, o.Text, o.Seq, o.Final = kind, text, seq, final
	return o
}

// errAlreadyAnswered: the turn was not committed because a message it
// answers had a receipt already; the stored answers were replayed.
var errAlreadyAnswered = errors.New("agent: already answered")

// answered is one inbound message of a turn with its final envelope.
type answered struct {
	in  *bus.Inbound
	d   bus.Delivery
	out bus.Outbound
}

// deliverFinal persists the receipt (with the turn's messages) and then
// publishes the final envelope and acknowledges d; see deliver.
func (m *Manager) deliverFinal(ctx context.Context, in *bus.Inbound, d bus.Delivery, out bus.Outbound, msgs []memory.Message, fresh bool) error {
	return m.deliverAll(ctx, in.SessionKey(), []answered{{in: in, d: d, out: out}}, msgs, fresh)
}

// deliver is deliverAll that logs its error; false when the answer was not
// delivered (the messages are left for redelivery).
func (m *Manager) deliver(ctx context.Context, session string, as []answered, msgs []memory.Message, fresh bool) bool {
	err := m.deliverAll(ctx, session, as, msgs, fresh)
	if err != nil && !errors.Is(err, errAlreadyAnswered) {
		m.logUndelivered(m.log.With("session", session), err)
	}
	return err == nil
}

// deliverAll commits a turn: the turn's messages and the receipt of every
// inbound message it answers, in one transaction; then, for each message in
// order, it publishes the final envelope, acknowledges the delivery and
// marks the receipt published. If the store already has a receipt for one
// of the messages, the stored receipts are replayed instead, so a message
// is never answered twice. The answer for the turn's main message is last.
func (m *Manager) deliverAll(ctx context.Context, session string, as []answered, msgs []memory.Message, fresh bool) error {
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), commitTimeout)
	defer cancel()
	finals := make([][]byte, len(as))
	receipts := make([]memory.Receipt, len(as))
	for i, a := range as {
		final, err := json.Marshal(a.out)
		if err != nil {
			m.untrackAll(as)
			return fmt.Errorf("agent: encode final: %w", err)
		}
		finals[i] = final
		receipts[i] = memory.Receipt{Key: a.in.DedupKey(), Session: session, Final: final, Time: m.opt.Now().UTC()}
	}
	rec := memory.TurnRecord{
		Session:  session,
		Messages: msgs,
		Fresh:    fresh,
		Receipt:  receipts[len(as)-1],
		Also:     receipts[:len(as)-1],
	}
	err := m.deps.Store.CommitTurn(cctx, rec)
	if errors.Is(err, memory.ErrInvalid) && len(rec.Messages) > 0 {
		// A message the store refuses must not keep the answer from the
		// user or make the message loop: keep the receipts, drop the turn.
		m.log.Error("turn not storable; answering without saving it to history", "session", rec.Session, "err", err)
		rec.Messages = nil
		err = m.deps.Store.CommitTurn(cctx, rec)
	}
	switch {
	case errors.Is(err, memory.ErrDuplicate):
		for _, a := range as {
			if !m.answered(cctx, a.in, a.d) {
				m.untrack(a.d)
			}
		}
		return errAlreadyAnswered
	case err != nil:
		m.untrackAll(as)
		return fmt.Errorf("agent: commit turn: %w: %w", errStore, err)
	}
	failpoint.Hit(failpoint.AfterCommit)
	for i, a := range as {
		if err := m.deps.Publisher.Publish(cctx, m.opt.Subjects.Out(a.in.Channel, a.in.ChatID), finals[i], a.out.ID); err != nil {
			// Persisted but not published: leave the messages
			// unacknowledged; their redelivery publishes the stored finals.
			m.untrackAll(as[i:])
			return fmt.Errorf("agent: publish final: %w", err)
		}
		failpoint.Hit(failpoint.AfterPublish)
		m.done(a.d)
		failpoint.Hit(failpoint.AfterAck)
		m.deps.Observer.Outbound(a.in.Channel, a.out.Kind)
		m.markPublished(cctx, receipts[i].Key)
	}
	return nil
}

// untrackAll untracks the deliveries of as.
func (m *Manager) untrackAll(as []answered) {
	for _, a := range as {
		m.untrack(a.d)
	}
}

// answered reports whether in was answered already (its receipt exists)
// and if so deals with d: the stored final is published again when it may
// not have reached the bus, and d is acknowledged. Nothing else is
// published for it. A failed lookup leaves d for redelivery and reports
// true, so the caller does not process it either.
func (m *Manager) answered(ctx context.Context, in *bus.Inbound, d bus.Delivery) bool {
	r, ok, err := m.deps.Store.Receipt(ctx, in.DedupKey())
	switch {
	case err != nil:
		m.log.Error("receipt lookup failed; message left for redelivery", "key", in.DedupKey(), "err", err)
		m.untrack(d)
		return true
	case !ok:
		return false
	}
	m.suppress(ctx, in, r, d)
	return true
}

// suppress answers a duplicate delivery of in from its receipt r.
func (m *Manager) suppress(ctx context.Context, in *bus.Inbound, r memory.Receipt, d bus.Delivery) {
	m.deps.Observer.Inbound(in.Channel, "duplicate")
	m.deps.Observer.DuplicateSuppressed(in.Channel)
	if err := m.replayReceipt(ctx, r, d); err != nil {
		m.log.Error("replay failed", "key", in.DedupKey(), "err", err)
	}
}

// markPublished records that a final envelope reached the bus, so a later
// re-publication of the same inbound message is acknowledged silently.
func (m *Manager) markPublished(ctx context.Context, key string) {
	if err := m.deps.Store.MarkPublished(ctx, key); err != nil {
		m.log.Warn("could not mark the final answer as published", "key", key, "err", err)
	}
}

// replayReceipt handles a message that already has a receipt: if its final
// envelope was published it just acknowledges d; otherwise (the daemon died
// between commit and publish) it publishes the stored envelope, with the
// same outbound id so the bus de-duplicates it, then acknowledges d.
func (m *Manager) replayReceipt(ctx context.Context, r memory.Receipt, d bus.Delivery) error {
	if r.Published {
		m.log.Info("duplicate inbound message ignored: already answered", "key", r.Key)
		m.done(d)
		return nil
	}
	var out bus.Outbound
	if err := json.Unmarshal(r.Final, &out); err != nil {
		// A receipt we cannot read must not make the message loop forever.
		m.log.Error("stored final envelope is unreadable; acknowledging without re-publishing", "key", r.Key, "err", err)
		m.done(d)
		return nil
	}
	if err := m.deps.Publisher.Publish(ctx, m.opt.Subjects.Out(out.Channel, out.ChatID), r.Final, out.ID); err != nil {
		m.untrack(d)
		return fmt.Errorf("agent: re-publish final: %w", err)
	}
	m.log.Info("answer of an already handled message re-published from its receipt", "key", r.Key)
	m.done(d)
	m.markPublished(ctx, r.Key)
	return nil
}

// finishSimple answers a message with one final envelope and no history.
func (m *Manager) finishSimple(ctx context.Context, in *bus.Inbound, d bus.Delivery, kind, text string, fresh bool) {
	out := newOutbound(in, kind, text, 1, true)
	if err := m.deliverFinal(ctx, in, d, out, nil, fresh); err != nil && !errors.Is(err, errAlreadyAnswered) {
		m.logUndelivered(m.log.With("key", in.DedupKey()), err)
	}
}

type answer struct{ kind, text string }

// steer offers a /steer text to the session's running turn. handled is
// false when no turn is running (the text then goes to the model as a
// normal message). The caller holds m.mu.
func (m *Manager) steer(s *session, text string) (a answer, handled bool) {
	switch {
	case text == "":
		return answer{bus.KindError, "Usage: /steer <what to do differently>"}, true
	case utf8.RuneCountInString(text) > maxSteerChars:
		return answer{bus.KindError, fmt.Sprintf("Steering text is limited to %d characters.", maxSteerChars)}, true
	case s == nil:
		return answer{}, false
	}
	switch s.offerSteer(text) {
	case steerAccepted:
		return answer{bus.KindNotice, "Got it: I will take this into account at the next step of the running task."}, true
	case steerFull:
		return answer{bus.KindError, fmt.Sprintf("%d steering messages are already waiting; wait for the task to pick them up.", maxSteerItems)}, true
	}
	return answer{}, false
}

// handleStop answers /stop, bypassing the session queue: it cancels the
// session's running turn, if any.
func (m *Manager) handleStop(ctx context.Context, s *session, in *bus.Inbound, d bus.Delivery) {
	if m.answered(ctx, in, d) {
		return
	}
	text := "Nothing is running."
	if s != nil && s.stop() {
		text = "Stopping the running request."
	}
	m.finishSimple(ctx, in, d, bus.KindNotice, text, false)
}

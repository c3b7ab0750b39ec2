package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/switchboard-chat/switchboard/agent/loop"
	"github.com/switchboard-chat/switchboard/bus"
	"github.com/switchboard-chat/switchboard/internal/failpoint"
	"github.com/switchboard-chat/switchboard/internal/observe"
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

// Deps are the manager's collaborators. Source, Publisher, Store and
// Main's Model and Prompts are required.
type Deps struct {
	Source    Source
	Publisher Publisher
	Store     memory.Store
	Log       *slog.Logger
	// Observer, when set, receives measurements for metrics.
	Observer Observer
	// Pairing, when set, answers /pair approve CODE from an owner and
	// says whose tool calls run as an owner's; unset, nobody's do.
	Pairing Pairing
	// Main is the agent main's collaborators (its model, tools, prompt
	// files, memory, skills, summarizer, Close). Its Name, Config and
	// Settings are NewManager's: MainAgent, NewManager's Config and
	// Options' model settings; a later Replace of main uses the new
	// profile's.
	Main Profile
	// Agents are the agents beside main and how a new session picks one.
	Agents Agents
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
// ones to the DLQ, routes valid ones to their session (in order within a
// session, concurrently across sessions up to Config.MaxConcurrentTurns),
// answers commands, and acknowledges a message only once its final
// outbound message is persisted and published. A session has a goroutine
// only while it has messages to process; an idle one stays in memory,
// with its conversation cache, for Config.SessionIdle, then is retired.
//
// Create it with NewManager and call Run once.
type Manager struct {
	env    *sessionEnv // settings and collaborators shared with the sessions
	source Source
	sem    chan struct{} // turn slots (agent.max_concurrent_turns)

	mu       sync.Mutex // guards sessions and peak; taken before session.mu and courier.mu
	sessions map[string]*session
	peak     int // most sessions the map held since it was last rebuilt (shrink)

	agents  *agentSet // every agent's current generation, main's included
	resolve func(bus.Speaker) string

	wg          sync.WaitGroup // heartbeat, sweep, summaries, command goroutines
	sessWG      sync.WaitGroup // session goroutines
	summaryJobs chan summaryJob
}

// sessionEnv is one agent's generation as its sessions see it: settings,
// collaborators (prof), the courier that delivers answers and the turn
// counters (shared by every agent). It never changes once built; the
// manager's own (Manager.env) has no agent's collaborators (prof and exec
// are zero), only the shared parts.
type sessionEnv struct {
	agent   string // the agent's name
	cfg     Config
	opt     Options
	deps    Deps
	prof    Profile
	exec    *loop.Executor
	courier *courier
	stats   *turnStats
	log     *slog.Logger
	heads   *promptHeads // the shared heads of the agent's system prompts; nil in the manager's base env
}

// turnStats count turns for the logs and /status. Safe for concurrent use.
type turnStats struct {
	start    time.Time
	answered atomic.Int64 // turns answered since start
	seq      atomic.Int64 // numbers turns in logs
}

// NewManager validates its arguments and returns a manager. It does no I/O.
func NewManager(cfg Config, opt Options, deps Deps) (*Manager, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("agent: %w", err)
	}
	if deps.Source == nil || deps.Publisher == nil || deps.Store == nil || deps.Main.Model == nil || deps.Main.Prompts == nil {
		return nil, errors.New("agent: NewManager: Source, Publisher, Store and Main's Model and Prompts are required")
	}
	opt = opt.withDefaults()
	log := deps.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if deps.Observer == nil {
		deps.Observer = nopObserver{}
	}
	mlog := log.With("component", "agent")
	env := &sessionEnv{agent: MainAgent, cfg: cfg, opt: opt, deps: deps, log: mlog,
		courier: newCourier(deps, opt, mlog),
		stats:   &turnStats{start: opt.Now()}}
	env.deps.Main, env.deps.Agents = Profile{}, Agents{}
	agents, err := newAgents(env, deps.Main, deps.Agents)
	if err != nil {
		return nil, fmt.Errorf("agent: %w", err)
	}
	return &Manager{
		env:         env,
		agents:      agents,
		resolve:     deps.Agents.Resolve,
		source:      deps.Source,
		sem:         make(chan struct{}, cfg.MaxConcurrentTurns),
		sessions:    map[string]*session{},
		summaryJobs: make(chan summaryJob, summaryQueue),
	}, nil
}

// withDefaults fills the unset options.
func (opt Options) withDefaults() Options {
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
	return opt
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
	m.wg.Go(func() { m.env.courier.heartbeat(runCtx, m.env.opt.Heartbeat) })
	m.wg.Go(func() { m.sweeper(runCtx) })
	m.summaries(runCtx)
	err := m.source.Consume(ctx, func(d bus.Delivery) { m.dispatch(runCtx, d) })
	// Running sessions see the flag before their next turn and end; idle
	// ones have no goroutine.
	m.env.courier.draining.Store(true)
	drained := make(chan struct{})
	go func() { m.sessWG.Wait(); close(drained) }() // joined below: ends once sessions exit
	timer := time.NewTimer(m.env.opt.ShutdownTimeout)
	select {
	case <-drained:
	case <-timer.C:
		m.env.log.Warn("shutdown timeout: cancelling running turns; their messages will be redelivered", "timeout", m.env.opt.ShutdownTimeout)
	}
	timer.Stop()
	cancel()
	<-drained
	m.wg.Wait()
	m.agents.closeAll()
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

// ActiveSessions returns the number of sessions in memory: with messages
// to process, or idle for less than Config.SessionIdle.
func (m *Manager) ActiveSessions() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.sessions)
}

// Sessions returns a read-only snapshot of the sessions in memory, sorted
// by key (the web console's dashboard shows it).
func (m *Manager) Sessions() []observe.Session {
	m.mu.Lock()
	defer m.mu.Unlock()
	now := time.Now()
	out := make([]observe.Session, 0, len(m.sessions))
	for k, s := range m.sessions {
		s.mu.Lock()
		st := observe.Session{Key: k, State: "idle", Queued: len(s.queue), LastActivity: s.idleSince}
		switch {
		case s.running:
			st.State, st.LastActivity = "running", now
		case len(s.queue) > 0:
			st.State = "queued"
		}
		s.mu.Unlock()
		out = append(out, st)
	}
	slices.SortFunc(out, func(a, b observe.Session) int { return strings.Compare(a.Key, b.Key) })
	return out
}

// The Manager is its sessions' host (sessionHost).

func (m *Manager) acquireTurn(ctx context.Context) (release func(), ok bool) {
	select {
	case m.sem <- struct{}{}:
		return func() { <-m.sem }, true
	case <-ctx.Done():
		return nil, false
	}
}

func (m *Manager) background(f func()) { m.wg.Go(f) }

func (m *Manager) acquireAgent(ctx context.Context, name string) (*generation, bool) {
	return m.agents.acquire(ctx, name)
}

func (m *Manager) releaseAgent(g *generation) { m.agents.release(g) }

func (m *Manager) agentEnv(name string) *sessionEnv { return m.agents.current(name) }

// Replace puts a new generation of the running agent name in force (a
// configuration reload): new turns of that agent wait while its running
// ones finish, for at most Options.ShutdownTimeout; then its generation is
// closed (Profile.Close), open opens the next and the waiting turns go on
// with it. Sessions keep the agent; their next turn uses the new profile.
// When the agent stays busy the running generation stays; when open fails
// or returns an invalid profile, fallback reopens the running settings;
// either way the error says why the new settings were not applied. Safe
// for concurrent use with the sessions; one change runs at a time.
func (m *Manager) Replace(name string, open, fallback func() (Profile, error)) error {
	if err := m.agents.replace(name, m.env.opt.ShutdownTimeout, open, fallback); err != nil {
		return fmt.Errorf("agent %s: %w", name, err)
	}
	return nil
}

// Swap puts p in force for the running agent p.Name at once (a reload
// that changes no files: model or limits): turns already running finish
// with the agent's previous profile, which is closed after the last of
// them; the next turn of every session of the agent uses p. On an error
// (p invalid, no such agent) p is not the manager's: the caller closes it.
func (m *Manager) Swap(p Profile) error {
	if err := m.agents.swap(p); err != nil {
		return fmt.Errorf("agent %s: %w", p.Name, err)
	}
	return nil
}

// Add opens a new agent with open and puts it in force at once: a session
// that Resolve gives it is answered by it from its first message.
func (m *Manager) Add(name string, open func() (Profile, error)) error {
	if err := m.agents.add(name, m.env.opt.ShutdownTimeout, open); err != nil {
		return fmt.Errorf("agent %s: %w", name, err)
	}
	return nil
}

// Remove takes agent name out of force (main cannot be): its running
// turns finish, then its sessions are answered by main from their next
// message, and it is closed after its last turn.
func (m *Manager) Remove(name string) error {
	if err := m.agents.remove(name); err != nil {
		return fmt.Errorf("agent %s: %w", name, err)
	}
	m.env.log.Info("agent removed: its sessions are answered by main from their next message", "agent", name)
	return nil
}

func (m *Manager) draining() bool { return m.env.courier.draining.Load() }

// sweeper retires the sessions idle for longer than Config.SessionIdle,
// every quarter of it (at least every minute), until ctx ends.
func (m *Manager) sweeper(ctx context.Context) {
	idle := m.env.cfg.SessionIdle
	t := time.NewTicker(min(idle/4, time.Minute))
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			m.sweep(ctx, now, idle)
		}
	}
}

// sweep removes the sessions that are retirable at now from the map
// (rebuilding it when it shrank a lot: a Go map keeps its memory after
// deletes) and writes their conversations to the daily notes. A message
// for a retired session later starts a new one, loaded from the store.
func (m *Manager) sweep(ctx context.Context, now time.Time, idle time.Duration) {
	var retired []*session
	m.mu.Lock()
	for key, s := range m.sessions {
		if s.retirable(now, idle) {
			delete(m.sessions, key)
			retired = append(retired, s)
		}
	}
	m.sessions = shrunk(m.sessions, &m.peak)
	m.mu.Unlock()
	for _, s := range retired {
		s.noteConversation(ctx) // no goroutine owns the session any more
	}
}

// shrunk returns m, or a copy of it in a map of its size when it holds a
// quarter or less of the most entries it held (peak, updated here) and
// that was many: deleting from a Go map never frees its memory.
func shrunk[K comparable, V any](m map[K]V, peak *int) map[K]V {
	const least = 1024
	*peak = max(*peak, len(m))
	if *peak < least || len(m) > *peak/4 {
		return m
	}
	c := make(map[K]V, len(m))
	for k, v := range m {
		c[k] = v
	}
	*peak = len(c)
	return c
}

// dispatch is called by the source, one message at a time; it never blocks
// on a turn. A session holds at most maxHeldPerSession messages; beyond
// that a message is handed back to the bus to be delivered again later, so
// a flooding chat costs memory for a bounded number of messages only and
// never refuses one. /stop and /steer bypass the queue.
func (m *Manager) dispatch(ctx context.Context, d bus.Delivery) {
	if m.draining() {
		return // not acknowledged: redelivered after the restart
	}
	env := m.env
	in, err := bus.ParseInbound(env.opt.Subjects, d.Subject(), d.Data(), env.opt.MaxTextBytes)
	if err != nil {
		m.reject(ctx, d, err)
		return
	}
	failpoint.Hit(failpoint.Received)
	redelivered := d.Info().NumDelivered > 1
	switch cmd := parseCommand(in.Text); cmd.name {
	case cmdStop:
		m.mu.Lock()
		env.courier.track(d)
		s := m.sessions[in.SessionKey()]
		m.mu.Unlock()
		m.countRedelivery(in, redelivered)
		m.wg.Go(func() { m.handleStop(ctx, s, in, d) })
		return
	case cmdSteer:
		var handled bool
		if in, handled = m.dispatchSteer(ctx, d, in, cmd.arg, redelivered); handled {
			return
		}
	}
	m.mu.Lock()
	key := in.SessionKey()
	s := m.sessions[key]
	if s == nil {
		s = newSession(env, m, key, m.agentFor(in))
		m.sessions[key] = s
		m.peak = max(m.peak, len(m.sessions))
	}
	o := s.offer(item{in: in, d: d}, env.opt.Now(), env.opt.DeferDelay)
	if o.held {
		env.courier.track(d)
	}
	if o.start {
		m.sessWG.Go(func() { s.run(ctx) })
	}
	m.mu.Unlock()
	m.countRedelivery(in, redelivered && !o.back)
	if !o.held {
		if err := d.NakWithDelay(o.delay); err != nil {
			env.log.Warn("could not hand a message of a busy chat back to the bus; it is redelivered after the ack wait", "subject", d.Subject(), "err", err)
		}
	}
}

// dispatchSteer handles a /steer: an answered one is suppressed, one for a
// running turn goes to its inbox and is answered at once. Without a
// running turn it returns the message with the command's argument as its
// text, to be queued like any other (handled false).
func (m *Manager) dispatchSteer(ctx context.Context, d bus.Delivery, in *bus.Inbound, arg string, redelivered bool) (*bus.Inbound, bool) {
	env := m.env
	// A /steer already answered must not reach the running turn again.
	r, found, err := env.deps.Store.Receipt(ctx, in.DedupKey())
	m.mu.Lock()
	env.courier.track(d)
	switch {
	case err != nil:
		m.mu.Unlock()
		m.countRedelivery(in, redelivered)
		env.log.Error("receipt lookup failed", "key", in.DedupKey(), "err", err)
		env.courier.fail(ctx, d, fmt.Errorf("agent: receipt lookup: %w", err))
		return in, true
	case found:
		m.mu.Unlock()
		m.countRedelivery(in, redelivered)
		m.wg.Go(func() { env.courier.suppress(ctx, in, r, d) })
		return in, true
	}
	if reply, handled := m.steer(m.sessions[in.SessionKey()], arg); handled {
		m.mu.Unlock()
		m.countRedelivery(in, redelivered)
		m.wg.Go(func() { env.courier.finishSimple(ctx, in, d, reply.kind, reply.text, false) })
		return in, true
	}
	env.courier.forget(d)
	m.mu.Unlock()
	// No running turn: /steer behaves like a normal message.
	c := *in
	c.Text = arg
	return &c, false
}

// countRedelivery reports a redelivery to the observer.
func (m *Manager) countRedelivery(in *bus.Inbound, redelivered bool) {
	if redelivered {
		m.env.deps.Observer.Redelivered(in.Channel)
	}
}

// reject sends an invalid message to the DLQ, answers its sender when it
// is addressable and removes it from the stream (courier.deadLetter).
// Garbage never stops the daemon and never reaches the model.
func (m *Manager) reject(ctx context.Context, d bus.Delivery, reason error) {
	outcome := "rejected_invalid"
	if errors.Is(reason, bus.ErrTooLarge) {
		outcome = "rejected_too_large"
	}
	m.env.courier.deadLetter(ctx, d, reason, outcome)
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
	switch s.steer.offer(text) {
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
	c := m.env.courier
	if c.answered(ctx, in, d) {
		return
	}
	text := "Nothing is running."
	if s != nil && s.steer.stop() {
		text = "Stopping the running request."
	}
	c.finishSimple(ctx, in, d, bus.KindNotice, text, false)
}

// agentFor names the agent that answers a new session whose first
// message is in (main without a rule). An unknown name is answered by
// main when the session's turn acquires it.
func (m *Manager) agentFor(in *bus.Inbound) string {
	if m.resolve == nil {
		return MainAgent
	}
	name := m.resolve(in.Speaker())
	if name == "" {
		return MainAgent
	}
	return name
}

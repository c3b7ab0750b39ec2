package agent

import (
	"context"
	"fmt"
	"runtime/debug"
	"slices"
	"sync"
	"time"

	"github.com/switchboard-chat/switchboard/agent/loop"
	"github.com/switchboard-chat/switchboard/bus"
	"github.com/switchboard-chat/switchboard/internal/reqlog"
	"github.com/switchboard-chat/switchboard/memory"
)

// item is one queued inbound message.
type item struct {
	in *bus.Inbound
	d  bus.Delivery
}

// sessionHost is what a session needs of the manager that runs it. The
// manager starts a session's goroutine when offer asks for it and removes
// a session idle for Config.SessionIdle from its map (Manager.sweep).
type sessionHost interface {
	// acquireTurn waits for one of agent.max_concurrent_turns turn slots;
	// ok is false when ctx ended first. release frees the slot.
	acquireTurn(ctx context.Context) (release func(), ok bool)
	// background runs f on a goroutine the manager joins at shutdown.
	background(f func())
	// enqueueSummary queues a background summary job without blocking.
	enqueueSummary(j summaryJob)
	// draining reports whether shutdown began: no new turns start.
	draining() bool
	// ActiveSessions is the number of sessions in memory (for /status).
	ActiveSessions() int
	// acquireAgent returns the current generation of the named agent
	// (main's when it no longer exists), waiting while it is drained for a
	// reload; ok is false when ctx ended first. releaseAgent gives it back.
	acquireAgent(ctx context.Context, name string) (g *generation, ok bool)
	releaseAgent(g *generation)
	// agentEnv is the named agent's current environment, not acquired (for
	// settings read between turns).
	agentEnv(name string) *sessionEnv
}

// session is one chat session: its queue, processed in order by a
// goroutine that exists only while there is work (offer starts it, it ends
// when the queue is empty), and what the session keeps between turns (the
// conversation cache, the summary) while it stays in the manager's map for
// Config.SessionIdle after its last turn. The queue, the running flag, the
// idle time, the deferred set and the summary are guarded by mu; the
// running turn's cancel function and /steer inbox by steer; the
// conversation cache, the agent's name and env are owned by the running
// goroutine (taking over from the previous one through mu).
type session struct {
	// base is the manager's environment (courier, store, options), for
	// what is not the agent's; env is the agent's generation of the batch
	// being processed (the last one between batches).
	base *sessionEnv
	env  *sessionEnv
	host sessionHost
	key  string

	mu sync.Mutex
	// queue holds at most maxHeldPerSession messages, in stream order.
	queue []item
	// running is true while a goroutine processes the queue.
	running bool
	// idleSince is when the last goroutine ended (monotonic clock).
	idleSince time.Time
	// deferred are the stream sequences of messages handed back to the bus
	// (NakWithDelay) because the queue was full, with when; while one is
	// outstanding, later messages are handed back too, so the chat's order
	// holds. nil until the first hand-back.
	deferred map[uint64]time.Time
	// summaryShared is the running summary of turns dropped from the
	// context; guarded by mu because the background summariser updates it.
	summaryShared string

	steer steerBox
	conv  conversation
}

// conversation is a session's context cache (session goroutine only).
type conversation struct {
	loaded  bool
	history []memory.Message // context cache, oldest first
	speaker bus.Speaker      // who the last turn was for
	agent   string           // the agent answering the session (main once it was removed)
	// unnoted are the turns answered since the conversation was last
	// written to the daily notes.
	unnoted []memory.Message
}

func newSession(base *sessionEnv, host sessionHost, key, agent string) *session {
	return &session{base: base, env: base, host: host, key: key, conv: conversation{agent: agent}}
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

// offered is what offer did with a message.
type offered struct {
	held  bool          // in the queue; else hand it back after delay
	delay time.Duration // for a message not held
	back  bool          // the message is one this session handed back earlier
	start bool          // held, and the session has no goroutine: start one (run)
}

// offer puts it into the queue, in stream order, when the queue has room
// and no earlier message of the session is still with the bus; otherwise
// the caller hands it back to the bus (bus.Delivery.NakWithDelay) with the
// returned delay, which grows with the messages ahead of it. base is
// Options.DeferDelay. When it holds the message and the session has no
// goroutine, it marks the session running and reports start: the caller
// must then start run. The caller holds m.mu.
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
		if back {
			delete(s.deferred, seq)
		}
		if len(s.deferred) == 0 {
			s.deferred = nil // a map keeps its memory after deletes
		}
		i := len(s.queue)
		for seq != 0 && i > 0 && s.queue[i-1].d.Info().Sequence > seq {
			i--
		}
		s.queue = slices.Insert(s.queue, i, it)
		start := !s.running
		s.running = true
		return offered{held: true, back: back, start: start}
	}
	if seq != 0 {
		if s.deferred == nil {
			s.deferred = map[uint64]time.Time{}
		}
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
// speaker, as long as their texts together stay within limit bytes. It
// returns none, and marks the session no longer running (stopRunning),
// when the queue is empty, ctx ended or shutdown began: the calling
// goroutine must then end. Messages left queued at shutdown are not
// acknowledged: the bus redelivers them after the restart.
func (s *session) next(ctx context.Context, collect bool, limit int) []item {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.queue) == 0 || ctx.Err() != nil || s.host.draining() {
		s.stopRunning()
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
	if len(s.queue) == 0 {
		s.queue = nil // the array goes with the last message it held
	}
	return batch
}

func (s *session) queued() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.queue)
}

// run processes the queue until it is empty, ctx ends or shutdown
// begins; then the goroutine ends and the session waits, without one, for
// its next message (offer) or for the manager to retire it
// (Manager.sweep). Only one run is active per session (offer's start).
func (s *session) run(ctx context.Context) {
	ctx = reqlog.WithSession(ctx, s.key) // the dashboard's record of what the model was sent
	for {
		env := s.host.agentEnv(s.conv.agent)
		batch := s.next(ctx, env.cfg.QueueMode == QueueCollect, env.opt.MaxTextBytes)
		if len(batch) == 0 {
			return
		}
		s.process(ctx, batch)
	}
}

// stopRunning ends the session's goroutine: the conversation cache is
// trimmed to what it holds (the session may stay idle in memory for a
// long time) and the session is marked idle. The caller holds s.mu and is
// the running goroutine.
func (s *session) stopRunning() {
	s.conv.history = tight(s.conv.history)
	if s.env.prof.Memory == nil {
		s.conv.unnoted = nil // only the daily notes read it
	}
	// unnoted is not made tight: it grows by append every turn, so a copy
	// of it at every pause would cost as much again; it shares the
	// messages' blocks with history and is bounded (keepForNote).
	s.running = false
	s.idleSince = time.Now()
}

// tight returns ms, copied into an array of its length when the one it is
// in has much room to spare (append's growth, the loop's headroom): what
// an idle session keeps costs only what it holds.
func tight(ms []memory.Message) []memory.Message {
	if len(ms) == 0 {
		return nil
	}
	if cap(ms)-len(ms) <= len(ms)/2+4 {
		return ms
	}
	return slices.Clone(ms)
}

// retirable reports whether the session may leave the manager's map: no
// goroutine, nothing queued, idle for longer than idle at now, and no
// handed-back message outstanding (entries older than deferExpiry are
// dropped first). The caller holds m.mu.
func (s *session) retirable(now time.Time, idle time.Duration) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.running || len(s.queue) > 0 || now.Sub(s.idleSince) < idle {
		return false
	}
	expiry := deferExpiry(s.base.opt.DeferDelay)
	at := s.base.opt.Now()
	for q, t := range s.deferred {
		if at.Sub(t) > expiry {
			delete(s.deferred, q)
		}
	}
	if len(s.deferred) > 0 {
		return false
	}
	s.deferred = nil
	return true
}

// process handles the messages of one turn (one message, or several
// collected ones); a panic in it answers the users with an error instead
// of killing the daemon. Before anything is published for a message, its
// receipt is looked up: an answered message only gets its stored final
// again (or nothing, when that was published), never a typing signal, a
// delta or a second answer.
func (s *session) process(ctx context.Context, batch []item) {
	c := s.base.courier
	g, ok := s.host.acquireAgent(ctx, s.conv.agent)
	if !ok {
		return // shutting down: left for redelivery
	}
	defer s.host.releaseAgent(g)
	if g.env.agent != s.conv.agent {
		s.base.log.Info("the session's agent was removed: main answers it from now on", "session", s.key, "agent", s.conv.agent)
		s.conv.agent = g.env.agent
	}
	s.env = g.env
	defer func() {
		if r := recover(); r != nil {
			s.env.log.Error("turn panicked", "session", s.key, "panic", r, "stack", string(debug.Stack()))
			s.conv.loaded = false // the cache may be inconsistent: reload next time
			for _, it := range batch {
				c.finishSimple(ctx, it.in, it.d, bus.KindError, "Sorry, something went wrong inside Switchboard while answering. The operator can find details in the log.", false)
			}
		}
	}()
	batch, again := s.unanswered(ctx, batch)
	defer func() {
		for _, it := range again {
			if !c.answered(ctx, it.in, it.d) {
				c.untrack(it.d) // its first copy was not answered either
			}
		}
	}()
	if len(batch) == 0 {
		return
	}
	for _, it := range batch {
		s.env.deps.Observer.Inbound(it.in.Channel, "accepted")
	}
	if len(batch) == 1 && s.command(ctx, batch[0]) {
		return
	}
	release, ok := s.host.acquireTurn(ctx)
	if !ok {
		return
	}
	defer release()
	s.turn(ctx, batch)
}

// unanswered splits a batch into the messages to answer and second copies
// of them (answered by the first); messages answered before are dealt
// with from their receipts and left out.
func (s *session) unanswered(ctx context.Context, batch []item) (fresh, again []item) {
	seen := map[string]bool{}
	for _, it := range batch {
		switch {
		case seen[it.in.DedupKey()]:
			again = append(again, it) // a second copy: answered by the first
		case s.env.courier.answered(ctx, it.in, it.d):
		default:
			seen[it.in.DedupKey()] = true
			fresh = append(fresh, it)
		}
	}
	return fresh, again
}

// command answers a session command (/new, /help, /compact, /status);
// false when it is none.
func (s *session) command(ctx context.Context, it item) bool {
	c := s.env.courier
	switch cmd := parseCommand(it.in.Text); cmd.name {
	case cmdNew:
		s.conv.history, s.conv.loaded = nil, true
		s.setSummary("")
		c.finishSimple(ctx, it.in, it.d, bus.KindNotice, "Started a new conversation. Earlier messages stay on disk but are no longer part of the context.", true)
	case cmdHelp:
		c.finishSimple(ctx, it.in, it.d, bus.KindNotice, helpText, false)
	case cmdCompact:
		if err := s.load(ctx); err != nil {
			c.fail(ctx, it.d, err)
			return true
		}
		c.finishSimple(ctx, it.in, it.d, bus.KindNotice, s.compactNow(ctx), false)
	case cmdStatus:
		s.load(ctx)
		c.finishSimple(ctx, it.in, it.d, bus.KindNotice, s.status(it.in), false)
	case cmdPair:
		c.finishSimple(ctx, it.in, it.d, bus.KindNotice, pairCommand(s.env.deps.Pairing, it.in, cmd.arg), false)
	default:
		return false
	}
	return true
}

// status describes the session for /status, asked by in's speaker: the
// session's own facts, and the daemon's (active sessions, turns answered,
// uptime) only for an owner (access.owners) or the operator's console.
// Called from the session goroutine.
func (s *session) status(in *bus.Inbound) string {
	env := s.env
	turns := len(loop.TurnStarts(s.conv.history))
	model := env.opt.ModelName
	if model == "" {
		model = "(unknown)"
	}
	out := fmt.Sprintf("Session: %s\nAgent: %s\nTurns in context: %d (max %d)\nMessages waiting: %d\nModel: %s",
		s.key, env.agent, turns, env.cfg.MaxContextTurns, s.queued(), model)
	const console = "console" // the operator's `switchboard chat`
	if in.Channel != console && (env.deps.Pairing == nil || !env.deps.Pairing.Owner(in.Channel, in.UserID)) {
		return out
	}
	return out + fmt.Sprintf("\nActive sessions: %d\nTurns answered since start: %d\nUp for: %s",
		s.host.ActiveSessions(), env.stats.answered.Load(), env.opt.Now().Sub(env.stats.start).Round(time.Second))
}

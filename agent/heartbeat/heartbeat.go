// Package heartbeat runs the agents' heartbeats (agents.<name>.heartbeat,
// docs/agents.md): at each interval within its active hours, one proactive
// turn of the agent, in the agent's own heartbeat session, that reads
// HEARTBEAT.md and either says something to the target chat or answers
// [SilentToken] (or nothing), which sends nothing.
//
// # On the bus
//
// A heartbeat turn is an inbound envelope on the heartbeat channel:
// subject chat.in.heartbeat.<agent>, channel [Channel], chat_id the
// agent's name, user "heartbeat", text "[Heartbeat] <prompt>" ([Trigger]).
// Its session is therefore "heartbeat/<agent>", apart from every chat:
// the agent's bindings do not apply (the router gives the session to the
// agent it names), and its history is bounded to the last [KeepTurns]
// turns, so a heartbeat every 30 minutes never grows a big context. The
// runtime answers it like a scheduled task (a proactive turn, which may
// end silently); the answer is published on chat.out.heartbeat.<agent>,
// where the [Runner] reads it from the out stream through the durable
// consumer [RelayConsumer] and, unless it is silent, publishes it to the
// target chat as a proactive message (kind reply, in_reply_to empty,
// final; id "hb-out:<turn id>", de-duplicated by the out stream over its
// retention), acknowledging the answer only once that publish is stored:
// an answer published while the daemon stops is relayed after the
// restart, and a second delivery of it is dropped as a duplicate.
//
// # Once per slot, across restarts
//
// Time is cut into slots of every (since the Unix epoch); the turn of a
// slot has the id "hb:<agent>:<slot unix time>". The mechanism is the
// scheduler's (tools/schedule): publish first with that id as the
// Nats-Msg-Id, then record the slot in data_dir/heartbeat.db. A crash in
// between publishes the same id again after the restart, which JetStream's
// de-duplication and the runtime's receipts drop; a recorded slot is never
// published again. A slot whose target chat has a turn running is skipped
// (logged, counted, an event), as is one outside active_hours, or one
// whose target is "last" before any direct chat was seen.
//
// `switchboard heartbeat now AGENT` publishes a trigger with a fresh id on
// the bus as the operator ([RunVerb]); the daemon answers it like a slot's.
//
// "last" is the user's last active direct chat with the agent: the Runner
// follows the inbound subjects and keeps, per agent, the last direct
// (non-group) chat a message came from, in heartbeat.db.
package heartbeat

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	bolt "go.etcd.io/bbolt"

	"github.com/switchboard-chat/switchboard/bus"
	"github.com/switchboard-chat/switchboard/bus/natsbus"
	"github.com/switchboard-chat/switchboard/internal/observe"
	"github.com/switchboard-chat/switchboard/internal/provision"
)

// Channel is the channel of heartbeat turns: their session is
// "heartbeat/<agent>".
const Channel = bus.HeartbeatChannel

// User is the user id of heartbeat turns.
const User = "heartbeat"

// KeepTurns bounds the heartbeat session's history: its requests carry at
// most its last KeepTurns turns.
const KeepTurns = 4

// MetaAgent is the inbound and outbound meta key naming the heartbeat's
// agent.
const MetaAgent = "heartbeat"

// FileName is the heartbeat state's file in data_dir.
const FileName = "heartbeat.db"

// maxSleep bounds one wait of the loop, so that a change of the wall
// clock is noticed.
const maxSleep = time.Minute

var (
	bucketSlots = []byte("heartbeat_slots") // agent → last slot handled (unix seconds)
	bucketLast  = []byte("heartbeat_last")  // agent → last direct chat (JSON Target)
)

// Outcomes counted by the Observer.
const (
	OutcomeFired       = "fired"        // a turn was published
	OutcomeSkippedBusy = "skipped_busy" // the target chat had a turn running
	OutcomeNoTarget    = "skipped_no_target"
	OutcomeSent        = "sent"   // the turn said something; sent to the target chat
	OutcomeSilent      = "silent" // the turn answered the silent token or nothing
	OutcomeFailed      = "failed" // publishing failed, or the turn ended in an error
)

// Agent is one agent's heartbeat.
type Agent struct {
	Name   string
	Config Config
}

// Publisher publishes a message with a de-duplication id (the bus).
type Publisher interface {
	Publish(ctx context.Context, subject string, data []byte, msgID string) error
}

// Observer counts heartbeat outcomes (metrics).
type Observer interface {
	Heartbeat(agent, outcome string)
}

// Options are the Runner's collaborators.
type Options struct {
	Subjects  bus.Subjects
	Publisher Publisher
	// Conn, when set, is followed for the answers of heartbeat turns (to
	// relay them) and for the last direct chats; events are published on
	// it.
	Conn *nats.Conn
	// DataDir holds heartbeat.db.
	DataDir string
	// Busy reports whether the session has a turn running (nil: never).
	Busy func(session string) bool
	// Resolve names the agent a chat's new session gets (the bindings),
	// for "last" (nil: main).
	Resolve  func(bus.Speaker) string
	Observer Observer
	Log      *slog.Logger
	// Now is the clock (default time.Now).
	Now func() time.Time
}

// Runner fires the heartbeats of the agents it holds and relays what they
// say. Safe for concurrent use; Run is its lifecycle.
type Runner struct {
	opt  Options
	db   *bolt.DB
	wake chan struct{}

	// wantLast: some agent's heartbeat goes to its user's last direct chat
	// (to: last), so inbound messages are followed; none: they are not
	// decoded at all.
	wantLast atomic.Bool

	mu     sync.Mutex
	agents map[string]Config
	slots  map[string]int64  // agent → last slot handled
	last   map[string]Target // agent → last direct chat
}

// New returns a runner of agents (those whose heartbeat is off are held
// for `heartbeat now` and relays only). It does no I/O: Run opens
// data_dir/heartbeat.db and closes it when it returns.
func New(opt Options, agents []Agent) *Runner {
	if opt.Log == nil {
		opt.Log = slog.New(slog.DiscardHandler)
	}
	if opt.Now == nil {
		opt.Now = time.Now
	}
	if opt.Subjects.Prefix == "" {
		opt.Subjects.Prefix = "chat"
	}
	r := &Runner{opt: opt, wake: make(chan struct{}, 1)}
	r.Swap(agents)
	return r
}

// open opens the state file and reads it.
func (r *Runner) open() error {
	if r.opt.Publisher == nil {
		return errors.New("heartbeat: a publisher is required")
	}
	db, err := bolt.Open(filepath.Join(r.opt.DataDir, FileName), 0o600, &bolt.Options{Timeout: 5 * time.Second})
	if err != nil {
		return fmt.Errorf("heartbeat: open state: %w", err)
	}
	slots, last, err := load(db)
	if err != nil {
		_ = db.Close()
		return err
	}
	r.mu.Lock()
	r.db, r.slots, r.last = db, slots, last
	r.mu.Unlock()
	return nil
}

// load reads the recorded slots and last chats.
func load(db *bolt.DB) (slots map[string]int64, last map[string]Target, err error) {
	slots, last = map[string]int64{}, map[string]Target{}
	err = db.Update(func(tx *bolt.Tx) error {
		for _, name := range [][]byte{bucketSlots, bucketLast} {
			if _, err := tx.CreateBucketIfNotExists(name); err != nil {
				return err
			}
		}
		if err := tx.Bucket(bucketSlots).ForEach(func(k, v []byte) error {
			n, err := strconv.ParseInt(string(v), 10, 64)
			if err == nil {
				slots[string(k)] = n
			}
			return nil
		}); err != nil {
			return err
		}
		return tx.Bucket(bucketLast).ForEach(func(k, v []byte) error {
			var t Target
			if json.Unmarshal(v, &t) == nil {
				last[string(k)] = t
			}
			return nil
		})
	})
	if err != nil {
		return nil, nil, fmt.Errorf("heartbeat: load state: %w", err)
	}
	return slots, last, nil
}

// Swap puts agents' heartbeats in force (a configuration reload) and
// returns a line per change, for the reload's log.
func (r *Runner) Swap(agents []Agent) []string {
	next := make(map[string]Config, len(agents))
	for _, a := range agents {
		next[a.Name] = a.Config
	}
	r.mu.Lock()
	var changes []string
	for name, c := range next {
		if old, ok := r.agents[name]; r.agents != nil && (!ok || old != c) {
			changes = append(changes, fmt.Sprintf("agents.%s.heartbeat: %s", name, describe(c)))
		}
	}
	for name := range r.agents {
		if _, ok := next[name]; !ok {
			changes = append(changes, fmt.Sprintf("agents.%s.heartbeat: agent removed", name))
		}
	}
	r.agents = next
	r.mu.Unlock()
	r.wantLast.Store(anyLast(next))
	slices.Sort(changes)
	select {
	case r.wake <- struct{}{}:
	default:
	}
	return changes
}

func describe(c Config) string {
	if !c.Enabled() {
		return "off"
	}
	s := fmt.Sprintf("every %s to %s", c.Every, c.To)
	if c.ActiveHours != "" {
		s += " during " + c.ActiveHours
	}
	return s
}

// Run fires the heartbeats until ctx ends, relays their answers and
// follows the direct chats (with Options.Conn), then returns nil.
func (r *Runner) Run(ctx context.Context) error {
	if err := r.open(); err != nil {
		return err
	}
	defer func() { _ = r.db.Close() }()
	if c := r.opt.Conn; c != nil {
		stop, err := r.followAnswers(ctx, c)
		if err != nil {
			if ctx.Err() != nil {
				return nil // stopped while starting
			}
			return err
		}
		defer stop()
		in, err := c.Subscribe(r.opt.Subjects.InAll(), func(m *nats.Msg) { r.noteInbound(m.Data) })
		if err != nil {
			return fmt.Errorf("heartbeat: follow chats: %w", err)
		}
		defer func() { _ = in.Unsubscribe() }()
	}
	for {
		next := r.tick(ctx)
		wait := min(max(next.Sub(r.opt.Now()), 0), maxSleep)
		timer := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			timer.Stop()
			return nil
		case <-r.wake:
		case <-timer.C:
		}
		timer.Stop()
	}
}

// tick handles the slot due of every agent and returns when the next one
// begins.
func (r *Runner) tick(ctx context.Context) time.Time {
	now := r.opt.Now()
	r.mu.Lock()
	names := make([]string, 0, len(r.agents))
	for name, c := range r.agents {
		if c.Enabled() {
			names = append(names, name)
		}
	}
	r.mu.Unlock()
	slices.Sort(names)
	next := now.Add(maxSleep)
	for _, name := range names {
		r.mu.Lock()
		c, done := r.agents[name], r.slots[name]
		r.mu.Unlock()
		slot := now.Truncate(c.Every)
		if n := slot.Add(c.Every); n.Before(next) {
			next = n
		}
		if slot.Unix() <= done || !c.active(now) || ctx.Err() != nil {
			continue
		}
		r.fireSlot(ctx, name, c, slot)
	}
	return next
}

// fireSlot publishes the turn of agent's slot, unless the target chat is
// busy or unknown, and records the slot.
func (r *Runner) fireSlot(ctx context.Context, name string, c Config, slot time.Time) {
	id := fmt.Sprintf("hb:%s:%d", name, slot.Unix())
	to, ok := r.target(name, c)
	log := r.opt.Log.With("agent", name, "slot", slot, "id", id)
	switch {
	case !ok:
		log.Info("heartbeat skipped: no direct chat with the agent seen yet (to: last)")
		r.outcome(ctx, name, OutcomeNoTarget, id, to)
	case r.opt.Busy != nil && r.opt.Busy(to.session()):
		log.Info("heartbeat skipped: the target chat has a turn running", "to", to)
		r.outcome(ctx, name, OutcomeSkippedBusy, id, to)
	default:
		if err := r.publish(ctx, name, c, id, slot); err != nil {
			if ctx.Err() == nil {
				log.Warn("heartbeat not published; tried again at the next wake", "err", err)
				r.outcome(ctx, name, OutcomeFailed, id, to)
			}
			return // not recorded: the slot is published again (same id)
		}
		log.Info("heartbeat fired", "to", to)
		r.outcome(ctx, name, OutcomeFired, id, to)
	}
	if err := r.record(name, slot.Unix()); err != nil {
		log.Error("heartbeat: slot not recorded; a restart publishes it again (dropped as a duplicate)", "err", err)
	}
}

// publish sends a turn's trigger with its de-duplication id.
func (r *Runner) publish(ctx context.Context, name string, c Config, id string, at time.Time) error {
	in := Trigger(name, id, c.prompt(), at)
	data, err := json.Marshal(in)
	if err != nil {
		return err
	}
	return r.opt.Publisher.Publish(ctx, r.opt.Subjects.In(Channel, name), data, in.DedupKey())
}

// Trigger is the inbound envelope of a heartbeat turn of agent.
func Trigger(agent, id, prompt string, at time.Time) bus.Inbound {
	return bus.Inbound{V: bus.Version, ID: id, Channel: Channel, ChatID: agent, UserID: User,
		Text: "[Heartbeat] " + prompt, Mentioned: true, TS: at.UTC().Format(time.RFC3339),
		Meta: map[string]string{MetaAgent: agent}}
}

// record notes that agent's slot was handled.
func (r *Runner) record(name string, slot int64) error {
	r.mu.Lock()
	r.slots[name] = max(r.slots[name], slot)
	r.mu.Unlock()
	return r.db.Update(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketSlots).Put([]byte(name), []byte(strconv.FormatInt(slot, 10)))
	})
}

// target is the chat agent's heartbeat speaks to (ok false: "last" and
// none seen yet).
func (r *Runner) target(name string, c Config) (Target, bool) {
	if !c.To.Last {
		return c.To, !c.To.IsZero()
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	t, ok := r.last[name] // nil before Run: none
	return t, ok
}

func (t Target) session() string {
	return bus.Speaker{Channel: t.Channel, ChatID: t.ChatID, ThreadID: t.ThreadID}.SessionKey()
}

// anyLast reports whether some agent's heartbeat goes to "last".
func anyLast(agents map[string]Config) bool {
	for _, c := range agents {
		if c.To.Last {
			return true
		}
	}
	return false
}

// noteInbound keeps the last direct chat of the agent a message goes to,
// for the agents whose heartbeat goes to "last" (written to the state file
// only when it changes).
func (r *Runner) noteInbound(data []byte) {
	if !r.wantLast.Load() {
		return
	}
	var in bus.Inbound
	if json.Unmarshal(data, &in) != nil || in.IsGroup || in.Channel == Channel || !bus.ValidChannel(in.Channel) || in.ChatID == "" {
		return
	}
	name := "main"
	if r.opt.Resolve != nil {
		name = r.opt.Resolve(in.Speaker())
	}
	t := Target{Channel: in.Channel, ChatID: in.ChatID, ThreadID: in.ThreadID}
	r.mu.Lock()
	if !r.agents[name].To.Last {
		r.mu.Unlock()
		return
	}
	same := r.last[name] == t
	r.last[name] = t
	r.mu.Unlock()
	if same {
		return
	}
	v, _ := json.Marshal(t)
	if err := r.db.Update(func(tx *bolt.Tx) error { return tx.Bucket(bucketLast).Put([]byte(name), v) }); err != nil {
		r.opt.Log.Warn("heartbeat: last direct chat not recorded", "agent", name, "err", err)
	}
}

// RelayConsumer is the durable consumer on the out stream from which the
// Runner reads the heartbeat turns' answers (chat.out.heartbeat.>); the
// instances of a cluster share it, so each answer is relayed by one.
const RelayConsumer = "heartbeat_relay"

// relayAckWait is how long an answer may stay unacknowledged (a relay
// being published) before JetStream delivers it again.
const relayAckWait = 30 * time.Second

// relayRetry is how long a relay that could not be published waits before
// its answer is delivered again.
const relayRetry = 2 * time.Second

// followAnswers reads the heartbeat turns' answers from the out stream
// through the durable [RelayConsumer] (created or updated through
// internal/provision) and relays each: acknowledged once its relay is
// stored (a de-duplicated publish), delivered again when it could not be
// (or when the daemon stopped in between), so an answer published while
// the daemon stops is relayed after the restart, exactly once. It returns
// what stops the consumption and waits for the relay running.
func (r *Runner) followAnswers(ctx context.Context, c *nats.Conn) (func(), error) {
	js, err := jetstream.New(c)
	if err != nil {
		return nil, fmt.Errorf("heartbeat: follow answers: %w", err)
	}
	stream := natsbus.StreamsFor(r.opt.Subjects.Prefix).Out
	var cons jetstream.Consumer
	err = provision.Do(ctx, r.opt.Log, "consumer "+stream+"/"+RelayConsumer, 0, func(ctx context.Context) error {
		cons, err = js.CreateOrUpdateConsumer(ctx, stream, jetstream.ConsumerConfig{
			Durable:       RelayConsumer,
			Description:   "Switchboard heartbeat: the heartbeat turns' answers, relayed to their chats",
			FilterSubject: r.opt.Subjects.OutChannel(Channel),
			DeliverPolicy: jetstream.DeliverNewPolicy,
			AckPolicy:     jetstream.AckExplicitPolicy,
			AckWait:       relayAckWait,
			MaxDeliver:    -1,
		})
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("heartbeat: follow answers: consumer %s/%s: %w", stream, RelayConsumer, err)
	}
	cc, err := cons.Consume(func(m jetstream.Msg) {
		switch {
		case r.relay(ctx, m.Data()):
			if err := m.DoubleAck(ctx); err != nil && ctx.Err() == nil {
				r.opt.Log.Warn("heartbeat: answer relayed but not acknowledged; its relay is dropped as a duplicate when delivered again", "err", err)
			}
		default:
			// Stopping, or the publish failed: delivered again after a
			// pause (not at once, which could hand it to this stopping
			// run's last pull request, and then only after AckWait).
			_ = m.NakWithDelay(relayRetry)
		}
	}, jetstream.ConsumeErrHandler(func(_ jetstream.ConsumeContext, err error) {
		if ctx.Err() == nil {
			r.opt.Log.Warn("heartbeat: reading the answers", "err", err)
		}
	}))
	if err != nil {
		return nil, fmt.Errorf("heartbeat: follow answers: %w", err)
	}
	return func() { cc.Stop(); <-cc.Closed() }, nil
}

// relay sends what a heartbeat turn said to its target chat; a silent
// answer sends nothing. It reports false when the relay could not be
// published (the answer is to be delivered again), true when the answer
// is done with: relayed, silent, or dropped for good.
func (r *Runner) relay(ctx context.Context, data []byte) bool {
	var out bus.Outbound
	if json.Unmarshal(data, &out) != nil || !out.Final || out.Channel != Channel {
		return true
	}
	name := out.ChatID
	r.mu.Lock()
	c, ok := r.agents[name]
	r.mu.Unlock()
	log := r.opt.Log.With("agent", name, "id", out.InReplyTo)
	if !ok {
		log.Warn("heartbeat answer of an unknown agent dropped")
		return true
	}
	to, ok := r.target(name, c)
	switch {
	case out.Kind == bus.KindError:
		log.Warn("heartbeat turn ended in an error; nothing sent", "text", out.Text)
		r.outcome(ctx, name, OutcomeFailed, out.InReplyTo, to)
		return true
	case Silent(out.Text):
		log.Info("heartbeat: nothing to say")
		r.outcome(ctx, name, OutcomeSilent, out.InReplyTo, to)
		return true
	case !ok:
		log.Warn("heartbeat answer dropped: no target chat (to: last, no direct chat seen yet)")
		r.outcome(ctx, name, OutcomeNoTarget, out.InReplyTo, to)
		return true
	}
	msg := bus.Outbound{V: bus.Version, ID: "hb-out:" + out.InReplyTo, Channel: to.Channel, ChatID: to.ChatID, ThreadID: to.ThreadID,
		Kind: bus.KindReply, Text: out.Text, Final: true, Meta: map[string]string{MetaAgent: name}}
	body, err := json.Marshal(msg)
	if err == nil {
		err = r.opt.Publisher.Publish(ctx, r.opt.Subjects.Out(to.Channel, to.ChatID), body, msg.ID)
	}
	if err != nil {
		if ctx.Err() == nil {
			log.Error("heartbeat message not sent; tried again", "to", to, "err", err)
			r.outcome(ctx, name, OutcomeFailed, out.InReplyTo, to)
		}
		return false
	}
	log.Info("heartbeat message sent", "to", to)
	r.outcome(ctx, name, OutcomeSent, out.InReplyTo, to)
	return true
}

// Silent reports whether a heartbeat answer says nothing: empty, or the
// silent token alone (any case, surrounding punctuation and markup
// allowed).
func Silent(text string) bool {
	t := strings.Trim(strings.TrimSpace(text), " \t\r\n.*_`\"'!")
	return t == "" || strings.EqualFold(t, SilentToken)
}

// outcome counts an outcome and publishes it as an event of the
// heartbeat session.
func (r *Runner) outcome(ctx context.Context, name, outcome, id string, to Target) {
	if r.opt.Observer != nil {
		r.opt.Observer.Heartbeat(name, outcome)
	}
	if r.opt.Conn == nil {
		return
	}
	data, _ := json.Marshal(map[string]string{"outcome": outcome, "to": to.String()})
	ev := bus.Event{V: bus.Version, Type: bus.EventHeartbeat, Session: Channel + "/" + name, Channel: Channel, ChatID: name,
		InReplyTo: id, Agent: name, Time: r.opt.Now().UTC(), Data: data}
	if body, err := json.Marshal(ev); err == nil && ctx.Err() == nil {
		_ = r.opt.Conn.Publish(r.opt.Subjects.Event(Channel, name), body)
	}
}

// Running returns Options.Busy from a list of the sessions in memory
// (agent.Manager.Sessions): a session is busy while its state is running.
func Running(sessions func() []observe.Session) func(string) bool {
	return func(key string) bool {
		for _, s := range sessions() {
			if s.Key == key {
				return s.State == "running"
			}
		}
		return false
	}
}

// Package schedule provides the schedule tool and the scheduler that runs
// its tasks: reminders and recurring agent tasks ("at" a time, "every" an
// interval, or a cron expression), created from a chat and run in that
// chat.
//
// A task runs by publishing an inbound envelope for the chat that created
// it — same channel, chat, thread and user, text "[Scheduled task]
// <prompt>", meta scheduled_task=<id> — so the agent runtime handles it as
// a message from that user, in that chat's session, one turn at a time.
// Each run has the envelope id "sched:<task id>:<due unix time>" and thus
// the Nats-Msg-Id "<channel>:sched:<task id>:<due unix time>".
//
// Exactly once per due time, across restarts: the run is published first
// and recorded (last due time, next due time) in bbolt after the bus
// acknowledged it. A crash in between publishes the same due time again
// after the restart, with the same id, and JetStream's de-duplication plus
// the runtime's durable receipts (keyed on the same id) drop the copy. A
// recorded due time is never published again. Runs are published by one
// goroutine, and a task's turns run in its chat's session, so a task never
// runs twice at once. Due times missed while the daemon was down are run
// once when it starts (late), not once per missed time.
//
// Tasks are stored in their own bucket of the tools database ([New]); each
// user (channel + user id) may have at most tools.schedule.max_per_user,
// and all the users of a channel together tools.schedule.max_per_channel
// (a bridge chooses its user ids, so only the second bounds a bridge).
//
// Runs are paced per channel ([WithPace]): the daemon paces each bridge's
// channels to the bridge's bus.bridges.<name>.max_msgs_per_sec, the rate
// its own messages are let in at, so scheduled runs are not a way around
// it. A run over its channel's rate is deferred (published late, oldest
// due time first), never dropped; other channels are not held up.
//
// Several instances (memory.store jetstream, [NewShared]): the tasks live
// in a key-value bucket every instance sees ([SharedStore]: the daemon's
// schedules bucket), each instance follows its changes (a task created
// through one instance is listed and counted on all), and the loop that
// fires runs under a lease ([Exclusive]), so one instance fires at a time
// and another takes over, with the tasks the first created, when its lease
// lapses. The fire stays the de-duplicated publish above: a lease handed
// over between a publish and its record publishes the same id again and
// the copy is dropped.
package schedule

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	// Cron expressions and "at" times name IANA zones; embed the database
	// so that images without /usr/share/zoneinfo work.
	_ "time/tzdata"

	bolt "go.etcd.io/bbolt"
	"golang.org/x/sync/errgroup"

	"github.com/switchboard-chat/switchboard/bus"
	"github.com/switchboard-chat/switchboard/internal/failpoint"
	"github.com/switchboard-chat/switchboard/internal/kvstate"
	"github.com/switchboard-chat/switchboard/internal/retry"
	"github.com/switchboard-chat/switchboard/tools"
)

var bucketTasks = []byte("schedule_tasks")

// retrySchedule is the wait before the n-th retry of a task's failed
// publish: retryFirst doubling up to retryMax. The scheduler loop does not
// sleep per task; the wait sets the task's earliest retry time.
var retrySchedule = retry.Exponential(retryFirst, retryMax)

// Timing of the scheduler loop.
const (
	// maxSleep bounds one wait, so that a change of the wall clock is
	// noticed.
	maxSleep = time.Minute
	// retryFirst and retryMax bound the wait after a failed publish.
	retryFirst = 5 * time.Second
	retryMax   = 5 * time.Minute
	// lateAfter: a run published this long after its due time says so.
	lateAfter = 2 * time.Minute
	// MaxPromptBytes bounds a task's prompt.
	MaxPromptBytes = 4000
	// storeTimeout bounds recording a run in a shared store, which is done
	// even when the loop is being stopped (its lease moved).
	storeTimeout = 10 * time.Second
	// watchFirst and watchMax bound the wait before following a shared
	// store again after its watch failed.
	watchFirst = time.Second
	watchMax   = 30 * time.Second
)

// Store keeps the tasks by id: the tools database ([New]) or a bucket
// several instances share ([NewShared]).
type Store interface {
	All(ctx context.Context) (map[string][]byte, error)
	Put(ctx context.Context, key string, value []byte) (uint64, error)
	Delete(ctx context.Context, key string) error
}

// SharedStore is a Store several instances use at once that tells of every
// change (a *kvstate.Bucket).
type SharedStore interface {
	Store
	Watch(ctx context.Context, fn func(kvstate.Change)) error
}

// Exclusive runs fn on one instance at a time, until ctx ends (a
// lease.Lease: fn's context ends when the lease is lost, and fn runs again
// when it is acquired again).
type Exclusive interface {
	Run(ctx context.Context, fn func(context.Context) error) error
}

// Shared is what [NewShared] needs: the shared tasks and the lease.
type Shared struct {
	Store SharedStore
	Lease Exclusive
}

// boltStore is the tools database's bucket of tasks.
type boltStore struct{ db *bolt.DB }

func (b boltStore) All(context.Context) (map[string][]byte, error) {
	out := make(map[string][]byte)
	err := b.db.Update(func(tx *bolt.Tx) error {
		bk, err := tx.CreateBucketIfNotExists(bucketTasks)
		if err != nil {
			return err
		}
		return bk.ForEach(func(k, v []byte) error {
			out[string(k)] = slices.Clone(v)
			return nil
		})
	})
	return out, err
}

func (b boltStore) Put(_ context.Context, key string, value []byte) (uint64, error) {
	return 0, b.db.Update(func(tx *bolt.Tx) error { return tx.Bucket(bucketTasks).Put([]byte(key), value) })
}

func (b boltStore) Delete(_ context.Context, key string) error {
	return b.db.Update(func(tx *bolt.Tx) error { return tx.Bucket(bucketTasks).Delete([]byte(key)) })
}

// Task is one scheduled task as stored.
type Task struct {
	ID       string `json:"id"`
	Channel  string `json:"channel"`
	ChatID   string `json:"chat_id"`
	ThreadID string `json:"thread_id,omitempty"`
	UserID   string `json:"user_id"`
	IsGroup  bool   `json:"is_group,omitempty"`
	Prompt   string `json:"prompt"`

	Kind  string        `json:"kind"`
	At    time.Time     `json:"at,omitzero"`
	Every time.Duration `json:"every,omitempty"`
	Cron  string        `json:"cron,omitempty"`
	TZ    string        `json:"tz,omitempty"`

	Created time.Time `json:"created"`
	// Next is the next due time; LastDue the due time of the last run
	// published and recorded.
	Next    time.Time `json:"next"`
	LastDue time.Time `json:"last_due,omitzero"`
	Runs    int       `json:"runs"`
}

// spec parses the task's schedule; def is the default zone.
func (t *Task) spec(def *time.Location) (*spec, error) {
	loc := def
	if t.TZ != "" {
		l, err := time.LoadLocation(t.TZ)
		if err != nil {
			return nil, fmt.Errorf("time zone %q: %w", t.TZ, err)
		}
		loc = l
	}
	s := &spec{kind: t.Kind, at: t.At, every: t.Every, expr: t.Cron, loc: loc}
	switch t.Kind {
	case KindAt:
	case KindEvery:
		if t.Every <= 0 {
			return nil, fmt.Errorf("interval %s is not positive", t.Every)
		}
	case KindCron:
		c, err := parseCron(t.Cron, loc)
		if err != nil {
			return nil, err
		}
		s.cron = c
	default:
		return nil, fmt.Errorf("unknown kind %q", t.Kind)
	}
	return s, nil
}

// Scheduler stores tasks and publishes their runs. It is safe for
// concurrent use; Run is its lifecycle.
type Scheduler struct {
	store  Store
	shared *Shared // nil: one instance
	loaded chan struct{}
	pub    tools.Publisher
	subj   bus.Subjects
	cfg    tools.ScheduleConfig
	pace   *Pace // nil: no channel is paced
	loc    *time.Location
	log    *slog.Logger
	now    func() time.Time
	wake   chan struct{}

	// afterPublish (tests) runs between a run's publish and its record;
	// an error skips the record, as a crash would.
	afterPublish func(*Task) error

	mu    sync.Mutex           // guards the fields below
	tasks map[string]*Task     // by id
	retry map[string]time.Time // task id → earliest retry after a failed publish
	fails map[string]int
	revs  map[string]uint64 // shared: the revision of each task held (tombstone: a task deleted here)
}

// tombstone is the revision of a task this instance deleted: older
// changes of it that the watch shows afterwards are ignored.
const tombstone = ^uint64(0)

// Option configures a Scheduler.
type Option func(*Scheduler)

// WithPace paces the runs of p's channels (shared by the schedulers given
// the same p).
func WithPace(p *Pace) Option { return func(s *Scheduler) { s.pace = p } }

// New loads the tasks stored in db (creating the bucket) and returns the
// scheduler; runs are published through pub on subj's inbound subjects.
// db stays the caller's to close, after Run returned. A nil log discards.
func New(db *bolt.DB, pub tools.Publisher, subj bus.Subjects, cfg tools.ScheduleConfig, log *slog.Logger, opts ...Option) (*Scheduler, error) {
	s, err := build(boltStore{db}, pub, subj, cfg, log, opts)
	if err != nil {
		return nil, err
	}
	all, err := s.store.All(context.Background())
	if err != nil {
		return nil, fmt.Errorf("schedule: load tasks: %w", err)
	}
	for k, v := range all {
		if t := s.decode(k, v); t != nil {
			s.tasks[t.ID] = t
		}
	}
	close(s.loaded)
	return s, nil
}

// NewShared returns the scheduler of one of several instances: the tasks
// are sh.Store's (loaded and followed by Run) and Run fires them only
// while holding sh.Lease. Until Run has read the store, the tool waits.
func NewShared(sh Shared, pub tools.Publisher, subj bus.Subjects, cfg tools.ScheduleConfig, log *slog.Logger, opts ...Option) (*Scheduler, error) {
	if sh.Store == nil || sh.Lease == nil {
		return nil, errors.New("schedule: a shared scheduler needs its store and its lease")
	}
	s, err := build(sh.Store, pub, subj, cfg, log, opts)
	if err != nil {
		return nil, err
	}
	s.shared = &sh
	return s, nil
}

func build(st Store, pub tools.Publisher, subj bus.Subjects, cfg tools.ScheduleConfig, log *slog.Logger, opts []Option) (*Scheduler, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	def := tools.DefaultConfig().Schedule
	if cfg.MaxPerUser <= 0 {
		cfg.MaxPerUser = def.MaxPerUser
	}
	if cfg.MaxPerChannel <= 0 {
		cfg.MaxPerChannel = def.MaxPerChannel
	}
	if cfg.MinInterval <= 0 {
		cfg.MinInterval = def.MinInterval
	}
	loc := time.Local
	if cfg.Timezone != "" {
		l, err := time.LoadLocation(cfg.Timezone)
		if err != nil {
			return nil, fmt.Errorf("schedule: time zone %q: %w", cfg.Timezone, err)
		}
		loc = l
	}
	s := &Scheduler{store: st, loaded: make(chan struct{}), pub: pub, subj: subj, cfg: cfg, loc: loc, log: log, now: time.Now,
		wake: make(chan struct{}, 1), tasks: make(map[string]*Task), retry: make(map[string]time.Time), fails: make(map[string]int),
		revs: make(map[string]uint64)}
	for _, o := range opts {
		o(s)
	}
	return s, nil
}

// decode reads a stored task; an unreadable one, or one with an invalid
// schedule, is logged and skipped (nil).
func (s *Scheduler) decode(key string, v []byte) *Task {
	t := new(Task)
	if err := json.Unmarshal(v, t); err != nil {
		s.log.Warn("schedule: unreadable task skipped", "key", key, "err", err)
		return nil
	}
	if _, err := t.spec(s.loc); err != nil {
		s.log.Warn("schedule: task with an invalid schedule skipped", "task", t.ID, "err", err)
		return nil
	}
	return t
}

// Run publishes due runs until ctx is cancelled, then returns nil. A
// shared scheduler also follows the store's changes all along, and
// publishes only while it holds the lease.
func (s *Scheduler) Run(ctx context.Context) error {
	if s.shared == nil {
		return s.loop(ctx)
	}
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error { s.follow(gctx); return nil })
	g.Go(func() error {
		select {
		case <-gctx.Done():
			return nil
		case <-s.loaded:
		}
		return s.shared.Lease.Run(gctx, s.loop)
	})
	return g.Wait()
}

// follow applies the shared store's changes to the tasks held until ctx
// ends, watching again after a failure.
func (s *Scheduler) follow(ctx context.Context) {
	_ = retry.Do(ctx, retry.Policy{Schedule: retry.Exponential(watchFirst, watchMax)}, func(ctx context.Context, _ int) error {
		err := s.shared.Store.Watch(ctx, s.apply)
		if ctx.Err() != nil {
			return nil
		}
		if err == nil {
			err = errors.New("the watch ended")
		}
		s.log.Warn("schedule: lost track of the shared tasks; following them again", "err", err)
		return err
	})
}

// apply is one change of the shared store.
func (s *Scheduler) apply(c kvstate.Change) {
	if c.Synced {
		select {
		case <-s.loaded:
		default:
			close(s.loaded)
		}
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	defer s.poke()
	if c.Deleted {
		delete(s.tasks, c.Key)
		delete(s.retry, c.Key)
		delete(s.fails, c.Key)
		delete(s.revs, c.Key)
		return
	}
	if c.Revision <= s.revs[c.Key] {
		return // this instance's own write, or older than what it holds
	}
	if t := s.decode(c.Key, c.Value); t != nil && t.ID == c.Key {
		s.tasks[t.ID] = t
		s.revs[t.ID] = c.Revision
	}
}

// waitLoaded waits until the tasks were read from the store.
func (s *Scheduler) waitLoaded(ctx context.Context) error {
	select {
	case <-s.loaded:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("schedule: the scheduled tasks are not loaded yet: %w", ctx.Err())
	}
}

// loop publishes due runs until ctx is cancelled, then returns nil.
func (s *Scheduler) loop(ctx context.Context) error {
	for {
		next := s.fireDue(ctx)
		wait := maxSleep
		if !next.IsZero() {
			wait = min(max(next.Sub(s.now()), 0), maxSleep)
		}
		timer := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			timer.Stop()
			return nil
		case <-s.wake:
		case <-timer.C:
		}
		timer.Stop()
	}
}

// poke wakes Run to look at the tasks again.
func (s *Scheduler) poke() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// fireDue publishes every due run its channel's pace allows and returns
// the earliest time something is due next, or may be published (a run
// deferred by the pace); zero for nothing.
func (s *Scheduler) fireDue(ctx context.Context) time.Time {
	now := s.now()
	var due []Task
	s.mu.Lock()
	for _, t := range s.tasks {
		if !t.Next.IsZero() && !t.Next.After(now) && !s.retry[t.ID].After(now) {
			due = append(due, *t)
		}
	}
	s.mu.Unlock()
	slices.SortFunc(due, func(a, b Task) int { return a.Next.Compare(b.Next) })
	var next time.Time
	deferred := map[string]bool{} // channels whose pace is spent for now
	for i := range due {
		if ctx.Err() != nil {
			break
		}
		t := &due[i]
		if deferred[t.Channel] {
			continue
		}
		if ok, at := s.pace.take(t.Channel, s.now()); !ok {
			deferred[t.Channel] = true
			if next.IsZero() || at.Before(next) {
				next = at
			}
			s.log.Debug("schedule: run deferred by its channel's pace", "task", t.ID, "channel", t.Channel, "due", t.Next, "until", at)
			continue
		}
		s.fire(ctx, t, now)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, t := range s.tasks {
		at := t.Next
		if r := s.retry[t.ID]; r.After(at) {
			at = r
		}
		if deferred[t.Channel] && !at.After(now) {
			continue // due, waiting for its channel's pace: next holds when
		}
		if !at.IsZero() && (next.IsZero() || at.Before(next)) {
			next = at
		}
	}
	return next
}

// fire publishes the run of t due at t.Next, then records it.
func (s *Scheduler) fire(ctx context.Context, t *Task, now time.Time) {
	due := t.Next
	in := s.envelope(t, due, now)
	data, err := json.Marshal(in)
	if err == nil {
		err = s.pub.Publish(ctx, s.subj.In(t.Channel, t.ChatID), data, in.DedupKey())
	}
	if err == nil && s.afterPublish != nil {
		if err = s.afterPublish(t); err != nil {
			// As if the process died here: nothing is recorded, and this
			// scheduler does not try again.
			s.mu.Lock()
			s.retry[t.ID] = now.Add(100 * 365 * 24 * time.Hour)
			s.mu.Unlock()
			return
		}
	}
	if err != nil {
		s.mu.Lock()
		s.fails[t.ID]++
		wait := retrySchedule(s.fails[t.ID])
		s.retry[t.ID] = now.Add(wait)
		s.mu.Unlock()
		if ctx.Err() == nil {
			s.log.Warn("schedule: run not published; will retry", "task", t.ID, "due", due, "retry_in", wait, "err", err)
		}
		return
	}
	s.log.Info("scheduled task run", "task", t.ID, "due", due, "channel", t.Channel, "msg_id", in.DedupKey())
	failpoint.Hit(failpoint.ScheduleFire)
	if err := s.record(ctx, t.ID, due); err != nil {
		// The run was published; the next attempt republishes the same
		// id, which the bus and the runtime drop.
		s.log.Error("schedule: run published but not recorded", "task", t.ID, "due", due, "err", err)
		s.mu.Lock()
		s.retry[t.ID] = now.Add(retryFirst)
		s.mu.Unlock()
	}
}

// envelope is the inbound message of a run.
func (s *Scheduler) envelope(t *Task, due, now time.Time) bus.Inbound {
	text := "[Scheduled task] " + t.Prompt
	if now.Sub(due) > lateAfter {
		loc := s.loc
		if sp, err := t.spec(s.loc); err == nil {
			loc = sp.loc
		}
		text = fmt.Sprintf("[Scheduled task, due %s, running late] %s", due.In(loc).Format("2006-01-02 15:04 MST"), t.Prompt)
	}
	return bus.Inbound{
		V: bus.Version, ID: fmt.Sprintf("sched:%s:%d", t.ID, due.Unix()),
		Channel: t.Channel, ChatID: t.ChatID, ThreadID: t.ThreadID, UserID: t.UserID,
		Text: text, IsGroup: t.IsGroup, Mentioned: true, TS: due.UTC().Format(time.RFC3339),
		Meta: map[string]string{"scheduled_task": t.ID},
	}
}

// record notes that the run due at due was published: the task's next due
// time moves past now (missed times are skipped), or a one-off task is
// removed.
func (s *Scheduler) record(ctx context.Context, id string, due time.Time) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	cur, ok := s.tasks[id]
	if !ok || !cur.Next.Equal(due) {
		return nil // deleted or changed meanwhile
	}
	t := *cur
	t.LastDue, t.Runs = due, t.Runs+1
	t.Next = time.Time{}
	if sp, err := t.spec(s.loc); err == nil {
		t.Next = following(sp, due, s.now())
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), storeTimeout)
	defer cancel()
	rev := tombstone
	if t.Next.IsZero() {
		if err := s.store.Delete(ctx, id); err != nil {
			return err
		}
	} else {
		data, err := json.Marshal(&t)
		if err == nil {
			rev, err = s.store.Put(ctx, id, data)
		}
		if err != nil {
			return err
		}
	}
	delete(s.retry, id)
	delete(s.fails, id)
	s.held(id, rev)
	if t.Next.IsZero() {
		delete(s.tasks, id)
	} else {
		s.tasks[id] = &t
	}
	return nil
}

// held notes the revision of what this instance wrote of task id
// (tombstone for a deletion); s.mu is held.
func (s *Scheduler) held(id string, rev uint64) {
	if s.shared != nil {
		s.revs[id] = max(s.revs[id], rev)
	}
}

// following is the first due time after due that is also after now.
func following(sp *spec, due, now time.Time) time.Time {
	switch sp.kind {
	case KindAt:
		return time.Time{}
	case KindEvery:
		n := due.Add(sp.every)
		if !n.After(now) {
			n = due.Add(sp.every * (now.Sub(due)/sp.every + 1))
		}
		return n
	}
	if now.Before(due) {
		now = due
	}
	return sp.next(now)
}

// add stores a new task.
func (s *Scheduler) add(ctx context.Context, t *Task) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, o := range s.tasks {
		if o.Channel == t.Channel && o.UserID == t.UserID {
			n++
		}
	}
	if n >= s.cfg.MaxPerUser {
		return fmt.Errorf("%w: you already have %d scheduled tasks, the most allowed (tools.schedule.max_per_user); delete one first", tools.ErrDenied, n)
	}
	if n := s.onChannel(t.Channel); n >= s.cfg.MaxPerChannel {
		return fmt.Errorf("%w: the users of channel %s already have %d scheduled tasks together, the most allowed for one channel "+
			"(tools.schedule.max_per_channel); no task can be created there until some have run or been deleted", tools.ErrDenied, t.Channel, n)
	}
	data, err := json.Marshal(t)
	if err != nil {
		return err
	}
	rev, err := s.store.Put(ctx, t.ID, data)
	if err != nil {
		return fmt.Errorf("schedule: store task: %w", err)
	}
	s.held(t.ID, rev)
	s.tasks[t.ID] = t
	s.poke()
	return nil
}

// onChannel counts the tasks of channel; s.mu is held.
func (s *Scheduler) onChannel(channel string) int {
	n := 0
	for _, o := range s.tasks {
		if o.Channel == channel {
			n++
		}
	}
	return n
}

// remove deletes a task of owner; it reports false when there is none.
func (s *Scheduler) remove(ctx context.Context, id string, owner tools.Session) (bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	t, ok := s.tasks[id]
	if !ok {
		return false, nil
	}
	if t.Channel != owner.Channel || t.UserID != owner.UserID {
		return false, fmt.Errorf("%w: task %s belongs to another user", tools.ErrDenied, id)
	}
	if err := s.store.Delete(ctx, id); err != nil {
		return false, fmt.Errorf("schedule: delete task: %w", err)
	}
	s.held(id, tombstone)
	delete(s.tasks, id)
	delete(s.retry, id)
	delete(s.fails, id)
	s.poke()
	return true, nil
}

// Tasks returns the tasks of the session's user (channel and user id),
// by next due time.
func (s *Scheduler) Tasks(owner tools.Session) []Task {
	s.mu.Lock()
	var out []Task
	for _, t := range s.tasks {
		if t.Channel == owner.Channel && t.UserID == owner.UserID {
			out = append(out, *t)
		}
	}
	s.mu.Unlock()
	slices.SortFunc(out, func(a, b Task) int {
		if c := a.Next.Compare(b.Next); c != 0 {
			return c
		}
		return strings.Compare(a.ID, b.ID)
	})
	return out
}

func newTaskID() string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return "t" + hex.EncodeToString(b[:])
}

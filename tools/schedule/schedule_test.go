package schedule

import (
	"context"
	"encoding/json"
	"errors"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	bolt "go.etcd.io/bbolt"
	"go.uber.org/goleak"

	"github.com/switchboard-chat/switchboard/bus"
	"github.com/switchboard-chat/switchboard/tools"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var subj = bus.Subjects{Prefix: "chat"}

// fakeBus stores inbound envelopes and drops a msg id it has seen, as
// JetStream de-duplication and the runtime's receipts do together.
type fakeBus struct {
	mu    sync.Mutex
	seen  map[string]bool
	msgs  []*bus.Inbound
	dups  int
	fails int // publishes to fail before succeeding
}

func newFakeBus() *fakeBus { return &fakeBus{seen: map[string]bool{}} }

func (b *fakeBus) Publish(_ context.Context, subject string, data []byte, msgID string) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.fails > 0 {
		b.fails--
		return errors.New("bus unavailable")
	}
	in, err := bus.ParseInbound(subj, subject, data, 0)
	if err != nil {
		return err
	}
	if msgID != in.DedupKey() {
		return errors.New("msg id " + msgID + " is not the envelope's dedup key " + in.DedupKey())
	}
	if b.seen[msgID] {
		b.dups++
		return nil
	}
	b.seen[msgID] = true
	b.msgs = append(b.msgs, in)
	return nil
}

func (b *fakeBus) all() []*bus.Inbound {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]*bus.Inbound(nil), b.msgs...)
}

func openDB(t *testing.T, path string) *bolt.DB {
	t.Helper()
	db, err := bolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	return db
}

func newScheduler(t *testing.T, db *bolt.DB, pub tools.Publisher, cfg tools.ScheduleConfig) *Scheduler {
	t.Helper()
	if cfg.Timezone == "" {
		cfg.Timezone = "UTC"
	}
	s, err := New(db, pub, subj, cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

var (
	ann = tools.Session{Key: "telegram/100", Speaker: bus.Speaker{Channel: "telegram", ChatID: "100", UserID: "ann"}}
	bob = tools.Session{Key: "telegram/200", Speaker: bus.Speaker{Channel: "telegram", ChatID: "200", UserID: "bob"}}
)

func call(t *testing.T, s *Scheduler, sess tools.Session, args string) tools.Result {
	t.Helper()
	reg, err := tools.NewRegistry(s.Tool())
	if err != nil {
		t.Fatal(err)
	}
	return reg.Run(t.Context(), "schedule", tools.Call{Args: json.RawMessage(args), Session: sess})
}

func taskID(t *testing.T, r tools.Result) string {
	t.Helper()
	rest, ok := strings.CutPrefix(r.Text, "scheduled task ")
	if r.IsError || !ok {
		t.Fatalf("create: %+v", r)
	}
	id, _, _ := strings.Cut(rest, " ")
	return id
}

// running runs s until the returned stop is called.
func running(s *Scheduler) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = s.Run(ctx)
	}()
	return func() { cancel(); <-done }
}

func TestCreateListDelete(t *testing.T) {
	db := openDB(t, filepath.Join(t.TempDir(), "tools.db"))
	defer db.Close()
	s := newScheduler(t, db, newFakeBus(), tools.ScheduleConfig{MaxPerUser: 3, Timezone: "Europe/Berlin"})
	s.now = func() time.Time { return time.Date(2026, 3, 1, 8, 0, 0, 0, time.UTC) }

	r := call(t, s, ann, `{"action":"create","prompt":"Remind Ann to call her mother","at":"2026-03-01 18:30"}`)
	id1 := taskID(t, r)
	if !strings.Contains(r.Text, "(once); next run 2026-03-01 18:30:00 CET (Sun)") {
		t.Errorf("create at: %s", r.Text)
	}
	r = call(t, s, ann, `{"action":"create","prompt":"Weather report","cron":"0 9 * * 1-5","timezone":"America/New_York"}`)
	id2 := taskID(t, r)
	if !strings.Contains(r.Text, `cron "0 9 * * 1-5" (America/New_York)); next run 2026-03-02 09:00:00 EST (Mon)`) {
		t.Errorf("create cron: %s", r.Text)
	}
	r = call(t, s, ann, `{"action":"create","prompt":"Stretch","every":"2h"}`)
	taskID(t, r)
	if !strings.Contains(r.Text, "(every 2h0m0s); next run 2026-03-01 11:00:00 CET") {
		t.Errorf("create every: %s", r.Text)
	}
	r = call(t, s, ann, `{"action":"create","prompt":"One too many","at":"in 5m"}`)
	if !r.Denied || !strings.Contains(r.Text, "already have 3 scheduled tasks") {
		t.Errorf("quota: %+v", r)
	}
	// Bob has his own quota and cannot touch Ann's tasks.
	if r := call(t, s, bob, `{"action":"create","prompt":"x","at":"in 5m"}`); r.IsError {
		t.Errorf("bob create: %+v", r)
	}
	if r := call(t, s, bob, `{"action":"delete","id":"`+id1+`"}`); !r.Denied {
		t.Errorf("bob deleted ann's task: %+v", r)
	}
	if r := call(t, s, bob, `{"action":"list"}`); strings.Contains(r.Text, "Ann") || !strings.HasPrefix(r.Text, "1 scheduled tasks") {
		t.Errorf("bob's list: %s", r.Text)
	}

	r = call(t, s, ann, `{"action":"list"}`)
	lines := strings.Split(r.Text, "\n")
	if len(lines) != 4 || !strings.HasPrefix(lines[0], "3 scheduled tasks (at most 3)") ||
		!strings.HasPrefix(lines[1], "- t") || !strings.Contains(lines[1], "every 2h") ||
		!strings.Contains(lines[2], id1) || !strings.Contains(lines[2], "in this chat, 0 runs so far: Remind Ann") ||
		!strings.Contains(lines[3], id2) {
		t.Errorf("list:\n%s", r.Text)
	}
	if r := call(t, s, ann, `{"action":"delete","id":"`+id1+`"}`); r.IsError || r.Text != "deleted task "+id1 {
		t.Errorf("delete: %+v", r)
	}
	if r := call(t, s, ann, `{"action":"delete","id":"`+id1+`"}`); !r.IsError || !strings.Contains(r.Text, "no scheduled task") {
		t.Errorf("delete again: %+v", r)
	}

	// Stored: a new scheduler on the same database sees the tasks.
	s2 := newScheduler(t, db, newFakeBus(), tools.ScheduleConfig{})
	if got := len(s2.Tasks(ann)); got != 2 {
		t.Errorf("after reload ann has %d tasks, want 2", got)
	}
}

func TestCreateBadArgs(t *testing.T) {
	db := openDB(t, filepath.Join(t.TempDir(), "tools.db"))
	defer db.Close()
	s := newScheduler(t, db, newFakeBus(), tools.ScheduleConfig{MinInterval: 10 * time.Minute})
	s.now = func() time.Time { return time.Date(2026, 3, 1, 8, 0, 0, 0, time.UTC) }
	tests := []struct{ args, want string }{
		{`{}`, "action is required"},
		{`{"action":"run"}`, "action must be create, list or delete"},
		{`{"action":"create","at":"in 5m"}`, "prompt is required"},
		{`{"action":"create","prompt":"x"}`, "exactly one of at, every or cron"},
		{`{"action":"create","prompt":"x","at":"in 5m","every":"1h"}`, "exactly one of at, every or cron"},
		{`{"action":"create","prompt":"x","at":"tomorrow"}`, "use an RFC 3339 time"},
		{`{"action":"create","prompt":"x","at":"in -5m"}`, "positive duration"},
		{`{"action":"create","prompt":"x","at":"2020-01-01 10:00"}`, "is in the past"},
		{`{"action":"create","prompt":"x","at":"2099-01-01 10:00"}`, "more than 10 years away"},
		{`{"action":"create","prompt":"x","every":"often"}`, "not a duration"},
		{`{"action":"create","prompt":"x","every":"5m"}`, "every must be at least 10m0s"},
		{`{"action":"create","prompt":"x","cron":"* * * * *"}`, "runs every 1m0s; runs must be at least 10m0s apart"},
		{`{"action":"create","prompt":"x","cron":"61 * * * *"}`, "cron expression"},
		{`{"action":"create","prompt":"x","cron":"@every 1h"}`, "use every instead"},
		{`{"action":"create","prompt":"x","cron":"TZ=UTC 0 9 * * *"}`, "timezone argument"},
		{`{"action":"create","prompt":"x","cron":"0 0 30 2 *"}`, "never runs"},
		{`{"action":"create","prompt":"x","at":"in 5m","timezone":"Mars/Base"}`, "unknown timezone"},
		{`{"action":"create","prompt":"x","at":"in 5m","id":"t1"}`, "id is for delete"},
		{`{"action":"create","prompt":"` + strings.Repeat("a", MaxPromptBytes+1) + `","at":"in 5m"}`, "at most 4000 bytes"},
		{`{"action":"delete"}`, "delete needs id"},
		{`{"action":"list","id":"x"}`, "list takes no other arguments"},
		{`{"action":"list","when":"now"}`, `unknown field "when"`},
	}
	for _, tt := range tests {
		r := call(t, s, ann, tt.args)
		if !r.IsError || !strings.Contains(r.Text, tt.want) {
			t.Errorf("%.70s: %+v, want %q", tt.args, r, tt.want)
		}
	}
	if r := call(t, s, tools.Session{}, `{"action":"list"}`); !r.IsError || !strings.Contains(r.Text, "needs a chat session") {
		t.Errorf("no session: %+v", r)
	}
	if n := len(s.Tasks(ann)); n != 0 {
		t.Errorf("%d tasks were created by bad calls", n)
	}
}

func TestParseAt(t *testing.T) {
	now := time.Date(2026, 3, 1, 8, 0, 0, 0, time.UTC)
	berlin, _ := time.LoadLocation("Europe/Berlin")
	tests := []struct {
		in   string
		want time.Time
	}{
		{"in 20m", now.Add(20 * time.Minute)},
		{"in 1h 30m", now.Add(90 * time.Minute)},
		{"+45s", now.Add(45 * time.Second)},
		{"2026-03-01T09:00:00+01:00", time.Date(2026, 3, 1, 8, 0, 0, 0, time.UTC)},
		{"2026-03-01 09:00", time.Date(2026, 3, 1, 8, 0, 0, 0, time.UTC)},
		{"2026-03-01T09:00:05", time.Date(2026, 3, 1, 8, 0, 5, 0, time.UTC)},
	}
	for _, tt := range tests {
		got, err := parseAt(tt.in, now, berlin)
		if err != nil || !got.Equal(tt.want) {
			t.Errorf("parseAt(%q) = %v, %v; want %v", tt.in, got, err, tt.want)
		}
	}
}

func TestFollowing(t *testing.T) {
	due := time.Date(2026, 3, 1, 8, 0, 0, 0, time.UTC)
	every := &spec{kind: KindEvery, every: time.Hour}
	if got := following(every, due, due.Add(time.Minute)); !got.Equal(due.Add(time.Hour)) {
		t.Errorf("every, on time: %v", got)
	}
	// Down for 5.5 hours: the missed runs are skipped, the phase is kept.
	if got := following(every, due, due.Add(330*time.Minute)); !got.Equal(due.Add(6 * time.Hour)) {
		t.Errorf("every, late: %v", got)
	}
	c, err := parseCron("0 9 * * *", time.UTC)
	if err != nil {
		t.Fatal(err)
	}
	cr := &spec{kind: KindCron, cron: c}
	if got := following(cr, due.Add(time.Hour), due.Add(3*24*time.Hour)); !got.Equal(time.Date(2026, 3, 4, 9, 0, 0, 0, time.UTC)) {
		t.Errorf("cron, late: %v", got)
	}
	if got := following(&spec{kind: KindAt, at: due}, due, due); !got.IsZero() {
		t.Errorf("at: %v", got)
	}
}

// TestFiresExactlyOnceAcrossRestart runs an "at" task and an "every" task
// through a crash between publish and record, and restarts.
func TestFiresExactlyOnceAcrossRestart(t *testing.T) {
	path := filepath.Join(t.TempDir(), "tools.db")
	synctest.Test(t, func(t *testing.T) {
		b := newFakeBus()
		db := openDB(t, path)
		s := newScheduler(t, db, b, tools.ScheduleConfig{})
		group := ann
		group.IsGroup, group.ThreadID, group.Key = true, "th1", "telegram/100/th1"
		atID := taskID(t, call(t, s, group, `{"action":"create","prompt":"Call the dentist","at":"in 10m"}`))
		everyID := taskID(t, call(t, s, ann, `{"action":"create","prompt":"Drink water","every":"1h"}`))
		start := time.Now()

		// The first run of the "at" task is published, then the process
		// "dies" before recording it.
		crashed := 0
		s.afterPublish = func(task *Task) error {
			if task.ID == atID {
				crashed++
				return errors.New("crash")
			}
			return nil
		}
		stop := running(s)
		time.Sleep(10*time.Minute + time.Second)
		synctest.Wait()
		stop()
		if crashed != 1 {
			t.Fatalf("the at task was published %d times before the crash, want 1", crashed)
		}
		msgs := b.all()
		if len(msgs) != 1 {
			t.Fatalf("%d runs published, want 1", len(msgs))
		}
		in := msgs[0]
		due := start.Add(10 * time.Minute)
		wantID := "sched:" + atID + ":" + itoa(due.Unix())
		if in.ID != wantID || in.Text != "[Scheduled task] Call the dentist" || in.Channel != "telegram" || in.ChatID != "100" ||
			in.ThreadID != "th1" || in.UserID != "ann" || !in.IsGroup || !in.Mentioned || in.Meta["scheduled_task"] != atID {
			t.Errorf("run envelope = %+v, want id %s", in, wantID)
		}
		if err := db.Close(); err != nil {
			t.Fatal(err)
		}

		// Restart: the unrecorded due time is published again with the same
		// id (the bus drops it) and now recorded; the every task fires on
		// schedule.
		db = openDB(t, path)
		s = newScheduler(t, db, b, tools.ScheduleConfig{})
		stop = running(s)
		synctest.Wait()
		if b.dups != 1 || len(b.all()) != 1 {
			t.Errorf("after restart: %d duplicates dropped, %d delivered; want 1 and 1", b.dups, len(b.all()))
		}
		if len(s.Tasks(ann)) != 1 {
			t.Errorf("the at task was not removed after its run: %+v", s.Tasks(ann))
		}
		time.Sleep(50 * time.Minute)
		synctest.Wait()
		stop()
		msgs = b.all()
		if len(msgs) != 2 || msgs[1].ID != "sched:"+everyID+":"+itoa(start.Add(time.Hour).Unix()) {
			t.Fatalf("runs = %v", ids(msgs))
		}
		if err := db.Close(); err != nil {
			t.Fatal(err)
		}

		// Restart again, 3.5 hours later: every due time is recorded, so
		// nothing is republished; the missed runs of the every task give
		// one late run, then it is back on its hourly phase.
		time.Sleep(3*time.Hour + 30*time.Minute)
		db = openDB(t, path)
		defer db.Close()
		s = newScheduler(t, db, b, tools.ScheduleConfig{})
		stop = running(s)
		synctest.Wait()
		msgs = b.all()
		if len(msgs) != 3 || b.dups != 1 {
			t.Fatalf("after the long stop: runs %v, %d duplicates", ids(msgs), b.dups)
		}
		late := msgs[2]
		if late.ID != "sched:"+everyID+":"+itoa(start.Add(2*time.Hour).Unix()) || !strings.Contains(late.Text, "running late] Drink water") {
			t.Errorf("late run = %s %q", late.ID, late.Text)
		}
		time.Sleep(31 * time.Minute) // the next hourly due time: start+5h
		synctest.Wait()
		stop()
		msgs = b.all()
		if len(msgs) != 4 || msgs[3].ID != "sched:"+everyID+":"+itoa(start.Add(5*time.Hour).Unix()) {
			t.Errorf("runs after catching up = %v", ids(msgs))
		}
		if task := s.Tasks(ann)[0]; task.Runs != 3 || !task.LastDue.Equal(start.Add(5*time.Hour)) {
			t.Errorf("task record = %+v", task)
		}
	})
}

func TestPublishFailureRetried(t *testing.T) {
	path := filepath.Join(t.TempDir(), "tools.db")
	synctest.Test(t, func(t *testing.T) {
		b := newFakeBus()
		b.fails = 2
		db := openDB(t, path)
		defer db.Close()
		s := newScheduler(t, db, b, tools.ScheduleConfig{})
		id := taskID(t, call(t, s, ann, `{"action":"create","prompt":"ping","at":"in 1m"}`))
		stop := running(s)
		defer stop()
		time.Sleep(time.Minute)
		synctest.Wait()
		if len(b.all()) != 0 {
			t.Fatal("published while the bus fails")
		}
		time.Sleep(retryFirst) // first retry fails too
		synctest.Wait()
		time.Sleep(2 * retryFirst)
		synctest.Wait()
		msgs := b.all()
		if len(msgs) != 1 || !strings.HasPrefix(msgs[0].ID, "sched:"+id+":") {
			t.Fatalf("runs = %v", ids(msgs))
		}
		if len(s.Tasks(ann)) != 0 {
			t.Error("task kept after its run")
		}
	})
}

func TestDeleteWakesAndStops(t *testing.T) {
	path := filepath.Join(t.TempDir(), "tools.db")
	synctest.Test(t, func(t *testing.T) {
		b := newFakeBus()
		db := openDB(t, path)
		defer db.Close()
		s := newScheduler(t, db, b, tools.ScheduleConfig{})
		stop := running(s)
		defer stop()
		synctest.Wait()
		id := taskID(t, call(t, s, ann, `{"action":"create","prompt":"p","every":"1m"}`))
		time.Sleep(time.Minute)
		synctest.Wait()
		if n := len(b.all()); n != 1 {
			t.Fatalf("%d runs after a minute", n)
		}
		call(t, s, ann, `{"action":"delete","id":"`+id+`"}`)
		time.Sleep(10 * time.Minute)
		synctest.Wait()
		if n := len(b.all()); n != 1 {
			t.Errorf("%d runs after the task was deleted", n)
		}
	})
}

func ids(msgs []*bus.Inbound) []string {
	var out []string
	for _, m := range msgs {
		out = append(out, m.ID)
	}
	return out
}

func itoa(n int64) string {
	b, _ := json.Marshal(n)
	return string(b)
}

package consolidate_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/switchboard-chat/switchboard/llm"
	"github.com/switchboard-chat/switchboard/llm/llmtest"
	"github.com/switchboard-chat/switchboard/memory/consolidate"
	"github.com/switchboard-chat/switchboard/memory/memcfg"
	"github.com/switchboard-chat/switchboard/memory/notes"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var tz = time.FixedZone("UTC+8", 8*3600)

// day is 2025-03-10 in tz.
var day = time.Date(2025, 3, 10, 0, 0, 0, 0, tz)

const (
	alice = "memory/users/telegram/100"
	bob   = "memory/users/telegram/200"
	group = "memory/chats/telegram/-500"
)

type env struct {
	dir       string
	notes     *notes.Notes
	srv       *llmtest.Server
	client    *llm.Client
	statePath string
	state     *consolidate.BoltState
}

func newEnv(t *testing.T) *env {
	t.Helper()
	e := &env{dir: t.TempDir(), statePath: filepath.Join(t.TempDir(), "memory-state.db")}
	root, err := os.OpenRoot(e.dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = root.Close() })
	if e.notes, err = notes.New(root, notes.Options{Scope: memcfg.ScopeUser}); err != nil {
		t.Fatal(err)
	}
	e.srv = llmtest.NewServer(t)
	cfg := llm.DefaultConfig()
	cfg.BaseURL, cfg.APIKey, cfg.Model, cfg.MaxRetries = e.srv.URL(), "k", "test-model", 0
	if e.client, err = llm.New(cfg, nil, llm.WithHTTPClient(e.srv.HTTPClient())); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.client.CloseIdleConnections)
	e.openState(t)
	return e
}

func (e *env) openState(t *testing.T) {
	t.Helper()
	if e.state != nil {
		if err := e.state.Close(); err != nil {
			t.Fatal(err)
		}
	}
	st, err := consolidate.OpenState(e.statePath)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	e.state = st
}

func (e *env) write(t *testing.T, rel, content string) {
	t.Helper()
	p := filepath.Join(e.dir, filepath.FromSlash(rel))
	if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
}

func (e *env) read(t *testing.T, rel string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(e.dir, filepath.FromSlash(rel)))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func (e *env) consolidator(t *testing.T, clock consolidate.Clock) *consolidate.Consolidator {
	t.Helper()
	c, err := consolidate.New(consolidate.Options{At: "23:50", Notes: e.notes, Model: e.client, State: e.state, Location: tz, Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// seed writes Alice's memory and notes, a group's notes, and Bob's old
// notes only.
func (e *env) seed(t *testing.T) {
	e.write(t, alice+"/MEMORY.md", "# Memory\n\n- Alice likes tea\n")
	e.write(t, alice+"/2025-03-09.md", "- Alice switched to coffee\n")
	e.write(t, alice+"/2025-03-10.md", "- Alice's sister visits on Saturday\n")
	e.write(t, alice+"/2025-03-01.md", "- 9 days old: the old router password\n")
	e.write(t, group+"/2025-03-10.md", "- team agreed to ship on Friday\n")
	e.write(t, bob+"/MEMORY.md", "- Bob is vegetarian\n")
	e.write(t, bob+"/2025-02-01.md", "- long ago\n")
}

// answer is the scripted model: it answers with a MEMORY.md naming the
// folder's owner.
func answer(req *llmtest.Request) llmtest.Reply {
	text := req.LastUserText()
	switch {
	case strings.Contains(text, "sister"):
		return llmtest.TextReply("## People\n- Alice drinks coffee (since 2025-03-09)\n- Alice's sister visits on Saturday 2025-03-15")
	case strings.Contains(text, "ship on Friday"):
		return llmtest.TextReply("```markdown\n## Team\n- ship on Friday\n```")
	}
	return llmtest.TextReply("- unexpected")
}

func TestRunDayRewritesWithBackup(t *testing.T) {
	e := newEnv(t)
	e.seed(t)
	e.srv.SetResponder(answer)
	c := e.consolidator(t, nil)
	rep, err := c.RunDay(t.Context(), day.Add(23*time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	// shared: no notes; Alice: rewritten; Bob: notes too old; group: rewritten.
	if want := (consolidate.Report{Rewritten: 2, Unchanged: 2}); rep != want {
		t.Errorf("RunDay = %+v, want %+v", rep, want)
	}
	if got := e.read(t, alice+"/MEMORY.md"); got != "## People\n- Alice drinks coffee (since 2025-03-09)\n- Alice's sister visits on Saturday 2025-03-15\n" {
		t.Errorf("Alice's MEMORY.md = %q", got)
	}
	if got := e.read(t, alice+"/MEMORY.md.bak-2025-03-10"); got != "# Memory\n\n- Alice likes tea\n" {
		t.Errorf("backup = %q", got)
	}
	if got := e.read(t, group+"/MEMORY.md"); got != "## Team\n- ship on Friday\n" {
		t.Errorf("group MEMORY.md = %q (code fence not stripped?)", got)
	}
	if _, err := os.Stat(filepath.Join(e.dir, group, "MEMORY.md.bak-2025-03-10")); !os.IsNotExist(err) {
		t.Errorf("a backup was made of a MEMORY.md that did not exist: %v", err)
	}
	if got := e.read(t, bob+"/MEMORY.md"); got != "- Bob is vegetarian\n" {
		t.Errorf("Bob's MEMORY.md changed without recent notes: %q", got)
	}
	reqs := e.srv.Requests()
	if len(reqs) != 2 {
		t.Fatalf("%d model requests, want 2", len(reqs))
	}
	for _, r := range reqs {
		sys := llmtest.MessageText(r.Body.Messages[0])
		if !strings.Contains(sys, "50 items") || !strings.Contains(sys, "Never invent") || !strings.Contains(sys, "most recent") {
			t.Errorf("system prompt lacks the rules: %q", sys)
		}
		if r.Body.Temperature > 0.001 {
			t.Errorf("temperature %v, want 0", r.Body.Temperature)
		}
	}
	user := reqs[0].LastUserText() + reqs[1].LastUserText()
	for _, want := range []string{"Alice likes tea", "switched to coffee", "2025-03-09 (Sunday)", "sister visits"} {
		if !strings.Contains(user, want) {
			t.Errorf("request lacks %q:\n%s", want, user)
		}
	}
	for _, not := range []string{"router password", "vegetarian", "long ago"} {
		if strings.Contains(user, not) {
			t.Errorf("request includes %q (too old or another folder):\n%s", not, user)
		}
	}
	if strings.Index(user, "switched to coffee") > strings.Index(user, "sister visits") {
		t.Error("notes are not oldest first")
	}
}

func TestNeverTwiceForTheSameDay(t *testing.T) {
	e := newEnv(t)
	e.seed(t)
	e.srv.SetResponder(answer)
	c := e.consolidator(t, nil)
	ctx := t.Context()
	if _, err := c.RunDay(ctx, day); err != nil {
		t.Fatal(err)
	}
	// New notes the same evening do not cause a second run that day.
	e.write(t, alice+"/2025-03-10.md", "- Alice's sister visits on Saturday\n- Alice bought a bike\n")
	rep, err := c.RunDay(ctx, day.Add(23*time.Hour+59*time.Minute))
	if err != nil || !rep.AlreadyDone {
		t.Errorf("second RunDay = %+v, %v; want AlreadyDone", rep, err)
	}
	// Not after a restart either.
	e.openState(t)
	c = e.consolidator(t, nil)
	if rep, err := c.RunDay(ctx, day); err != nil || !rep.AlreadyDone {
		t.Errorf("RunDay after reopening the state = %+v, %v", rep, err)
	}
	if n := e.srv.RequestCount(); n != 2 {
		t.Errorf("%d model requests, want 2 (one run)", n)
	}
	// The next night: Alice has a new note (read once), the group nothing
	// new, so only Alice's folder is rewritten.
	rep, err = c.RunDay(ctx, day.AddDate(0, 0, 1))
	if err != nil || rep.Rewritten != 1 || rep.AlreadyDone {
		t.Errorf("next night = %+v, %v; want one folder rewritten", rep, err)
	}
	if e.srv.RequestCount() != 3 || !strings.Contains(e.srv.Requests()[2].LastUserText(), "bought a bike") {
		t.Error("the next night did not send Alice's new note")
	}
	if got := e.read(t, alice+"/MEMORY.md.bak-2025-03-11"); !strings.Contains(got, "drinks coffee") {
		t.Errorf("second backup = %q", got)
	}
	// The night after: nothing new anywhere (a note aging out of the
	// window is not news).
	if rep, err := c.RunDay(ctx, day.AddDate(0, 0, 2)); err != nil || rep.Rewritten != 0 {
		t.Errorf("quiet night = %+v, %v", rep, err)
	}
	if n := e.srv.RequestCount(); n != 3 {
		t.Errorf("%d requests after a quiet night, want 3", n)
	}
	// A hand edit of MEMORY.md is news.
	e.write(t, alice+"/MEMORY.md", "- edited by hand\n")
	if rep, err := c.RunDay(ctx, day.AddDate(0, 0, 3)); err != nil || rep.Rewritten != 1 {
		t.Errorf("night after a hand edit = %+v, %v", rep, err)
	}
}

func TestFailuresKeepMemory(t *testing.T) {
	for _, tt := range []struct {
		name  string
		reply llmtest.Reply
	}{
		{"server error", llmtest.ErrorReply(500, "server_error", "boom")},
		{"empty answer", llmtest.TextReply("  ")},
		{"cut off", llmtest.Reply{Text: "- partial", FinishReason: "length"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t)
			e.write(t, alice+"/MEMORY.md", "- keep me\n")
			e.write(t, alice+"/2025-03-10.md", "- note\n")
			e.srv.Enqueue(tt.reply)
			rep, err := e.consolidator(t, nil).RunDay(t.Context(), day)
			if err != nil || rep.Failed != 1 {
				t.Errorf("RunDay = %+v, %v; want one failed folder", rep, err)
			}
			if got := e.read(t, alice+"/MEMORY.md"); got != "- keep me\n" {
				t.Errorf("MEMORY.md = %q after a failure", got)
			}
			if _, err := os.Stat(filepath.Join(e.dir, alice, "MEMORY.md.bak-2025-03-10")); !os.IsNotExist(err) {
				t.Error("backup written although nothing was replaced")
			}
		})
	}
}

func TestNewValidates(t *testing.T) {
	e := newEnv(t)
	for _, o := range []consolidate.Options{
		{At: "25:00", Notes: e.notes, Model: e.client, State: e.state},
		{At: "23:50", Model: e.client, State: e.state},
		{At: "23:50", Notes: e.notes, State: e.state},
		{At: "23:50", Notes: e.notes, Model: e.client},
		{At: "23:50", Notes: e.notes, Model: e.client, State: e.state, Lookback: -1},
	} {
		if _, err := consolidate.New(o); err == nil {
			t.Errorf("New(%+v) succeeded", o)
		}
	}
	if _, err := consolidate.OpenState(""); err == nil {
		t.Error(`OpenState("") succeeded`)
	}
	if _, err := consolidate.OpenState(e.statePath); err == nil || !strings.Contains(err.Error(), "locked") {
		t.Errorf("second OpenState = %v, want a lock error", err)
	}
}

// fakeClock is a Clock whose waits the test releases.
type fakeClock struct {
	mu    sync.Mutex
	now   time.Time
	waits chan wait
}

type wait struct {
	d  time.Duration
	ch chan time.Time
}

func newFakeClock(now time.Time) *fakeClock {
	return &fakeClock{now: now, waits: make(chan wait, 4)}
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) After(d time.Duration) <-chan time.Time {
	ch := make(chan time.Time, 1)
	c.waits <- wait{d: d, ch: ch}
	return ch
}

// next returns the wait Run asked for, failing after a deadline.
func (c *fakeClock) next(t *testing.T) wait {
	t.Helper()
	select {
	case w := <-c.waits:
		return w
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not wait on the clock")
		return wait{}
	}
}

// fire advances the clock by the wait's duration and releases it.
func (c *fakeClock) fire(w wait) {
	c.mu.Lock()
	c.now = c.now.Add(w.d)
	now := c.now
	c.mu.Unlock()
	w.ch <- now
}

func TestRunSchedule(t *testing.T) {
	e := newEnv(t)
	e.seed(t)
	e.srv.SetResponder(answer)
	clock := newFakeClock(day.Add(23*time.Hour + 40*time.Minute)) // 23:40
	c := e.consolidator(t, clock)
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()

	w := clock.next(t)
	if w.d != 10*time.Minute {
		t.Errorf("first wait %s, want 10m (until 23:50)", w.d)
	}
	if n := e.srv.RequestCount(); n != 0 {
		t.Errorf("%d requests before 23:50", n)
	}
	clock.fire(w)
	w = clock.next(t) // Run has consolidated and waits for tomorrow
	if w.d != 24*time.Hour {
		t.Errorf("wait after the run %s, want 24h", w.d)
	}
	if n := e.srv.RequestCount(); n != 2 {
		t.Errorf("%d requests at 23:50, want 2", n)
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Run = %v", err)
	}

	// Restarted at 23:55 the same day: today already ran, so nothing
	// happens and it waits for tomorrow's 23:50.
	clock = newFakeClock(day.Add(23*time.Hour + 55*time.Minute))
	c = e.consolidator(t, clock)
	ctx, cancel = context.WithCancel(t.Context())
	go func() { done <- c.Run(ctx) }()
	if w := clock.next(t); w.d != 24*time.Hour-5*time.Minute {
		t.Errorf("wait after a restart %s, want 23h55m", w.d)
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Run = %v", err)
	}
	if n := e.srv.RequestCount(); n != 2 {
		t.Errorf("%d requests, want still 2", n)
	}
}

func TestRunCatchesUpLateStart(t *testing.T) {
	e := newEnv(t)
	e.seed(t)
	e.srv.SetResponder(answer)
	clock := newFakeClock(day.Add(23*time.Hour + 58*time.Minute)) // started after 23:50, not run yet
	c := e.consolidator(t, clock)
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	if w := clock.next(t); w.d != 24*time.Hour-8*time.Minute {
		t.Errorf("wait %s, want until tomorrow 23:50", w.d)
	}
	if n := e.srv.RequestCount(); n != 2 {
		t.Errorf("%d requests, want the missed run done at once (2)", n)
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Run = %v", err)
	}
}

// TestMemberFoldersConsolidatedApart: a member's in-group notes are
// rewritten in their own folder, from their own notes only; the group's
// rewrite never reads them, and neither reads direct-chat memory.
func TestMemberFoldersConsolidatedApart(t *testing.T) {
	e := newEnv(t)
	member := group + "/users/100"
	e.write(t, alice+"/2025-03-10.md", "- Alice's dm secret: therapy on Monday\n")
	e.write(t, group+"/2025-03-10.md", "- team agreed to ship on Friday\n")
	e.write(t, member+"/2025-03-10.md", "- Alice wants async standups\n")
	e.srv.SetResponder(func(req *llmtest.Request) llmtest.Reply {
		text := req.LastUserText()
		switch {
		case strings.Contains(text, "therapy"):
			return llmtest.TextReply("- dm")
		case strings.Contains(text, "async standups"):
			return llmtest.TextReply("- member")
		}
		return llmtest.TextReply("- group")
	})
	rep, err := e.consolidator(t, nil).RunDay(t.Context(), day.Add(23*time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if rep.Rewritten != 3 {
		t.Errorf("RunDay = %+v, want 3 folders rewritten (Alice's, the group's, Alice's in the group)", rep)
	}
	for rel, want := range map[string]string{alice + "/MEMORY.md": "- dm\n", group + "/MEMORY.md": "- group\n", member + "/MEMORY.md": "- member\n"} {
		if got := e.read(t, rel); got != want {
			t.Errorf("%s = %q, want %q", rel, got, want)
		}
	}
	for _, r := range e.srv.Requests() {
		text := r.LastUserText()
		if strings.Contains(text, "ship on Friday") && (strings.Contains(text, "async standups") || strings.Contains(text, "therapy")) {
			t.Errorf("the group's rewrite read other folders:\n%s", text)
		}
	}
}

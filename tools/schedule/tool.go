package schedule

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/switchboard-chat/switchboard/tools"
)

// Tool returns the schedule tool.
func (s *Scheduler) Tool() tools.Tool { return &scheduleTool{s: s, desc: s.description()} }

type scheduleTool struct {
	s    *Scheduler
	desc string
}

func (*scheduleTool) Name() string { return "schedule" }

// Description is built once, with the tool: it is asked for every turn.
func (t *scheduleTool) Description() string { return t.desc }

func (s *Scheduler) description() string {
	return "Create, list or delete scheduled tasks of this user. A task runs the prompt as a message from the user in this chat when it is due: " +
		"once (at: a time such as 2026-03-01 09:00, an RFC 3339 time, or a delay such as \"in 20m\"), repeatedly (every: 30m, 2h, 24h), " +
		"or on a cron expression (cron: \"0 9 * * 1-5\" = 9:00 on weekdays). Write the prompt as an instruction to yourself, " +
		"e.g. \"Remind the user to call Ann\" or \"Check the weather in Paris and report it\". " +
		fmt.Sprintf("Times without an offset and cron expressions use the timezone argument (IANA name), else %s. At most %d tasks per user "+
			"and %d per channel; repeats at least %s apart.", s.loc, s.cfg.MaxPerUser, s.cfg.MaxPerChannel, s.cfg.MinInterval)
}

// scheduleToolSchema is scheduleTool's argument schema, built once (Schema hands out the
// same bytes; callers must not modify them).
var scheduleToolSchema = json.RawMessage(`{"type":"object","properties":{` +
	`"action":{"type":"string","enum":["create","list","delete"],"description":"What to do."},` +
	`"prompt":{"type":"string","description":"create: what to do when the task runs."},` +
	`"at":{"type":"string","description":"create, once: when (2026-03-01 09:00, 2026-03-01T09:00:00+01:00, or in 20m)."},` +
	`"every":{"type":"string","description":"create, repeating: the interval (e.g. 30m, 2h, 24h); the first run is one interval from now."},` +
	`"cron":{"type":"string","description":"create, repeating: a 5-field cron expression (minute hour day month weekday) or @hourly, @daily, @weekly, @monthly."},` +
	`"timezone":{"type":"string","description":"create: IANA time zone for at and cron, e.g. Europe/Berlin."},` +
	`"id":{"type":"string","description":"delete: the task id (see list)."}` +
	`},"required":["action"],"additionalProperties":false}`)

func (*scheduleTool) Schema() json.RawMessage { return scheduleToolSchema }

func (*scheduleTool) Permission() string { return tools.PermWrite }
func (*scheduleTool) ParallelSafe() bool { return false }

type scheduleArgs struct {
	Action   string `json:"action"`
	Prompt   string `json:"prompt"`
	At       string `json:"at"`
	Every    string `json:"every"`
	Cron     string `json:"cron"`
	Timezone string `json:"timezone"`
	ID       string `json:"id"`
}

func (t *scheduleTool) Run(ctx context.Context, call tools.Call) (tools.Result, error) {
	var a scheduleArgs
	if err := tools.DecodeArgs(call.Args, &a); err != nil {
		return tools.Result{}, err
	}
	sess := call.Session
	if sess.Channel == "" || sess.ChatID == "" || sess.UserID == "" {
		return tools.Result{}, fmt.Errorf("schedule needs a chat session; this call has none")
	}
	if err := ctx.Err(); err != nil {
		return tools.Result{}, err
	}
	if err := t.s.waitLoaded(ctx); err != nil {
		return tools.Result{}, err
	}
	switch a.Action {
	case "create":
		return t.create(ctx, sess, a)
	case "list":
		if a.Prompt != "" || a.At != "" || a.Every != "" || a.Cron != "" || a.ID != "" || a.Timezone != "" {
			return tools.Result{}, fmt.Errorf("%w: list takes no other arguments", tools.ErrBadArgs)
		}
		return tools.Result{Text: t.list(sess)}, nil
	case "delete":
		if a.ID == "" {
			return tools.Result{}, fmt.Errorf("%w: delete needs id (see action list)", tools.ErrBadArgs)
		}
		ok, err := t.s.remove(ctx, a.ID, sess)
		if err != nil {
			return tools.Result{}, err
		}
		if !ok {
			return tools.Result{}, fmt.Errorf("no scheduled task %q (action list shows the tasks)", a.ID)
		}
		return tools.Result{Text: "deleted task " + a.ID}, nil
	case "":
		return tools.Result{}, fmt.Errorf("%w: action is required: create, list or delete", tools.ErrBadArgs)
	}
	return tools.Result{}, fmt.Errorf("%w: action must be create, list or delete, got %q", tools.ErrBadArgs, a.Action)
}

func (t *scheduleTool) create(ctx context.Context, sess tools.Session, a scheduleArgs) (tools.Result, error) {
	s := t.s
	if a.ID != "" {
		return tools.Result{}, fmt.Errorf("%w: id is for delete; a new task gets its own", tools.ErrBadArgs)
	}
	prompt := strings.TrimSpace(a.Prompt)
	switch {
	case prompt == "":
		return tools.Result{}, fmt.Errorf("%w: prompt is required: what should happen when the task runs", tools.ErrBadArgs)
	case len(prompt) > MaxPromptBytes || !utf8.ValidString(prompt):
		return tools.Result{}, fmt.Errorf("%w: prompt must be valid UTF-8 of at most %d bytes", tools.ErrBadArgs, MaxPromptBytes)
	}
	n := 0
	for _, v := range []string{a.At, a.Every, a.Cron} {
		if strings.TrimSpace(v) != "" {
			n++
		}
	}
	if n != 1 {
		return tools.Result{}, fmt.Errorf("%w: give exactly one of at, every or cron", tools.ErrBadArgs)
	}
	loc := s.loc
	if a.Timezone != "" {
		l, err := time.LoadLocation(a.Timezone)
		if err != nil || a.Timezone == "Local" {
			return tools.Result{}, fmt.Errorf("%w: unknown timezone %q; use an IANA name such as Europe/Berlin or America/New_York", tools.ErrBadArgs, a.Timezone)
		}
		loc = l
	}
	now := s.now()
	task := &Task{ID: newTaskID(), Channel: sess.Channel, ChatID: sess.ChatID, ThreadID: sess.Thread(), UserID: sess.UserID,
		IsGroup: sess.IsGroup, Prompt: prompt, TZ: a.Timezone, Created: now.UTC()}
	switch {
	case a.At != "":
		at, err := parseAt(a.At, now, loc)
		if err != nil {
			return tools.Result{}, fmt.Errorf("%w: %v", tools.ErrBadArgs, err)
		}
		if !at.After(now) {
			return tools.Result{}, fmt.Errorf("%w: at %s is in the past (it is now %s)", tools.ErrBadArgs, at.In(loc).Format(time.RFC3339), now.In(loc).Format(time.RFC3339))
		}
		if at.After(now.AddDate(10, 0, 0)) {
			return tools.Result{}, fmt.Errorf("%w: at %s is more than 10 years away", tools.ErrBadArgs, at.In(loc).Format(time.RFC3339))
		}
		task.Kind, task.At, task.Next = KindAt, at.UTC(), at.UTC()
	case a.Every != "":
		d, err := time.ParseDuration(strings.TrimSpace(a.Every))
		if err != nil {
			return tools.Result{}, fmt.Errorf("%w: every %q is not a duration such as 30m, 2h or 24h", tools.ErrBadArgs, a.Every)
		}
		if d < s.cfg.MinInterval {
			return tools.Result{}, fmt.Errorf("%w: every must be at least %s, got %s", tools.ErrBadArgs, s.cfg.MinInterval, d)
		}
		task.Kind, task.Every, task.Next = KindEvery, d, now.Add(d).UTC()
	default:
		c, err := parseCron(a.Cron, loc)
		if err != nil {
			return tools.Result{}, fmt.Errorf("%w: %v", tools.ErrBadArgs, err)
		}
		next := c.Next(now)
		if next.IsZero() {
			return tools.Result{}, fmt.Errorf("%w: cron %q never runs", tools.ErrBadArgs, a.Cron)
		}
		if gap := minGap(c, now); gap != 0 && gap < s.cfg.MinInterval {
			return tools.Result{}, fmt.Errorf("%w: cron %q runs every %s; runs must be at least %s apart", tools.ErrBadArgs, a.Cron, gap, s.cfg.MinInterval)
		}
		task.Kind, task.Cron, task.Next = KindCron, strings.TrimSpace(a.Cron), next.UTC()
	}
	if err := s.add(ctx, task); err != nil {
		return tools.Result{}, err
	}
	return tools.Result{Text: fmt.Sprintf("scheduled task %s (%s); next run %s", task.ID, task.describe(), s.when(task, task.Next))}, nil
}

// when formats a time in the task's zone.
func (s *Scheduler) when(t *Task, at time.Time) string {
	loc := s.loc
	if sp, err := t.spec(s.loc); err == nil {
		loc = sp.loc
	}
	return at.In(loc).Format("2006-01-02 15:04:05 MST (Mon)")
}

func (t *scheduleTool) list(sess tools.Session) string {
	tasks := t.s.Tasks(sess)
	if len(tasks) == 0 {
		return "no scheduled tasks"
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%d scheduled tasks (at most %d):", len(tasks), t.s.cfg.MaxPerUser)
	for i := range tasks {
		task := &tasks[i]
		prompt := task.Prompt
		if utf8.RuneCountInString(prompt) > 120 {
			prompt = string([]rune(prompt)[:120]) + "…"
		}
		where := "this chat"
		if task.ChatID != sess.ChatID || task.ThreadID != sess.Thread() {
			where = "chat " + task.ChatID
			if task.ThreadID != "" {
				where += " thread " + task.ThreadID
			}
		}
		fmt.Fprintf(&b, "\n- %s: %s, next %s, in %s, %d runs so far: %s", task.ID, task.describe(), t.s.when(task, task.Next), where, task.Runs, prompt)
	}
	return b.String()
}

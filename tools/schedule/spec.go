package schedule

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/robfig/cron/v3"
)

// Kinds of schedule.
const (
	KindAt    = "at"
	KindEvery = "every"
	KindCron  = "cron"
)

// cronParser reads standard 5-field expressions and descriptors such as
// @daily; @every is refused (the "every" kind does that).
var cronParser = cron.NewParser(cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow | cron.Descriptor)

// spec is a parsed schedule.
type spec struct {
	kind  string
	at    time.Time     // KindAt
	every time.Duration // KindEvery
	expr  string        // KindCron
	cron  cron.Schedule
	loc   *time.Location
}

// parseCron parses a cron expression in loc.
func parseCron(expr string, loc *time.Location) (cron.Schedule, error) {
	expr = strings.TrimSpace(expr)
	up := strings.ToUpper(expr)
	switch {
	case expr == "":
		return nil, errors.New("cron expression is empty")
	case strings.HasPrefix(up, "TZ=") || strings.HasPrefix(up, "CRON_TZ="):
		return nil, errors.New("put the time zone in the timezone argument, not in the cron expression")
	case strings.HasPrefix(expr, "@every"):
		return nil, errors.New("use every instead of @every")
	}
	s, err := cronParser.Parse(expr)
	if err != nil {
		return nil, fmt.Errorf("cron expression %q: %v (use 5 fields: minute hour day-of-month month day-of-week, e.g. \"0 9 * * 1-5\")", expr, err)
	}
	ss, ok := s.(*cron.SpecSchedule)
	if !ok {
		return nil, fmt.Errorf("cron expression %q is not supported", expr)
	}
	ss.Location = loc
	return ss, nil
}

// next returns the first due time strictly after t, or the zero time when
// there is none (an "at" time that passed, a cron expression that never
// matches).
func (s *spec) next(t time.Time) time.Time {
	switch s.kind {
	case KindAt:
		if s.at.After(t) {
			return s.at
		}
		return time.Time{}
	case KindEvery:
		return t.Add(s.every)
	case KindCron:
		return s.cron.Next(t)
	}
	return time.Time{}
}

// minGap returns the shortest gap between the next runs of a cron
// schedule after t (over a sample of runs), or 0 if it never runs twice.
func minGap(c cron.Schedule, t time.Time) time.Duration {
	var gap time.Duration
	prev := c.Next(t)
	for range 50 {
		if prev.IsZero() {
			break
		}
		n := c.Next(prev)
		if n.IsZero() {
			break
		}
		if d := n.Sub(prev); gap == 0 || d < gap {
			gap = d
		}
		prev = n
	}
	return gap
}

// parseAt reads an "at" time: RFC 3339 ("2026-03-01T09:00:00+01:00"),
// a local date and time in loc ("2026-03-01 09:00", "2026-03-01T09:00:05"),
// or a delay from now ("in 20m", "in 1h30m", "+45s").
func parseAt(s string, now time.Time, loc *time.Location) (time.Time, error) {
	s = strings.TrimSpace(s)
	if rest, ok := strings.CutPrefix(s, "in "); ok || strings.HasPrefix(s, "+") {
		if !ok {
			rest = s[1:]
		}
		d, err := time.ParseDuration(strings.ReplaceAll(strings.TrimSpace(rest), " ", ""))
		if err != nil || d <= 0 {
			return time.Time{}, fmt.Errorf("at %q: the delay must be a positive duration such as \"in 20m\" or \"in 1h30m\"", s)
		}
		return now.Add(d), nil
	}
	if t, err := time.Parse(time.RFC3339, s); err == nil {
		return t, nil
	}
	for _, layout := range []string{"2006-01-02 15:04", "2006-01-02 15:04:05", "2006-01-02T15:04", "2006-01-02T15:04:05"} {
		if t, err := time.ParseInLocation(layout, s, loc); err == nil {
			return t, nil
		}
	}
	return time.Time{}, fmt.Errorf("at %q: use an RFC 3339 time (2026-03-01T09:00:00+01:00), a local time (2026-03-01 09:00) or a delay (in 20m)", s)
}

// describe is a schedule in words, for the model.
func (t *Task) describe() string {
	switch t.Kind {
	case KindAt:
		return "once"
	case KindEvery:
		return "every " + t.Every.String()
	case KindCron:
		return fmt.Sprintf("cron %q (%s)", t.Cron, t.zone())
	}
	return t.Kind
}

func (t *Task) zone() string {
	if t.TZ == "" {
		return "Local"
	}
	return t.TZ
}

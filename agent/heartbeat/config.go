package heartbeat

import (
	"errors"
	"fmt"
	"strings"
	"time"

	// Time zones are IANA names; embed the database so that images
	// without /usr/share/zoneinfo work.
	_ "time/tzdata"

	"go.yaml.in/yaml/v3"

	"github.com/switchboard-chat/switchboard/bus"
)

// MinEvery is the shortest interval agents.<name>.heartbeat.every takes.
const MinEvery = 5 * time.Minute

// DefaultPrompt is the heartbeat turn's instruction when
// agents.<name>.heartbeat.prompt is not set.
const DefaultPrompt = "Read HEARTBEAT.md in your workspace and act on it. If there is nothing to tell the user now, answer exactly " + SilentToken + "."

// SilentToken is the answer of a heartbeat turn that has nothing to say:
// nothing is sent (an empty answer is silent too).
const SilentToken = "HEARTBEAT_OK"

// Config is agents.<name>.heartbeat.
type Config struct {
	// Every is the interval between heartbeat turns (0, the default: no
	// heartbeat; at least MinEvery).
	Every time.Duration `yaml:"every"`
	// To is the chat that receives what a heartbeat turn says: a
	// {channel, chat_id} mapping, or "last", the user's last active direct
	// chat with the agent.
	To Target `yaml:"to"`
	// ActiveHours, "HH:MM-HH:MM" in Timezone, limits the turns to those
	// hours (empty: all day; the range may wrap past midnight).
	ActiveHours string `yaml:"active_hours"`
	// Timezone is the IANA name ActiveHours is read in (default: the
	// daemon's local time).
	Timezone string `yaml:"timezone"`
	// Prompt is the turn's instruction (default DefaultPrompt).
	Prompt string `yaml:"prompt"`
}

// Target is the chat a heartbeat speaks to.
type Target struct {
	// Last: the user's last active direct chat with the agent.
	Last     bool
	Channel  string `yaml:"channel"`
	ChatID   string `yaml:"chat_id"`
	ThreadID string `yaml:"thread_id"`
}

// IsZero reports whether no target is set.
func (t Target) IsZero() bool {
	return !t.Last && t.Channel == "" && t.ChatID == "" && t.ThreadID == ""
}

// String is "last" or "channel/chat_id[/thread_id]".
func (t Target) String() string {
	if t.Last {
		return "last"
	}
	return bus.Speaker{Channel: t.Channel, ChatID: t.ChatID, ThreadID: t.ThreadID}.SessionKey()
}

// UnmarshalYAML reads "last" or a {channel, chat_id, thread_id} mapping.
func (t *Target) UnmarshalYAML(n *yaml.Node) error {
	switch n.Kind {
	case yaml.ScalarNode:
		if n.Value != "last" {
			return errors.New(`want "last" or {channel, chat_id}`)
		}
		*t = Target{Last: true}
		return nil
	case yaml.MappingNode:
		for i := 0; i+1 < len(n.Content); i += 2 {
			if k := n.Content[i].Value; k != "channel" && k != "chat_id" && k != "thread_id" {
				return fmt.Errorf("unknown key %q (want channel, chat_id, thread_id)", k)
			}
		}
		type plain struct {
			Channel  string `yaml:"channel"`
			ChatID   string `yaml:"chat_id"`
			ThreadID string `yaml:"thread_id"`
		}
		var p plain
		if err := n.Decode(&p); err != nil {
			return err
		}
		*t = Target{Channel: p.Channel, ChatID: p.ChatID, ThreadID: p.ThreadID}
		return nil
	}
	return errors.New(`want "last" or {channel, chat_id}`)
}

// Enabled reports whether the heartbeat runs at an interval.
func (c Config) Enabled() bool { return c.Every > 0 }

// Validate reports every problem of the section, each naming its key
// under heartbeat (e.g. "heartbeat.every: ...").
func (c Config) Validate() error {
	var errs []error
	bad := func(key, format string, args ...any) {
		errs = append(errs, fmt.Errorf("heartbeat.%s: %s", key, fmt.Sprintf(format, args...)))
	}
	switch {
	case c.Every < 0:
		bad("every", "must not be negative")
	case c.Every > 0 && c.Every < MinEvery:
		bad("every", "%s is too often: at least %s", c.Every, MinEvery)
	}
	switch {
	case c.Every > 0 && c.To.IsZero():
		bad("to", `required with every: "last" or {channel, chat_id}`)
	case c.To.Last || c.To.IsZero():
	case !bus.ValidChannel(c.To.Channel):
		bad("to.channel", "%q is not a channel name (a-z 0-9 _ -, 1 to 32)", c.To.Channel)
	case c.To.Channel == Channel:
		bad("to.channel", "%q is the heartbeat's own channel", Channel)
	case c.To.ChatID == "":
		bad("to.chat_id", "required with to.channel")
	}
	if _, err := c.location(); err != nil {
		bad("timezone", "%v", err)
	}
	if _, _, err := parseHours(c.ActiveHours); err != nil {
		bad("active_hours", "%v", err)
	}
	return errors.Join(errs...)
}

// location is Timezone's location (time.Local when empty).
func (c Config) location() (*time.Location, error) {
	if c.Timezone == "" {
		return time.Local, nil
	}
	return time.LoadLocation(c.Timezone)
}

// prompt is the turn's instruction.
func (c Config) prompt() string {
	if strings.TrimSpace(c.Prompt) == "" {
		return DefaultPrompt
	}
	return c.Prompt
}

// parseHours reads "HH:MM-HH:MM" into minutes of the day ("" is all day:
// 0, 0).
func parseHours(s string) (from, to int, err error) {
	if s == "" {
		return 0, 0, nil
	}
	a, b, ok := strings.Cut(s, "-")
	if !ok {
		return 0, 0, fmt.Errorf("%q: want HH:MM-HH:MM, e.g. 08:00-22:00", s)
	}
	if from, err = clockMinute(strings.TrimSpace(a)); err == nil {
		to, err = clockMinute(strings.TrimSpace(b))
	}
	if err != nil {
		return 0, 0, fmt.Errorf("%q: %w", s, err)
	}
	if from == to {
		return 0, 0, fmt.Errorf("%q: empty range (leave active_hours out for all day)", s)
	}
	return from, to, nil
}

func clockMinute(s string) (int, error) {
	t, err := time.Parse("15:04", s)
	if err != nil {
		if s == "24:00" {
			return 24 * 60, nil
		}
		return 0, fmt.Errorf("%q is not a time of day HH:MM", s)
	}
	return t.Hour()*60 + t.Minute(), nil
}

// active reports whether t falls in the active hours.
func (c Config) active(t time.Time) bool {
	from, to, err := parseHours(c.ActiveHours)
	if err != nil || from == to {
		return err == nil
	}
	loc, err := c.location()
	if err != nil {
		return false
	}
	lt := t.In(loc)
	m := lt.Hour()*60 + lt.Minute()
	if from < to {
		return m >= from && m < to
	}
	return m >= from || m < to // wraps past midnight
}

package tools

import (
	"errors"
	"fmt"
	"path"
	"strings"
	"time"
)

// Config configures the built-in tools (YAML section "tools"). Each tool
// package takes its own part; DefaultConfig holds the documented defaults.
type Config struct {
	// Disabled lists tool names (or path.Match patterns such as
	// "mcp_github_*") that are never offered to the model.
	Disabled    []string          `yaml:"disabled"`
	SearchFiles SearchFilesConfig `yaml:"search_files"`
	Bash        BashConfig        `yaml:"bash"`
	WebFetch    WebFetchConfig    `yaml:"web_fetch"`
	SendMessage SendMessageConfig `yaml:"send_message"`
	Schedule    ScheduleConfig    `yaml:"schedule"`
}

// SearchFilesConfig configures search_files (tools.search_files).
type SearchFilesConfig struct {
	// MaxResults is the most matches one call may ask for (a call that
	// does not say gets 50).
	MaxResults int `yaml:"max_results"`
	// MaxFileBytes: larger files are skipped by the content search.
	MaxFileBytes int64 `yaml:"max_file_bytes"`
	// Timeout bounds one search.
	Timeout time.Duration `yaml:"timeout"`
}

// BashConfig configures the bash tool (tools.bash).
type BashConfig struct {
	// Enabled registers the tool at all. Off by default.
	Enabled bool `yaml:"enabled"`
	// AllowUsers are the users who may run commands, as
	// "<channel>:<user_id>" (e.g. "telegram:123456"), or "<channel>:*" for
	// every user of a channel. Empty allows nobody.
	AllowUsers []string `yaml:"allow_users"`
	// Timeout is a foreground command's default time limit; a call may ask
	// for up to MaxTimeout.
	Timeout    time.Duration `yaml:"timeout"`
	MaxTimeout time.Duration `yaml:"max_timeout"`
	// JobTimeout is the time limit of a background job.
	JobTimeout time.Duration `yaml:"job_timeout"`
	// MaxJobs bounds the background jobs kept at once (running, or
	// finished with output not yet read).
	MaxJobs int `yaml:"max_jobs"`
	// Sandbox is "bwrap" (the default): run commands under bubblewrap in
	// their own PID namespace without capabilities, with a read-only
	// system, the workspace as the only folder of the host's data, minus
	// other users' and chats' private folders and data_dir; the tool
	// refuses to start without bwrap. "none" runs commands unconfined (a
	// warning in the log and in `switchboard check`).
	Sandbox string `yaml:"sandbox"`
	// Network gives sandboxed commands the host's network. Off by
	// default: a command gets a network namespace of its own, with no
	// way out and nothing of the daemon's listeners (the bus, the APIs)
	// on its loopback. With sandbox none commands always have the host's
	// network.
	Network bool `yaml:"network"`
	// PassEnv names environment variables passed to commands besides the
	// safe set (PATH, HOME, LANG, LC_*, TZ, TERM, USER, LOGNAME, SHELL,
	// TMPDIR). Nothing else of the daemon's environment is passed.
	PassEnv []string `yaml:"pass_env"`
}

// WebFetchConfig configures web_fetch (tools.web_fetch).
type WebFetchConfig struct {
	// AllowPrivate lets web_fetch reach private and loopback addresses
	// (10/8, 172.16/12, 192.168/16, 127/8, fc00::/7, 100.64/10...).
	// Link-local addresses (169.254/16, fe80::/10), where cloud metadata
	// services live, stay refused.
	AllowPrivate bool `yaml:"allow_private"`
	// Timeout bounds one fetch, redirects included.
	Timeout time.Duration `yaml:"timeout"`
	// MaxBytes bounds the body read.
	MaxBytes int64 `yaml:"max_bytes"`
	// MaxRedirects bounds the redirects followed.
	MaxRedirects int `yaml:"max_redirects"`
	// UserAgent is sent with every request.
	UserAgent string `yaml:"user_agent"`
}

// SendMessageConfig configures send_message (tools.send_message).
type SendMessageConfig struct {
	// MaxFileBytes bounds a file sent as an attachment (it travels base64
	// encoded inside one bus message).
	MaxFileBytes int64 `yaml:"max_file_bytes"`
}

// ScheduleConfig configures schedule (tools.schedule).
type ScheduleConfig struct {
	// MaxPerUser bounds the tasks one user may have.
	MaxPerUser int `yaml:"max_per_user"`
	// MaxPerChannel bounds the tasks of all the users of one channel
	// together: a bridge names its users, so the per-user bound alone
	// does not bound a channel.
	MaxPerChannel int `yaml:"max_per_channel"`
	// MinInterval is the shortest repeat: "every" intervals and the gap
	// between two runs of a cron expression.
	MinInterval time.Duration `yaml:"min_interval"`
	// Timezone (IANA name, e.g. Europe/Berlin) in which "at" times without
	// an offset and cron expressions are read; "" means the daemon's local
	// time zone. A task may name its own.
	Timezone string `yaml:"timezone"`
}

// Defaults and bounds of the tools.
const (
	DefaultMaxOutputBytes = 50 * 1024
	maxMaxFileBytes       = 8 << 20
)

// DefaultConfig returns the documented defaults.
func DefaultConfig() Config {
	return Config{
		SearchFiles: SearchFilesConfig{MaxResults: 500, MaxFileBytes: 2 << 20, Timeout: 30 * time.Second},
		Bash: BashConfig{
			Timeout:    120 * time.Second,
			MaxTimeout: 600 * time.Second,
			JobTimeout: time.Hour,
			MaxJobs:    4,
			Sandbox:    "bwrap",
		},
		WebFetch: WebFetchConfig{
			Timeout:      30 * time.Second,
			MaxBytes:     5 << 20,
			MaxRedirects: 5,
			UserAgent:    "Switchboard/1.0 (+web_fetch)",
		},
		SendMessage: SendMessageConfig{MaxFileBytes: 512 << 10},
		Schedule:    ScheduleConfig{MaxPerUser: 20, MaxPerChannel: 1000, MinInterval: time.Minute},
	}
}

// Validate reports every problem (errors.Join), each naming its YAML key
// under "tools.".
func (c Config) Validate() error {
	var errs []error
	bad := func(key, format string, args ...any) {
		errs = append(errs, fmt.Errorf("tools.%s: "+format, append([]any{key}, args...)...))
	}
	for i, p := range c.Disabled {
		if _, err := path.Match(p, ""); err != nil || p == "" {
			bad(fmt.Sprintf("disabled[%d]", i), "must be a tool name or pattern such as mcp_github_*, got %q", p)
		}
	}

	s := c.SearchFiles
	if s.MaxResults < 1 || s.MaxResults > 10000 {
		bad("search_files.max_results", "must be between 1 and 10000, got %d", s.MaxResults)
	}
	if s.MaxFileBytes < 1 {
		bad("search_files.max_file_bytes", "must be at least 1, got %d", s.MaxFileBytes)
	}
	if s.Timeout < time.Second {
		bad("search_files.timeout", "must be at least 1s, got %s", s.Timeout)
	}

	b := c.Bash
	if b.Timeout < time.Second {
		bad("bash.timeout", "must be at least 1s, got %s", b.Timeout)
	}
	if b.MaxTimeout < b.Timeout {
		bad("bash.max_timeout", "must be at least bash.timeout (%s), got %s", b.Timeout, b.MaxTimeout)
	}
	if b.JobTimeout < time.Second {
		bad("bash.job_timeout", "must be at least 1s, got %s", b.JobTimeout)
	}
	if b.MaxJobs < 0 || b.MaxJobs > 64 {
		bad("bash.max_jobs", "must be between 0 and 64, got %d", b.MaxJobs)
	}
	switch b.Sandbox {
	case "bwrap", "none":
	case "":
		bad("bash.sandbox", `must be "bwrap" (the default) or "none" (unconfined); "" no longer means none`)
	default:
		bad("bash.sandbox", `must be "bwrap" or "none", got %q`, b.Sandbox)
	}
	for i, u := range b.AllowUsers {
		if err := checkUserRef(u); err != nil {
			bad(fmt.Sprintf("bash.allow_users[%d]", i), "%v", err)
		}
	}
	for i, name := range b.PassEnv {
		if !ValidEnvName(name) {
			bad(fmt.Sprintf("bash.pass_env[%d]", i), "must be an environment variable name, got %q", name)
		}
	}

	w := c.WebFetch
	if w.Timeout < time.Second {
		bad("web_fetch.timeout", "must be at least 1s, got %s", w.Timeout)
	}
	if w.MaxBytes < 1024 {
		bad("web_fetch.max_bytes", "must be at least 1024, got %d", w.MaxBytes)
	}
	if w.MaxRedirects < 0 || w.MaxRedirects > 20 {
		bad("web_fetch.max_redirects", "must be between 0 and 20, got %d", w.MaxRedirects)
	}
	if strings.ContainsAny(w.UserAgent, "\r\n") {
		bad("web_fetch.user_agent", "must be one line")
	}

	if m := c.SendMessage.MaxFileBytes; m < 0 || m > maxMaxFileBytes {
		bad("send_message.max_file_bytes", "must be between 0 and %d, got %d", maxMaxFileBytes, m)
	}

	sc := c.Schedule
	if sc.MaxPerUser < 1 || sc.MaxPerUser > 10000 {
		bad("schedule.max_per_user", "must be between 1 and 10000, got %d", sc.MaxPerUser)
	}
	if sc.MaxPerChannel < 1 || sc.MaxPerChannel > 1000000 {
		bad("schedule.max_per_channel", "must be between 1 and 1000000, got %d", sc.MaxPerChannel)
	}
	if sc.MinInterval < time.Minute {
		bad("schedule.min_interval", "must be at least 1m, got %s", sc.MinInterval)
	}
	if sc.Timezone != "" {
		if _, err := time.LoadLocation(sc.Timezone); err != nil {
			bad("schedule.timezone", "unknown time zone %q (use an IANA name such as Europe/Berlin)", sc.Timezone)
		}
	}
	return errors.Join(errs...)
}

// checkUserRef checks a "<channel>:<user_id>" entry.
func checkUserRef(s string) error {
	ch, user, ok := strings.Cut(s, ":")
	if !ok || ch == "" || user == "" {
		return fmt.Errorf(`must be "<channel>:<user_id>" or "<channel>:*", got %q`, s)
	}
	for i := 0; i < len(ch); i++ {
		c := ch[i]
		if !('a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '_' || c == '-') {
			return fmt.Errorf("channel %q must match ^[a-z0-9_-]{1,32}$ (in %q)", ch, s)
		}
	}
	if len(ch) > 32 {
		return fmt.Errorf("channel %q must match ^[a-z0-9_-]{1,32}$ (in %q)", ch, s)
	}
	return nil
}

// UserAllowed reports whether the session's user matches one of the
// "<channel>:<user_id>" / "<channel>:*" entries of allow.
func UserAllowed(allow []string, s Session) bool {
	if s.Channel == "" || s.UserID == "" {
		return false
	}
	for _, a := range allow {
		ch, user, _ := strings.Cut(a, ":")
		if ch == s.Channel && (user == "*" || user == s.UserID) {
			return true
		}
	}
	return false
}

// ValidEnvName reports whether s is a portable environment variable name:
// letters, digits and "_", not starting with a digit.
func ValidEnvName(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c == '_' || 'A' <= c && c <= 'Z' || 'a' <= c && c <= 'z' || i > 0 && '0' <= c && c <= '9') {
			return false
		}
	}
	return true
}

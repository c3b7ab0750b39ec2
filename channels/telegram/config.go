package telegram

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"time"

	tgbotapi "github.com/go-telegram-bot-api/telegram-bot-api/v5"
	"go.yaml.in/yaml/v3"

	"github.com/switchboard-chat/switchboard/channels"
	"github.com/switchboard-chat/switchboard/config"
)

// Group triggers (Config.GroupTrigger): which group messages reach the agent.
const (
	// TriggerMentionOrReply passes group messages that mention the bot,
	// reply to one of its messages, or are one of its commands.
	TriggerMentionOrReply = "mention_or_reply"
	// TriggerMention passes group messages that mention the bot or are one
	// of its commands; replies to the bot without a mention are ignored.
	TriggerMention = "mention"
	// TriggerAll passes every group message the bot receives (with privacy
	// mode on, Telegram itself only delivers commands, mentions and
	// replies).
	TriggerAll = "all"
)

// Receiving modes (Config.Mode).
const (
	// ModePolling long-polls getUpdates (no public address needed).
	ModePolling = "polling"
	// ModeWebhook receives updates on an HTTPS webhook Telegram calls.
	ModeWebhook = "webhook"
)

// DefaultAPIEndpoint is Telegram's Bot API, in the library's format: a
// fmt pattern taking the token and the method name.
const DefaultAPIEndpoint = tgbotapi.APIEndpoint

// MinSecretLen is the shortest webhook_secret accepted: the secret is
// all that tells Telegram's webhook calls from anyone else's
// (config.MinSecretLength).
const MinSecretLen = config.MinSecretLength

// Defaults and bounds of the size and time settings.
const (
	DefaultPollTimeout   = 30 * time.Second
	DefaultMaxImageBytes = 512 << 10
	DefaultMaxFileBytes  = 20 << 20

	maxPollTimeout   = 60 * time.Second
	minBytesSetting  = 1 << 10
	maxImageBytesCap = 10 << 20
	maxFileBytesCap  = 2 << 30
)

// Config configures the Telegram channel (YAML section channels.telegram).
// The zero value is not valid; start from [DefaultConfig].
type Config struct {
	// Token is the bot token from @BotFather ("123456789:AA..."). Empty
	// turns the channel off (the daemon logs that and runs without it).
	Token string `yaml:"token"`
	// APIEndpoint is the Bot API URL pattern, "<base>/bot%s/%s" (the token,
	// then the method), default Telegram's. Point it at a local Bot API
	// server or a test server. Files are downloaded from
	// "<base>/file/bot%s/%s".
	APIEndpoint string `yaml:"api_endpoint"`
	// AllowUsers lists who may talk to the bot: numeric user ids and
	// @usernames (case-insensitive); "*" allows everyone; empty denies
	// everyone. An entry may hold several, separated by commas or spaces,
	// so the list can come from one environment variable.
	AllowUsers UserList `yaml:"allow_users"`
	// GroupTrigger is mention_or_reply, mention or all (see the Trigger
	// constants).
	GroupTrigger string `yaml:"group_trigger"`
	// Mode is polling or webhook.
	Mode string `yaml:"mode"`
	// WebhookListen is the host:port the webhook HTTP server listens on
	// (webhook mode; usually behind a TLS-terminating reverse proxy).
	WebhookListen string `yaml:"webhook_listen"`
	// WebhookURL is the public HTTPS URL Telegram posts updates to; its
	// path is the path the webhook server answers on.
	WebhookURL string `yaml:"webhook_url"`
	// WebhookSecret is sent by Telegram in X-Telegram-Bot-Api-Secret-Token
	// with every update: [MinSecretLen] to 256 characters of [A-Za-z0-9_-].
	WebhookSecret string `yaml:"webhook_secret"`
	// PollTimeout is the getUpdates long-poll time (polling mode), whole
	// seconds from 1s to 60s.
	PollTimeout time.Duration `yaml:"poll_timeout"`
	// MaxImageBytes caps a photo passed to the model inline (base64 in the
	// inbound envelope, so it must also fit the bus's payload limit).
	MaxImageBytes int64 `yaml:"max_image_bytes"`
	// MaxFileBytes caps a document, voice note or other file downloaded
	// into the workspace inbox.
	MaxFileBytes int64 `yaml:"max_file_bytes"`
}

// DefaultConfig returns the documented defaults: no token (off), Telegram's
// endpoint, nobody allowed, mention_or_reply, polling.
func DefaultConfig() Config {
	return Config{
		APIEndpoint:   DefaultAPIEndpoint,
		GroupTrigger:  TriggerMentionOrReply,
		Mode:          ModePolling,
		PollTimeout:   DefaultPollTimeout,
		MaxImageBytes: DefaultMaxImageBytes,
		MaxFileBytes:  DefaultMaxFileBytes,
	}
}

// Enabled reports whether a token is set, i.e. whether the channel runs.
func (c Config) Enabled() bool { return c.Token != "" }

var (
	tokenRE    = regexp.MustCompile(`^[0-9]{1,20}:[A-Za-z0-9_-]{1,200}$`)
	secretRE   = regexp.MustCompile(`^[A-Za-z0-9_-]{1,256}$`)
	usernameRE = regexp.MustCompile(`^@[A-Za-z0-9_]{1,32}$`)
)

// key names a setting in errors.
func key(name string) string { return "channels.telegram." + name }

// Validate reports every problem (errors.Join), each naming its YAML key.
// An empty token is valid (the channel is off); the other keys are checked
// all the same. Errors never contain the token.
func (c Config) Validate() error {
	var errs []error
	if c.Token != "" && !tokenRE.MatchString(c.Token) {
		errs = append(errs, fmt.Errorf("%s: must look like 123456789:AAE... (the token @BotFather gave you)", key("token")))
	}
	if _, err := fileEndpoint(c.APIEndpoint); err != nil {
		errs = append(errs, fmt.Errorf("%s: %w", key("api_endpoint"), err))
	}
	for i, u := range c.AllowUsers {
		if err := checkUser(u); err != nil {
			errs = append(errs, fmt.Errorf("%s[%d]: %w", key("allow_users"), i, err))
		}
	}
	switch c.GroupTrigger {
	case TriggerMentionOrReply, TriggerMention, TriggerAll:
	default:
		errs = append(errs, fmt.Errorf("%s: must be mention_or_reply, mention or all, got %q", key("group_trigger"), c.GroupTrigger))
	}
	switch c.Mode {
	case ModePolling:
	case ModeWebhook:
		errs = append(errs, c.validateWebhook()...)
	default:
		errs = append(errs, fmt.Errorf("%s: must be polling or webhook, got %q", key("mode"), c.Mode))
	}
	if c.PollTimeout < time.Second || c.PollTimeout > maxPollTimeout || c.PollTimeout%time.Second != 0 {
		errs = append(errs, fmt.Errorf("%s: must be whole seconds from 1s to %s, got %s", key("poll_timeout"), maxPollTimeout, c.PollTimeout))
	}
	if c.MaxImageBytes < minBytesSetting || c.MaxImageBytes > maxImageBytesCap {
		errs = append(errs, fmt.Errorf("%s: must be between %d and %d, got %d", key("max_image_bytes"), minBytesSetting, maxImageBytesCap, c.MaxImageBytes))
	}
	if c.MaxFileBytes < minBytesSetting || c.MaxFileBytes > maxFileBytesCap {
		errs = append(errs, fmt.Errorf("%s: must be between %d and %d, got %d", key("max_file_bytes"), minBytesSetting, int64(maxFileBytesCap), c.MaxFileBytes))
	}
	return errors.Join(errs...)
}

// validateWebhook checks the keys webhook mode needs.
func (c Config) validateWebhook() []error {
	var errs []error
	if c.WebhookListen == "" {
		errs = append(errs, fmt.Errorf("%s: required in webhook mode (e.g. 127.0.0.1:8443)", key("webhook_listen")))
	} else if _, port, err := net.SplitHostPort(c.WebhookListen); err != nil || port == "" {
		errs = append(errs, fmt.Errorf("%s: must be host:port, got %q", key("webhook_listen"), c.WebhookListen))
	}
	if u, err := url.Parse(c.WebhookURL); c.WebhookURL == "" || err != nil || u.Scheme != "https" || u.Host == "" {
		errs = append(errs, fmt.Errorf("%s: must be the public https:// URL Telegram posts updates to, got %q", key("webhook_url"), c.WebhookURL))
	}
	switch {
	case !secretRE.MatchString(c.WebhookSecret):
		errs = append(errs, fmt.Errorf("%s: required in webhook mode: %d to 256 characters of A-Z, a-z, 0-9, _ and - (e.g. openssl rand -hex 32)", key("webhook_secret"), MinSecretLen))
	case len(c.WebhookSecret) < MinSecretLen:
		errs = append(errs, fmt.Errorf("%s: must be at least %d characters, got %d: it is all that tells Telegram's calls from anyone else's, and a short one can be guessed (e.g. openssl rand -hex 32)",
			key("webhook_secret"), MinSecretLen, len(c.WebhookSecret)))
	}
	return errs
}

// fileEndpoint checks an API endpoint pattern and derives the file
// download pattern from it: "<base>/bot%s/%s" gives "<base>/file/bot%s/%s".
func fileEndpoint(api string) (string, error) {
	base, ok := strings.CutSuffix(api, "/bot%s/%s")
	if !ok || strings.Contains(base, "%") {
		return "", fmt.Errorf("must be a URL ending in /bot%%s/%%s (the token, then the method), such as %s, got %q", DefaultAPIEndpoint, api)
	}
	u, err := url.Parse(base)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return "", fmt.Errorf("must be an http(s) URL ending in /bot%%s/%%s, got %q", api)
	}
	return base + "/file/bot%s/%s", nil
}

// checkUser validates one allow_users entry.
func checkUser(u string) error {
	switch {
	case u == "*":
		return nil
	case strings.HasPrefix(u, "@"):
		if !usernameRE.MatchString(u) {
			return fmt.Errorf("must be a numeric user id, an @username of letters, digits and _, or *, got %q", u)
		}
		return nil
	}
	if id, err := strconv.ParseInt(u, 10, 64); err != nil || id <= 0 {
		return fmt.Errorf("must be a numeric user id, an @username, or *, got %q", u)
	}
	return nil
}

// UserList is the allow_users list. In YAML it is a list of ids and
// @usernames, or one string; every entry is split at commas and white
// space and empty parts are dropped, so `allow_users: ${TELEGRAM_ALLOW_USERS}`
// works with "123, @ann" and with an unset variable (an empty list).
type UserList []string

// UnmarshalYAML decodes a list of scalars or one scalar, splitting and
// dropping empty parts.
func (l *UserList) UnmarshalYAML(n *yaml.Node) error {
	items, err := channels.SplitList(n, "user ids and @usernames")
	if err != nil {
		return err
	}
	*l = UserList(items)
	return nil
}

// access answers whether a Telegram user is on the allow list. It is
// immutable and safe for concurrent use.
type access struct {
	all   bool
	ids   map[int64]bool
	names map[string]bool // lower-case, without '@'
}

func newAccess(list UserList) access {
	a := access{ids: make(map[int64]bool), names: make(map[string]bool)}
	for _, u := range list {
		switch {
		case u == "*":
			a.all = true
		case strings.HasPrefix(u, "@"):
			a.names[strings.ToLower(u[1:])] = true
		default:
			if id, err := strconv.ParseInt(u, 10, 64); err == nil {
				a.ids[id] = true
			}
		}
	}
	return a
}

// allowed reports whether u may talk to the bot.
func (a access) allowed(u *tgbotapi.User) bool {
	if u == nil {
		return false
	}
	if a.all || a.ids[u.ID] {
		return true
	}
	return u.UserName != "" && a.names[strings.ToLower(u.UserName)]
}

package slack

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/switchboard-chat/switchboard/channels"
	"github.com/switchboard-chat/switchboard/config"
)

// Modes (Config.Mode).
const (
	// ModeSocket receives events over a Socket Mode websocket the adapter
	// opens with the app-level token: no public URL is needed.
	ModeSocket = "socket"
	// ModeHTTP receives events from Slack's Events API on an HTTP server
	// the adapter runs on Config.HTTPListen, at [EventsPath].
	ModeHTTP = "http"
)

// Group triggers (Config.GroupTrigger): which channel messages the bot
// answers. Direct messages are always answered (subject to AllowUsers).
const (
	// TriggerMentionOrThread answers mentions of the bot, and replies in a
	// thread the bot has already answered in.
	TriggerMentionOrThread = "mention_or_thread"
	// TriggerMention answers mentions of the bot only.
	TriggerMention = "mention"
	// TriggerAll answers every message in the channels the bot is in.
	TriggerAll = "all"
)

// DefaultAPIURL is Slack's Web API base URL.
const DefaultAPIURL = "https://slack.com/api/"

// EventsPath is the path the HTTP mode serves Events API requests on.
const EventsPath = "/slack/events"

// MinSecretLen is the shortest signing secret accepted: the secret is all
// that tells Slack's requests from anyone else's (config.MinSecretLength).
const MinSecretLen = config.MinSecretLength

// Config configures the Slack adapter (YAML section channels.slack). The
// zero value of Mode, APIURL and GroupTrigger means their default, so a
// section that sets only the tokens is complete. The adapter is off while
// no token is set (see [Config.Enabled]).
type Config struct {
	// Mode is "socket" (default) or "http".
	Mode string `yaml:"mode"`
	// AppToken is the app-level token (xapp-...) with the
	// connections:write scope; required in socket mode.
	AppToken string `yaml:"app_token"`
	// BotToken is the bot user OAuth token (xoxb-...); always required.
	BotToken string `yaml:"bot_token"`
	// SigningSecret verifies Events API requests; required in http mode,
	// at least [MinSecretLen] characters.
	SigningSecret string `yaml:"signing_secret"`
	// HTTPListen is the host:port the http mode listens on; required in
	// http mode. Events are served at POST /slack/events.
	HTTPListen string `yaml:"http_listen"`
	// APIURL is the Web API base URL (default [DefaultAPIURL]); it is
	// normalised to end with "/".
	APIURL string `yaml:"api_url"`
	// AllowUsers lists the Slack user ids (U...) the bot answers; ["*"]
	// allows everyone; empty denies everyone.
	AllowUsers IDList `yaml:"allow_users"`
	// AllowChannels lists the channel ids (C... or G...) the bot answers
	// in; empty allows every channel the bot is a member of. Direct
	// messages are governed by AllowUsers alone.
	AllowChannels IDList `yaml:"allow_channels"`
	// GroupTrigger is "mention_or_thread" (default), "mention" or "all".
	GroupTrigger string `yaml:"group_trigger"`
}

// DefaultConfig returns the documented defaults: socket mode, Slack's API
// URL, mention_or_thread, and no tokens.
func DefaultConfig() Config {
	return Config{Mode: ModeSocket, APIURL: DefaultAPIURL, GroupTrigger: TriggerMentionOrThread}
}

// Enabled reports whether any token or secret is set, i.e. whether the
// channel runs. The shipped configuration reads them from the
// environment, so Slack is off until SLACK_BOT_TOKEN (and the app token or
// signing secret) are set.
func (c Config) Enabled() bool { return c.BotToken != "" || c.AppToken != "" || c.SigningSecret != "" }

// withDefaults fills in the defaults of empty fields and normalises
// APIURL to end with "/" (slack-go appends method names to it).
func (c Config) withDefaults() Config {
	if c.Mode == "" {
		c.Mode = ModeSocket
	}
	if c.APIURL == "" {
		c.APIURL = DefaultAPIURL
	}
	if !strings.HasSuffix(c.APIURL, "/") {
		c.APIURL += "/"
	}
	if c.GroupTrigger == "" {
		c.GroupTrigger = TriggerMentionOrThread
	}
	return c
}

// Validate reports every problem (errors.Join), each naming its key under
// channels.slack. Empty Mode, APIURL and GroupTrigger are valid (their
// defaults apply). A configuration with no token at all is valid (the
// channel is off) as long as its other keys are; once any token is set,
// the tokens the mode needs are required. Errors never contain a token.
func (c Config) Validate() error {
	c = c.withDefaults()
	const p = "channels.slack."
	var errs []error
	on := c.Enabled()
	switch c.Mode {
	case ModeSocket:
		if c.AppToken == "" {
			if on {
				errs = append(errs, errors.New(p+"app_token: required in socket mode (an app-level token xapp-... with the connections:write scope; see docs/slack.md)"))
			}
		} else if !strings.HasPrefix(c.AppToken, "xapp-") {
			errs = append(errs, errors.New(p+"app_token: must be an app-level token starting with xapp-"))
		}
	case ModeHTTP:
		switch {
		case c.SigningSecret == "" && on:
			errs = append(errs, errors.New(p+"signing_secret: required in http mode (Basic Information → App Credentials → Signing Secret)"))
		case c.SigningSecret != "" && len(c.SigningSecret) < MinSecretLen:
			errs = append(errs, fmt.Errorf(p+"signing_secret: must be the app's signing secret (Slack's have 32 characters; at least %d), got %d characters: a short one can be guessed", MinSecretLen, len(c.SigningSecret)))
		}
		if c.HTTPListen == "" {
			if on {
				errs = append(errs, errors.New(p+"http_listen: required in http mode, e.g. 0.0.0.0:3000"))
			}
		} else if err := checkListen(c.HTTPListen); err != nil {
			errs = append(errs, fmt.Errorf(p+"http_listen: %w", err))
		}
	default:
		errs = append(errs, fmt.Errorf(p+"mode: must be socket or http, got %q", c.Mode))
	}
	if c.BotToken == "" {
		if on {
			errs = append(errs, errors.New(p+"bot_token: required (the bot user OAuth token xoxb-...; see docs/slack.md)"))
		}
	} else if !strings.HasPrefix(c.BotToken, "xoxb-") {
		errs = append(errs, errors.New(p+"bot_token: must be a bot token starting with xoxb-"))
	}
	if u, err := url.Parse(c.APIURL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		errs = append(errs, fmt.Errorf(p+"api_url: must be an absolute http or https URL, got %q", c.APIURL))
	}
	switch c.GroupTrigger {
	case TriggerMentionOrThread, TriggerMention, TriggerAll:
	default:
		errs = append(errs, fmt.Errorf(p+"group_trigger: must be mention_or_thread, mention or all, got %q", c.GroupTrigger))
	}
	for i, u := range c.AllowUsers {
		if u == "*" {
			if len(c.AllowUsers) > 1 {
				errs = append(errs, fmt.Errorf(p+"allow_users[%d]: \"*\" allows everyone and must be the only entry", i))
			}
			continue
		}
		if !validID(u) {
			errs = append(errs, fmt.Errorf(p+"allow_users[%d]: must be a Slack user id such as U0123ABCD (or \"*\"), got %q", i, u))
		}
	}
	for i, ch := range c.AllowChannels {
		if !validID(ch) {
			errs = append(errs, fmt.Errorf(p+"allow_channels[%d]: must be a Slack channel id such as C0123ABCD, got %q", i, ch))
		}
	}
	return errors.Join(errs...)
}

// checkListen validates a host:port listen address.
func checkListen(addr string) error {
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("must be host:port, got %q", addr)
	}
	if n, err := strconv.Atoi(port); err != nil || n < 0 || n > 65535 {
		return fmt.Errorf("port must be a number from 0 to 65535, got %q", port)
	}
	return nil
}

// validID reports whether s looks like a Slack object id: upper-case
// letters and digits, 2 to 32 of them.
func validID(s string) bool {
	if len(s) < 2 || len(s) > 32 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('A' <= c && c <= 'Z' || '0' <= c && c <= '9') {
			return false
		}
	}
	return true
}

// IDList is a list of Slack ids. In YAML it is a list, or one string;
// every entry is split at commas and white space and empty parts are
// dropped, so `allow_users: [${SLACK_ALLOW_USERS}]` works with
// "U0123, U0456" and with an unset variable (an empty list).
type IDList []string

// UnmarshalYAML decodes a list of scalars or one scalar, splitting and
// dropping empty parts; an empty result is nil.
func (l *IDList) UnmarshalYAML(n *yaml.Node) error {
	items, err := channels.SplitList(n, "Slack ids")
	if err != nil {
		return err
	}
	*l = IDList(items)
	return nil
}

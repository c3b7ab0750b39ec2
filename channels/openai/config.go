package openai

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"regexp"
	"strings"
	"time"

	"github.com/switchboard-chat/switchboard/config"
)

// Defaults and bounds of the settings.
const (
	DefaultListen         = "127.0.0.1:8088"
	DefaultModel          = "switchboard"
	DefaultMaxBodyBytes   = 4 << 20
	DefaultRequestTimeout = 10 * time.Minute
	DefaultRateLimit      = 60

	minBodyBytes      = 1 << 10
	maxBodyBytesCap   = 64 << 20
	maxRequestTimeout = 24 * time.Hour
	maxRateLimit      = 100_000
	minKeyBytes       = config.MinSecretLength
	maxKeyBytes       = 512
)

// Config configures the OpenAI-compatible API (YAML section
// channels.openai). The section absent, or present with no keys, is off.
// Start from [DefaultConfig].
type Config struct {
	// Listen is the host:port the HTTP server binds. A port alone
	// (":8088") binds the loopback interface, 127.0.0.1; any other host is
	// taken as written (put TLS in front of it).
	Listen string `yaml:"listen"`
	// Keys are the accepted API keys (Authorization: Bearer <key>), each
	// one user of the daemon. Empty: the channel is off.
	Keys []Key `yaml:"keys"`
	// Models are the model ids GET /v1/models lists and a request may
	// name; every one is the same agent.
	Models []string `yaml:"models"`
	// MaxBodyBytes bounds a request body; a larger one gets 413.
	MaxBodyBytes int64 `yaml:"max_body_bytes"`
	// RequestTimeout bounds how long a request waits for the agent's
	// final answer (then 504; the turn goes on, its answer is kept for a
	// retry with the same Idempotency-Key).
	RequestTimeout time.Duration `yaml:"request_timeout"`
	// RateLimit is the chat completion requests accepted per minute and
	// API key (a bucket of that many, refilled evenly); beyond, 429.
	RateLimit int `yaml:"rate_limit"`
	// CORSOrigins are the browser origins allowed to call the API
	// ("https://chat.example.com", or "*"); empty: no CORS headers.
	CORSOrigins []string `yaml:"cors_origins"`
}

// Key is one API key and the user it stands for.
type Key struct {
	// Key is the secret a client sends as its bearer token (at least 16
	// bytes; use ${ENV} to keep it out of the file).
	Key string `yaml:"key"`
	// User is the user id the agent sees for requests with this key:
	// 1 to 64 of A-Z a-z 0-9 _ . @ -.
	User string `yaml:"user"`
}

// String hides the secret, so a Key can be logged.
func (k Key) String() string { return "openai.Key{user: " + k.User + ", key: (redacted)}" }

// GoString hides the secret from %#v too.
func (k Key) GoString() string { return k.String() }

// DefaultConfig returns the documented defaults: loopback 127.0.0.1:8088,
// no keys (off), the model "switchboard", 4 MiB bodies, 10 minutes, 60
// requests a minute, no CORS.
func DefaultConfig() Config {
	return Config{
		Listen:         DefaultListen,
		Models:         []string{DefaultModel},
		MaxBodyBytes:   DefaultMaxBodyBytes,
		RequestTimeout: DefaultRequestTimeout,
		RateLimit:      DefaultRateLimit,
	}
}

// Enabled reports whether the channel runs: at least one key is set.
func (c Config) Enabled() bool { return len(c.Keys) > 0 }

var (
	userRE  = regexp.MustCompile(`^[A-Za-z0-9_.@-]{1,64}$`)
	modelRE = regexp.MustCompile(`^[A-Za-z0-9_.:/-]{1,128}$`)
)

// key names a setting in errors.
func key(name string) string { return "channels.openai." + name }

// Validate reports every problem (errors.Join), each naming its YAML key.
// Errors never contain an API key.
func (c Config) Validate() error {
	var errs []error
	if _, err := bindAddr(c.Listen); err != nil {
		errs = append(errs, fmt.Errorf("%s: %w", key("listen"), err))
	}
	seen := map[string]int{}
	for i, k := range c.Keys {
		switch {
		case k.Key == "":
			errs = append(errs, fmt.Errorf("%s[%d].key: required (is its environment variable set?)", key("keys"), i))
		case len(k.Key) < minKeyBytes || len(k.Key) > maxKeyBytes:
			errs = append(errs, fmt.Errorf("%s[%d].key: must be %d to %d bytes, got %d", key("keys"), i, minKeyBytes, maxKeyBytes, len(k.Key)))
		case strings.ContainsAny(k.Key, " \t\r\n"):
			errs = append(errs, fmt.Errorf("%s[%d].key: must not contain white space", key("keys"), i))
		default:
			if j, dup := seen[k.Key]; dup {
				errs = append(errs, fmt.Errorf("%s[%d].key: the same key as %s[%d]", key("keys"), i, key("keys"), j))
			}
			seen[k.Key] = i
		}
		if !userRE.MatchString(k.User) {
			errs = append(errs, fmt.Errorf("%s[%d].user: must be 1 to 64 of A-Z a-z 0-9 _ . @ -, got %q", key("keys"), i, k.User))
		}
	}
	if len(c.Models) == 0 {
		errs = append(errs, fmt.Errorf("%s: must list at least one model id", key("models")))
	}
	for i, m := range c.Models {
		if !modelRE.MatchString(m) {
			errs = append(errs, fmt.Errorf("%s[%d]: must be 1 to 128 of A-Z a-z 0-9 _ . : / -, got %q", key("models"), i, m))
		}
	}
	if c.MaxBodyBytes < minBodyBytes || c.MaxBodyBytes > maxBodyBytesCap {
		errs = append(errs, fmt.Errorf("%s: must be between %d and %d, got %d", key("max_body_bytes"), minBodyBytes, maxBodyBytesCap, c.MaxBodyBytes))
	}
	if c.RequestTimeout < time.Second || c.RequestTimeout > maxRequestTimeout {
		errs = append(errs, fmt.Errorf("%s: must be between 1s and %s, got %s", key("request_timeout"), maxRequestTimeout, c.RequestTimeout))
	}
	if c.RateLimit < 1 || c.RateLimit > maxRateLimit {
		errs = append(errs, fmt.Errorf("%s: must be between 1 and %d requests per minute, got %d", key("rate_limit"), maxRateLimit, c.RateLimit))
	}
	for i, o := range c.CORSOrigins {
		if o == "*" {
			continue
		}
		if u, err := url.Parse(o); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.Path != "" || u.RawQuery != "" {
			errs = append(errs, fmt.Errorf("%s[%d]: must be an origin such as https://chat.example.com (no path), or *, got %q", key("cors_origins"), i, o))
		}
	}
	return errors.Join(errs...)
}

// bindAddr is the address the server binds: listen, with 127.0.0.1 when
// it names no host.
func bindAddr(listen string) (string, error) {
	host, port, err := net.SplitHostPort(listen)
	if err != nil || port == "" {
		return "", fmt.Errorf("must be host:port (e.g. %s), got %q", DefaultListen, listen)
	}
	if host == "" {
		host = "127.0.0.1"
	}
	return net.JoinHostPort(host, port), nil
}

package natsbus

import (
	"errors"
	"fmt"
	"net"
	"regexp"
	"slices"
	"strconv"
	"time"

	"github.com/nats-io/nkeys"

	"github.com/switchboard-chat/switchboard/bus"
	"github.com/switchboard-chat/switchboard/config"
)

// Config configures the bus (YAML section "bus").
type Config struct {
	// URL of an external NATS server; empty starts the embedded server
	// in-process with JetStream.
	URL string `yaml:"url"`
	// Listen is the embedded server's client listener ("host:port"); empty
	// means in-process only. Ignored when URL is set. The listener accepts
	// no anonymous client (see Admin); a host other than loopback
	// (localhost, 127.0.0.0/8, ::1) requires Admin.
	Listen string `yaml:"listen"`
	// SubjectPrefix is the first subject token (default "chat").
	SubjectPrefix string `yaml:"subject_prefix"`
	// MaxTextBytes bounds an inbound envelope's text (default 65536).
	MaxTextBytes int `yaml:"max_text_bytes"`
	// OutRetention is how long the outbound stream keeps a message and, equal
	// to it, its de-duplication window: a final answer re-published with the
	// same Nats-Msg-Id (after a crash between publish and acknowledgement)
	// is never stored twice while the first copy is kept. Consumers
	// remember the outbound ids they have shown for at least this long
	// (docs/bus-protocol.md §5). At least 1s; 0 means [DefaultOutRetention].
	// An existing stream is updated at start.
	OutRetention time.Duration `yaml:"out_retention"`
	// Replicas is how many JetStream servers hold a copy of every stream
	// the daemon creates (CHAT_IN, CHAT_OUT, CHAT_DLQ and, with
	// memory.store jetstream, the history stream): 1 to [MaxReplicas],
	// default 1; 3 on a 3-node cluster. More than 1 needs bus.url pointing
	// at a JetStream cluster with at least that many servers (the embedded
	// server is one node). An existing stream is updated to it at start
	// where NATS allows, else the daemon says which stream and why.
	Replicas int `yaml:"replicas"`
	// Bridges declares the external bridges by name (YAML
	// "bus.bridges.<name>"): on the embedded server each bridge
	// authenticates with its own credentials and may touch only its
	// channels' subjects. Each bridge's channels are rate limited on the way in
	// ([BridgeConfig.MaxMsgsPerSec]) and get a durable outbound consumer
	// ([BridgeConsumerName]).
	Bridges map[string]BridgeConfig `yaml:"bridges"`
	// Admin holds the operators' credentials for the embedded server (YAML
	// "bus.admin"): full access, for the nats CLI, `switchboard chat` and
	// `switchboard bus tail`. The embedded server never accepts an anonymous
	// client: the daemon connects in-process with a credential generated at
	// start, and when Admin is not set and Listen is not empty the daemon
	// generates the operators' token in data_dir ([OperatorTokenFile]).
	// Required when Listen is not a loopback address.
	Admin AdminConfig `yaml:"admin"`
	// Partitions is agent.partitions, filled in by the daemon (not a key
	// of the bus section): above 1 the in stream is partitioned and
	// consumed through one pinned consumer per partition
	// ([PartitionConsumerConfig]); 0 and 1 mean one consumer,
	// [ConsumerName].
	Partitions int `yaml:"-"`
	// BuiltinChannels are the channel names of the daemon's own adapters
	// (console, telegram, slack, web, openai), filled in by the daemon
	// (not a key of the bus section): a bridge may neither be named after
	// one (its consumer, bridge_<name>, is the adapter's) nor declare one.
	BuiltinChannels []string `yaml:"-"`
}

// BridgeConfig declares one bridge (YAML "bus.bridges.<name>"). Exactly one
// credential kind is set: Token, or User and Password, or NKey.
type BridgeConfig struct {
	// Channels are the channel names the bridge speaks for; at least one,
	// each matching ^[a-z0-9_-]{1,32}$, none claimed by another bridge.
	Channels []string `yaml:"channels"`
	// Token authenticates the bridge with a shared secret (nats.Token).
	Token string `yaml:"token"`
	// User and Password authenticate the bridge with a user name and
	// password (nats.UserInfo).
	User     string `yaml:"user"`
	Password string `yaml:"password"`
	// NKey is the bridge's public user NKey ("U..."); the bridge signs the
	// server's nonce with the matching seed (nats.Nkey).
	NKey string `yaml:"nkey"`
	// MaxMsgsPerSec bounds the inbound messages accepted per second on each
	// of the bridge's channels (a token bucket holding one second's worth,
	// at least 1); excess messages are dead-lettered. 0 means
	// [DefaultMaxMsgsPerSec].
	MaxMsgsPerSec float64 `yaml:"max_msgs_per_sec"`
}

// AdminConfig holds the operators' credentials (YAML "bus.admin"): Token, or
// User and Password.
type AdminConfig struct {
	Token    string `yaml:"token"`
	User     string `yaml:"user"`
	Password string `yaml:"password"`
}

// Set reports whether any admin credential is configured.
func (a AdminConfig) Set() bool { return a.Token != "" || a.User != "" || a.Password != "" }

// Bridge limits.
const (
	// DefaultMaxMsgsPerSec is a bridge channel's inbound rate limit when
	// max_msgs_per_sec is not set.
	DefaultMaxMsgsPerSec = 20
	// MaxMsgsPerSecLimit is the largest max_msgs_per_sec accepted.
	MaxMsgsPerSecLimit = 100_000
)

// MinSecretLength is the shortest bus.admin token or password, or bridge
// token or password, accepted when bus.listen is not a loopback address
// (shorter ones are a warning on loopback): config.MinSecretLength.
const MinSecretLength = config.MinSecretLength

// MaxReplicas bounds bus.replicas (JetStream's own limit).
const MaxReplicas = 5

// DefaultOutRetention is bus.out_retention when it is not set.
const DefaultOutRetention = 24 * time.Hour

// DefaultConfig returns the documented defaults.
func DefaultConfig() Config {
	return Config{Listen: "127.0.0.1:4222", SubjectPrefix: "chat", MaxTextBytes: 65536, OutRetention: DefaultOutRetention, Replicas: 1}
}

// WithBuiltinChannels returns c with [Config.BuiltinChannels] set to
// names: the daemon's own adapters' channels, which no bridge may be named
// after or declare.
func (c Config) WithBuiltinChannels(names []string) Config {
	c.BuiltinChannels = slices.Clone(names)
	return c
}

// OutRetentionOrDefault returns OutRetention, or [DefaultOutRetention] when
// it is 0.
func (c Config) OutRetentionOrDefault() time.Duration {
	if c.OutRetention == 0 {
		return DefaultOutRetention
	}
	return c.OutRetention
}

var prefixRE = regexp.MustCompile(`^[A-Za-z0-9_-]+(\.[A-Za-z0-9_-]+)*$`)

// Validate reports every problem, each naming its YAML key.
func (c Config) Validate() error {
	var errs []error
	if c.Listen != "" && c.URL == "" {
		if host, port, err := net.SplitHostPort(c.Listen); err != nil {
			errs = append(errs, fmt.Errorf("bus.listen: must be host:port, got %q", c.Listen))
		} else if n, err := strconv.Atoi(port); err != nil || n < 0 || n > 65535 {
			errs = append(errs, fmt.Errorf("bus.listen: port must be a number from 0 to 65535 (0 picks a free port), got %q", port))
		} else if !loopbackHost(host) && !c.Admin.Set() {
			errs = append(errs, fmt.Errorf("bus.admin: token, or user and password, is required when bus.listen (%q) is not a loopback address: the operator credential the daemon generates in data_dir is for processes on this machine only; set bus.admin (e.g. token: ${SWITCHBOARD_BUS_ADMIN_TOKEN}) or listen on 127.0.0.1", c.Listen))
		} else if !loopbackHost(host) {
			for _, key := range c.shortSecrets() {
				errs = append(errs, fmt.Errorf("%s: must be at least %d characters when bus.listen (%q) is not a loopback address: anyone who reaches the listener can try to guess it; use a long random string (openssl rand -hex 32)", key, MinSecretLength, c.Listen))
			}
		}
	}
	if !prefixRE.MatchString(c.SubjectPrefix) {
		errs = append(errs, fmt.Errorf("bus.subject_prefix: must be dot-separated tokens of [A-Za-z0-9_-], got %q", c.SubjectPrefix))
	}
	if c.MaxTextBytes <= 0 || c.MaxTextBytes > 4<<20 {
		errs = append(errs, fmt.Errorf("bus.max_text_bytes: must be between 1 and 4194304, got %d", c.MaxTextBytes))
	}
	if c.OutRetention != 0 && c.OutRetention < time.Second {
		errs = append(errs, fmt.Errorf("bus.out_retention: must be at least 1s (how long CHAT_OUT keeps and de-duplicates outbound messages; default %s), got %s", DefaultOutRetention, c.OutRetention))
	}
	switch {
	case c.Replicas < 1 || c.Replicas > MaxReplicas:
		errs = append(errs, fmt.Errorf("bus.replicas: must be between 1 and %d (copies of each stream; 3 on a 3-node cluster), got %d", MaxReplicas, c.Replicas))
	case c.Replicas > 1 && c.URL == "":
		errs = append(errs, fmt.Errorf("bus.replicas: %d needs a NATS cluster of at least %d JetStream servers (set bus.url); the embedded server is a single node, so use 1", c.Replicas, c.Replicas))
	}
	if c.Partitions < 0 || c.Partitions > MaxPartitions {
		errs = append(errs, fmt.Errorf("agent.partitions: must be between 1 and %d, got %d", MaxPartitions, c.Partitions))
	}
	errs = append(errs, c.validateBridges()...)
	return errors.Join(errs...)
}

// validateBridges checks bus.bridges and bus.admin.
func (c Config) validateBridges() []error {
	var errs []error
	external := c.URL != ""
	if external {
		if c.Admin.Set() {
			errs = append(errs, errors.New("bus.admin: used only by the embedded server; with bus.url set, put the credentials in the URL (nats://user:password@host:4222) and configure users in the NATS server"))
		}
	} else {
		errs = append(errs, checkAdmin(c.Admin)...)
	}
	owner := map[string]string{}      // channel -> bridge name
	credential := map[string]string{} // "token:x", "user:x", "nkey:x" -> key that uses it
	if !external {
		if c.Admin.Token != "" {
			credential["token:"+c.Admin.Token] = "bus.admin.token"
		}
		if c.Admin.User != "" {
			credential["user:"+c.Admin.User] = "bus.admin.user"
		}
	}
	names := make([]string, 0, len(c.Bridges))
	for name := range c.Bridges {
		names = append(names, name)
	}
	slices.Sort(names) // deterministic messages; the first name keeps a shared channel
	for _, name := range names {
		b := c.Bridges[name]
		key := "bus.bridges." + name
		switch {
		case !bus.ValidChannel(name):
			errs = append(errs, fmt.Errorf("%s: bridge name must match ^[a-z0-9_-]{1,32}$, got %q", key, name))
		case slices.Contains(c.BuiltinChannels, name):
			errs = append(errs, fmt.Errorf("%s: %q is the name of a built-in channel, whose adapter owns the consumer %s; give the bridge another name", key, name, BridgeConsumerName(name)))
		}
		if len(b.Channels) == 0 {
			errs = append(errs, fmt.Errorf("%s.channels: must list at least one channel", key))
		}
		for i, ch := range b.Channels {
			ckey := fmt.Sprintf("%s.channels[%d]", key, i)
			switch prev, taken := owner[ch]; {
			case !bus.ValidChannel(ch):
				errs = append(errs, fmt.Errorf("%s: must match ^[a-z0-9_-]{1,32}$, got %q", ckey, ch))
			case ch == bus.InvalidChannel:
				errs = append(errs, fmt.Errorf("%s: %q is reserved for dead letters of unparsable subjects", ckey, ch))
			case ch == bus.HeartbeatChannel:
				errs = append(errs, fmt.Errorf("%s: %q is reserved for the agents' heartbeat turns", ckey, ch))
			case slices.Contains(c.BuiltinChannels, ch):
				errs = append(errs, fmt.Errorf("%s: %q is a built-in channel of the daemon (its own adapter speaks for it); a bridge needs a channel name of its own", ckey, ch))
			case taken && prev == name:
				errs = append(errs, fmt.Errorf("%s: channel %q is listed twice", ckey, ch))
			case taken:
				errs = append(errs, fmt.Errorf("%s: channel %q is already claimed by bus.bridges.%s", ckey, ch, prev))
			default:
				owner[ch] = name
			}
		}
		if b.MaxMsgsPerSec < 0 || b.MaxMsgsPerSec > MaxMsgsPerSecLimit {
			errs = append(errs, fmt.Errorf("%s.max_msgs_per_sec: must be between 0 (default %d) and %d, got %g", key, DefaultMaxMsgsPerSec, MaxMsgsPerSecLimit, b.MaxMsgsPerSec))
		}
		if external {
			if b.Token != "" || b.User != "" || b.Password != "" || b.NKey != "" {
				errs = append(errs, fmt.Errorf("%s: credentials are enforced only by the embedded server; with bus.url set, configure this bridge's user and permissions in the NATS server (docs/bus-protocol.md) and remove token, user, password and nkey here", key))
			}
			continue
		}
		errs = append(errs, checkBridgeCredentials(key, b)...)
		for _, cred := range []struct{ field, value string }{
			{"token", b.Token}, {"user", b.User}, {"nkey", b.NKey},
		} {
			if cred.value == "" {
				continue
			}
			id := cred.field + ":" + cred.value
			if prev, dup := credential[id]; dup {
				errs = append(errs, fmt.Errorf("%s.%s: the same %s is used by %s; every bridge needs its own", key, cred.field, cred.field, prev))
				continue
			}
			credential[id] = key + "." + cred.field
		}
	}
	return errs
}

// shortSecrets returns the keys of the embedded server's secrets (bus.admin
// and the bridges' tokens and passwords) shorter than [MinSecretLength],
// sorted.
func (c Config) shortSecrets() []string {
	var keys []string
	short := func(key, secret string) {
		if secret != "" && len(secret) < MinSecretLength {
			keys = append(keys, key)
		}
	}
	short("bus.admin.token", c.Admin.Token)
	short("bus.admin.password", c.Admin.Password)
	for name, b := range c.Bridges {
		short("bus.bridges."+name+".token", b.Token)
		short("bus.bridges."+name+".password", b.Password)
	}
	slices.Sort(keys)
	return keys
}

// WeakSecrets returns one warning per secret of the embedded listener
// shorter than [MinSecretLength], naming its key: the daemon logs them at
// start and `switchboard check` shows them. It is empty with bus.url, an
// in-process bus, or a listener that is not a loopback address (where
// Validate refuses them).
func (c Config) WeakSecrets() []string {
	if c.URL != "" || c.Listen == "" {
		return nil
	}
	if host, _, err := net.SplitHostPort(c.Listen); err != nil || !loopbackHost(host) {
		return nil
	}
	var warns []string
	for _, key := range c.shortSecrets() {
		warns = append(warns, fmt.Sprintf("%s is shorter than %d characters: any process on this machine can guess it (failed logins are throttled, not stopped); use a long random string (openssl rand -hex 32)", key, MinSecretLength))
	}
	return warns
}

// checkBridgeCredentials checks that exactly one credential kind is set and
// that it is well-formed.
func checkBridgeCredentials(key string, b BridgeConfig) []error {
	var errs []error
	kinds := 0
	if b.Token != "" {
		kinds++
	}
	if b.User != "" || b.Password != "" {
		kinds++
		if b.User == "" {
			errs = append(errs, fmt.Errorf("%s.user: required with %s.password", key, key))
		}
		if b.Password == "" {
			errs = append(errs, fmt.Errorf("%s.password: required with %s.user", key, key))
		}
	}
	if b.NKey != "" {
		kinds++
		if !nkeys.IsValidPublicUserKey(b.NKey) {
			errs = append(errs, fmt.Errorf("%s.nkey: must be a public user NKey (56 characters starting with U, from `nk -gen user -pubout`), got %q", key, b.NKey))
		}
	}
	switch kinds {
	case 0:
		errs = append(errs, fmt.Errorf("%s: set exactly one credential: token, user and password, or nkey (none is set; is its environment variable empty?)", key))
	case 1:
	default:
		errs = append(errs, fmt.Errorf("%s: set exactly one credential: token, user and password, or nkey (%d kinds are set)", key, kinds))
	}
	return errs
}

// checkAdmin checks bus.admin: token, or user and password, not both.
func checkAdmin(a AdminConfig) []error {
	var errs []error
	if a.Token != "" && (a.User != "" || a.Password != "") {
		errs = append(errs, errors.New("bus.admin: set either token, or user and password, not both"))
	}
	if a.User != "" && a.Password == "" {
		errs = append(errs, errors.New("bus.admin.password: required with bus.admin.user"))
	}
	if a.Password != "" && a.User == "" {
		errs = append(errs, errors.New("bus.admin.user: required with bus.admin.password"))
	}
	return errs
}

// Rate returns the inbound rate limit of each of the bridge's channels, in
// messages per second: MaxMsgsPerSec, or [DefaultMaxMsgsPerSec] when it is
// 0.
func (b BridgeConfig) Rate() float64 {
	if b.MaxMsgsPerSec == 0 {
		return DefaultMaxMsgsPerSec
	}
	return b.MaxMsgsPerSec
}

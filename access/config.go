// Package access decides who may talk to the bot in a direct chat beyond a
// channel's own allow_users list, and lets an owner admit a new user by a
// pairing code instead of copying ids into the configuration (issue 20).
//
// Contract:
//
//   - Config is the "access" section: access.dm_policy.<channel> is
//     pairing, allowlist or open; access.owners lists the users who may
//     approve codes and change the agent's shared prompt inputs, as
//     <channel>:<user_id> on a built-in channel ([Authenticated]; a
//     bridge's channel is refused: the bridge chooses its user ids), and
//     the operator's console ([Console]) counts as an owner too. Telegram
//     and Slack default to pairing; every other channel (console, web,
//     openai, the bus bridges) is open, because it authenticates its own
//     users; Validate refuses a policy other than open for them, since
//     nothing would enforce it.
//   - The gate sits in the Telegram and Slack adapters, where allow_users
//     already sits: a message of a user not on allow_users asks
//     [Store.Check] before it is published. A refused message never reaches
//     the bus, so no turn, history or memory sees it. In groups Check only
//     admits approved users and owners; the group's own rules (triggers,
//     allow_users) are unchanged.
//   - Under pairing, an unknown user in a direct chat gets one message with
//     an 8-character code (alphabet [Alphabet], valid [CodeTTL]). Rate
//     limits: one new code per user per [UserEvery] (messages in between
//     get no answer), at most [MaxPending] codes pending at once (beyond,
//     one "try later" note per user per UserEvery). The sha256 of every code
//     ever issued is kept, so a code is never issued twice.
//   - State is data_dir/access.db (bbolt) with memory.store bolt, opened
//     for each operation and closed right after: the daemon reads it at
//     each decision, so an approval or a revocation by `switchboard
//     pairing` in another process applies to the user's next message
//     without a restart, and the verb works with the daemon stopped as
//     well as running (bbolt's file lock orders the two processes). With
//     memory.store jetstream it is the cluster's "<prefix>_access"
//     key-value bucket (internal/kvstate, Options.Shared), which every
//     instance reads at each decision: the pending codes, rate-limit
//     stamps and approved users under one key changed by a
//     revision-checked read-modify-write (two instances answering one
//     user at once issue one code), every issued code's hash under a key
//     of its own created only when absent (a code is never issued twice
//     across instances). `switchboard pairing` then reaches the bucket on
//     the bus as the operator, like `switchboard status`.
//   - The channels' allow_users lists travel in Config.AllowUsers: the
//     adapters read them from the Store ([Store.AllowUsers]) at each
//     message, so a reload's [Store.SetConfig] puts them in force.
//   - Approve (the verb, or /pair approve in a chat of an owner) moves the
//     user to the approved list; Revoke removes them, and their next message
//     gets a new code.
package access

import (
	"errors"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"
)

// Policy is a channel's rule for direct chats with users not on its
// allow list.
type Policy string

// The policies.
const (
	Pairing   Policy = "pairing"   // an unknown user gets a code the owner approves
	Allowlist Policy = "allowlist" // an unknown user is refused, as allow_users alone does
	Open      Policy = "open"      // everyone may talk
)

// Console is the channel of the operator's `switchboard chat`: only the
// daemon's own account (the operator's credential) publishes on it, so its
// users are the operator and count as owners ([Config.Owner]).
const Console = "console"

// Authenticated are the built-in channels, whose user ids the platform or
// the daemon authenticates (a Telegram or Slack account, a web or API
// login, the operator's console): the only channels access.owners may
// name. A bridge chooses the user ids of its channels itself.
var Authenticated = []string{Console, "openai", "slack", "telegram", "web"}

// Gated are the channels whose adapters ask the gate; every other channel
// authenticates its own users (web and openai logins, bus bridge
// credentials, the console's operator) and can only be open.
var Gated = []string{"slack", "telegram"}

// Config is the "access" section of the configuration.
type Config struct {
	// DMPolicy is the policy per channel name; a channel not listed gets
	// its default (pairing for Telegram and Slack, open for the others).
	DMPolicy map[string]Policy `yaml:"dm_policy"`
	// Owners are the users who may approve pairing codes from a chat
	// (/pair approve CODE) and change the agent's shared prompt inputs
	// (AGENT.md, USER.md, RULE.md, MEMORY.md, HEARTBEAT.md, skills/, the
	// shared memory), as <channel>:<user_id> on a built-in channel
	// ([Authenticated]). They are admitted on their channel without being
	// on its allow list. The operator's console counts as an owner
	// without being listed.
	Owners []string `yaml:"owners"`
	// Bridged are the channels of the declared bridges
	// (bus.bridges.<name>.channels, not a key of this section), channel
	// to bridge name: the daemon fills it ([Config.WithBridges]) so that
	// Validate refuses an owner on a channel whose user ids a bridge
	// chooses.
	Bridged map[string]string `yaml:"-"`
	// AllowUsers are the channels' allow_users lists (channels.<name>.
	// allow_users, not a key of this section), by channel name: the
	// daemon fills it from its configuration so that a reload puts them
	// in force through [Store.SetConfig]; the adapters read them with
	// [Store.AllowUsers]. A channel not listed keeps the list it started
	// with.
	AllowUsers map[string][]string `yaml:"-"`
}

// DefaultConfig returns the documented defaults: no policy overridden, no
// owner.
func DefaultConfig() Config { return Config{} }

// Listed are the channels whose adapters read allow_users from the Store
// ([Store.AllowUsers]), so that a reload changes it: the gated ones, and
// the web console, whose logins it names.
var Listed = []string{"slack", "telegram", "web"}

// ReloadKeys are the configuration keys a reload applies through
// [Store.SetConfig] besides the access section: channels.<name>.allow_users
// of the [Listed] channels.
func ReloadKeys() []string {
	keys := make([]string, 0, len(Listed))
	for _, ch := range Listed {
		keys = append(keys, allowKey(ch))
	}
	return keys
}

func allowKey(channel string) string { return "channels." + channel + ".allow_users" }

// WithChannels returns c carrying the allow_users lists of the [Listed]
// channels (Config.AllowUsers) found in sections: the daemon's channels
// section, a struct whose fields, tagged with the channel's YAML name,
// point to each channel's configuration with an AllowUsers list (a nil
// pointer, a section absent, gives none).
func (c Config) WithChannels(sections any) Config {
	c.AllowUsers = map[string][]string{}
	v := reflect.Indirect(reflect.ValueOf(sections))
	if v.Kind() != reflect.Struct {
		return c
	}
	strs := reflect.TypeFor[[]string]()
	for i := range v.NumField() {
		name, _, _ := strings.Cut(v.Type().Field(i).Tag.Get("yaml"), ",")
		f := v.Field(i)
		if !slices.Contains(Listed, name) || f.Kind() != reflect.Pointer || f.Type().Elem().Kind() != reflect.Struct {
			continue
		}
		l, ok := f.Type().Elem().FieldByName("AllowUsers")
		if !ok || !l.Type.ConvertibleTo(strs) {
			continue
		}
		if !f.IsNil() { // a section absent is off: its adapter does not run
			c.AllowUsers[name] = f.Elem().FieldByIndex(l.Index).Convert(strs).Interface().([]string)
		}
	}
	return c
}

// Policy returns channel's policy.
func (c Config) Policy(channel string) Policy {
	if p, ok := c.DMPolicy[channel]; ok {
		return p
	}
	if slices.Contains(Gated, channel) {
		return Pairing
	}
	return Open
}

// WithBridges returns c carrying the declared bridges' channels
// (Config.Bridged): bridges maps each bus.bridges.<name> to its channels.
func (c Config) WithBridges(bridges map[string][]string) Config {
	c.Bridged = map[string]string{}
	for _, name := range slices.Sorted(maps.Keys(bridges)) {
		for _, ch := range bridges[name] {
			if _, taken := c.Bridged[ch]; !taken {
				c.Bridged[ch] = name
			}
		}
	}
	return c
}

// Owner reports whether channel:user is an owner: listed in owners, or a
// user of the operator's console ([Console]).
func (c Config) Owner(channel, user string) bool {
	return user != "" && (channel == Console || slices.Contains(c.Owners, channel+":"+user))
}

// Validate reports every problem, each naming its key.
func (c Config) Validate() error {
	var errs []error
	for _, ch := range slices.Sorted(maps.Keys(c.DMPolicy)) {
		p := c.DMPolicy[ch]
		switch {
		case p != Pairing && p != Allowlist && p != Open:
			errs = append(errs, fmt.Errorf("access.dm_policy.%s: must be pairing, allowlist or open, got %q", ch, p))
		case p != Open && !slices.Contains(Gated, ch):
			errs = append(errs, fmt.Errorf("access.dm_policy.%s: only %s have a pairing gate; %s authenticates its own users and can only be open, got %q",
				ch, strings.Join(Gated, " and "), ch, p))
		}
	}
	for i, o := range c.Owners {
		if err := c.checkOwner(o); err != nil {
			errs = append(errs, fmt.Errorf("access.owners[%d]: %w", i, err))
		}
	}
	return errors.Join(errs...)
}

// checkOwner checks one entry of owners: well-formed, on a built-in
// channel, not on a bridge's.
func (c Config) checkOwner(o string) error {
	u, err := ParseUser(o)
	if err != nil {
		return err
	}
	if b, ok := c.Bridged[u[0]]; ok {
		return fmt.Errorf("%s is on channel %s of the bridge bus.bridges.%s, which chooses its users' ids itself, so anyone behind the bridge could act as this owner "+
			"(approve pairing codes, change the shared prompt files); owners must be on a built-in channel (%s)", o, u[0], b, strings.Join(Authenticated, ", "))
	}
	if !slices.Contains(Authenticated, u[0]) {
		return fmt.Errorf("%s is not on a built-in channel (%s), whose user ids are authenticated; owners must be", o, strings.Join(Authenticated, ", "))
	}
	return nil
}

// ParseUser splits "<channel>:<user_id>".
func ParseUser(s string) ([2]string, error) {
	ch, user, ok := strings.Cut(s, ":")
	if !ok || ch == "" || user == "" || strings.ContainsAny(s, " \t\n") {
		return [2]string{}, fmt.Errorf("want <channel>:<user_id> such as telegram:123456789, got %q", s)
	}
	return [2]string{ch, user}, nil
}

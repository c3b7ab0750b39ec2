package web

import (
	"errors"
	"fmt"
	"net"
	"regexp"

	"go.yaml.in/yaml/v3"

	"github.com/switchboard-chat/switchboard/channels"
)

// DefaultListen is the address the console binds by default.
const DefaultListen = "127.0.0.1:8089"

// Config configures the web console (YAML section channels.web). It is off
// while AllowUsers is empty (the section absent, or the shipped
// config.yaml with SWITCHBOARD_WEB_USERS unset). Start from
// [DefaultConfig].
type Config struct {
	// Listen is the host:port the console's HTTP server binds. A port
	// alone (":8089") binds the loopback interface, 127.0.0.1; any other
	// host is taken as written (put an HTTPS reverse proxy in front of it).
	Listen string `yaml:"listen"`
	// AllowUsers are the user names that may log in with a pairing code
	// (1 to 64 of A-Z a-z 0-9 _ . @ -). Empty: the console is off.
	AllowUsers UserList `yaml:"allow_users"`
	// Dashboard turns on the operator's dashboard (/dashboard): sessions,
	// live traces of every channel, health, dead letters, metrics, model
	// requests and the redacted config, for the Operators.
	Dashboard bool `yaml:"dashboard"`
	// Operators are the users of AllowUsers who may see the dashboard;
	// everyone else gets the chat only. Empty (the default): nobody.
	Operators UserList `yaml:"operators"`
}

// DefaultConfig returns the documented defaults: 127.0.0.1:8089, nobody
// allowed (off), the dashboard on, no operator.
func DefaultConfig() Config { return Config{Listen: DefaultListen, Dashboard: true} }

// Enabled reports whether the console runs: at least one user is allowed.
func (c Config) Enabled() bool { return len(c.AllowUsers) > 0 }

// UserList is the allow_users (and operators) list: a YAML list of names or one string,
// split at commas and white space, so `allow_users: ${SWITCHBOARD_WEB_USERS}`
// works with "ann, bob" and with an unset variable (no entries).
type UserList []string

// UnmarshalYAML decodes a list of scalars or one scalar.
func (l *UserList) UnmarshalYAML(n *yaml.Node) error {
	items, err := channels.SplitList(n, "user names")
	if err != nil {
		return err
	}
	*l = UserList(items)
	return nil
}

var userRE = regexp.MustCompile(`^[A-Za-z0-9_.@-]{1,64}$`)

// key names a setting in errors.
func key(name string) string { return "channels.web." + name }

// Validate reports every problem (errors.Join), each naming its YAML key.
func (c Config) Validate() error {
	var errs []error
	if _, err := bindAddr(c.Listen); err != nil {
		errs = append(errs, fmt.Errorf("%s: %w", key("listen"), err))
	}
	seen := map[string]bool{}
	for i, u := range c.AllowUsers {
		switch {
		case !userRE.MatchString(u):
			errs = append(errs, fmt.Errorf("%s[%d]: must be 1 to 64 of A-Z a-z 0-9 _ . @ -, got %q", key("allow_users"), i, u))
		case seen[u]:
			errs = append(errs, fmt.Errorf("%s[%d]: %q is listed twice", key("allow_users"), i, u))
		}
		seen[u] = true
	}
	ops := map[string]bool{}
	for i, u := range c.Operators {
		switch {
		case !userRE.MatchString(u):
			errs = append(errs, fmt.Errorf("%s[%d]: must be 1 to 64 of A-Z a-z 0-9 _ . @ -, got %q", key("operators"), i, u))
		case ops[u]:
			errs = append(errs, fmt.Errorf("%s[%d]: %q is listed twice", key("operators"), i, u))
		case c.Enabled() && !seen[u]:
			errs = append(errs, fmt.Errorf("%s[%d]: %q is not in %s, so cannot log in", key("operators"), i, u, key("allow_users")))
		}
		ops[u] = true
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

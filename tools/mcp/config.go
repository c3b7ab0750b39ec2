package mcp

import (
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"time"

	"golang.org/x/net/http/httpguts"

	"github.com/switchboard-chat/switchboard/tools"
)

// Config lists the MCP servers whose tools join the agent's tool set
// (YAML section "mcp").
type Config struct {
	// Servers maps a server name (used in tool names, mcp_<name>_<tool>)
	// to how to reach it.
	Servers map[string]ServerConfig `yaml:"servers"`
}

// ServerConfig is one MCP server: a command speaking MCP over stdio, or
// the URL of a streamable HTTP endpoint.
type ServerConfig struct {
	// Command and Args start a stdio server. Its environment is the safe
	// set of the daemon's (PATH, HOME, LANG...) plus Env.
	Command string            `yaml:"command"`
	Args    []string          `yaml:"args"`
	Env     map[string]string `yaml:"env"`
	// URL is a streamable HTTP endpoint; Headers are sent with every
	// request (e.g. Authorization).
	URL     string            `yaml:"url"`
	Headers map[string]string `yaml:"headers"`
	// Timeout bounds one tool call (0 means DefaultTimeout).
	Timeout time.Duration `yaml:"timeout"`
	// Disabled keeps the server configured but not started.
	Disabled bool `yaml:"disabled"`
}

// DefaultTimeout is a tool call's time limit when the server sets none.
const DefaultTimeout = 60 * time.Second

// maxServerName bounds server names so that mcp_<server>_<tool> leaves
// room for the tool's name within 64 characters.
const maxServerName = 24

var serverNameRE = regexp.MustCompile(`^[a-zA-Z0-9-]{1,24}$`)

// DefaultConfig returns the default: no servers.
func DefaultConfig() Config { return Config{} }

// Validate reports every problem (errors.Join), each naming its YAML key
// under "mcp.".
func (c Config) Validate() error {
	var errs []error
	names := make([]string, 0, len(c.Servers))
	for name := range c.Servers {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		s := c.Servers[name]
		key := "mcp.servers." + name
		bad := func(field, format string, args ...any) {
			k := key
			if field != "" {
				k += "." + field
			}
			errs = append(errs, fmt.Errorf("%s: "+format, append([]any{k}, args...)...))
		}
		if !serverNameRE.MatchString(name) {
			bad("", "server names must be 1 to %d letters, digits or -, got %q", maxServerName, name)
		}
		switch {
		case s.Command != "" && s.URL != "":
			bad("", "set command (a stdio server) or url (an HTTP server), not both")
		case s.Command == "" && s.URL == "":
			bad("", "set command (a stdio server) or url (an HTTP server)")
		case s.URL != "":
			u, err := url.Parse(s.URL)
			if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
				bad("url", "must be an http(s) URL, got %q", RedactURL(s.URL))
			}
			if len(s.Args) > 0 || len(s.Env) > 0 {
				bad("", "args and env apply to command servers only")
			}
		case s.Command != "":
			if strings.TrimSpace(s.Command) != s.Command {
				bad("command", "must not have leading or trailing spaces")
			}
			if len(s.Headers) > 0 {
				bad("headers", "apply to url servers only")
			}
		}
		for k := range s.Env {
			if !tools.ValidEnvName(k) {
				bad("env", "%q is not an environment variable name", k)
			}
		}
		for k, v := range s.Headers {
			if !httpguts.ValidHeaderFieldName(k) || !httpguts.ValidHeaderFieldValue(v) {
				bad("headers", "%q is not a valid header", k)
			}
			if http.CanonicalHeaderKey(k) == "Host" {
				bad("headers", "Host cannot be set")
			}
		}
		if s.Timeout < 0 {
			bad("timeout", "must not be negative, got %s", s.Timeout)
		}
	}
	return errors.Join(errs...)
}

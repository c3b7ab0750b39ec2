package main

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/switchboard-chat/switchboard"
	"github.com/switchboard-chat/switchboard/access"
	"github.com/switchboard-chat/switchboard/admin"
	"github.com/switchboard-chat/switchboard/agent"
	"github.com/switchboard-chat/switchboard/agent/profiles"
	"github.com/switchboard-chat/switchboard/bus/natsbus"
	openaich "github.com/switchboard-chat/switchboard/channels/openai"
	slackch "github.com/switchboard-chat/switchboard/channels/slack"
	"github.com/switchboard-chat/switchboard/channels/telegram"
	webch "github.com/switchboard-chat/switchboard/channels/web"
	"github.com/switchboard-chat/switchboard/config"
	"github.com/switchboard-chat/switchboard/internal/httpserve"
	"github.com/switchboard-chat/switchboard/internal/logging"
	"github.com/switchboard-chat/switchboard/llm"
	"github.com/switchboard-chat/switchboard/memory/memcfg"
	"github.com/switchboard-chat/switchboard/tools"
	"github.com/switchboard-chat/switchboard/tools/mcp"
)

// Config is the whole configuration file (config.yaml). Each section is
// owned by the package it configures; this type only composes them.
type Config struct {
	// DataDir holds the daemon's state: history.db and the embedded NATS
	// server's JetStream store.
	DataDir string `yaml:"data_dir"`
	// ShutdownTimeout is how long running turns may finish after SIGTERM
	// or SIGINT before they are cancelled (and redelivered after restart).
	ShutdownTimeout time.Duration  `yaml:"shutdown_timeout"`
	Log             logging.Config `yaml:"log"`
	Bus             natsbus.Config `yaml:"bus"`
	LLM             llm.Config     `yaml:"llm"`
	Agent           agent.Config   `yaml:"agent"`
	Memory          memcfg.Config  `yaml:"memory"`
	Tools           tools.Config   `yaml:"tools"`
	MCP             mcp.Config     `yaml:"mcp"`
	Admin           admin.Config   `yaml:"admin"`
	Channels        ChannelsConfig `yaml:"channels"`
	Access          access.Config  `yaml:"access"`
	// Agents and Bindings: several agents, bound to chats (agent/profiles).
	Agents   map[string]config.Node `yaml:"agents"`
	Bindings []profiles.Binding     `yaml:"bindings"`
	HTTP     httpserve.Config       `yaml:"http"`
	File     string                 `yaml:"-"` // the --config LoadConfig was given, which a reload reads again
}

// Profiles are the agents (main first) and bindings (profiles.Build).
func (c Config) Profiles() (profiles.Set, error) {
	return profiles.Build(profiles.Defaults{LLM: c.LLM, Agent: c.Agent, Tools: c.Tools, DataDir: c.DataDir}, c.Agents, c.Bindings)
}

// ChannelsConfig holds the built-in chat platform adapters (YAML section
// "channels"). A nil section, or one with no token, is off.
type ChannelsConfig struct {
	OpenAI   *openaich.Config `yaml:"openai"`
	Slack    *slackch.Config  `yaml:"slack"`
	Telegram *telegram.Config `yaml:"telegram"`
	Web      *webch.Config    `yaml:"web"`
}

// defaultConfig returns the documented defaults; the shipped config.yaml
// with an empty environment decodes to exactly this value.
func defaultConfig() Config {
	return Config{
		DataDir:         "./data",
		ShutdownTimeout: 30 * time.Second,
		Log:             logging.DefaultConfig(),
		Bus:             natsbus.DefaultConfig(),
		LLM:             llm.DefaultConfig(),
		Agent:           agent.DefaultConfig(),
		Memory:          memcfg.DefaultConfig(),
		Tools:           tools.DefaultConfig(),
		MCP:             mcp.DefaultConfig(),
		Admin:           admin.DefaultConfig(),
		HTTP:            httpserve.DefaultConfig(),
		Access:          access.DefaultConfig(),
		Channels:        ChannelsConfig{OpenAI: new(openaich.DefaultConfig()), Slack: new(slackch.DefaultConfig()), Telegram: new(telegram.DefaultConfig()), Web: new(webch.DefaultConfig())},
	}
}

// LoadConfig reads, expands (from the process environment), decodes and
// validates the configuration file (config.Load: path when set, which must
// exist, else defaultConfigPath when it exists, else the built-in defaults).
// See ParseConfig for the rules. On a problem in the file the error starts
// with a line naming the file, followed by one line per problem.
func LoadConfig(path string) (Config, config.Source, error) {
	data, src, err := config.Load(path, defaultConfigPath, switchboard.ShippedConfig)
	if err != nil {
		return Config{}, src, err
	}
	cfg, err := ParseConfig(data, os.LookupEnv)
	if err != nil {
		return Config{}, src, fmt.Errorf("config %s:\n%w", src, err)
	}
	cfg.File = path
	return cfg, src, nil
}

// ParseConfig decodes a configuration file over defaultConfig and validates
// the result (Config.Validate), with the rules of package config:
//
//   - ${VAR} and ${VAR:-default} in scalar values are replaced with the
//     variable's value from lookupEnv (":-" also applies when the variable is
//     set but empty); $$ writes a literal $. Expansion happens after YAML
//     parsing, so a value cannot change the file's structure. An unquoted
//     value that expands to a number or boolean is decoded as one.
//   - Every key must be known; an unknown key is an error naming its dotted
//     path and line.
//   - A key present with an empty value sets the empty (zero) value, which
//     overrides the default: bus.listen: "" means in-process only. A section
//     present with no keys keeps its defaults.
//   - Durations use Go syntax: 90s, 10m, 1h30m.
//   - llm.base_url left empty means [llm.DefaultBaseURL].
//
// Every problem is reported: the error is an errors.Join of one error per
// problem, each naming its key and the rule it breaks. A nil lookupEnv
// behaves as an empty environment.
func ParseConfig(data []byte, lookupEnv func(string) (string, bool)) (Config, error) {
	cfg := defaultConfig()
	opts := config.Options{LookupEnv: lookupEnv, TopLevel: "a mapping of sections (data_dir:, log:, bus:, llm:, agent:, admin:)"}
	if err := config.Decode(data, &cfg, opts); err != nil {
		return Config{}, err
	}
	if cfg.LLM.BaseURL == "" {
		cfg.LLM.BaseURL = llm.DefaultBaseURL
	}
	return cfg, nil
}

// Validate checks every section and reports every problem (errors.Join),
// each naming its YAML key.
func (c Config) Validate() error {
	var errs []error
	if c.DataDir == "" {
		errs = append(errs, errors.New("data_dir: must not be empty"))
	}
	if c.ShutdownTimeout < time.Second || c.ShutdownTimeout > time.Hour {
		errs = append(errs, fmt.Errorf("shutdown_timeout: must be between 1s and 1h, got %s", c.ShutdownTimeout))
	}
	_, perr := c.Profiles()
	errs = append(errs, c.Log.Validate(), c.Bus.WithBuiltinChannels(builtinChannels).Validate(), c.LLM.Validate(), c.Agent.Validate(), c.Memory.Validate(), c.Tools.Validate(), c.MCP.Validate(), c.Admin.Validate(), c.HTTP.Validate(), c.Access.WithBridges(c.bridgeChannels()).Validate(), perr)
	if c.Channels.OpenAI != nil {
		errs = append(errs, c.Channels.OpenAI.Validate())
	}
	if c.Channels.Slack != nil {
		errs = append(errs, c.Channels.Slack.Validate())
	}
	if c.Channels.Telegram != nil {
		errs = append(errs, c.Channels.Telegram.Validate())
	}
	if c.Channels.Web != nil {
		errs = append(errs, c.Channels.Web.Validate())
	}
	if c.Bus.URL == "" && c.Bus.Listen != "" && c.Bus.Listen == c.Admin.Listen && !strings.HasSuffix(c.Admin.Listen, ":0") {
		errs = append(errs, fmt.Errorf("admin.listen: must differ from bus.listen, both are %q", c.Admin.Listen))
	}
	return errors.Join(errs...)
}

// builtinChannels are the channels of the daemon's own adapters
// (access.Authenticated; TestBuiltinChannelsAreTheAdapters checks them
// against the adapters' names): no bus.bridges.<name> may be named after
// one or declare one (natsbus.Config.BuiltinChannels).
var builtinChannels = access.Authenticated

// bridgeChannels are the channels of each bus.bridges.<name>, for the
// access section's checks of owners (access.Config.WithBridges).
func (c Config) bridgeChannels() map[string][]string {
	out := make(map[string][]string, len(c.Bus.Bridges))
	for name, b := range c.Bus.Bridges {
		out[name] = b.Channels
	}
	return out
}

// Logger returns the process logger writing to w (logging.Config.New).
func (c Config) Logger(w io.Writer) *slog.Logger { return c.Log.New(w) }

package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"go.yaml.in/yaml/v3"

	"github.com/switchboard-chat/switchboard/agent"
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

var updateGolden = flag.Bool("update", false, "rewrite testdata/*.golden files")

// shippedConfig is the example configuration at the repository root.
const shippedConfig = "../../config.yaml"

func noEnv(string) (string, bool) { return "", false }

func envMap(m map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
}

func TestParseConfigTestdata(t *testing.T) {
	tests := []struct {
		file     string
		want     func(*Config) // edits defaultConfig() into the expected value
		wantErrs []string      // each must appear in the error, in this order
	}{
		{file: "valid_empty.yaml", want: func(*Config) {}},
		{file: "valid_empty_sections.yaml", want: func(*Config) {}},
		{file: "valid_empty_overrides.yaml", want: func(c *Config) {
			c.Bus.Listen = ""
			c.Admin.Listen = ""
		}},
		{file: "valid_anchors.yaml", want: func(c *Config) {
			c.Agent.MaxSteps = 7
			c.Agent.MaxContextTurns = 7
			c.LLM.Model = "merged-model"
			c.LLM.MaxTokens = 200
		}},
		{file: "valid_full.yaml", want: func(c *Config) {
			*c = Config{
				DataDir:         "/var/lib/sb",
				ShutdownTimeout: 45 * time.Second,
				Log:             logging.Config{Level: "debug", Format: "json"},
			}
			c.Bus.URL = "nats://nats.internal:4222"
			c.Bus.Listen = "0.0.0.0:14222"
			c.Bus.SubjectPrefix = "acme.chat"
			c.Bus.MaxTextBytes = 1024
			c.Bus.OutRetention = 6 * time.Hour
			c.Bus.Replicas = 3
			c.LLM.BaseURL = "http://localhost:11434/v1"
			c.LLM.APIKey = "sk-test"
			c.LLM.Model = "llama3.1"
			c.LLM.MaxTokens = 512
			c.LLM.Temperature = 0.7
			c.LLM.ContextWindow = 8192
			c.LLM.RequestTimeout = 90 * time.Second
			c.LLM.IdleTimeout = 90 * time.Second
			c.LLM.MaxRetries = 0
			c.LLM.RateLimitBackoff = 10 * time.Second
			c.LLM.RetryBackoff = time.Second
			c.LLM.Fallbacks = []llm.Endpoint{{BaseURL: "http://backup:8000/v1", Model: "backup-model"}}
			c.LLM.FallbackCooldown = time.Minute
			c.Agent.Workspace = "/srv/workspace"
			c.Agent.MaxSteps = 5
			c.Agent.MaxConcurrentTurns = 2
			c.Agent.SessionIdle = time.Hour
			c.Agent.MaxContextTokens = 4000
			c.Agent.MaxContextTurns = 3
			c.Agent.DeltaInterval = 2 * time.Second
			c.Tools = tools.Config{Disabled: []string{"bash", "mcp_*"},
				SearchFiles: tools.SearchFilesConfig{MaxResults: 100, MaxFileBytes: 1 << 20, Timeout: 10 * time.Second},
				Bash: tools.BashConfig{Enabled: true, AllowUsers: []string{"telegram:123456789", "console:*"}, Timeout: 30 * time.Second,
					MaxTimeout: 2 * time.Minute, JobTimeout: 10 * time.Minute, MaxJobs: 2, Sandbox: "bwrap", PassEnv: []string{"GOPATH"}},
				WebFetch:    tools.WebFetchConfig{AllowPrivate: true, Timeout: 10 * time.Second, MaxBytes: 1 << 20, MaxRedirects: 3, UserAgent: "TestAgent/1"},
				SendMessage: tools.SendMessageConfig{MaxFileBytes: 1024},
				Schedule:    tools.ScheduleConfig{MaxPerUser: 5, MaxPerChannel: 50, MinInterval: 5 * time.Minute, Timezone: "Europe/Berlin"}}
			c.MCP = mcp.Config{Servers: map[string]mcp.ServerConfig{
				"github": {Command: "npx", Args: []string{"-y", "@modelcontextprotocol/server-github"}, Env: map[string]string{"GITHUB_PERSONAL_ACCESS_TOKEN": "ghp-test"}, Timeout: 90 * time.Second},
				"search": {URL: "https://mcp.example.com/mcp", Headers: map[string]string{"Authorization": "Bearer t0k"}, Disabled: true}}}
			c.Agent.ExtraAttempts = 4
			c.Agent.MaxConsecutiveRollbacks = 2
			c.Agent.KeepToolResults = 3
			c.Agent.SubagentDepth = 2
			c.Agent.SubagentConcurrency = 2
			c.Agent.QueueMode = agent.QueueSequential
			c.Agent.Subagents = map[string]agent.SubagentConfig{"researcher": {
				Description: "Finds facts.", PromptFile: "agents/researcher.md", Tools: []string{"read_file", "list_dir"},
				MaxSteps: 4, Model: "small-model", Timeout: 90 * time.Second,
			}}
			c.Memory = memcfg.Config{Store: "jetstream", Scope: "shared", Retention: 30, Consolidate: "03:15", EmbeddingModel: "text-embedding-3-small",
				EmbeddingBaseURL: "http://embed:8080/v1", EmbeddingAPIKey: "ek-test", IndexInterval: 5 * time.Minute}
			c.Admin.Listen = "0.0.0.0:19090"
			c.HTTP = httpserve.Config{MaxConns: 300, MaxConnsPerIP: 300, ReadHeaderTimeout: 5 * time.Second, ReadTimeout: 30 * time.Second, IdleTimeout: 90 * time.Second, MaxHeaderBytes: 16384}
			c.Channels.OpenAI = &openaich.Config{Listen: "0.0.0.0:18088",
				Keys:   []openaich.Key{{Key: "sk-full-0123456789abcdef", User: "ann"}, {Key: "sk-full-fedcba9876543210", User: "bob@example.com"}},
				Models: []string{"switchboard", "switchboard-fast"}, MaxBodyBytes: 1 << 20, RequestTimeout: 2 * time.Minute, RateLimit: 30,
				CORSOrigins: []string{"https://chat.example.com"}}
			c.Channels.Slack = &slackch.Config{Mode: "http", BotToken: "xoxb-1-full", SigningSecret: "full-signing-secret-0123456789", HTTPListen: "0.0.0.0:3000",
				APIURL: "http://slack-proxy:8080/api", AllowUsers: slackch.IDList{"U0123ABCD", "U0456EFGH"},
				AllowChannels: slackch.IDList{"C0123ABCD"}, GroupTrigger: "all"}
			c.LLM.TranscriptionModel = "whisper-1"
			c.Channels.Telegram = &telegram.Config{Token: "123456:AAE-full_token", APIEndpoint: "http://tg-local:8081/bot%s/%s",
				AllowUsers: telegram.UserList{"123456789", "@ann", "987", "@bob"}, GroupTrigger: "mention", Mode: "webhook",
				WebhookListen: "127.0.0.1:8443", WebhookURL: "https://bot.example.com/telegram/hook", WebhookSecret: "hook-secret-0123456789",
				PollTimeout: 50 * time.Second, MaxImageBytes: 262144, MaxFileBytes: 1048576}
			c.Channels.Web = &webch.Config{Listen: "0.0.0.0:18089", AllowUsers: webch.UserList{"ann", "bob"}, Operators: webch.UserList{"bob"}}
		}},
		{file: "valid_bridges.yaml", want: func(c *Config) {
			c.Bus.Bridges = map[string]natsbus.BridgeConfig{
				"wechat": {Channels: []string{"wechat"}, Token: "wechat-token", MaxMsgsPerSec: 5},
				"line":   {Channels: []string{"line", "line-jp"}, NKey: "UDXU4RCSJNZOIQHZNWXHXORDPRTGNJAHAHFRGZNEEJCPQTT2M7NLCNF4"},
			}
			c.Bus.Admin = natsbus.AdminConfig{User: "ops", Password: "ops-secret"}
		}},
		{file: "invalid_bridges.yaml", wantErrs: []string{
			"bus.bridges.line.channel (line 11): unknown key (did you mean channels?)",
			`bus.admin: token, or user and password, is required when bus.listen ("0.0.0.0:4222") is not a loopback address`,
			"bus.bridges.copycat.max_msgs_per_sec: must be between 0",
			"bus.bridges.copycat: set exactly one credential",
			"bus.bridges.line.channels: must list at least one channel",
			"bus.bridges.line.nkey: must be a public user NKey",
			`bus.bridges.wechat.channels[0]: channel "wechat" is already claimed by bus.bridges.copycat`,
			`bus.bridges.wechat.channels[1]: must match ^[a-z0-9_-]{1,32}$, got "Bad.Name"`,
			"bus.bridges.wechat: set exactly one credential: token, user and password, or nkey (2 kinds are set)",
		}},
		{file: "invalid_unknown_keys.yaml", wantErrs: []string{
			"datadir (line 2): unknown key (did you mean data_dir?)",
			"log.colour (line 5): unknown key",
			"agent.max_stepz (line 8): unknown key (did you mean max_steps?)",
			"agent.tools (line 9): unknown key",
			"telegram (line 13): unknown key",
		}},
		{file: "invalid_types.yaml", wantErrs: []string{
			"log.level (line 2): must be a string, got a list",
			`bus (line 3): must be a mapping of keys, got the value "nats://localhost:4222"`,
			`llm.max_tokens (line 5): must be an integer, got "lots"`,
			`llm.temperature (line 6): must be a number, got "warm"`,
			`llm.request_timeout (line 7): must be a duration such as 90s, 10m or 1h30m, got "600"`,
			`llm.idle_timeout (line 8): must be a duration such as 90s, 10m or 1h30m, got "soon"`,
			`agent.max_steps (line 10): must be an integer, got "1.5"`,
			`agent.session_idle (line 11): must be a duration such as 90s, 10m or 1h30m, got a mapping`,
		}},
		{file: "invalid_values.yaml", wantErrs: []string{
			"data_dir: must not be empty",
			`log.level: must be one of debug, info, warn, error, got "verbose"`,
			`log.format: must be text or json, got "xml"`,
			`bus.listen: must be host:port, got "localhost"`,
			`bus.subject_prefix: must be dot-separated tokens`,
			"bus.max_text_bytes: must be between 1 and 4194304, got 0",
			"bus.replicas: 3 needs a NATS cluster of at least 3 JetStream servers (set bus.url); the embedded server is a single node, so use 1",
			`llm.base_url: must be an http(s) URL`,
			"llm.model: must not be empty",
			"llm.temperature: must be between 0 and 2, got 3",
			"agent.workspace: must not be empty",
			"agent.max_steps: must be between 1 and 1000, got 0",
			"agent.session_idle: must be at least 1s, got 10ms",
			`memory.store: must be bolt or jetstream, got "sqlite"`,
			`admin.listen: must be host:port such as 127.0.0.1:9090, or empty to disable, got "9090"`,
		}},
		{file: "invalid_port_clash.yaml", wantErrs: []string{
			`admin.listen: must differ from bus.listen, both are "127.0.0.1:9090"`,
		}},
		{file: "invalid_syntax.yaml", wantErrs: []string{"invalid YAML: yaml: line 3:"}},
		{file: "invalid_not_mapping.yaml", wantErrs: []string{
			"line 1: the top level must be a mapping of sections (data_dir:, log:, bus:, llm:, agent:, admin:), got a list",
		}},
		{file: "invalid_two_documents.yaml", wantErrs: []string{
			"line 2: the file must hold one YAML document, found a second one",
		}},
		{file: "invalid_env.yaml", wantErrs: []string{
			`llm.api_key (line 2): unterminated ${ in "${OPENAI_API_KEY" (write $$ for a literal $)`,
			"llm.model (line 3): invalid environment variable reference ${1MODEL}",
		}},
		{file: "invalid_many.yaml", wantErrs: []string{"loud"}}, // full text: TestConfigErrorGolden
	}

	// Every testdata file is in the table, so none is silently unchecked.
	files, err := filepath.Glob("testdata/*.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var covered []string
	for _, tt := range tests {
		covered = append(covered, filepath.Join("testdata", tt.file))
	}
	sort.Strings(files)
	sort.Strings(covered)
	if diff := cmp.Diff(files, covered); diff != "" {
		t.Errorf("testdata/*.yaml and the table differ (-files +table):\n%s", diff)
	}

	for _, tt := range tests {
		t.Run(tt.file, func(t *testing.T) {
			data, err := os.ReadFile(filepath.Join("testdata", tt.file))
			if err != nil {
				t.Fatal(err)
			}
			got, err := ParseConfig(data, noEnv)
			if tt.want != nil {
				if err != nil {
					t.Fatalf("ParseConfig(%s) error:\n%v", tt.file, err)
				}
				want := defaultConfig()
				tt.want(&want)
				if diff := cmp.Diff(want, got); diff != "" {
					t.Fatalf("ParseConfig(%s) mismatch (-want +got):\n%s", tt.file, diff)
				}
				return
			}
			if err == nil {
				t.Fatalf("ParseConfig(%s) = nil error, want %q", tt.file, tt.wantErrs)
			}
			if !reflect.ValueOf(got).IsZero() {
				t.Errorf("ParseConfig(%s) returned a non-zero Config with an error", tt.file)
			}
			text := err.Error()
			at := 0
			for _, w := range tt.wantErrs {
				i := strings.Index(text[at:], w)
				if i < 0 {
					t.Fatalf("ParseConfig(%s) error lacks %q (or has it out of order):\n%s", tt.file, w, text)
				}
				at += i + len(w)
			}
			if tt.file == "invalid_unknown_keys.yaml" || tt.file == "invalid_types.yaml" {
				// Exactly the listed problems: no validation noise from
				// keys that merely failed to decode.
				if n := len(strings.Split(text, "\n")); n != len(tt.wantErrs) {
					t.Fatalf("ParseConfig(%s) reported %d problems, want %d:\n%s", tt.file, n, len(tt.wantErrs), text)
				}
			}
		})
	}
}

func TestConfigErrorGolden(t *testing.T) {
	_, _, loadErr := LoadConfig("testdata/invalid_many.yaml")
	if loadErr == nil {
		t.Fatal("LoadConfig(testdata/invalid_many.yaml) = nil error")
	}
	got := loadErr.Error() + "\n"
	golden := "testdata/invalid_many.golden"
	if *updateGolden {
		if err := os.WriteFile(golden, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatalf("%v (run go test -run TestConfigErrorGolden -update to create it)", err)
	}
	if diff := cmp.Diff(string(want), got); diff != "" {
		t.Fatalf("error text differs from %s (-want +got):\n%s", golden, diff)
	}
	// Each problem is its own error, reachable with errors.Join's Unwrap.
	if n := len(config.Problems(errors.Unwrap(loadErr))); n != strings.Count(got, "\n")-1 {
		t.Fatalf("config.Problems found %d problems, the text has %d lines after the header", n, strings.Count(got, "\n")-1)
	}
}

func TestLoadConfigMissingFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "nope.yaml")
	_, _, err := LoadConfig(path)
	if err == nil || !strings.Contains(err.Error(), "config: file "+path+" does not exist") {
		t.Fatalf("LoadConfig(missing) = %v, want a 'does not exist' error", err)
	}
}

func TestLoadConfigUnreadable(t *testing.T) {
	dir := t.TempDir() // a directory cannot be read as a file
	_, _, err := LoadConfig(dir)
	if err == nil || !strings.HasPrefix(err.Error(), "config: read "+dir+": ") {
		t.Fatalf("LoadConfig(dir) = %v, want a read error", err)
	}
}

func TestLoadConfigExpandsProcessEnvironment(t *testing.T) {
	t.Setenv("SB_TEST_MODEL", "qwen2.5")
	t.Setenv("SB_TEST_STEPS", "9")
	path := filepath.Join(t.TempDir(), "c.yaml")
	body := "llm:\n  model: ${SB_TEST_MODEL}\nagent:\n  max_steps: ${SB_TEST_STEPS}\n"
	if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, _, err := LoadConfig(path)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.LLM.Model != "qwen2.5" || cfg.Agent.MaxSteps != 9 {
		t.Fatalf("LoadConfig: model %q, max_steps %d; want qwen2.5, 9", cfg.LLM.Model, cfg.Agent.MaxSteps)
	}
}

func TestEnvValueCannotBreakYAML(t *testing.T) {
	hostile := "k\"ey'\n  max_steps: 999\n# [x]: {y} &a *b | > %"
	data := []byte("llm:\n  api_key: ${KEY}\n  model: '${MODEL}'\nagent:\n  max_steps: ${STEPS}\n")
	cfg, err := ParseConfig(data, envMap(map[string]string{"KEY": hostile, "MODEL": "true", "STEPS": "12"}))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.LLM.APIKey != hostile {
		t.Errorf("api_key = %q, want the env value verbatim %q", cfg.LLM.APIKey, hostile)
	}
	if cfg.LLM.Model != "true" {
		t.Errorf("model = %q, want the string \"true\"", cfg.LLM.Model)
	}
	if cfg.Agent.MaxSteps != 12 {
		t.Errorf("max_steps = %d, want 12 (an unquoted expansion decodes as a number)", cfg.Agent.MaxSteps)
	}

	// A value that is not a number is reported against the key.
	_, err = ParseConfig(data, envMap(map[string]string{"STEPS": "12 # steps"}))
	if err == nil || !strings.Contains(err.Error(), `agent.max_steps (line 5): must be an integer, got "12 # steps"`) {
		t.Fatalf("non-numeric env for max_steps: %v", err)
	}

	// Keys and comments are never expanded.
	_, err = ParseConfig([]byte("# ${BAD\n${KEY}: 1\n"), envMap(map[string]string{"KEY": "data_dir"}))
	if err == nil || !strings.Contains(err.Error(), "${KEY} (line 2): unknown key") {
		t.Fatalf("env reference in a key: %v, want it left as an unknown key", err)
	}
}

func TestEnvEmptyMeansUnset(t *testing.T) {
	data := []byte("bus:\n  listen: ${LISTEN}\nllm:\n  base_url: ${URL}\n")
	cfg, err := ParseConfig(data, envMap(map[string]string{"LISTEN": "", "URL": ""}))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Bus.Listen != "" {
		t.Errorf("bus.listen = %q, want empty: an empty value overrides the default", cfg.Bus.Listen)
	}
	if cfg.LLM.BaseURL != llm.DefaultBaseURL {
		t.Errorf("llm.base_url = %q, want %q when empty", cfg.LLM.BaseURL, llm.DefaultBaseURL)
	}
}

func TestParseConfigNilLookup(t *testing.T) {
	cfg, err := ParseConfig([]byte("llm:\n  api_key: ${OPENAI_API_KEY}\n"), nil)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.LLM.APIKey != "" {
		t.Fatalf("api_key = %q with a nil lookup, want empty", cfg.LLM.APIKey)
	}
}

func TestShippedConfigIsDefaults(t *testing.T) {
	data, err := os.ReadFile(shippedConfig)
	if err != nil {
		t.Fatal(err)
	}
	got, err := ParseConfig(data, noEnv)
	if err != nil {
		t.Fatalf("shipped config.yaml with an empty environment:\n%v", err)
	}
	if diff := cmp.Diff(defaultConfig(), got, cmpopts.EquateEmpty()); diff != "" {
		t.Fatalf("config.yaml and defaultConfig() drifted apart (-defaults +config.yaml):\n%s", diff)
	}
}

func TestShippedConfigUsesEnvironment(t *testing.T) {
	data, err := os.ReadFile(shippedConfig)
	if err != nil {
		t.Fatal(err)
	}
	got, err := ParseConfig(data, envMap(map[string]string{
		"OPENAI_BASE_URL":             "http://localhost:11434/v1",
		"OPENAI_API_KEY":              "sk-123",
		"OPENAI_MODEL":                "llama3.1",
		"SWITCHBOARD_BUS_LISTEN":      "0.0.0.0:4222",
		"SWITCHBOARD_BUS_ADMIN_TOKEN": "ops-token-for-the-container",
		"SWITCHBOARD_ADMIN_LISTEN":    "0.0.0.0:9090",
	}))
	if err != nil {
		t.Fatal(err)
	}
	want := defaultConfig()
	want.LLM.BaseURL = "http://localhost:11434/v1"
	want.LLM.APIKey = "sk-123"
	want.LLM.Model = "llama3.1"
	want.Bus.Listen = "0.0.0.0:4222"
	want.Bus.Admin.Token = "ops-token-for-the-container"
	want.Admin.Listen = "0.0.0.0:9090"
	if diff := cmp.Diff(want, got, cmpopts.EquateEmpty()); diff != "" {
		t.Fatalf("shipped config.yaml with env (-want +got):\n%s", diff)
	}
}

// TestShippedConfigInContainerNeedsBusToken: the container image sets
// SWITCHBOARD_BUS_LISTEN=0.0.0.0:4222; without SWITCHBOARD_BUS_ADMIN_TOKEN
// the daemon refuses to start, naming the keys, instead of opening an
// unauthenticated bus to the network.
func TestShippedConfigInContainerNeedsBusToken(t *testing.T) {
	data, err := os.ReadFile(shippedConfig)
	if err != nil {
		t.Fatal(err)
	}
	_, err = ParseConfig(data, envMap(map[string]string{
		"SWITCHBOARD_BUS_LISTEN":   "0.0.0.0:4222",
		"SWITCHBOARD_ADMIN_LISTEN": "0.0.0.0:9090",
	}))
	if err == nil || !strings.Contains(err.Error(), `bus.admin: token, or user and password, is required when bus.listen ("0.0.0.0:4222") is not a loopback address`) ||
		!strings.Contains(err.Error(), "SWITCHBOARD_BUS_ADMIN_TOKEN") {
		t.Fatalf("shipped config in a container without a bus token: %v", err)
	}
	// The same through `switchboard serve`: exit code 1 before anything starts.
	dir := t.TempDir()
	t.Setenv("SWITCHBOARD_BUS_LISTEN", "0.0.0.0:4222")
	t.Setenv("SWITCHBOARD_ADMIN_LISTEN", "")
	t.Setenv("SWITCHBOARD_BUS_ADMIN_TOKEN", "")
	cfgFile := filepath.Join(dir, "config.yaml")
	body := strings.Replace(string(data), "data_dir: ./data", "data_dir: "+filepath.Join(dir, "data"), 1)
	if err := os.WriteFile(cfgFile, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	if code := run(t.Context(), []string{"serve", "--config", cfgFile}, strings.NewReader(""), &out, &out); code != 1 || !strings.Contains(out.String(), "bus.admin: token, or user and password, is required") {
		t.Fatalf("serve without a bus token in a container = exit %d:\n%s", code, out.String())
	}
	if _, err := os.Stat(filepath.Join(dir, "data")); !os.IsNotExist(err) {
		t.Fatalf("serve created data_dir before refusing the configuration: %v", err)
	}
}

// fileKeys returns the dotted key of every leaf of a YAML mapping, each
// with the line comment of its value.
func fileKeys(n *yaml.Node, prefix string, out map[string]string) {
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		key := k.Value
		if prefix != "" {
			key = prefix + "." + key
		}
		if v.Kind == yaml.MappingNode && len(v.Content) > 0 {
			fileKeys(v, key, out)
			continue
		}
		out[key] = v.LineComment + k.LineComment
	}
}

func TestShippedConfigDocumentsEveryKey(t *testing.T) {
	data, err := os.ReadFile(shippedConfig)
	if err != nil {
		t.Fatal(err)
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		t.Fatal(err)
	}
	inFile := make(map[string]string)
	fileKeys(doc.Content[0], "", inFile)
	var fileList []string
	for k := range inFile {
		fileList = append(fileList, k)
	}
	sort.Strings(fileList)
	want := config.Keys(reflect.TypeFor[Config]())
	if len(want) < 20 {
		t.Fatalf("yamlKeys found only %d keys: %v", len(want), want)
	}
	if diff := cmp.Diff(want, fileList); diff != "" {
		t.Fatalf("keys of Config vs keys in config.yaml (-Config +config.yaml):\n%s", diff)
	}
	for _, k := range fileList {
		if !strings.HasPrefix(inFile[k], "# default ") {
			t.Errorf("config.yaml: %s has line comment %q, want one starting with \"# default \"", k, inFile[k])
		}
	}
}

func TestLogger(t *testing.T) {
	var buf bytes.Buffer
	cfg := defaultConfig()
	cfg.Log = logging.Config{Level: "warn", Format: "json"}
	log := cfg.Logger(&buf)
	log.Info("hidden")
	log.Warn("shown", "k", 1)
	var rec map[string]any
	if err := json.Unmarshal(buf.Bytes(), &rec); err != nil {
		t.Fatalf("json logger wrote %q: %v", buf.String(), err)
	}
	if rec["msg"] != "shown" || rec["level"] != "WARN" || rec["k"] != 1.0 {
		t.Fatalf("json record = %v", rec)
	}

	for _, tt := range []struct {
		level       string
		debug, info bool
		errorShown  bool
	}{
		{"debug", true, true, true},
		{"info", false, true, true},
		{"warn", false, false, true},
		{"error", false, false, true},
	} {
		buf.Reset()
		cfg.Log = logging.Config{Level: tt.level, Format: "text"}
		log := cfg.Logger(&buf)
		log.Debug("d")
		log.Info("i")
		log.Error("e")
		out := buf.String()
		if got := strings.Contains(out, "msg=d"); got != tt.debug {
			t.Errorf("level %s: debug shown = %v, want %v", tt.level, got, tt.debug)
		}
		if got := strings.Contains(out, "msg=i"); got != tt.info {
			t.Errorf("level %s: info shown = %v, want %v", tt.level, got, tt.info)
		}
		if !strings.Contains(out, "level=ERROR msg=e") {
			t.Errorf("level %s: text output %q lacks the error record", tt.level, out)
		}
	}
	defaultConfig().Logger(nil).Error("discarded without panicking")
}

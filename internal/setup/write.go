package setup

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/switchboard-chat/switchboard/workspace"
)

// file is the configuration written: only the keys chosen (yaml tags as
// the daemon's configuration has them).
type file struct {
	DataDir  string        `yaml:"data_dir,omitempty"`
	LLM      fileLLM       `yaml:"llm"`
	Agent    *fileAgent    `yaml:"agent,omitempty"`
	Channels *fileChannels `yaml:"channels,omitempty"`
	Access   *fileAccess   `yaml:"access,omitempty"`
}

type fileAccess struct {
	Owners []string `yaml:"owners"`
}

type fileLLM struct {
	BaseURL string `yaml:"base_url"`
	APIKey  string `yaml:"api_key,omitempty"`
	Model   string `yaml:"model"`
}

type fileAgent struct {
	Workspace string `yaml:"workspace"`
}

type fileChannels struct {
	Telegram *fileTelegram `yaml:"telegram,omitempty"`
	Slack    *fileSlack    `yaml:"slack,omitempty"`
}

type fileTelegram struct {
	Token       string   `yaml:"token"`
	APIEndpoint string   `yaml:"api_endpoint,omitempty"`
	AllowUsers  []string `yaml:"allow_users"`
}

type fileSlack struct {
	BotToken   string   `yaml:"bot_token"`
	AppToken   string   `yaml:"app_token,omitempty"`
	APIURL     string   `yaml:"api_url,omitempty"`
	AllowUsers []string `yaml:"allow_users"`
}

// workspaceDir is where the written configuration puts the workspace:
// the daemon's default, or data-dir/workspace.
func workspaceDir(a *answers) string {
	return filepath.Join(a.dataDir, "workspace")
}

// render returns the configuration file for the answers.
func render(a *answers) ([]byte, error) {
	f := file{LLM: fileLLM{BaseURL: a.baseURL, APIKey: a.secretValue(a.apiKey), Model: a.model}}
	if filepath.Clean(a.dataDir) != filepath.Clean(defaultDataDir) {
		f.DataDir = a.dataDir
		f.Agent = &fileAgent{Workspace: workspaceDir(a)}
	}
	if a.useTelegram || a.useSlack {
		f.Channels = &fileChannels{}
	}
	if a.useTelegram {
		f.Channels.Telegram = &fileTelegram{Token: a.secretValue(a.telegramToken), APIEndpoint: a.telegramAPI, AllowUsers: orEmpty(splitList(a.telegramAllow))}
	}
	if a.useSlack {
		f.Channels.Slack = &fileSlack{BotToken: a.secretValue(a.slackBot), AppToken: a.secretValue(a.slackApp), APIURL: a.slackAPI, AllowUsers: orEmpty(splitList(a.slackAllow))}
	}
	if a.owner != "" && a.owner != noOwner {
		f.Access = &fileAccess{Owners: []string{a.owner}}
	}
	var b bytes.Buffer
	b.WriteString("# Written by `switchboard init`: only the keys chosen; every other key keeps its\n" +
		"# built-in default (the config.yaml of the Switchboard repository documents them all).\n")
	enc := yaml.NewEncoder(&b)
	enc.SetIndent(2)
	if err := enc.Encode(f); err != nil {
		return nil, fmt.Errorf("init: render the configuration: %w", err)
	}
	if err := enc.Close(); err != nil {
		return nil, fmt.Errorf("init: render the configuration: %w", err)
	}
	return b.Bytes(), nil
}

func orEmpty(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

// secretValue returns ${NAME} for a value that came from the environment
// variable NAME, the value itself otherwise ($ doubled, as the loader
// expands ${...}).
func (a *answers) secretValue(v string) string {
	if name, ok := a.fromEnv[v]; ok && v != "" {
		return "${" + name + "}"
	}
	return strings.ReplaceAll(v, "$", "$$")
}

// writeFiles writes the configuration (never over an existing file unless
// --force) and creates the workspace files.
func writeFiles(a *answers, data []byte) error {
	if dir := filepath.Dir(a.path); dir != "." {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return fmt.Errorf("init: %w", err)
		}
	}
	flags := os.O_WRONLY | os.O_CREATE | os.O_EXCL
	if a.force {
		flags = os.O_WRONLY | os.O_CREATE | os.O_TRUNC
	}
	f, err := os.OpenFile(a.path, flags, 0o600)
	if err != nil {
		return fmt.Errorf("init: write the configuration: %w", err)
	}
	_, err = f.Write(data)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("init: write the configuration: %w", err)
	}
	ws, err := workspace.Open(workspaceDir(a), nil)
	if err != nil {
		return fmt.Errorf("init: %w", err)
	}
	return ws.Close()
}

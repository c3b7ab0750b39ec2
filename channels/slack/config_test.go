package slack

import (
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"go.yaml.in/yaml/v3"

	"github.com/switchboard-chat/switchboard/internal/polltest"
)

func TestConfigValidate(t *testing.T) {
	ok := Config{AppToken: "xapp-1", BotToken: "xoxb-1"}
	for _, tt := range []struct {
		name string
		mod  func(*Config)
		want []string // substrings of the error; none: valid
	}{
		{"socket mode with defaults", func(*Config) {}, nil},
		{"http mode", func(c *Config) {
			*c = Config{Mode: ModeHTTP, BotToken: "xoxb-1", SigningSecret: "8f742231b10e8888abcd99yyyzzz85a5", HTTPListen: ":3000"}
		}, nil},
		{"http mode with a short signing secret", func(c *Config) {
			*c = Config{Mode: ModeHTTP, BotToken: "xoxb-1", SigningSecret: "s", HTTPListen: ":3000"}
		}, []string{"channels.slack.signing_secret: must be the app's signing secret (Slack's have 32 characters; at least 16), got 1 characters"}},
		{"everything set", func(c *Config) {
			c.APIURL, c.AllowUsers, c.AllowChannels, c.GroupTrigger = "http://proxy:8080/api", []string{"U1", "W2"}, []string{"C1", "G2"}, TriggerAll
		}, nil},
		{"no token at all: off", func(c *Config) { *c = Config{} }, nil},
		{"off but other keys wrong", func(c *Config) { *c = Config{GroupTrigger: "x", HTTPListen: "nope"} }, []string{"channels.slack.group_trigger"}},
		{"app token without bot token", func(c *Config) { c.BotToken = "" }, []string{"channels.slack.bot_token: required"}},
		{"bot token without app token", func(c *Config) { c.AppToken = "" }, []string{"channels.slack.app_token: required in socket mode"}},
		{"wrong token kinds", func(c *Config) { c.AppToken, c.BotToken = "xoxb-1", "xoxp-1" }, []string{"channels.slack.app_token: must be an app-level token", "channels.slack.bot_token: must be a bot token"}},
		{"http mode needs secret and address", func(c *Config) { c.Mode = ModeHTTP }, []string{"channels.slack.signing_secret: required in http mode", "channels.slack.http_listen: required in http mode"}},
		{"bad listen address", func(c *Config) { c.Mode, c.SigningSecret, c.HTTPListen = ModeHTTP, "s", "3000" }, []string{"channels.slack.http_listen: must be host:port"}},
		{"bad listen port", func(c *Config) { c.Mode, c.SigningSecret, c.HTTPListen = ModeHTTP, "s", ":http" }, []string{"channels.slack.http_listen: port must be a number"}},
		{"unknown mode", func(c *Config) { c.Mode = "rtm" }, []string{`channels.slack.mode: must be socket or http, got "rtm"`}},
		{"bad api url", func(c *Config) { c.APIURL = "slack.com/api" }, []string{"channels.slack.api_url: must be an absolute http or https URL"}},
		{"bad trigger", func(c *Config) { c.GroupTrigger = "always" }, []string{`channels.slack.group_trigger: must be mention_or_thread, mention or all, got "always"`}},
		{"bad user id", func(c *Config) { c.AllowUsers = []string{"U1", "@ann"} }, []string{`channels.slack.allow_users[1]: must be a Slack user id`}},
		{"star with others", func(c *Config) { c.AllowUsers = []string{"*", "U1"} }, []string{`channels.slack.allow_users[0]: "*" allows everyone and must be the only entry`}},
		{"bad channel id", func(c *Config) { c.AllowChannels = []string{"#general"} }, []string{`channels.slack.allow_channels[0]: must be a Slack channel id`}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c := ok
			tt.mod(&c)
			err := c.Validate()
			if len(tt.want) == 0 {
				if err != nil {
					t.Fatalf("Validate = %v, want nil", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("Validate = nil, want errors %q", tt.want)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("Validate = %v\nwant it to contain %q", err, w)
				}
			}
		})
	}
}

func TestConfigDefaultsAndAPIURLNormalised(t *testing.T) {
	c := Config{APIURL: "http://127.0.0.1:9/api"}.withDefaults()
	if c.Mode != ModeSocket || c.GroupTrigger != TriggerMentionOrThread || c.APIURL != "http://127.0.0.1:9/api/" {
		t.Errorf("withDefaults = %+v", c)
	}
	if got := (Config{}).withDefaults().APIURL; got != DefaultAPIURL {
		t.Errorf("default api_url = %q", got)
	}
	if diff := cmp.Diff(DefaultConfig(), Config{}.withDefaults()); diff != "" {
		t.Errorf("DefaultConfig and the zero value's defaults differ:\n%s", diff)
	}
}

func TestNewValidates(t *testing.T) {
	if _, err := New(Config{}, Options{}); err == nil || !strings.Contains(err.Error(), "channels.slack.bot_token") {
		t.Errorf("New with an empty config = %v", err)
	}
	if _, err := New(Config{GroupTrigger: "x"}, Options{}); err == nil || !strings.Contains(err.Error(), "group_trigger") {
		t.Errorf("New with an invalid config = %v", err)
	}
	if _, err := New(Config{AppToken: "xapp-1", BotToken: "xoxb-1"}, Options{}); err == nil || !strings.Contains(err.Error(), "Options.Conn") {
		t.Errorf("New without a connection = %v", err)
	}
}

func TestRunRejectedToken(t *testing.T) {
	e := newEnv(t)
	cfg := e.config()
	cfg.BotToken = "xoxb-wrong"
	a := e.adapter(cfg)
	if err := a.Run(t.Context()); err == nil || !strings.Contains(err.Error(), "channels.slack.bot_token rejected") {
		t.Errorf("Run = %v, want the bot token rejected", err)
	}
	if err := a.Run(t.Context()); err == nil || !strings.Contains(err.Error(), "already started") {
		t.Errorf("second Run = %v", err)
	}
}

func TestRunRejectedAppToken(t *testing.T) {
	e := newEnv(t)
	cfg := e.config()
	cfg.AppToken = "xapp-wrong"
	var statuses []error
	a := e.adapter(cfg)
	a.opts.Status = func(err error) { statuses = append(statuses, err) }
	err := a.Run(t.Context())
	if err == nil || !strings.Contains(err.Error(), "channels.slack.app_token") {
		t.Errorf("Run = %v, want the app token rejected", err)
	}
	if len(statuses) == 0 || statuses[len(statuses)-1] == nil {
		t.Errorf("statuses = %v, want an error reported last", statuses)
	}
}

func TestAuthTestRetriesTransientFailures(t *testing.T) {
	e := newEnv(t)
	e.slack.failNext("auth.test", failure{status: 503})
	e.slack.failNext("auth.test", failure{status: 429, retryAfter: "3"})
	var (
		mu       sync.Mutex
		statuses []error
	)
	a := e.adapter(e.config())
	a.opts.Status = func(err error) {
		mu.Lock()
		defer mu.Unlock()
		statuses = append(statuses, err)
	}
	r := e.start(a)
	// Stopped only once healthy: stopping during the retries ends them.
	polltest.Until(t, waitTimeout, 5*time.Millisecond, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(statuses) >= 3 && statuses[len(statuses)-1] == nil
	}, func() string { return "the adapter did not become healthy after the retries" })
	r.stop(t)
	if got := e.naps.all(); len(got) != 2 || got[1] != 3*time.Second {
		t.Errorf("waits = %v, want two, the second the Retry-After of 3s", got)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(statuses) < 3 || statuses[0] == nil || statuses[len(statuses)-1] != nil {
		t.Errorf("statuses = %v, want errors while retrying, then healthy", statuses)
	}
}

func TestStorePersistsAndBounds(t *testing.T) {
	path := filepath.Join(t.TempDir(), "slack.db")
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	clock := func() time.Time { return now }
	s, err := openStore(t.Context(), path, nil, clock)
	if err != nil {
		t.Fatal(err)
	}
	if first, err := s.add(bucketDenied, "U1"); !first || err != nil {
		t.Fatalf("add = %v, %v", first, err)
	}
	if first, _ := s.add(bucketDenied, "U1"); first {
		t.Error("second add reported new")
	}
	if _, err := s.add(bucketThreads, threadKey("C1", "1.1")); err != nil {
		t.Fatal(err)
	}
	if err := s.close(); err != nil {
		t.Fatal(err)
	}
	if err := s.close(); err != nil {
		t.Fatalf("second close: %v", err)
	}

	now = now.Add(72 * time.Hour) // the sets do not expire
	s, err = openStore(t.Context(), path, nil, clock)
	if err != nil {
		t.Fatal(err)
	}
	defer s.close()
	if !s.has(bucketDenied, "U1") || !s.has(bucketThreads, "C1/1.1") {
		t.Error("state lost across a restart")
	}

	set := &boundedSet{max: 10, m: map[string]int64{}}
	for i := range 11 {
		set.m[string(rune('a'+i))] = int64(i)
	}
	evicted := set.evict()
	if len(evicted) != 2 || evicted[0] != "a" || evicted[1] != "b" || len(set.m) != 9 {
		t.Errorf("evict = %q, left %d, want the two oldest gone", evicted, len(set.m))
	}
}

func TestStoreOpenErrors(t *testing.T) {
	_, err := openStore(t.Context(), filepath.Join(t.TempDir(), "missing", "dir", "slack.db"), nil, time.Now)
	if err == nil || !strings.Contains(err.Error(), "slack: open") {
		t.Errorf("openStore in a missing folder = %v", err)
	}
}

func TestIDListYAML(t *testing.T) {
	for _, tt := range []struct {
		yaml string
		want IDList
	}{
		{"ids: [U1, U2]", IDList{"U1", "U2"}},
		{"ids: 'U1, U2 U3'", IDList{"U1", "U2", "U3"}},
		{"ids: [\"U1,U2\", U3]", IDList{"U1", "U2", "U3"}},
		{"ids: [\"\"]", nil},
		{"ids: [~]", nil},
		{"ids: []", nil},
	} {
		var v struct {
			IDs IDList `yaml:"ids"`
		}
		if err := yaml.Unmarshal([]byte(tt.yaml), &v); err != nil {
			t.Errorf("%s: %v", tt.yaml, err)
			continue
		}
		if !cmp.Equal(v.IDs, tt.want) {
			t.Errorf("%s decoded to %q, want %q", tt.yaml, v.IDs, tt.want)
		}
	}
	var v struct {
		IDs IDList `yaml:"ids"`
	}
	if err := yaml.Unmarshal([]byte("ids: {a: b}"), &v); err == nil {
		t.Error("a mapping decoded")
	}
	if err := yaml.Unmarshal([]byte("ids: [[U1]]"), &v); err == nil {
		t.Error("a nested list decoded")
	}
}

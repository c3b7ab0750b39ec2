package telegram

import (
	"strings"
	"testing"
	"time"

	tgbotapi "github.com/go-telegram-bot-api/telegram-bot-api/v5"
	"github.com/google/go-cmp/cmp"
	"go.yaml.in/yaml/v3"
)

func TestDefaultConfigIsValid(t *testing.T) {
	c := DefaultConfig()
	if err := c.Validate(); err != nil {
		t.Fatalf("DefaultConfig().Validate() = %v", err)
	}
	if c.Enabled() {
		t.Error("DefaultConfig() is enabled without a token")
	}
	c.Token = fakeToken
	if !c.Enabled() {
		t.Error("a config with a token is not enabled")
	}
}

func TestConfigValidate(t *testing.T) {
	webhook := func(c *Config) {
		c.Mode = ModeWebhook
		c.WebhookListen = "127.0.0.1:8443"
		c.WebhookURL = "https://bot.example.com/telegram"
		c.WebhookSecret = "s3cret-_X0123456789"
	}
	tests := []struct {
		name    string
		mut     func(*Config)
		wantErr []string // each must appear; nil: valid
	}{
		{"token", func(c *Config) { c.Token = fakeToken }, nil},
		{"bad token", func(c *Config) { c.Token = "not a token" }, []string{"channels.telegram.token: must look like"}},
		{"webhook", webhook, nil},
		{"endpoint for a local server", func(c *Config) { c.APIEndpoint = "http://localhost:8081/bot%s/%s" }, nil},
		{"bad endpoint", func(c *Config) { c.APIEndpoint = "https://api.telegram.org/%s" }, []string{"channels.telegram.api_endpoint: must be a URL ending in /bot%s/%s"}},
		{"endpoint not http", func(c *Config) { c.APIEndpoint = "ftp://x/bot%s/%s" }, []string{"channels.telegram.api_endpoint: must be an http(s) URL"}},
		{"users", func(c *Config) { c.AllowUsers = UserList{"123", "@ann_b", "*"} }, nil},
		{"bad users", func(c *Config) { c.AllowUsers = UserList{"12a", "@a-b", "-5"} }, []string{
			`channels.telegram.allow_users[0]: must be a numeric user id, an @username, or *, got "12a"`,
			`channels.telegram.allow_users[1]: must be a numeric user id, an @username of letters`,
			`channels.telegram.allow_users[2]`,
		}},
		{"trigger", func(c *Config) { c.GroupTrigger = "always" }, []string{`channels.telegram.group_trigger: must be mention_or_reply, mention or all, got "always"`}},
		{"mode", func(c *Config) { c.Mode = "push" }, []string{`channels.telegram.mode: must be polling or webhook, got "push"`}},
		{"webhook without settings", func(c *Config) { c.Mode = ModeWebhook }, []string{
			"channels.telegram.webhook_listen: required in webhook mode",
			"channels.telegram.webhook_url: must be the public https:// URL",
			"channels.telegram.webhook_secret: required in webhook mode",
		}},
		{"webhook bad settings", func(c *Config) {
			webhook(c)
			c.WebhookListen = "8443"
			c.WebhookURL = "http://bot.example.com/telegram"
			c.WebhookSecret = "has space"
		}, []string{"webhook_listen: must be host:port", "webhook_url: must be the public https://", "webhook_secret"}},
		{"webhook secret short", func(c *Config) {
			webhook(c)
			c.WebhookSecret = "x"
		}, []string{"channels.telegram.webhook_secret: must be at least 16 characters, got 1: it is all that tells Telegram's calls from anyone else's"}},
		{"webhook secret of 16", func(c *Config) {
			webhook(c)
			c.WebhookSecret = "0123456789abcdef"
		}, nil},
		{"poll timeout", func(c *Config) { c.PollTimeout = 1500 * time.Millisecond }, []string{"channels.telegram.poll_timeout: must be whole seconds from 1s to 1m0s, got 1.5s"}},
		{"poll timeout long", func(c *Config) { c.PollTimeout = 2 * time.Minute }, []string{"channels.telegram.poll_timeout"}},
		{"sizes", func(c *Config) { c.MaxImageBytes, c.MaxFileBytes = 10, 0 }, []string{"channels.telegram.max_image_bytes: must be between", "channels.telegram.max_file_bytes: must be between"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := DefaultConfig()
			tt.mut(&c)
			err := c.Validate()
			if tt.wantErr == nil {
				if err != nil {
					t.Fatalf("Validate() = %v, want nil", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("Validate() = nil, want errors %q", tt.wantErr)
			}
			for _, w := range tt.wantErr {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("Validate() = %v\nwant it to contain %q", err, w)
				}
			}
		})
	}
}

func TestValidateNeverShowsTheToken(t *testing.T) {
	c := DefaultConfig()
	c.Token = "123456:secret value with spaces"
	err := c.Validate()
	if err == nil || strings.Contains(err.Error(), "secret") {
		t.Fatalf("Validate() = %v: want an error that does not contain the token", err)
	}
}

func TestNewRejects(t *testing.T) {
	e := newEnv(t)
	if _, err := New(DefaultConfig(), Deps{Conn: e.nc, StatePath: "x"}); err == nil || !strings.Contains(err.Error(), "channels.telegram.token: required") {
		t.Errorf("New without a token = %v", err)
	}
	cfg := e.config()
	if _, err := New(cfg, Deps{StatePath: "x"}); err == nil || !strings.Contains(err.Error(), "Conn is nil") {
		t.Errorf("New without a connection = %v", err)
	}
	if _, err := New(cfg, Deps{Conn: e.nc}); err == nil || !strings.Contains(err.Error(), "StatePath") {
		t.Errorf("New without a state path = %v", err)
	}
	cfg.GroupTrigger = "x"
	if _, err := New(cfg, Deps{Conn: e.nc, StatePath: "x"}); err == nil || !strings.Contains(err.Error(), "group_trigger") {
		t.Errorf("New with an invalid config = %v", err)
	}
}

func TestUserListYAML(t *testing.T) {
	tests := []struct {
		yaml string
		want UserList
		err  bool
	}{
		{`allow_users: [123, "@Ann", "*"]`, UserList{"123", "@Ann", "*"}, false},
		{`allow_users: ["123, @ann  456"]`, UserList{"123", "@ann", "456"}, false},
		{`allow_users: "123,456"`, UserList{"123", "456"}, false},
		{`allow_users: [~]`, nil, false},   // an unset ${VAR} in a list
		{`allow_users: [""]`, nil, false},  // a set but empty ${VAR}
		{`allow_users: []`, nil, false},    // explicitly nobody
		{`allow_users: [[1]]`, nil, true},  // nested list
		{`allow_users: {a: 1}`, nil, true}, // mapping
		{`allow_users: [&x 12, *x]`, UserList{"12", "12"}, false},
	}
	for _, tt := range tests {
		var got struct {
			AllowUsers UserList `yaml:"allow_users"`
		}
		err := yaml.Unmarshal([]byte(tt.yaml), &got)
		if (err != nil) != tt.err {
			t.Errorf("%s: error %v, want error %v", tt.yaml, err, tt.err)
			continue
		}
		if diff := cmp.Diff(tt.want, got.AllowUsers); !tt.err && diff != "" {
			t.Errorf("%s: (-want +got)\n%s", tt.yaml, diff)
		}
	}
}

func TestAccess(t *testing.T) {
	ann := &tgbotapi.User{ID: 7, UserName: "Ann"}
	bob := &tgbotapi.User{ID: 8}
	tests := []struct {
		list     UserList
		ann, bob bool
	}{
		{nil, false, false}, // empty denies everyone
		{UserList{"*"}, true, true},
		{UserList{"7"}, true, false},
		{UserList{"@ann"}, true, false}, // case-insensitive
		{UserList{"@bob"}, false, false},
		{UserList{"8", "@ANN"}, true, true},
	}
	for _, tt := range tests {
		a := newAccess(tt.list)
		if got := a.allowed(ann); got != tt.ann {
			t.Errorf("%v: allowed(ann) = %v, want %v", tt.list, got, tt.ann)
		}
		if got := a.allowed(bob); got != tt.bob {
			t.Errorf("%v: allowed(bob) = %v, want %v", tt.list, got, tt.bob)
		}
		if a.allowed(nil) {
			t.Errorf("%v: allowed(nil) = true", tt.list)
		}
	}
}

func TestFileEndpoint(t *testing.T) {
	got, err := fileEndpoint(DefaultAPIEndpoint)
	if err != nil || got != tgbotapi.FileEndpoint {
		t.Errorf("fileEndpoint(default) = %q, %v; want %q", got, err, tgbotapi.FileEndpoint)
	}
	got, err = fileEndpoint("http://127.0.0.1:8081/tg/bot%s/%s")
	if err != nil || got != "http://127.0.0.1:8081/tg/file/bot%s/%s" {
		t.Errorf("fileEndpoint(local) = %q, %v", got, err)
	}
	if _, err := fileEndpoint("http://x/%d/bot%s/%s"); err == nil {
		t.Error("fileEndpoint accepted an extra verb")
	}
}

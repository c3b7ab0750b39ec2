package natsbus_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"

	"github.com/switchboard-chat/switchboard/bus/natsbus"
)

func TestConfigValidateBridges(t *testing.T) {
	kp, err := nkeys.CreateUser()
	if err != nil {
		t.Fatal(err)
	}
	pub, _ := kp.PublicKey()
	acct, _ := nkeys.CreateAccount()
	acctPub, _ := acct.PublicKey()
	type bridges = map[string]natsbus.BridgeConfig
	admin := natsbus.AdminConfig{Token: "admin"}
	tests := []struct {
		name    string
		edit    func(*natsbus.Config)
		wantErr []string // each must appear; none means valid
	}{
		{"token bridge", func(c *natsbus.Config) {
			c.Bridges = bridges{"wechat": {Channels: []string{"wechat"}, Token: "t"}}
		}, nil},
		{"every credential kind", func(c *natsbus.Config) {
			c.Bridges = bridges{
				"a": {Channels: []string{"a"}, Token: "t"},
				"b": {Channels: []string{"b", "b2"}, User: "b", Password: "p"},
				"c": {Channels: []string{"c"}, NKey: pub, MaxMsgsPerSec: 0.5},
			}
		}, nil},
		{"in-process only needs no admin", func(c *natsbus.Config) {
			c.Listen, c.Admin = "", natsbus.AdminConfig{}
			c.Bridges = bridges{"a": {Channels: []string{"a"}, Token: "t"}}
		}, nil},
		{"admin without bridges", func(c *natsbus.Config) { c.Bridges = nil }, nil},
		{"external with channels and limits only", func(c *natsbus.Config) {
			c.URL, c.Admin = "nats://nats:4222", natsbus.AdminConfig{}
			c.Bridges = bridges{"a": {Channels: []string{"a"}, MaxMsgsPerSec: 5}}
		}, nil},
		{"no credential", func(c *natsbus.Config) {
			c.Bridges = bridges{"wechat": {Channels: []string{"wechat"}}}
		}, []string{"bus.bridges.wechat: set exactly one credential", "none is set"}},
		{"two credential kinds", func(c *natsbus.Config) {
			c.Bridges = bridges{"wechat": {Channels: []string{"wechat"}, Token: "t", NKey: pub}}
		}, []string{"bus.bridges.wechat: set exactly one credential", "2 kinds"}},
		{"user without password", func(c *natsbus.Config) {
			c.Bridges = bridges{"wechat": {Channels: []string{"wechat"}, User: "u"}}
		}, []string{"bus.bridges.wechat.password: required"}},
		{"bad nkey", func(c *natsbus.Config) {
			c.Bridges = bridges{"wechat": {Channels: []string{"wechat"}, NKey: "UABC"}}
		}, []string{"bus.bridges.wechat.nkey: must be a public user NKey"}},
		{"account nkey", func(c *natsbus.Config) {
			c.Bridges = bridges{"wechat": {Channels: []string{"wechat"}, NKey: acctPub}}
		}, []string{"bus.bridges.wechat.nkey"}},
		{"seed instead of public key", func(c *natsbus.Config) {
			seed, _ := kp.Seed()
			c.Bridges = bridges{"wechat": {Channels: []string{"wechat"}, NKey: string(seed)}}
		}, []string{"bus.bridges.wechat.nkey"}},
		{"bad names", func(c *natsbus.Config) {
			c.Bridges = bridges{"We Chat": {Channels: []string{"wechat.x", "", "_invalid", "heartbeat"}, Token: "t"}}
		}, []string{`bus.bridges.We Chat: bridge name must match`, `bus.bridges.We Chat.channels[0]: must match`, `channels[1]: must match`, `channels[2]: "_invalid" is reserved`, `channels[3]: "heartbeat" is reserved for the agents' heartbeat turns`}},
		{"no channels", func(c *natsbus.Config) {
			c.Bridges = bridges{"wechat": {Token: "t"}}
		}, []string{"bus.bridges.wechat.channels: must list at least one channel"}},
		{"channel claimed twice", func(c *natsbus.Config) {
			c.Bridges = bridges{
				"a": {Channels: []string{"shared", "shared"}, Token: "t1"},
				"b": {Channels: []string{"shared"}, Token: "t2"},
			}
		}, []string{`bus.bridges.a.channels[1]: channel "shared" is listed twice`, `bus.bridges.b.channels[0]: channel "shared" is already claimed by bus.bridges.a`}},
		{"shared credentials", func(c *natsbus.Config) {
			c.Admin = natsbus.AdminConfig{User: "ops", Password: "p"}
			c.Bridges = bridges{
				"a": {Channels: []string{"a"}, Token: "same"},
				"b": {Channels: []string{"b"}, Token: "same"},
				"c": {Channels: []string{"c"}, User: "ops", Password: "x"},
			}
		}, []string{"bus.bridges.b.token: the same token is used by bus.bridges.a.token", "bus.bridges.c.user: the same user is used by bus.admin.user"}},
		{"bridge token equals admin token", func(c *natsbus.Config) {
			c.Bridges = bridges{"a": {Channels: []string{"a"}, Token: "admin"}}
		}, []string{"bus.bridges.a.token: the same token is used by bus.admin.token"}},
		{"rate out of range", func(c *natsbus.Config) {
			c.Bridges = bridges{"a": {Channels: []string{"a"}, Token: "t", MaxMsgsPerSec: -1}, "b": {Channels: []string{"b"}, Token: "u", MaxMsgsPerSec: 1e6}}
		}, []string{"bus.bridges.a.max_msgs_per_sec: must be between 0", "bus.bridges.b.max_msgs_per_sec"}},
		{"bridges on a loopback listener without admin", func(c *natsbus.Config) {
			c.Admin = natsbus.AdminConfig{}
			c.Bridges = bridges{"a": {Channels: []string{"a"}, Token: "t"}}
		}, nil},
		{"all interfaces without admin", func(c *natsbus.Config) {
			c.Listen, c.Admin = "0.0.0.0:4222", natsbus.AdminConfig{}
		}, []string{`bus.admin: token, or user and password, is required when bus.listen ("0.0.0.0:4222") is not a loopback address`}},
		{"a LAN address without admin", func(c *natsbus.Config) {
			c.Listen, c.Admin = "192.168.1.10:4222", natsbus.AdminConfig{}
		}, []string{`bus.listen ("192.168.1.10:4222") is not a loopback address`}},
		{"ipv6 wildcard without admin", func(c *natsbus.Config) {
			c.Listen, c.Admin = "[::]:4222", natsbus.AdminConfig{}
		}, []string{`bus.listen ("[::]:4222") is not a loopback address`}},
		{"empty host without admin", func(c *natsbus.Config) {
			c.Listen, c.Admin = ":4222", natsbus.AdminConfig{}
		}, []string{`bus.listen (":4222") is not a loopback address`}},
		{"all interfaces with admin", func(c *natsbus.Config) {
			c.Listen, c.Admin.Token = "0.0.0.0:4222", "a-long-admin-token-for-the-network"
		}, nil},
		{"short secrets on all interfaces", func(c *natsbus.Config) {
			c.Listen, c.Admin = "0.0.0.0:4222", natsbus.AdminConfig{User: "ops", Password: "p"}
			c.Bridges = bridges{
				"a": {Channels: []string{"a"}, Token: "x"},
				"b": {Channels: []string{"b"}, User: "b", Password: "fifteen-chars!!"},
				"c": {Channels: []string{"c"}, Token: "sixteen-chars!!!"},
				"d": {Channels: []string{"d"}, NKey: pub},
			}
		}, []string{
			`bus.admin.password: must be at least 16 characters when bus.listen ("0.0.0.0:4222") is not a loopback address`,
			"bus.bridges.a.token: must be at least 16 characters",
			"bus.bridges.b.password: must be at least 16 characters",
		}},
		{"a bridge named after a built-in channel", func(c *natsbus.Config) {
			*c = c.WithBuiltinChannels([]string{"console", "telegram", "slack", "web", "openai"})
			c.Bridges = bridges{"web": {Channels: []string{"mine"}, Token: "t"}}
		}, []string{`bus.bridges.web: "web" is the name of a built-in channel, whose adapter owns the consumer bridge_web`}},
		{"a bridge declaring built-in channels", func(c *natsbus.Config) {
			*c = c.WithBuiltinChannels([]string{"console", "telegram", "slack", "web", "openai"})
			c.Bridges = bridges{"x": {Channels: []string{"ok", "telegram", "console"}, Token: "t"}}
		}, []string{
			`bus.bridges.x.channels[1]: "telegram" is a built-in channel of the daemon`,
			`bus.bridges.x.channels[2]: "console" is a built-in channel of the daemon`,
		}},
		{"localhost without admin", func(c *natsbus.Config) { c.Listen, c.Admin = "localhost:4222", natsbus.AdminConfig{} }, nil},
		{"ipv6 loopback without admin", func(c *natsbus.Config) { c.Listen, c.Admin = "[::1]:4222", natsbus.AdminConfig{} }, nil},
		{"external needs no admin", func(c *natsbus.Config) {
			c.URL, c.Listen, c.Admin = "nats://nats:4222", "0.0.0.0:4222", natsbus.AdminConfig{}
		}, nil},
		{"admin with both kinds", func(c *natsbus.Config) {
			c.Admin = natsbus.AdminConfig{Token: "t", User: "u", Password: "p"}
		}, []string{"bus.admin: set either token, or user and password"}},
		{"admin user without password", func(c *natsbus.Config) {
			c.Admin = natsbus.AdminConfig{User: "u"}
		}, []string{"bus.admin.password: required"}},
		{"external with credentials", func(c *natsbus.Config) {
			c.URL = "nats://nats:4222"
			c.Bridges = bridges{"a": {Channels: []string{"a"}, Token: "t"}}
		}, []string{"bus.admin: used only by the embedded server", "bus.bridges.a: credentials are enforced only by the embedded server"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := natsbus.DefaultConfig()
			c.Admin = admin
			tt.edit(&c)
			err := c.Validate()
			if len(tt.wantErr) == 0 {
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
					t.Errorf("Validate() = %v\nwant it to mention %q", err, w)
				}
			}
		})
	}
}

func TestBridgeRate(t *testing.T) {
	if r := (natsbus.BridgeConfig{}).Rate(); r != natsbus.DefaultMaxMsgsPerSec {
		t.Errorf("default rate = %g", r)
	}
	if r := (natsbus.BridgeConfig{MaxMsgsPerSec: 2.5}).Rate(); r != 2.5 {
		t.Errorf("rate = %g", r)
	}
}

func TestBridgePermissions(t *testing.T) {
	p := natsbus.BridgePermissions("acme.bot", "wx", []string{"wechat", "wechat2"})
	wantPub := []string{
		"acme.bot.in.wechat.>",
		"$JS.API.CONSUMER.CREATE.ACME_BOT_OUT.bridge_wx.acme.bot.out.wechat.>",
		"acme.bot.in.wechat2.>",
		"$JS.API.CONSUMER.CREATE.ACME_BOT_OUT.bridge_wx.acme.bot.out.wechat2.>",
		"$JS.API.CONSUMER.INFO.ACME_BOT_OUT.bridge_wx",
		"$JS.API.CONSUMER.MSG.NEXT.ACME_BOT_OUT.bridge_wx",
		"$JS.ACK.ACME_BOT_OUT.bridge_wx.>",
		"$JS.API.INFO",
	}
	wantSub := []string{
		"acme.bot.out.wechat.>", "acme.bot.event.wechat.>", "acme.bot.dlq.wechat",
		"acme.bot.out.wechat2.>", "acme.bot.event.wechat2.>", "acme.bot.dlq.wechat2",
		"_INBOX_wx.>",
	}
	if !slices.Equal(p.Publish, wantPub) || !slices.Equal(p.Subscribe, wantSub) {
		t.Errorf("BridgePermissions =\n%q\n%q", p.Publish, p.Subscribe)
	}
	c := natsbus.BridgeConsumerConfig("chat", "wx", []string{"wechat2", "wechat"})
	if c.Durable != "bridge_wx" || c.FilterSubject != "" || !slices.Equal(c.FilterSubjects, []string{"chat.out.wechat.>", "chat.out.wechat2.>"}) {
		t.Errorf("BridgeConsumerConfig = %+v", c)
	}
}

func TestOperatorDial(t *testing.T) {
	withBridges := func(c *natsbus.Config) {
		c.Bridges = map[string]natsbus.BridgeConfig{"a": {Channels: []string{"a"}, Token: "t"}}
	}
	withFile := t.TempDir()
	token, _, err := natsbus.OperatorToken(withFile)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		edit    func(*natsbus.Config)
		dataDir string
		want    natsbus.Operator
		wantErr string
	}{
		{"default", func(*natsbus.Config) {}, withFile, natsbus.Operator{URL: "nats://127.0.0.1:4222", Token: token, Source: natsbus.OperatorTokenPath(withFile)}, ""},
		{"all interfaces", func(c *natsbus.Config) { c.Listen = "0.0.0.0:5222"; c.Admin.Token = "x" }, "", natsbus.Operator{URL: "nats://127.0.0.1:5222", Token: "x", Source: "bus.admin"}, ""},
		{"ipv6 any", func(c *natsbus.Config) { c.Listen = "[::]:5222"; c.Admin.Token = "x" }, "", natsbus.Operator{URL: "nats://[::1]:5222", Token: "x", Source: "bus.admin"}, ""},
		{"external", func(c *natsbus.Config) { c.URL = "nats://u:p@nats:4222" }, "", natsbus.Operator{URL: "nats://u:p@nats:4222", Source: "bus.url"}, ""},
		{"admin token", func(c *natsbus.Config) { withBridges(c); c.Admin.Token = "x" }, withFile, natsbus.Operator{URL: "nats://127.0.0.1:4222", Token: "x", Source: "bus.admin"}, ""},
		{"admin user", func(c *natsbus.Config) { withBridges(c); c.Admin.User, c.Admin.Password = "u", "p" }, "", natsbus.Operator{URL: "nats://127.0.0.1:4222", User: "u", Password: "p", Source: "bus.admin"}, ""},
		{"bridges, credential file", withBridges, withFile, natsbus.Operator{URL: "nats://127.0.0.1:4222", Token: token, Source: natsbus.OperatorTokenPath(withFile)}, ""},
		{"no credential file yet", func(*natsbus.Config) {}, t.TempDir(), natsbus.Operator{}, "does not exist: the daemon creates it when it first starts"},
		{"in-process", func(c *natsbus.Config) { c.Listen = "" }, withFile, natsbus.Operator{}, "in-process only"},
		{"random port", func(c *natsbus.Config) { c.Listen = "127.0.0.1:0" }, withFile, natsbus.Operator{}, "set a fixed port"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := natsbus.DefaultConfig()
			tt.edit(&c)
			op, err := c.Operator(tt.dataDir)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("Operator() error = %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil || op != tt.want {
				t.Fatalf("Operator() = %+v, %v; want %+v", op, err, tt.want)
			}
			url, opts, err := c.OperatorDial(tt.dataDir)
			wantOpts := 1
			if op.Token == "" && op.User == "" {
				wantOpts = 0
			}
			if err != nil || url != op.URL || len(opts) != wantOpts {
				t.Fatalf("OperatorDial() = %q, %d options, %v", url, len(opts), err)
			}
		})
	}
}

// TestOperatorDialConnects checks the operator options against a live
// server: bus.admin, and the generated credential file of data_dir.
func TestOperatorDialConnects(t *testing.T) {
	cfg := isolatedConfig()
	b := open(t, cfg, t.TempDir())
	cfg.Listen = strings.TrimPrefix(b.ClientURL(), "nats://")
	url, opts, err := cfg.OperatorDial("")
	if err != nil {
		t.Fatal(err)
	}
	nc, err := nats.Connect(url, opts...)
	if err != nil {
		t.Fatalf("operator connect: %v", err)
	}
	nc.Close()

	// No bus.admin: the daemon passes the token of its credential file as
	// the admin token (what serve does), and OperatorDial reads the file.
	dataDir := t.TempDir()
	token, _, err := natsbus.OperatorToken(dataDir)
	if err != nil {
		t.Fatal(err)
	}
	cfg = natsbus.DefaultConfig()
	cfg.Listen = "127.0.0.1:0"
	daemonCfg := cfg
	daemonCfg.Admin.Token = token
	b = open(t, daemonCfg, t.TempDir())
	cfg.Listen = strings.TrimPrefix(b.ClientURL(), "nats://")
	url, opts, err = cfg.OperatorDial(dataDir)
	if err != nil {
		t.Fatal(err)
	}
	nc, err = nats.Connect(url, opts...)
	if err != nil {
		t.Fatalf("operator connect with the credential file: %v", err)
	}
	nc.Close()
}

package natsbus_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nkeys"

	"github.com/switchboard-chat/switchboard/bus"
	"github.com/switchboard-chat/switchboard/bus/bustest"
	"github.com/switchboard-chat/switchboard/bus/natsbus"
)

// Credentials of the isolation tests.
const (
	wechatToken  = "wechat-secret-token"
	linePassword = "line-secret"
	adminUser    = "ops"
	adminPass    = "ops-secret"
)

// isolatedConfig declares two bridges: wechat (token, channel wechat) and
// line (user and password, channels line and line2), plus admin
// credentials, on a listener with a random port.
func isolatedConfig() natsbus.Config {
	cfg := natsbus.DefaultConfig()
	cfg.Listen = "127.0.0.1:0"
	cfg.Admin = natsbus.AdminConfig{User: adminUser, Password: adminPass}
	cfg.Bridges = map[string]natsbus.BridgeConfig{
		"wechat": {Channels: []string{"wechat"}, Token: wechatToken, MaxMsgsPerSec: 1000},
		"line":   {Channels: []string{"line", "line2"}, User: "line", Password: linePassword, MaxMsgsPerSec: 1000},
	}
	return cfg
}

// client is a test connection that records the asynchronous errors the
// server sends (permission violations).
type client struct {
	nc   *nats.Conn
	js   jetstream.JetStream
	errs chan error
}

func dial(t *testing.T, url string, opts ...nats.Option) (*client, error) {
	t.Helper()
	c := &client{errs: make(chan error, 64)}
	opts = append(opts, nats.MaxReconnects(0), nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
		select {
		case c.errs <- err:
		default:
		}
	}))
	nc, err := nats.Connect(url, opts...)
	if err != nil {
		return nil, err
	}
	t.Cleanup(nc.Close)
	c.nc = nc
	if c.js, err = jetstream.New(nc); err != nil {
		t.Fatal(err)
	}
	return c, nil
}

func mustDial(t *testing.T, url string, opts ...nats.Option) *client {
	t.Helper()
	c, err := dial(t, url, opts...)
	if err != nil {
		t.Fatalf("connect %s: %v", url, err)
	}
	return c
}

// asBridge connects as bridge name with its inbox prefix.
func asBridge(t *testing.T, b *natsbus.Bus, name string, opts ...nats.Option) *client {
	t.Helper()
	return mustDial(t, b.ClientURL(), append(opts, nats.CustomInboxPrefix(natsbus.BridgeInboxPrefix(name)))...)
}

// wantViolation waits for a permission violation naming subject.
func (c *client) wantViolation(t *testing.T, subject string) {
	t.Helper()
	timer := time.NewTimer(wait)
	defer timer.Stop()
	for {
		select {
		case err := <-c.errs:
			if errors.Is(err, nats.ErrPermissionViolation) && strings.Contains(err.Error(), `"`+subject+`"`) {
				return
			}
			t.Logf("other async error: %v", err)
		case <-timer.C:
			t.Fatalf("no permission violation for %q within %s", subject, wait)
		}
	}
}

// noViolation checks, after a round trip to the server, that no error was
// reported.
func (c *client) noViolation(t *testing.T) {
	t.Helper()
	if err := c.nc.Flush(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-c.errs:
		t.Fatalf("unexpected async error: %v", err)
	default:
	}
}

// requestDenied runs a JetStream API call that the server must refuse: it
// waits for the permission violation on api, then cancels the call (which
// gets no answer) and checks it failed.
func (c *client) requestDenied(t *testing.T, api string, call func(ctx context.Context) error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), wait)
	done := make(chan error, 1)
	go func() { done <- call(ctx) }()
	c.wantViolation(t, api)
	cancel()
	if err := <-done; err == nil {
		t.Fatalf("call on %s succeeded, want it refused", api)
	}
}

func publishOut(t *testing.T, b *natsbus.Bus, channel, chat, id, text string) {
	t.Helper()
	o := bus.Outbound{V: 1, ID: id, Channel: channel, ChatID: chat, Kind: bus.KindReply, Text: text, Seq: 1, Final: true}
	if err := b.Publish(t.Context(), b.Subjects().Out(channel, chat), mustJSON(t, o), id); err != nil {
		t.Fatal(err)
	}
}

func fetchOne(t *testing.T, cons jetstream.Consumer) jetstream.Msg {
	t.Helper()
	batch, err := cons.Fetch(1, jetstream.FetchMaxWait(wait))
	if err != nil {
		t.Fatalf("fetch: %v", err)
	}
	for m := range batch.Messages() {
		return m
	}
	t.Fatalf("fetch: no message within %s (err %v)", wait, batch.Error())
	return nil
}

func TestAuthRefusesAnonymousAndWrongCredentials(t *testing.T) {
	b := open(t, isolatedConfig(), t.TempDir())
	url := b.ClientURL()
	kp, err := nkeys.CreateUser()
	if err != nil {
		t.Fatal(err)
	}
	for name, opts := range map[string][]nats.Option{
		"anonymous":          nil,
		"wrong token":        {nats.Token("guess")},
		"wrong password":     {nats.UserInfo("line", "guess")},
		"unknown user":       {nats.UserInfo("nobody", linePassword)},
		"admin user, no pw":  {nats.UserInfo(adminUser, "")},
		"password as token":  {nats.Token(adminPass)},
		"undeclared nkey":    {nats.Nkey(mustPub(t, kp), kp.Sign)},
		"token as user name": {nats.UserInfo(wechatToken, "")},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := dial(t, url, opts...)
			if !errors.Is(err, nats.ErrAuthorization) {
				t.Fatalf("connect = %v, want an authorization violation", err)
			}
		})
	}
}

func mustPub(t *testing.T, kp nkeys.KeyPair) string {
	t.Helper()
	pub, err := kp.PublicKey()
	if err != nil {
		t.Fatal(err)
	}
	return pub
}

func TestBridgeIsolation(t *testing.T) {
	b := open(t, isolatedConfig(), t.TempDir())
	agent := startConsume(t, b) // the daemon's in-process connection
	wechat := asBridge(t, b, "wechat", nats.Token(wechatToken))
	ctx := t.Context()

	t.Run("publishes its inbound with acknowledgement", func(t *testing.T) {
		in := bus.Inbound{V: 1, ID: "w1", Channel: "wechat", ChatID: "room@x", UserID: "u", Text: "hi"}
		ack, err := wechat.js.Publish(ctx, b.Subjects().In("wechat", "room@x"), mustJSON(t, in), jetstream.WithMsgID(in.DedupKey()))
		if err != nil || ack.Stream != "CHAT_IN" {
			t.Fatalf("publish = %+v, %v", ack, err)
		}
		d := agent.next(t)
		if got := decode(t, b, d); got.ID != "w1" {
			t.Fatalf("agent got %+v", got)
		}
		doubleAck(t, d)
		wechat.noViolation(t)
	})

	t.Run("reads its outbound through its durable consumer", func(t *testing.T) {
		publishOut(t, b, "line", "l1", "o-line", "not for wechat")
		publishOut(t, b, "wechat", "room@x", "o-wechat", "for wechat")
		cons, err := wechat.js.Consumer(ctx, "CHAT_OUT", "bridge_wechat")
		if err != nil {
			t.Fatal(err)
		}
		m := fetchOne(t, cons)
		var o bus.Outbound
		if err := json.Unmarshal(m.Data(), &o); err != nil || o.ID != "o-wechat" {
			t.Fatalf("fetched %s: %v", m.Data(), err)
		}
		if err := m.DoubleAck(ctx); err != nil {
			t.Fatalf("ack: %v", err)
		}
		// A core subscription on its own channel works too.
		col := bustest.Collect(t, wechat.nc, b.Subjects().OutChannel("wechat"))
		publishOut(t, b, "wechat", "c2", "o-core", "core")
		col.WaitOutbound(t, wait, func(o bus.Outbound) bool { return o.ID == "o-core" })
		// So does recreating its consumer with its own filter.
		want := natsbus.BridgeConsumerConfig("chat", "wechat", []string{"wechat"})
		if _, err := wechat.js.CreateOrUpdateConsumer(ctx, "CHAT_OUT", want); err != nil {
			t.Fatalf("recreate own consumer: %v", err)
		}
		wechat.noViolation(t)
	})

	t.Run("cannot inject another channel's messages", func(t *testing.T) {
		for _, subject := range []string{"chat.in.slack.x", "chat.in.line.l1", "chat.out.wechat.x", "chat.dlq.wechat", "chat.event.wechat.x"} {
			if err := wechat.nc.Publish(subject, []byte(`{"v":1,"id":"evil","channel":"slack","chat_id":"x","user_id":"u","text":"hi"}`)); err != nil {
				t.Fatal(err)
			}
			wechat.wantViolation(t, subject)
		}
		// Nothing reached the agent: the next delivery is a later message.
		publishInbound(t, b, bus.Inbound{V: 1, ID: "marker", Channel: "console", ChatID: "c", UserID: "u", Text: "x"})
		d := agent.next(t)
		if got := decode(t, b, d); got.ID != "marker" {
			t.Fatalf("agent got %+v, want the marker", got)
		}
		doubleAck(t, d)
	})

	t.Run("cannot read another channel's messages", func(t *testing.T) {
		for _, subject := range []string{"chat.out.telegram.>", "chat.out.line.l1", "chat.out.>", "chat.>", ">", "_INBOX.>", "_INBOX_line.>", "chat.dlq.line", "chat.in.wechat.>"} {
			if _, err := wechat.nc.SubscribeSync(subject); err != nil {
				t.Fatal(err)
			}
			wechat.wantViolation(t, subject)
		}
	})

	t.Run("cannot create a consumer on other subjects", func(t *testing.T) {
		for _, tc := range []struct {
			name, filter, api string
		}{
			{"bridge_wechat", "chat.out.telegram.>", "$JS.API.CONSUMER.CREATE.CHAT_OUT.bridge_wechat.chat.out.telegram.>"},
			{"bridge_wechat", "chat.out.>", "$JS.API.CONSUMER.CREATE.CHAT_OUT.bridge_wechat.chat.out.>"},
			{"mine", "chat.out.wechat.>", "$JS.API.CONSUMER.CREATE.CHAT_OUT.mine.chat.out.wechat.>"},
			{"bridge_line", "chat.out.line.>", "$JS.API.CONSUMER.CREATE.CHAT_OUT.bridge_line.chat.out.line.>"},
		} {
			cfg := jetstream.ConsumerConfig{Durable: tc.name, FilterSubject: tc.filter, AckPolicy: jetstream.AckExplicitPolicy}
			wechat.requestDenied(t, tc.api, func(ctx context.Context) error {
				_, err := wechat.js.CreateOrUpdateConsumer(ctx, "CHAT_OUT", cfg)
				return err
			})
		}
		// Several filters cannot be checked from the subject: refused.
		cfg := jetstream.ConsumerConfig{Durable: "bridge_wechat", FilterSubjects: []string{"chat.out.wechat.>", "chat.out.line.>"}, AckPolicy: jetstream.AckExplicitPolicy}
		wechat.requestDenied(t, "$JS.API.CONSUMER.CREATE.CHAT_OUT.bridge_wechat", func(ctx context.Context) error {
			_, err := wechat.js.CreateOrUpdateConsumer(ctx, "CHAT_OUT", cfg)
			return err
		})
		// Nor use another bridge's consumer, or look at the streams.
		wechat.requestDenied(t, "$JS.API.CONSUMER.INFO.CHAT_OUT.bridge_line", func(ctx context.Context) error {
			_, err := wechat.js.Consumer(ctx, "CHAT_OUT", "bridge_line")
			return err
		})
		wechat.requestDenied(t, "$JS.API.STREAM.INFO.CHAT_OUT", func(ctx context.Context) error {
			_, err := wechat.js.Stream(ctx, "CHAT_OUT")
			return err
		})
		wechat.requestDenied(t, "$JS.API.CONSUMER.DELETE.CHAT_IN.agent", func(ctx context.Context) error {
			return wechat.js.DeleteConsumer(ctx, "CHAT_IN", "agent")
		})
		// The daemon's consumer is untouched.
		cons, err := b.JetStream().Consumer(t.Context(), "CHAT_OUT", "bridge_wechat")
		if err != nil || cons.CachedInfo().Config.FilterSubject != "chat.out.wechat.>" {
			t.Fatalf("bridge_wechat = %+v, %v", cons, err)
		}
	})
}

func TestBridgeWithSeveralChannels(t *testing.T) {
	b := open(t, isolatedConfig(), t.TempDir())
	agent := startConsume(t, b)
	line := asBridge(t, b, "line", nats.UserInfo("line", linePassword))
	in := bus.Inbound{V: 1, ID: "l1", Channel: "line2", ChatID: "g", UserID: "u", Text: "hi"}
	bustest.PublishInbound(t, line.nc, b.Subjects(), in)
	d := agent.next(t)
	if got := decode(t, b, d); got.Channel != "line2" {
		t.Fatalf("agent got %+v", got)
	}
	doubleAck(t, d)

	publishOut(t, b, "wechat", "w", "o-w", "x")
	publishOut(t, b, "line2", "g", "o-l2", "y")
	publishOut(t, b, "line", "g", "o-l1", "z")
	cons, err := line.js.Consumer(t.Context(), "CHAT_OUT", "bridge_line")
	if err != nil {
		t.Fatal(err)
	}
	if got := cons.CachedInfo().Config.FilterSubjects; strings.Join(got, ",") != "chat.out.line.>,chat.out.line2.>" {
		t.Fatalf("bridge_line filters = %v", got)
	}
	var ids []string
	for range 2 {
		m := fetchOne(t, cons)
		var o bus.Outbound
		if err := json.Unmarshal(m.Data(), &o); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, o.ID)
		if err := m.Ack(); err != nil {
			t.Fatal(err)
		}
	}
	if strings.Join(ids, ",") != "o-l2,o-l1" {
		t.Fatalf("line fetched %v", ids)
	}
	line.noViolation(t)
}

func TestNKeyBridge(t *testing.T) {
	kp, err := nkeys.CreateUser()
	if err != nil {
		t.Fatal(err)
	}
	other, err := nkeys.CreateUser()
	if err != nil {
		t.Fatal(err)
	}
	cfg := isolatedConfig()
	cfg.Bridges["kakao"] = natsbus.BridgeConfig{Channels: []string{"kakao"}, NKey: mustPub(t, kp)}
	b := open(t, cfg, t.TempDir())
	agent := startConsume(t, b)

	// Signing the nonce with another key is refused.
	if _, err := dial(t, b.ClientURL(), nats.Nkey(mustPub(t, kp), other.Sign)); !errors.Is(err, nats.ErrAuthorization) {
		t.Fatalf("connect with the wrong seed = %v, want an authorization violation", err)
	}
	kakao := asBridge(t, b, "kakao", nats.Nkey(mustPub(t, kp), kp.Sign))
	bustest.PublishInbound(t, kakao.nc, b.Subjects(), bus.Inbound{V: 1, ID: "k1", Channel: "kakao", ChatID: "c", UserID: "u", Text: "hi"})
	d := agent.next(t)
	if got := decode(t, b, d); got.ID != "k1" {
		t.Fatalf("agent got %+v", got)
	}
	doubleAck(t, d)
	if err := kakao.nc.Publish("chat.in.wechat.c", []byte("{}")); err != nil {
		t.Fatal(err)
	}
	kakao.wantViolation(t, "chat.in.wechat.c")
}

func TestAdminHasFullAccess(t *testing.T) {
	byToken := isolatedConfig()
	byToken.Admin = natsbus.AdminConfig{Token: "admin-token"}
	for _, tc := range []struct {
		name string
		cfg  natsbus.Config
		opt  nats.Option
	}{
		{"user and password", isolatedConfig(), nats.UserInfo(adminUser, adminPass)},
		{"token", byToken, nats.Token("admin-token")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := open(t, tc.cfg, t.TempDir())
			admin := mustDial(t, b.ClientURL(), tc.opt)
			all := bustest.Collect(t, admin.nc, "chat.>")
			bustest.PublishInbound(t, admin.nc, b.Subjects(), bus.Inbound{V: 1, ID: "a1", Channel: "wechat", ChatID: "c", UserID: "u", Text: "x"})
			publishOut(t, b, "telegram", "t", "o-t", "seen by admin")
			all.WaitOutbound(t, wait, func(o bus.Outbound) bool { return o.ID == "o-t" })
			if _, err := admin.js.Stream(t.Context(), "CHAT_IN"); err != nil {
				t.Fatal(err)
			}
			if _, err := admin.js.CreateOrUpdateConsumer(t.Context(), "CHAT_OUT", jetstream.ConsumerConfig{Durable: "audit", FilterSubject: "chat.out.>"}); err != nil {
				t.Fatal(err)
			}
			admin.noViolation(t)
		})
	}
}

func TestBridgeConsumerFilterReset(t *testing.T) {
	dir := t.TempDir()
	cfg := isolatedConfig()
	b := open(t, cfg, dir)
	// Someone with full access widens bridge_wechat's filter.
	c := natsbus.BridgeConsumerConfig("chat", "wechat", []string{"wechat"})
	c.FilterSubject = "chat.out.>"
	if _, err := b.JetStream().UpdateConsumer(t.Context(), "CHAT_OUT", c); err != nil {
		t.Fatal(err)
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	// The next start narrows it again; line's consumer follows its new
	// channel list.
	cfg.Bridges["line"] = natsbus.BridgeConfig{Channels: []string{"line"}, User: "line", Password: linePassword}
	b = open(t, cfg, dir)
	for name, want := range map[string]string{"bridge_wechat": "chat.out.wechat.>", "bridge_line": "chat.out.line.>"} {
		cons, err := b.JetStream().Consumer(t.Context(), "CHAT_OUT", name)
		if err != nil {
			t.Fatal(err)
		}
		if got := cons.CachedInfo().Config; got.FilterSubject != want || len(got.FilterSubjects) != 0 {
			t.Errorf("%s filter = %q %v, want %q", name, got.FilterSubject, got.FilterSubjects, want)
		}
	}
}

// TestOpenWithoutBridgesRefusesAnonymous: the embedded listener is never
// anonymous, even with no bridge declared; operators use bus.admin.
func TestOpenWithoutBridgesRefusesAnonymous(t *testing.T) {
	cfg := natsbus.DefaultConfig()
	cfg.Listen = "127.0.0.1:0"
	cfg.Admin.Token = "ops-token"
	b := open(t, cfg, t.TempDir())
	for _, opt := range []nats.Option{nil, nats.Token("guess"), nats.UserInfo("admin", "")} {
		var opts []nats.Option
		if opt != nil {
			opts = append(opts, opt)
		}
		if anon, err := dial(t, b.ClientURL(), opts...); !errors.Is(err, nats.ErrAuthorization) {
			if anon != nil {
				anon.nc.Close()
			}
			t.Fatalf("client without the operator credential: err = %v, want an authorization violation", err)
		}
	}
	ops := mustDial(t, b.ClientURL(), nats.Token("ops-token"))
	if _, err := ops.js.Stream(t.Context(), "CHAT_IN"); err != nil {
		t.Fatalf("operator without bridges: %v", err)
	}
}

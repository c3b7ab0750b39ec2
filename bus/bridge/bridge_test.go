package bridge

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"

	"github.com/switchboard-chat/switchboard/bus"
	"github.com/switchboard-chat/switchboard/bus/natsbus"
)

func TestStreamOutMatchesDaemon(t *testing.T) {
	for _, p := range []string{"chat", "acme.bot", "a-b_c.D1"} {
		if got, want := StreamOut(p), natsbus.StreamsFor(p).Out; got != want {
			t.Errorf("StreamOut(%q) = %q, want %q", p, got, want)
		}
	}
}

func TestExponentialBackoff(t *testing.T) {
	b := ExponentialBackoff(time.Second, 60*time.Second)
	want := []time.Duration{1, 2, 4, 8, 16, 32, 60, 60}
	for i, w := range want {
		if got := b(i + 1); got != w*time.Second {
			t.Errorf("backoff(%d) = %s, want %s", i+1, got, w*time.Second)
		}
	}
	if got := ExponentialBackoff(5*time.Second, time.Second)(3); got != 5*time.Second {
		t.Errorf("backoff with limit below first = %s, want 5s", got)
	}
	if got := b(1000); got != 60*time.Second {
		t.Errorf("backoff(1000) = %s, want 60s", got)
	}
}

func TestPermanent(t *testing.T) {
	base := errors.New("chat not found")
	err := Permanent(base)
	if !errors.Is(err, ErrPermanent) || !errors.Is(err, base) {
		t.Errorf("Permanent(err) = %v, want it to wrap ErrPermanent and err", err)
	}
	if !strings.Contains(err.Error(), "chat not found") {
		t.Errorf("Permanent(err).Error() = %q, want it to contain the cause", err)
	}
	if Permanent(nil) != nil {
		t.Error("Permanent(nil) != nil")
	}
}

func TestOptionsValidation(t *testing.T) {
	nc := &nats.Conn{} // New does no I/O
	tests := []struct {
		name    string
		opts    Options
		wantErr string
	}{
		{"missing channel", Options{}, "Options.Channel"},
		{"bad channel", Options{Channel: "Tele.gram"}, "Options.Channel"},
		{"bad prefix", Options{Channel: "tg", SubjectPrefix: "chat..x"}, "Options.SubjectPrefix"},
		{"bad durable", Options{Channel: "tg", Durable: "a.b"}, "Options.Durable"},
		{"negative text limit", Options{Channel: "tg", MaxTextBytes: -1}, "Options.MaxTextBytes"},
		{"huge text limit", Options{Channel: "tg", MaxTextBytes: 5 << 20}, "Options.MaxTextBytes"},
		{"negative workers", Options{Channel: "tg", MaxWorkers: -1}, "Options.MaxWorkers"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := New(nc, tt.opts)
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("New(%+v) error = %v, want one naming %s", tt.opts, err, tt.wantErr)
			}
		})
	}
	if _, err := New(nil, Options{Channel: "tg"}); err == nil {
		t.Error("New(nil conn) succeeded")
	}

	c, err := New(nc, Options{Channel: "tg"})
	if err != nil {
		t.Fatal(err)
	}
	o := c.opts
	if o.SubjectPrefix != "chat" || o.Durable != "bridge_tg" || o.MaxTextBytes != 65536 || o.MaxWorkers != DefaultMaxWorkers || o.Backoff == nil || o.Log == nil {
		t.Errorf("defaults = %+v", o)
	}
	if c.Channel() != "tg" || c.Subjects().Prefix != "chat" {
		t.Errorf("Channel() = %q, Subjects() = %+v", c.Channel(), c.Subjects())
	}
}

func inbound(id, chat string) bus.Inbound {
	return bus.Inbound{ID: id, ChatID: chat, UserID: "u1", UserName: "Ann", Text: "hello", Meta: map[string]string{"k": "v"}}
}

func TestPublishInboundRoundTrip(t *testing.T) {
	e := newEnv(t)
	c := e.newClient(t, Options{})
	in := inbound("42", "room.1")
	in.ThreadID = "7"
	if err := c.PublishInbound(t.Context(), in); err != nil {
		t.Fatalf("PublishInbound: %v", err)
	}
	subject := e.subj.In("tg", "room.1")
	if subject != "chat.in.tg.room%2E1" {
		t.Fatalf("subject = %q", subject)
	}
	stream, err := e.js.Stream(t.Context(), "CHAT_IN")
	if err != nil {
		t.Fatal(err)
	}
	raw, err := stream.GetLastMsgForSubject(t.Context(), subject)
	if err != nil {
		t.Fatalf("message not in CHAT_IN: %v", err)
	}
	if got := raw.Header.Get(bus.HeaderMsgID); got != "tg:42" {
		t.Errorf("Nats-Msg-Id = %q, want tg:42", got)
	}
	got, err := bus.ParseInbound(e.subj, raw.Subject, raw.Data, 0)
	if err != nil {
		t.Fatalf("runtime would reject the published message: %v", err)
	}
	if got.V != 1 || got.Channel != "tg" || got.ID != "42" || got.ThreadID != "7" || got.Text != "hello" || got.Meta["k"] != "v" {
		t.Errorf("published envelope = %+v", got)
	}
}

func TestPublishInboundDuplicateIsSuccess(t *testing.T) {
	e := newEnv(t)
	c := e.newClient(t, Options{})
	for range 3 {
		if err := c.PublishInbound(t.Context(), inbound("dup", "c1")); err != nil {
			t.Fatalf("PublishInbound: %v", err)
		}
	}
	if err := c.PublishInbound(t.Context(), inbound("other", "c1")); err != nil {
		t.Fatal(err)
	}
	stream, err := e.js.Stream(t.Context(), "CHAT_IN")
	if err != nil {
		t.Fatal(err)
	}
	info, err := stream.Info(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if info.State.Msgs != 2 {
		t.Errorf("CHAT_IN holds %d messages, want 2 (duplicates dropped)", info.State.Msgs)
	}
}

func TestPublishInboundValidation(t *testing.T) {
	e := newEnv(t)
	c := e.newClient(t, Options{MaxTextBytes: 10})
	tests := []struct {
		name      string
		edit      func(*bus.Inbound)
		wantField string
		wantErr   error
	}{
		{"missing user", func(in *bus.Inbound) { in.UserID = "" }, "user_id", bus.ErrInvalid},
		{"missing id", func(in *bus.Inbound) { in.ID = "" }, "id", bus.ErrInvalid},
		{"missing chat", func(in *bus.Inbound) { in.ChatID = "" }, "chat_id", bus.ErrInvalid},
		{"other channel", func(in *bus.Inbound) { in.Channel = "slack" }, "channel", bus.ErrInvalid},
		{"wrong version", func(in *bus.Inbound) { in.V = 2 }, "v", bus.ErrInvalid},
		{"text over limit", func(in *bus.Inbound) { in.Text = "eleven byte" }, "text", bus.ErrTooLarge},
		{"no text", func(in *bus.Inbound) { in.Text = "" }, "text", bus.ErrInvalid},
		{"bad timestamp", func(in *bus.Inbound) { in.TS = "yesterday" }, "ts", bus.ErrInvalid},
		{"bad attachment", func(in *bus.Inbound) { in.Attachments = []bus.Attachment{{Kind: "video"}} }, "attachments[0].kind", bus.ErrInvalid},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := inbound("1", "c1")
			tt.edit(&in)
			err := c.PublishInbound(t.Context(), in)
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("PublishInbound error = %v, want %v", err, tt.wantErr)
			}
			var fe *bus.FieldError
			if !errors.As(err, &fe) || fe.Field != tt.wantField {
				t.Fatalf("PublishInbound error = %v, want a FieldError on %q", err, tt.wantField)
			}
		})
	}
	stream, err := e.js.Stream(t.Context(), "CHAT_IN")
	if err != nil {
		t.Fatal(err)
	}
	info, err := stream.Info(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if info.State.Msgs != 0 {
		t.Errorf("CHAT_IN holds %d messages after invalid publishes, want 0", info.State.Msgs)
	}
}

func TestPublishInboundNoStream(t *testing.T) {
	e := newEnv(t)
	c := e.newClient(t, Options{SubjectPrefix: "other"})
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
	defer cancel()
	err := c.PublishInbound(ctx, inbound("1", "c1"))
	if err == nil || errors.Is(err, bus.ErrInvalid) {
		t.Fatalf("PublishInbound with no stream = %v, want a transient publish error", err)
	}
}

func TestClosedClient(t *testing.T) {
	e := newEnv(t)
	c := e.newClient(t, Options{})
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if err := c.Close(); err != nil {
		t.Fatalf("second Close = %v", err)
	}
	if err := c.PublishInbound(t.Context(), inbound("1", "c1")); !errors.Is(err, ErrClosed) {
		t.Errorf("PublishInbound after Close = %v, want ErrClosed", err)
	}
	if err := c.ConsumeOutbound(t.Context(), func(context.Context, bus.Outbound) error { return nil }); !errors.Is(err, ErrClosed) {
		t.Errorf("ConsumeOutbound after Close = %v, want ErrClosed", err)
	}
	if e.nc.IsClosed() {
		t.Error("Close of a New client closed the caller's connection")
	}
}

// startAuthServer starts a JetStream server on a random local port with the
// authentication set by configure, and creates the streams through an
// admin connection made with adminOpts.
func startAuthServer(t *testing.T, configure func(*server.Options), adminOpts ...nats.Option) *server.Server {
	t.Helper()
	opts := &server.Options{
		ServerName: "bridgetest", Host: "127.0.0.1", Port: server.RANDOM_PORT,
		JetStream: true, StoreDir: t.TempDir(), NoSigs: true, NoLog: true,
	}
	configure(opts)
	s, err := server.NewServer(opts)
	if err != nil {
		t.Fatalf("new server: %v", err)
	}
	s.Start()
	t.Cleanup(func() {
		s.Shutdown()
		s.WaitForShutdown()
	})
	if !s.ReadyForConnections(waitTimeout) {
		t.Fatal("server not ready")
	}
	nc, err := nats.Connect(s.ClientURL(), adminOpts...)
	if err != nil {
		t.Fatalf("admin connect: %v", err)
	}
	t.Cleanup(nc.Close)
	createStreams(t, nc, "chat")
	return s
}

func TestDial(t *testing.T) {
	userKP, err := nkeys.CreateUser()
	if err != nil {
		t.Fatal(err)
	}
	userSeed, _ := userKP.Seed()
	userPub, _ := userKP.PublicKey()
	otherKP, _ := nkeys.CreateUser()
	otherSeed, _ := otherKP.Seed()

	tokenServer := startAuthServer(t, func(o *server.Options) { o.Authorization = "s3cret" }, nats.Token("s3cret"))
	userServer := startAuthServer(t, func(o *server.Options) {
		o.Users = []*server.User{{Username: "wechat", Password: "pw"}}
	}, nats.UserInfo("wechat", "pw"))
	nkeyServer := startAuthServer(t, func(o *server.Options) {
		o.Nkeys = []*server.NkeyUser{{Nkey: userPub}}
	}, nats.Nkey(userPub, userKP.Sign))

	tests := []struct {
		name   string
		s      *server.Server
		creds  Credentials
		wantOK bool
	}{
		{"token", tokenServer, Credentials{Token: "s3cret"}, true},
		{"wrong token", tokenServer, Credentials{Token: "guess"}, false},
		{"no credentials", tokenServer, Credentials{}, false},
		{"user and password", userServer, Credentials{User: "wechat", Password: "pw"}, true},
		{"wrong password", userServer, Credentials{User: "wechat", Password: "nope"}, false},
		{"nkey", nkeyServer, Credentials{NKeySeed: string(userSeed)}, true},
		{"unknown nkey", nkeyServer, Credentials{NKeySeed: string(otherSeed)}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := Dial(t.Context(), tt.s.ClientURL(), tt.creds, Options{Channel: "wechat"})
			if !tt.wantOK {
				if err == nil {
					_ = c.Close()
					t.Fatal("Dial succeeded, want an authorization error")
				}
				if !errors.Is(err, nats.ErrAuthorization) {
					t.Errorf("Dial error = %v, want nats.ErrAuthorization", err)
				}
				return
			}
			if err != nil {
				t.Fatalf("Dial: %v", err)
			}
			in := inbound("1", "wxid_a@chatroom")
			if err := c.PublishInbound(t.Context(), in); err != nil {
				t.Errorf("PublishInbound over dialled client: %v", err)
			}
			nc := c.Conn()
			if err := c.Close(); err != nil {
				t.Fatal(err)
			}
			if !nc.IsClosed() {
				t.Error("Close of a dialled client left its connection open")
			}
			if err := c.Close(); err != nil {
				t.Errorf("second Close = %v", err)
			}
		})
	}
}

func TestDialValidation(t *testing.T) {
	tests := []struct {
		name    string
		url     string
		creds   Credentials
		opts    Options
		wantErr string
	}{
		{"empty url", "", Credentials{}, Options{Channel: "x"}, "server URL is empty"},
		{"two methods", "nats://127.0.0.1:1", Credentials{Token: "t", User: "u", Password: "p"}, Options{Channel: "x"}, "only one of"},
		{"password without user", "nats://127.0.0.1:1", Credentials{Password: "p"}, Options{Channel: "x"}, "Credentials.User"},
		{"bad seed", "nats://127.0.0.1:1", Credentials{NKeySeed: "SUnotaseed"}, Options{Channel: "x"}, "Credentials.NKeySeed"},
		{"bad options", "nats://127.0.0.1:1", Credentials{}, Options{}, "Options.Channel"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := Dial(t.Context(), tt.url, tt.creds, tt.opts)
			if err == nil {
				_ = c.Close()
				t.Fatal("Dial succeeded")
			}
			if !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("Dial error = %v, want it to mention %q", err, tt.wantErr)
			}
		})
	}
	accountKP, _ := nkeys.CreateAccount()
	accountSeed, _ := accountKP.Seed()
	if _, err := Dial(t.Context(), "nats://127.0.0.1:1", Credentials{NKeySeed: string(accountSeed)}, Options{Channel: "x"}); err == nil || !strings.Contains(err.Error(), "user seed") {
		t.Errorf("Dial with an account seed = %v, want a user-seed error", err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if _, err := Dial(ctx, "nats://127.0.0.1:1", Credentials{}, Options{Channel: "x"}); !errors.Is(err, context.Canceled) {
		t.Errorf("Dial with a cancelled context = %v, want context.Canceled", err)
	}
}

func TestCredentialsStringRedacts(t *testing.T) {
	for _, c := range []Credentials{{Token: "tok123"}, {User: "u", Password: "pw123"}, {NKeySeed: "SUseed123"}, {}} {
		s := c.String() + fmt.Sprintf(" %v %+v %#v", c, c, c)
		for _, secret := range []string{"tok123", "pw123", "SUseed123"} {
			if strings.Contains(s, secret) {
				t.Errorf("Credentials.String() = %q leaks %q", s, secret)
			}
		}
	}
}

// TestPublishInboundMatchesRuntimeJSON checks the published bytes decode to
// the same envelope the caller passed (plus the defaults).
func TestPublishInboundMatchesRuntimeJSON(t *testing.T) {
	e := newEnv(t)
	c := e.newClient(t, Options{})
	in := inbound("a1", "c1")
	in.Attachments = []bus.Attachment{{Kind: bus.AttachImage, URL: "https://example.com/a.png", MIME: "image/png", Size: 10}}
	in.IsGroup, in.Mentioned, in.ReplyTo, in.TS = true, true, "a0", "2026-03-01T10:00:00+08:00"
	if err := c.PublishInbound(t.Context(), in); err != nil {
		t.Fatal(err)
	}
	stream, _ := e.js.Stream(t.Context(), "CHAT_IN")
	raw, err := stream.GetLastMsgForSubject(t.Context(), e.subj.In("tg", "c1"))
	if err != nil {
		t.Fatal(err)
	}
	var got bus.Inbound
	if err := json.Unmarshal(raw.Data, &got); err != nil {
		t.Fatal(err)
	}
	in.V, in.Channel = 1, "tg"
	wantJSON, _ := json.Marshal(in)
	gotJSON, _ := json.Marshal(got)
	if string(gotJSON) != string(wantJSON) {
		t.Errorf("published %s\nwant      %s", gotJSON, wantJSON)
	}
}

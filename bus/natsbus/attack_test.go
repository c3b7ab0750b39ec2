package natsbus_test

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/switchboard-chat/switchboard/bus"
	"github.com/switchboard-chat/switchboard/bus/bustest"
	"github.com/switchboard-chat/switchboard/bus/natsbus"
	"github.com/switchboard-chat/switchboard/internal/health"
	"github.com/switchboard-chat/switchboard/internal/polltest"
	"github.com/switchboard-chat/switchboard/internal/syncbuf"
)

// Attacks by a bridge with its own valid credential, and by anyone who
// reaches the embedded listener, on the bus itself.

// apiAnswer is a JetStream API answer: an error, or a consumer's config.
type apiAnswer struct {
	Error  *jetstream.APIError      `json:"error"`
	Config jetstream.ConsumerConfig `json:"config"`
}

// rawRequest sends a raw JetStream API request as c and decodes the answer.
func rawRequest(t *testing.T, c *client, subject, body string) apiAnswer {
	t.Helper()
	m, err := c.nc.Request(subject, []byte(body), wait)
	if err != nil {
		t.Fatalf("request %s: %v", subject, err)
	}
	var a apiAnswer
	if err := json.Unmarshal(m.Data, &a); err != nil {
		t.Fatalf("answer %s: %v", m.Data, err)
	}
	return a
}

// TestAttackBridgeConsumerConfig: the wechat bridge asks, on the one
// consumer-create subject it may use, for its consumer with settings of its
// own: one that deletes itself (inactive_threshold), push consumers
// delivering onto another bridge's dead-letter and event subjects or into
// CHAT_DLQ, no acks. Each request is refused with a JetStream API error
// naming the setting, the consumer stays the daemon's, and line's traffic
// flows meanwhile. A request for the daemon's settings (what the bridge
// kit and the Node bridge send) is still answered with the consumer.
func TestAttackBridgeConsumerConfig(t *testing.T) {
	b := open(t, isolatedConfig(), t.TempDir())
	agent := startConsume(t, b)
	wechat := asBridge(t, b, "wechat", nats.Token(wechatToken))
	line := asBridge(t, b, "line", nats.UserInfo("line", linePassword))
	lineDLQ := bustest.Collect(t, line.nc, "chat.dlq.line")
	const create = "$JS.API.CONSUMER.CREATE.CHAT_OUT.bridge_wechat.chat.out.wechat.>"
	base := `"durable_name":"bridge_wechat","filter_subject":"chat.out.wechat.>","ack_policy":"explicit","deliver_policy":"new"`
	for i, tc := range []struct{ config, want string }{
		{`{` + base + `,"inactive_threshold":1000000000}`, "inactive_threshold"},
		{`{` + base + `,"deliver_subject":"chat.dlq.line"}`, "deliver_subject"},
		{`{` + base + `,"deliver_subject":"chat.event.line.l1"}`, "deliver_subject"},
		{`{` + base + `,"deliver_subject":"chat.dlq.wechat","deliver_group":"g"}`, "deliver_group, deliver_subject"},
		{`{"durable_name":"bridge_wechat","filter_subject":"chat.out.wechat.>","ack_policy":"none"}`, "ack_policy"},
		{`{` + base + `,"max_deliver":1,"ack_wait":1000000}`, "ack_wait, max_deliver"},
		{`{` + base + `,"headers_only":true,"idle_heartbeat":1000000000,"flow_control":true}`, "flow_control, headers_only, idle_heartbeat"},
		{`{` + base + `,"direct":true}`, `unknown field "direct"`},
		{`{` + base + `,"metadata":{"owner":"mallory"}}`, "metadata"},
	} {
		a := rawRequest(t, wechat, create, `{"stream_name":"CHAT_OUT","config":`+tc.config+`}`)
		if a.Error == nil || a.Error.Code != 400 || !strings.Contains(a.Error.Description, tc.want) ||
			!strings.Contains(a.Error.Description, "consumer bridge_wechat is the daemon's") {
			t.Errorf("create %s = %+v, want a 400 naming %q", tc.config, a.Error, tc.want)
		}
		// Line is answered meanwhile.
		in := bus.Inbound{V: 1, ID: fmt.Sprint("l-", i), Channel: "line", ChatID: "g", UserID: "u", Text: "hi"}
		bustest.PublishInbound(t, line.nc, b.Subjects(), in)
		d := agent.next(t)
		if got := decode(t, b, d); got.ID != in.ID {
			t.Fatalf("agent got %+v, want line's %s", got, in.ID)
		}
		doubleAck(t, d)
	}
	if a := rawRequest(t, wechat, create, `{"stream_name":"CHAT_DLQ","config":{`+base+`}}`); a.Error == nil || !strings.Contains(a.Error.Description, "stream_name must be CHAT_OUT") {
		t.Errorf("create on CHAT_DLQ = %+v, want refused", a.Error)
	}
	cons, err := b.JetStream().Consumer(t.Context(), "CHAT_OUT", "bridge_wechat")
	if err != nil {
		t.Fatalf("bridge_wechat after the attack: %v", err)
	}
	if got := cons.CachedInfo().Config; got.DeliverSubject != "" || got.InactiveThreshold != 0 || got.AckPolicy != jetstream.AckExplicitPolicy ||
		got.MaxDeliver != -1 || got.AckWait != natsbus.BridgeAckWait {
		t.Fatalf("bridge_wechat = %+v, want the daemon's", got)
	}
	// The daemon's settings, with a description of the bridge's own, are
	// answered with the daemon's consumer.
	a := rawRequest(t, wechat, create, `{"stream_name":"CHAT_OUT","config":{`+base+`,"description":"mine","ack_wait":60000000000}}`)
	if a.Error != nil || a.Config.Durable != "bridge_wechat" || a.Config.Description != natsbus.BridgeConsumerConfig("chat", "wechat", []string{"wechat"}).Description {
		t.Fatalf("create with the daemon's settings = %+v, %+v", a.Error, a.Config)
	}
	publishOut(t, b, "wechat", "room", "o-w", "for wechat")
	if m := fetchOne(t, cons); !strings.Contains(string(m.Data()), `"o-w"`) {
		t.Fatalf("wechat fetched %s", m.Data())
	}
	// Nothing reached line's dead letters through a delivery.
	if got := lineDLQ.All(); len(got) != 0 {
		t.Fatalf("line's dead-letter subject got %d messages: %s", len(got), got[0].Data)
	}
	wechat.noViolation(t)
}

// TestAttackBridgeAccountInfo: $JS.API.INFO, which client libraries ask
// for, gives a bridge its own view, not the daemon account's streams,
// consumers and bytes.
func TestAttackBridgeAccountInfo(t *testing.T) {
	b := open(t, isolatedConfig(), t.TempDir())
	publishInbound(t, b, inbound("i1", "something stored"))
	wechat := asBridge(t, b, "wechat", nats.Token(wechatToken))
	info, err := wechat.js.AccountInfo(t.Context())
	if err != nil {
		t.Fatalf("account info as a bridge: %v", err)
	}
	if info.Streams != 0 || info.Store != 0 || info.Memory != 0 || info.Consumers > 1 {
		t.Fatalf("a bridge sees streams %d, consumers %d, store %d, memory %d: the daemon account's figures", info.Streams, info.Consumers, info.Store, info.Memory)
	}
	wechat.noViolation(t)
}

// rawLogin is bustest.RawLogin with the package's wait.
func rawLogin(t *testing.T, url string, fields map[string]any) string {
	t.Helper()
	return bustest.RawLogin(t, url, fields, wait)
}

// TestAttackLoginGuessing: 50 password guesses over raw TCP from one
// address, then the right password: after the burst, every login from
// that address is refused unchecked, the right one too, while the
// daemon's own connections and an established bridge keep working; once
// the address has been quiet a while, the right password gets in again.
func TestAttackLoginGuessing(t *testing.T) {
	b := open(t, isolatedConfig(), t.TempDir())
	agent := startConsume(t, b)
	line := asBridge(t, b, "line", nats.UserInfo("line", linePassword))
	url := b.ClientURL()
	refused := 0
	for i := range 50 {
		if got := rawLogin(t, url, map[string]any{"user": adminUser, "pass": fmt.Sprint("guess-", i)}); strings.Contains(got, "Authorization Violation") {
			refused++
		}
	}
	if refused != 50 {
		t.Fatalf("%d of 50 wrong guesses refused", refused)
	}
	if got := rawLogin(t, url, map[string]any{"user": adminUser, "pass": adminPass}); !strings.Contains(got, "Authorization Violation") {
		t.Fatalf("the right password after 50 guesses = %q, want refused while the address is throttled", got)
	}
	in := bus.Inbound{V: 1, ID: "during", Channel: "line", ChatID: "g", UserID: "u", Text: "hi"}
	bustest.PublishInbound(t, line.nc, b.Subjects(), in)
	d := agent.next(t)
	if got := decode(t, b, d); got.ID != "during" {
		t.Fatalf("agent got %+v, want line's message", got)
	}
	doubleAck(t, d)
	polltest.Until(t, 3*wait, 200*time.Millisecond, func() bool {
		return rawLogin(t, url, map[string]any{"user": adminUser, "pass": adminPass}) == "PONG"
	}, func() string { return "the right password is still refused long after the guessing stopped" })
	bustest.PublishInbound(t, line.nc, b.Subjects(), bus.Inbound{V: 1, ID: "after", Channel: "line", ChatID: "g", UserID: "u", Text: "hi"})
	d = agent.next(t)
	if got := decode(t, b, d); got.ID != "after" {
		t.Fatalf("agent got %+v, want line's message", got)
	}
	doubleAck(t, d)
}

// TestAttackFailedLoginLogged: a client sends a bridge's token as its user
// name, then keeps guessing. The log never holds what it sent; failed
// logins are one Warn line (not Error) per ten seconds, with the address.
func TestAttackFailedLoginLogged(t *testing.T) {
	var buf syncbuf.Buffer
	log := slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
	b, err := natsbus.Open(t.Context(), isolatedConfig(), t.TempDir(), log)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	for range 5 {
		if got := rawLogin(t, b.ClientURL(), map[string]any{"user": wechatToken}); !strings.Contains(got, "Authorization Violation") {
			t.Fatalf("login with a token as user name = %q", got)
		}
	}
	polltest.Until(t, wait, 10*time.Millisecond, func() bool { return strings.Contains(buf.String(), "nats login refused") },
		func() string { return "no log line for the refused logins:\n" + buf.String() })
	out := buf.String()
	if strings.Contains(out, wechatToken) {
		t.Errorf("the log holds the user name the client sent (a token):\n%s", out)
	}
	if strings.Contains(out, "level=ERROR") {
		t.Errorf("failed logins logged at Error:\n%s", out)
	}
	if n := strings.Count(out, "nats login refused"); n != 1 {
		t.Errorf("%d lines for 5 refused logins within a second, want 1:\n%s", n, out)
	}
	if !strings.Contains(out, "remote=127.0.0.1:") || !strings.Contains(out, "credential=user") {
		t.Errorf("the line does not say where from and what kind of credential:\n%s", out)
	}
}

// TestAttackPlantedOperatorToken: someone who can write to data_dir, or
// plant a file there, leaves a credential they know; the daemon (and every
// client) refuses it instead of accepting it as the operators' token.
func TestAttackPlantedOperatorToken(t *testing.T) {
	long := strings.Repeat("a", 64) + "\n"
	tests := []struct {
		name    string
		plant   func(t *testing.T, dir string)
		wantErr string
	}{
		{"one-character token", func(t *testing.T, dir string) {
			writeFile(t, natsbus.OperatorTokenPath(dir), "x\n", 0o600)
		}, "holds a token of 1 characters, shorter than 16"},
		{"world-writable data_dir", func(t *testing.T, dir string) {
			writeFile(t, natsbus.OperatorTokenPath(dir), long, 0o600)
			if err := os.Chmod(dir, 0o777); err != nil {
				t.Fatal(err)
			}
		}, "has mode 0777: group and others may create files in it"},
		{"group-writable data_dir, no token yet", func(t *testing.T, dir string) {
			if err := os.Chmod(dir, 0o770); err != nil {
				t.Fatal(err)
			}
		}, "has mode 0770"},
		{"hard link", func(t *testing.T, dir string) {
			elsewhere := filepath.Join(t.TempDir(), "mine")
			writeFile(t, elsewhere, long, 0o600)
			if err := os.Link(elsewhere, natsbus.OperatorTokenPath(dir)); err != nil {
				t.Fatal(err)
			}
		}, "has 2 hard links"},
		{"another user's file", func(t *testing.T, dir string) {
			if os.Geteuid() != 0 {
				t.Skip("needs root to give the file to another user")
			}
			writeFile(t, natsbus.OperatorTokenPath(dir), long, 0o600)
			if err := os.Chown(natsbus.OperatorTokenPath(dir), 65534, 65534); err != nil {
				t.Fatal(err)
			}
		}, "belongs to uid 65534, not to uid 0"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "data")
			if err := os.Mkdir(dir, 0o700); err != nil {
				t.Fatal(err)
			}
			tt.plant(t, dir)
			cfg := natsbus.DefaultConfig()
			cfg.Listen = "127.0.0.1:0"
			if got, _, _, err := cfg.WithOperatorToken(dir); err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("the daemon's start: admin token %q, %v; want an error with %q", got.Admin.Token, err, tt.wantErr)
			}
			if tok, err := natsbus.ReadOperatorToken(dir); err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("ReadOperatorToken = %q, %v; want an error with %q", tok, err, tt.wantErr)
			}
		})
	}
}

// TestWeakSecretsWarned: on a loopback listener short secrets are a
// warning naming each key, at start and in `switchboard check`.
func TestWeakSecretsWarned(t *testing.T) {
	cfg := isolatedConfig() // line's password and the admin's are short
	want := []string{"bus.admin.password is shorter than 16 characters", "bus.bridges.line.password is shorter than 16 characters"}
	got := cfg.WeakSecrets()
	if len(got) != len(want) {
		t.Fatalf("WeakSecrets = %q, want %d warnings", got, len(want))
	}
	for i, w := range want {
		if !strings.HasPrefix(got[i], w) {
			t.Errorf("warning %d = %q, want it to start with %q", i, got[i], w)
		}
	}
	var buf syncbuf.Buffer
	b, err := natsbus.Open(t.Context(), cfg, t.TempDir(), slog.New(slog.NewTextHandler(&buf, nil)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	if out := buf.String(); strings.Count(out, "bus: weak secret") != 2 || !strings.Contains(out, "bus.bridges.line.password") {
		t.Errorf("start log:\n%s", out)
	}
	if r := cfg.CheckAuth(t.TempDir()); r.Status != health.Warn || !strings.Contains(r.Detail, "bus.admin.password is shorter than 16") {
		t.Errorf("CheckAuth = %s %q, want a warning naming the key", r.Status, r.Detail)
	}
	in := cfg
	in.Listen = ""
	if w := in.WeakSecrets(); len(w) != 0 {
		t.Errorf("in-process bus: WeakSecrets = %q, want none", w)
	}
}

package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
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
	"github.com/switchboard-chat/switchboard/internal/polltest"
	"github.com/switchboard-chat/switchboard/llm/llmtest"
)

// Attacks on the running daemon by a declared bridge with its own
// credential, and by anyone who reaches the bus listener.

// attackBridge is a bridge's connection to a test daemon's bus.
type attackBridge struct {
	nc   *nats.Conn
	js   jetstream.JetStream
	cons jetstream.Consumer // its durable consumer, looked up once
}

// dialBridge connects to url as the bridge name, with its inbox prefix,
// and looks up its durable consumer.
func dialBridge(t *testing.T, url, name string, cred nats.Option) *attackBridge {
	t.Helper()
	nc, err := nats.Connect(url, cred, nats.CustomInboxPrefix(natsbus.BridgeInboxPrefix(name)))
	if err != nil {
		t.Fatalf("bridge %s connect: %v", name, err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	cons, err := js.Consumer(t.Context(), "CHAT_OUT", natsbus.BridgeConsumerName(name))
	if err != nil {
		t.Fatalf("bridge %s: its consumer: %v", name, err)
	}
	return &attackBridge{nc: nc, js: js, cons: cons}
}

// talk sends a message from the bridge's channel and waits for the
// daemon's answer (the echo model repeats it).
func (b *attackBridge) talk(t *testing.T, subj bus.Subjects, channel, id string) {
	t.Helper()
	bustest.PublishInbound(t, b.nc, subj, bus.Inbound{V: 1, ID: id, Channel: channel, ChatID: "c1", UserID: "u", Text: "say " + id})
	if got := nextFinal(t, b.cons, id); !strings.Contains(got.Text, "say "+id) {
		t.Fatalf("%s answered with %+v", id, got)
	}
}

// createRaw sends wechat's raw consumer-create request with config and
// returns the API error of the answer (nil when it created a consumer).
func createRaw(t *testing.T, nc *nats.Conn, config string) *jetstream.APIError {
	t.Helper()
	m, err := nc.Request("$JS.API.CONSUMER.CREATE.CHAT_OUT.bridge_wechat.chat.out.wechat.>", []byte(`{"stream_name":"CHAT_OUT","config":`+config+`}`), wait)
	if err != nil {
		t.Fatalf("consumer create request: %v", err)
	}
	var a struct {
		Error *jetstream.APIError `json:"error"`
	}
	if err := json.Unmarshal(m.Data, &a); err != nil {
		t.Fatalf("answer %s: %v", m.Data, err)
	}
	return a.Error
}

// TestAttackBridgeConsumerConfigThroughDaemon: the wechat bridge asks, as
// its own consumer, for one that deletes itself after a second
// (inactive_threshold) and for a push consumer delivering onto line's
// dead-letter subject; both are refused with a JetStream API error, the
// consumer stays a pull consumer that serves wechat, and line is answered
// during and after.
func TestAttackBridgeConsumerConfigThroughDaemon(t *testing.T) {
	model := llmtest.NewServer(t, llmtest.WithResponder(llmtest.EchoResponder))
	d := startDaemon(t, bridgeConfig(t, model.URL()))
	url := d.s.Bus.ClientURL()
	wechat := dialBridge(t, url, "wechat", nats.Token(testWechatToken))
	line := dialBridge(t, url, "line", nats.UserInfo("line", testLinePass))
	lineDLQ := bustest.Collect(t, line.nc, "chat.dlq.line")

	base := `"durable_name":"bridge_wechat","filter_subject":"chat.out.wechat.>","ack_policy":"explicit","deliver_policy":"new"`
	if e := createRaw(t, wechat.nc, `{`+base+`,"inactive_threshold":1000000000}`); e == nil || e.Code != 400 || !strings.Contains(e.Description, "inactive_threshold") {
		t.Fatalf("a self-deleting consumer: answer error %+v, want a 400 naming inactive_threshold", e)
	}
	line.talk(t, d.subjects(), "line", "during-1")
	if e := createRaw(t, wechat.nc, `{`+base+`,"deliver_subject":"chat.dlq.line"}`); e == nil || e.Code != 400 || !strings.Contains(e.Description, "deliver_subject") {
		t.Fatalf("a push consumer onto line's dead letters: answer error %+v, want a 400 naming deliver_subject", e)
	}
	line.talk(t, d.subjects(), "line", "during-2")
	wechat.talk(t, d.subjects(), "wechat", "w-1")
	info, err := wechat.cons.Info(t.Context())
	if err != nil || info.Config.DeliverSubject != "" || info.Config.InactiveThreshold != 0 {
		t.Fatalf("bridge_wechat after the attack: %+v, %v", info, err)
	}
	line.talk(t, d.subjects(), "line", "after")
	if got := lineDLQ.All(); len(got) != 0 {
		t.Fatalf("line's dead-letter subject got %s", got[0].Data)
	}
}

// TestAttackBridgeConsumerLeftBehind: the consumer a bridge could leave
// behind before (bridge_wechat turned into a push consumer onto line's
// dead letters) no longer stops the daemon's start: it is replaced by the
// daemon's pull consumer and both bridges are answered. Deleted while the
// daemon runs, it is created again.
func TestAttackBridgeConsumerLeftBehind(t *testing.T) {
	model := llmtest.NewServer(t, llmtest.WithResponder(llmtest.EchoResponder))
	cfg := bridgeConfig(t, model.URL())
	startDaemon(t, cfg).stop()
	// What the old ingress let wechat do: its consumer deleted itself and
	// came back as a push consumer. The operator plants that state here,
	// with the daemon stopped (it would put its consumer back at once).
	plain := cfg.Bus
	plain.Listen, plain.Bridges, plain.Admin = "", nil, natsbus.AdminConfig{}
	store, err := natsbus.Open(t.Context(), plain, filepath.Join(cfg.DataDir, "jetstream"), nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := store.JetStream().DeleteConsumer(t.Context(), "CHAT_OUT", "bridge_wechat"); err != nil {
		t.Fatal(err)
	}
	if _, err := store.JetStream().CreateOrUpdatePushConsumer(t.Context(), "CHAT_OUT", jetstream.ConsumerConfig{Durable: "bridge_wechat",
		DeliverSubject: "chat.dlq.line", FilterSubject: "chat.out.wechat.>", AckPolicy: jetstream.AckNonePolicy}); err != nil {
		t.Fatal(err)
	}
	if err := store.Close(); err != nil {
		t.Fatal(err)
	}

	d := startDaemon(t, cfg) // failed before: "consumer is not a pull consumer"
	url := d.s.Bus.ClientURL()
	wechat := dialBridge(t, url, "wechat", nats.Token(testWechatToken))
	line := dialBridge(t, url, "line", nats.UserInfo("line", testLinePass))
	wechat.talk(t, d.subjects(), "wechat", "w-1")
	line.talk(t, d.subjects(), "line", "l-1")

	// Deleted while the daemon runs: it comes back, and serves wechat.
	ops, err := jetstream.New(d.nc)
	if err != nil {
		t.Fatal(err)
	}
	if err := ops.DeleteConsumer(t.Context(), "CHAT_OUT", "bridge_wechat"); err != nil {
		t.Fatal(err)
	}
	line.talk(t, d.subjects(), "line", "l-2")
	// The server's advisory puts it back at once; on a loaded machine the
	// repair may time out, and the periodic check puts it back then.
	polltest.Until(t, natsbus.BridgeConsumerCheckInterval+wait, 20*time.Millisecond, func() bool {
		_, err := ops.Consumer(t.Context(), "CHAT_OUT", "bridge_wechat")
		return err == nil
	}, func() string { return "bridge_wechat was not created again after it was deleted" })
	wechat.talk(t, d.subjects(), "wechat", "w-2")
	line.talk(t, d.subjects(), "line", "l-3")
}

// TestAttackBridgeNamedAfterBuiltinChannel: a bridge named web, or one
// declaring telegram or console among its channels, would own the
// built-in adapter's consumer (every web user's replies): `switchboard
// check` refuses the configuration, naming the key, and the daemon does
// not start with it.
func TestAttackBridgeNamedAfterBuiltinChannel(t *testing.T) {
	for _, tc := range []struct{ bridges, want string }{
		{"    web:\n      channels: [mine]\n      token: a-token-of-the-web-bridge", `bus.bridges.web: "web" is the name of a built-in channel, whose adapter owns the consumer bridge_web`},
		{"    openai:\n      channels: [openai]\n      token: a-token-of-the-openai-bridge", `bus.bridges.openai.channels[0]: "openai" is a built-in channel of the daemon`},
		{"    wx:\n      channels: [wechat, telegram, console, slack]\n      token: a-token-of-the-wx-bridge", `bus.bridges.wx.channels[1]: "telegram" is a built-in channel`},
	} {
		body := checkEnv{busListen: freeAddr(t), llmBaseURL: "http://127.0.0.1:1/v1"}.yaml(t)
		body = strings.Replace(body, "bus:\n", "bus:\n  bridges:\n"+tc.bridges+"\n", 1)
		code, out := runCheckFile(t, body)
		if code == 0 || !strings.Contains(out, tc.want) {
			t.Errorf("check with\n%s\n= exit %d, want a failure with %q; output:\n%s", tc.bridges, code, tc.want, out)
		}
		cfg, err := ParseConfig([]byte(body), noEnv)
		if err == nil {
			err = cfg.Validate()
		}
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("config with\n%s\n= %v, want %q", tc.bridges, err, tc.want)
		}
	}
	// The same, set by hand past the loader: serve refuses to start.
	cfg := testConfig(t, "http://127.0.0.1:1/v1")
	cfg.Bus.Bridges = map[string]natsbus.BridgeConfig{"web": {Channels: []string{"web"}, Token: "a-token-of-the-web-bridge"}}
	ctx, cancel := context.WithTimeout(t.Context(), wait)
	defer cancel()
	err := serve(ctx, cfg, slog.New(slog.NewTextHandler(io.Discard, nil)), func(started) { t.Error("the daemon started with a bridge named web"); cancel() })
	if err == nil || !strings.Contains(err.Error(), `bus.bridges.web: "web" is the name of a built-in channel`) {
		t.Fatalf("serve = %v, want the config error", err)
	}
}

// rawGuess logs in to the listener at url over a raw TCP connection with a
// user name and password (bustest.RawLogin) and returns the server's
// answer: "PONG" or "-ERR '...'".
func rawGuess(t *testing.T, url, user, pass string) string {
	t.Helper()
	return bustest.RawLogin(t, url, map[string]any{"user": user, "pass": pass}, wait)
}

// TestAttackLoginGuessingThroughDaemon: 50 guesses of line's password
// over raw TCP, then the right one: the address is throttled, so the
// right guess is refused too; the connected line bridge is answered during
// the attack, and the right password gets in once the address was quiet.
func TestAttackLoginGuessingThroughDaemon(t *testing.T) {
	model := llmtest.NewServer(t, llmtest.WithResponder(llmtest.EchoResponder))
	d := startDaemon(t, bridgeConfig(t, model.URL()))
	url := d.s.Bus.ClientURL()
	line := dialBridge(t, url, "line", nats.UserInfo("line", testLinePass))
	for i := range 50 {
		if got := rawGuess(t, url, "line", fmt.Sprint("guess-", i)); !strings.Contains(got, "Authorization Violation") {
			t.Fatalf("guess %d = %q", i, got)
		}
	}
	if got := rawGuess(t, url, "line", testLinePass); !strings.Contains(got, "Authorization Violation") {
		t.Fatalf("the right password after 50 wrong guesses = %q, want refused", got)
	}
	line.talk(t, d.subjects(), "line", "during")
	polltest.Until(t, wait, 200*time.Millisecond, func() bool { return rawGuess(t, url, "line", testLinePass) == "PONG" },
		func() string { return "the right password is still refused long after the guessing stopped" })
	line.talk(t, d.subjects(), "line", "after")
}

// TestAttackPlantedOperatorTokenThroughDaemon: a one-character operator
// token planted in data_dir, or a data_dir anyone may write, stops the
// daemon with an error saying why, instead of becoming the operators'
// credential.
func TestAttackPlantedOperatorTokenThroughDaemon(t *testing.T) {
	for _, tc := range []struct {
		name    string
		plant   func(t *testing.T, dataDir string)
		wantErr string
	}{
		{"one-character token", func(t *testing.T, dataDir string) {
			if err := os.WriteFile(natsbus.OperatorTokenPath(dataDir), []byte("x\n"), 0o600); err != nil {
				t.Fatal(err)
			}
		}, "holds a token of 1 characters"},
		{"world-writable data_dir", func(t *testing.T, dataDir string) {
			if err := os.Chmod(dataDir, 0o777); err != nil {
				t.Fatal(err)
			}
		}, "has mode 0777: group and others may create files in it"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := testConfig(t, "http://127.0.0.1:1/v1")
			if err := os.MkdirAll(cfg.DataDir, 0o700); err != nil {
				t.Fatal(err)
			}
			tc.plant(t, cfg.DataDir)
			ctx, cancel := context.WithTimeout(t.Context(), wait)
			defer cancel()
			err := serve(ctx, cfg, slog.New(slog.NewTextHandler(io.Discard, nil)), func(started) { t.Error("the daemon started"); cancel() })
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) || !strings.Contains(err.Error(), filepath.Base(cfg.DataDir)) {
				t.Fatalf("serve = %v, want an error with %q", err, tc.wantErr)
			}
		})
	}
}

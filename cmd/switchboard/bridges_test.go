package main

import (
	"context"
	"encoding/json"
	"errors"
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
	"github.com/switchboard-chat/switchboard/llm/llmtest"
)

// Credentials of the bridge tests.
const (
	testAdminToken  = "admin-token-for-tests"
	testWechatToken = "wechat-token-for-tests"
	testLinePass    = "line-password-for-tests"
)

// bridgeConfig is testConfig with two bridges declared (wechat: token,
// line: user and password) and an admin token.
func bridgeConfig(t testing.TB, llmURL string) Config {
	cfg := testConfig(t, llmURL)
	cfg.Bus.Admin = natsbus.AdminConfig{Token: testAdminToken}
	cfg.Bus.Bridges = map[string]natsbus.BridgeConfig{
		"wechat": {Channels: []string{"wechat"}, Token: testWechatToken, MaxMsgsPerSec: 50},
		"line":   {Channels: []string{"line"}, User: "line", Password: testLinePass},
	}
	return cfg
}

// authDaemon is an in-process `switchboard serve` whose bus requires
// credentials; admin is an operator connection to it.
type authDaemon struct {
	cfg   Config
	bus   *natsbus.Bus
	admin *nats.Conn
}

// startAuthDaemon runs serve until the test ends and connects an operator
// client with the admin token (startDaemon connects anonymously, which a
// bus with bridges refuses).
func startAuthDaemon(t *testing.T, cfg Config) *authDaemon {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan started, 1)
	done := make(chan error, 1)
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	if testing.Verbose() {
		log = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	go func() { done <- serve(ctx, cfg, log, func(s started) { ready <- s }) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("serve returned %v", err)
			}
		case <-time.After(wait):
			t.Error("daemon did not stop")
		}
	})
	var s started
	select {
	case s = <-ready:
	case err := <-done:
		done <- err
		t.Fatalf("serve: %v", err)
	case <-time.After(wait):
		t.Fatal("daemon did not start")
	}
	if anon, err := nats.Connect(s.Bus.ClientURL()); !errors.Is(err, nats.ErrAuthorization) {
		if anon != nil {
			anon.Close()
		}
		t.Fatalf("anonymous connect to a bus with bridges = %v, want an authorization violation", err)
	}
	admin, err := nats.Connect(s.Bus.ClientURL(), nats.Token(testAdminToken))
	if err != nil {
		t.Fatalf("admin connect: %v", err)
	}
	t.Cleanup(admin.Close)
	return &authDaemon{cfg: cfg, bus: s.Bus, admin: admin}
}

// connectBridge connects as a bridge, with its inbox prefix.
func (d *authDaemon) connectBridge(t *testing.T, name string, cred nats.Option) (*nats.Conn, jetstream.JetStream) {
	t.Helper()
	nc, err := nats.Connect(d.bus.ClientURL(), cred, nats.CustomInboxPrefix(natsbus.BridgeInboxPrefix(name)))
	if err != nil {
		t.Fatalf("bridge %s connect: %v", name, err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return nc, js
}

// nextFinal pulls from a bridge's durable consumer, acknowledging each
// message, until the final answer to inboundID arrives.
func nextFinal(t *testing.T, cons jetstream.Consumer, inboundID string) bus.Outbound {
	t.Helper()
	deadline := time.Now().Add(wait)
	for time.Now().Before(deadline) {
		batch, err := cons.Fetch(1, jetstream.FetchMaxWait(time.Until(deadline)))
		if err != nil {
			t.Fatalf("fetch: %v", err)
		}
		for m := range batch.Messages() {
			var o bus.Outbound
			if err := json.Unmarshal(m.Data(), &o); err != nil {
				t.Fatalf("outbound %s: %v", m.Data(), err)
			}
			if err := m.Ack(); err != nil {
				t.Fatal(err)
			}
			if o.InReplyTo == inboundID && o.Final {
				return o
			}
		}
		if err := batch.Error(); err != nil && !errors.Is(err, nats.ErrTimeout) {
			t.Fatalf("fetch: %v", err)
		}
	}
	t.Fatalf("no final answer to %s within %s", inboundID, wait)
	return bus.Outbound{}
}

// TestBridgeRoundTripThroughDaemon runs the real serve path with isolation
// on: a bridge publishes with its own credentials, the daemon (connected
// in-process) answers, and the bridge reads the answer from its durable
// consumer bridge_<name>.
func TestBridgeRoundTripThroughDaemon(t *testing.T) {
	model := llmtest.NewServer(t)
	model.Enqueue(llmtest.TextReply("Hello from the daemon"))
	d := startAuthDaemon(t, bridgeConfig(t, model.URL()))
	nc, js := d.connectBridge(t, "wechat", nats.Token(testWechatToken))
	cons, err := js.Consumer(t.Context(), "CHAT_OUT", natsbus.BridgeConsumerName("wechat"))
	if err != nil {
		t.Fatalf("the daemon did not create bridge_wechat: %v", err)
	}
	in := bus.Inbound{V: 1, ID: "w1", Channel: "wechat", ChatID: "wxid_room@chatroom", UserID: "wxid_ann", UserName: "Ann",
		Text: "hi", IsGroup: true, Mentioned: true, Meta: map[string]string{"room_id": "wxid_room@chatroom"}}
	bustest.PublishInbound(t, nc, d.bus.Subjects(), in)
	got := nextFinal(t, cons, "w1")
	if got.Kind != bus.KindReply || got.Text != "Hello from the daemon" || got.Meta["room_id"] != "wxid_room@chatroom" {
		t.Fatalf("final = %+v", got)
	}
}

// TestFloodThroughDaemon: the wechat bridge sends 10,000 messages (invalid
// ones, and valid ones carrying a /command that needs no model) while the
// line bridge holds a conversation. Line's turns complete normally;
// wechat's flood never reaches the model; every invalid message ends in
// wechat's dead-letter queue without spending its rate budget, and the
// valid ones beyond the budget are rate-limited before they are stored.
func TestFloodThroughDaemon(t *testing.T) {
	const flood, turns = 10_000, 3
	model := llmtest.NewServer(t)
	for i := range turns {
		model.Enqueue(llmtest.TextReply(fmt.Sprint("answer ", i)))
	}
	d := startAuthDaemon(t, bridgeConfig(t, model.URL()))
	dlq := bustest.Collect(t, d.admin, "chat.dlq.wechat")
	wechat, _ := d.connectBridge(t, "wechat", nats.Token(testWechatToken))
	line, lineJS := d.connectBridge(t, "line", nats.UserInfo("line", testLinePass))
	cons, err := lineJS.Consumer(t.Context(), "CHAT_OUT", natsbus.BridgeConsumerName("line"))
	if err != nil {
		t.Fatal(err)
	}

	garbage := []byte(`{"v":1,"id":"junk","channel":"wechat","chat_id":"flood","user_id":"u"}`) // no text
	const valid = 100                                                                           // one in every flood/valid is valid
	for i := range flood {
		data := garbage
		if i%(flood/valid) == 0 {
			data, _ = json.Marshal(bus.Inbound{V: 1, ID: fmt.Sprint("w", i), Channel: "wechat", ChatID: "flood", UserID: "u", Text: "/help"})
		}
		if err := wechat.Publish("chat.in.wechat.flood", data); err != nil {
			t.Fatal(err)
		}
		if i%(flood/turns) == 0 && i/(flood/turns) < turns {
			// A line turn starts in the middle of the flood and completes.
			n := i / (flood / turns)
			id := fmt.Sprint("l", n)
			bustest.PublishInbound(t, line, d.bus.Subjects(), bus.Inbound{V: 1, ID: id, Channel: "line", ChatID: "g1", UserID: "u", Text: "question"})
			if got := nextFinal(t, cons, id); got.Text != fmt.Sprint("answer ", n) {
				t.Fatalf("line turn %d final = %+v", n, got)
			}
		}
	}
	if err := wechat.Flush(); err != nil {
		t.Fatal(err)
	}
	// count returns the rate-limited and the invalid dead letters.
	count := func() (limited, invalid int) {
		for _, m := range dlq.All() {
			var r bus.DLQRecord
			if err := json.Unmarshal(m.Data, &r); err != nil {
				t.Fatal(err)
			}
			if r.Reason == natsbus.RateLimitReason("wechat") {
				limited++
			} else if strings.Contains(r.Reason, `field "text"`) {
				invalid++
			} else {
				t.Fatalf("unexpected dead letter %+v", r)
			}
		}
		return limited, invalid
	}
	dlq.WaitFor(t, 3*wait, func(*nats.Msg) bool { _, invalid := count(); return invalid == flood-valid })
	if limited, invalid := count(); invalid != flood-valid || limited > valid {
		t.Fatalf("%d rate-limited and %d invalid dead letters; want %d invalid and at most %d rate-limited", limited, invalid, flood-valid, valid)
	}
	if n := model.RequestCount(); n != turns {
		t.Fatalf("model called %d times, want %d (only line's turns)", n, turns)
	}
}

func TestCheckBusAuth(t *testing.T) {
	listen := freeAddr(t)
	dataDir := filepath.Join(t.TempDir(), "data")
	code, out := runCheckFile(t, checkEnv{busListen: listen, dataDir: dataDir}.yaml(t))
	if code != 0 {
		t.Fatalf("exit code %d; output:\n%s", code, out)
	}
	tokenFile := filepath.Join(dataDir, natsbus.OperatorTokenFile)
	wantLine(t, out, "bus auth", "OK", "the embedded listener on "+listen+" requires credentials (no anonymous client): no bridge is declared; operators use the token the daemon generates at its first start in "+tokenFile)
	if err := os.MkdirAll(dataDir, 0o700); err != nil {
		t.Fatal(err)
	}
	if _, _, err := natsbus.OperatorToken(dataDir); err != nil {
		t.Fatal(err)
	}
	_, out = runCheckFile(t, checkEnv{busListen: listen, dataDir: dataDir}.yaml(t))
	wantLine(t, out, "bus auth", "OK", "operators use the token in "+tokenFile+" (`switchboard bus context` writes a nats CLI context for it)")
	if err := os.Chmod(tokenFile, 0o644); err != nil {
		t.Fatal(err)
	}
	code, out = runCheckFile(t, checkEnv{busListen: listen, dataDir: dataDir}.yaml(t))
	if code != 1 {
		t.Fatalf("exit code %d with a world-readable credential; output:\n%s", code, out)
	}
	wantLine(t, out, "bus auth", "FAIL", "has mode 0644: group and others must not read or write it (chmod 600 "+tokenFile)

	dir := t.TempDir()
	body := fmt.Sprintf(`data_dir: %q
agent:
  workspace: %q
admin:
  listen: ""
bus:
  listen: %q
  bridges:
    wechat: {channels: [wechat], token: wechat-token-for-the-check}
    line: {channels: [line, line2], user: line, password: line-password-for-the-check}
  admin:
    token: ops-token-for-the-check
`, filepath.Join(dir, "data"), filepath.Join(dir, "ws"), listen)
	_, out = runCheckFile(t, body)
	wantLine(t, out, "bus auth", "OK", "requires credentials (no anonymous client): 2 bridges, line (line, line2); wechat (wechat); operators use bus.admin")

	_, out = runCheckFile(t, checkEnv{}.yaml(t))
	wantLine(t, out, "bus auth", "OK", "in-process only")
}

// TestBridgeCannotSuppressAnotherChannelsMessageThroughDaemon: the wechat
// bridge sends its own message under line's de-duplication key first; line's
// real message with that id is still answered by the daemon.
func TestBridgeCannotSuppressAnotherChannelsMessageThroughDaemon(t *testing.T) {
	model := llmtest.NewServer(t, llmtest.WithResponder(llmtest.EchoResponder))
	d := startAuthDaemon(t, bridgeConfig(t, model.URL()))
	wechat, wechatJS := d.connectBridge(t, "wechat", nats.Token(testWechatToken))
	_, lineJS := d.connectBridge(t, "line", nats.UserInfo("line", testLinePass))
	wechatCons, err := wechatJS.Consumer(t.Context(), "CHAT_OUT", natsbus.BridgeConsumerName("wechat"))
	if err != nil {
		t.Fatal(err)
	}
	lineCons, err := lineJS.Consumer(t.Context(), "CHAT_OUT", natsbus.BridgeConsumerName("line"))
	if err != nil {
		t.Fatal(err)
	}
	publish := func(js jetstream.JetStream, in bus.Inbound, msgID string) *jetstream.PubAck {
		t.Helper()
		m := nats.NewMsg(d.bus.Subjects().In(in.Channel, in.ChatID))
		m.Data, _ = json.Marshal(in)
		m.Header.Set(jetstream.MsgIDHeader, msgID)
		ack, err := js.PublishMsg(t.Context(), m)
		if err != nil {
			t.Fatalf("publish %s: %v", in.DedupKey(), err)
		}
		return ack
	}
	publish(wechatJS, bus.Inbound{V: 1, ID: "w-1", Channel: "wechat", ChatID: "room", UserID: "mallory", Text: "mine"}, "line:victim-1")
	if got := nextFinal(t, wechatCons, "w-1"); !strings.Contains(got.Text, "mine") {
		t.Fatalf("wechat's own message answered with %+v", got)
	}
	victim := bus.Inbound{V: 1, ID: "victim-1", Channel: "line", ChatID: "g1", UserID: "alice", Text: "please answer me"}
	if ack := publish(lineJS, victim, victim.DedupKey()); ack.Duplicate {
		t.Fatalf("line's message was taken for a duplicate: %+v", ack)
	}
	if got := nextFinal(t, lineCons, "victim-1"); !strings.Contains(got.Text, "please answer me") {
		t.Fatalf("line's message answered with %+v", got)
	}
	if err := wechat.Flush(); err != nil {
		t.Fatal(err)
	}
}

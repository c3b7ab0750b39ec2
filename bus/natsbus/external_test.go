package natsbus_test

import (
	"context"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/switchboard-chat/switchboard/bus"
	"github.com/switchboard-chat/switchboard/bus/bustest"
	"github.com/switchboard-chat/switchboard/bus/natsbus"
)

// docConf returns the ```conf block of docs/bus-protocol.md §14.
func docConf(t *testing.T) string {
	t.Helper()
	data, err := os.ReadFile("../../docs/bus-protocol.md")
	if err != nil {
		t.Fatal(err)
	}
	doc := string(data)
	i := strings.Index(doc, "## 14. ")
	if i < 0 {
		t.Fatal("docs/bus-protocol.md has no section 14")
	}
	doc = doc[i:]
	start := strings.Index(doc, "```conf\n")
	if start < 0 {
		t.Fatal("§14 has no conf block")
	}
	doc = doc[start+len("```conf\n"):]
	end := strings.Index(doc, "\n```")
	if end < 0 {
		t.Fatal("§14: unterminated conf block")
	}
	return doc[:end]
}

// TestExternalServerConfigFromDocs starts nats-server with the
// configuration documented for an external server and checks that it
// isolates the bridge as the embedded server does.
func TestExternalServerConfigFromDocs(t *testing.T) {
	t.Setenv("SWITCHBOARD_NATS_PASSWORD", "daemon-pw")
	t.Setenv("OPS_NATS_PASSWORD", "ops-pw")
	t.Setenv("WECHAT_NATS_PASSWORD", "wechat-pw")
	path := filepath.Join(t.TempDir(), "nats-server.conf")
	if err := os.WriteFile(path, []byte(docConf(t)), 0o600); err != nil {
		t.Fatal(err)
	}
	opts, err := server.ProcessConfigFile(path)
	if err != nil {
		t.Fatalf("the documented nats-server.conf does not load: %v", err)
	}
	opts.Host, opts.Port, opts.StoreDir, opts.NoSigs, opts.NoLog = "127.0.0.1", server.RANDOM_PORT, t.TempDir(), true, true
	s, err := server.NewServer(opts)
	if err != nil {
		t.Fatal(err)
	}
	s.Start()
	t.Cleanup(func() {
		s.Shutdown()
		s.WaitForShutdown()
	})
	if !s.ReadyForConnections(wait) {
		t.Fatal("server not ready")
	}
	u, err := url.Parse(s.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	u.User = url.UserPassword("switchboard", "daemon-pw")

	cfg := natsbus.DefaultConfig()
	cfg.URL = u.String()
	cfg.Bridges = map[string]natsbus.BridgeConfig{"wechat": {Channels: []string{"wechat"}}}
	b := open(t, cfg, "")
	agent := startConsume(t, b)

	if _, err := dial(t, s.ClientURL()); err == nil {
		t.Fatal("anonymous client accepted")
	}
	wechat := mustDial(t, s.ClientURL(), nats.UserInfo("wechat", "wechat-pw"), nats.CustomInboxPrefix(natsbus.BridgeInboxPrefix("wechat")))

	bustest.PublishInbound(t, wechat.nc, b.Subjects(), bus.Inbound{V: 1, ID: "w1", Channel: "wechat", ChatID: "c", UserID: "u", Text: "hi"})
	d := agent.next(t)
	if got := decode(t, b, d); got.ID != "w1" {
		t.Fatalf("agent got %+v", got)
	}
	doubleAck(t, d)
	publishOut(t, b, "telegram", "t", "o-t", "secret")
	publishOut(t, b, "wechat", "c", "o-w", "yours")
	cons, err := wechat.js.Consumer(t.Context(), "CHAT_OUT", "bridge_wechat")
	if err != nil {
		t.Fatalf("bridge_wechat (created by the daemon): %v", err)
	}
	m := fetchOne(t, cons)
	if !strings.Contains(string(m.Data()), `"o-w"`) {
		t.Fatalf("fetched %s", m.Data())
	}
	if err := m.DoubleAck(t.Context()); err != nil {
		t.Fatal(err)
	}
	if _, err := wechat.js.CreateOrUpdateConsumer(t.Context(), "CHAT_OUT", natsbus.BridgeConsumerConfig("chat", "wechat", []string{"wechat"})); err != nil {
		t.Fatalf("recreate own consumer: %v", err)
	}
	wechat.noViolation(t)

	if err := wechat.nc.Publish("chat.in.slack.x", []byte("{}")); err != nil {
		t.Fatal(err)
	}
	wechat.wantViolation(t, "chat.in.slack.x")
	if _, err := wechat.nc.SubscribeSync("chat.out.telegram.>"); err != nil {
		t.Fatal(err)
	}
	wechat.wantViolation(t, "chat.out.telegram.>")
	if _, err := wechat.nc.SubscribeSync("_INBOX.>"); err != nil {
		t.Fatal(err)
	}
	wechat.wantViolation(t, "_INBOX.>")
	wechat.requestDenied(t, "$JS.API.CONSUMER.CREATE.CHAT_OUT.bridge_wechat.chat.out.>", func(ctx context.Context) error {
		_, err := wechat.js.CreateOrUpdateConsumer(ctx, "CHAT_OUT", jetstream.ConsumerConfig{Durable: "bridge_wechat", FilterSubject: "chat.out.>"})
		return err
	})

	ops := mustDial(t, s.ClientURL(), nats.UserInfo("ops", "ops-pw"))
	if _, err := ops.js.Stream(t.Context(), "CHAT_OUT"); err != nil {
		t.Fatalf("operator: %v", err)
	}
}

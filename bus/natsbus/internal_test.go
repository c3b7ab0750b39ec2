package natsbus

import (
	"log/slog"
	"net"
	"strings"
	"testing"

	"github.com/switchboard-chat/switchboard/internal/syncbuf"
)

func TestStreamsFor(t *testing.T) {
	tests := []struct {
		prefix string
		want   Streams
	}{
		{"chat", Streams{"CHAT_IN", "CHAT_OUT", "CHAT_DLQ"}},
		{"acme.bot", Streams{"ACME_BOT_IN", "ACME_BOT_OUT", "ACME_BOT_DLQ"}},
		{"My-Chat", Streams{"MY-CHAT_IN", "MY-CHAT_OUT", "MY-CHAT_DLQ"}},
	}
	for _, tt := range tests {
		if got := StreamsFor(tt.prefix); got != tt.want {
			t.Errorf("StreamsFor(%q) = %+v, want %+v", tt.prefix, got, tt.want)
		}
	}
}

func TestListenerURL(t *testing.T) {
	addr := &net.TCPAddr{IP: net.IPv4zero, Port: 43210}
	tests := []struct{ listen, want string }{
		{"127.0.0.1:0", "nats://127.0.0.1:43210"},
		{"0.0.0.0:4222", "nats://127.0.0.1:43210"},
		{":4222", "nats://127.0.0.1:43210"},
		{"[::]:4222", "nats://[::1]:43210"},
		{"10.1.2.3:4222", "nats://10.1.2.3:43210"},
		{"myhost:4222", "nats://myhost:43210"},
	}
	for _, tt := range tests {
		if got := listenerURL(tt.listen, addr); got != tt.want {
			t.Errorf("listenerURL(%q) = %q, want %q", tt.listen, got, tt.want)
		}
	}
}

func TestMaxPayload(t *testing.T) {
	tests := []struct {
		text int
		want int32
	}{
		{65536, 1 << 20},
		{1 << 20, 2<<20 + 256<<10},
		{4 << 20, 8 << 20},
	}
	for _, tt := range tests {
		if got := maxPayload(tt.text); got != tt.want {
			t.Errorf("maxPayload(%d) = %d, want %d", tt.text, got, tt.want)
		}
	}
}

func TestRedactURL(t *testing.T) {
	tests := []struct{ in, want string }{
		{"nats://user:secret@host:4222", "nats://user:xxxxx@host:4222"},
		{"nats://token-secret@host:4222", "nats://xxxxx@host:4222"},
		{"nats://a:4222, nats://u:p@b:4222", "nats://a:4222,nats://u:xxxxx@b:4222"},
		{"nats://host:4222", "nats://host:4222"},
		{"", ""},
	}
	for _, tt := range tests {
		if got := redactURL(tt.in); got != tt.want {
			t.Errorf("redactURL(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

func TestLoopbackHost(t *testing.T) {
	for host, want := range map[string]bool{
		"localhost": true, "LocalHost": true, "127.0.0.1": true, "127.1.2.3": true, "::1": true, "::ffff:127.0.0.1": true,
		"": false, "0.0.0.0": false, "::": false, "192.168.1.10": false, "10.0.0.1": false, "fe80::1%eth0": false,
		"example.com": false, "localhost.example.com": false,
	} {
		if got := loopbackHost(host); got != want {
			t.Errorf("loopbackHost(%q) = %v, want %v", host, got, want)
		}
	}
}

func TestConfigValidateListenPort(t *testing.T) {
	for _, listen := range []string{"127.0.0.1:0", ":4222", "[::1]:65535", ""} {
		c := DefaultConfig()
		c.Listen = listen
		c.Admin.Token = "ops-token-for-all-interfaces" // required by ":4222", at least 16 characters there
		if err := c.Validate(); err != nil {
			t.Errorf("Listen %q: %v", listen, err)
		}
	}
	for _, listen := range []string{"127.0.0.1", "127.0.0.1:http", "127.0.0.1:65536", "127.0.0.1:-1"} {
		c := DefaultConfig()
		c.Listen = listen
		if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "bus.listen") {
			t.Errorf("Listen %q: error = %v, want one naming bus.listen", listen, err)
		}
	}
	c := DefaultConfig()
	c.URL, c.Listen = "nats://x:4222", "garbage" // Listen is ignored with URL
	if err := c.Validate(); err != nil {
		t.Errorf("Listen ignored with URL: %v", err)
	}
}

func TestServerLogRoutedToSlog(t *testing.T) {
	var buf syncbuf.Buffer
	log := slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
	cfg := DefaultConfig()
	cfg.Listen = ""
	b, err := Open(t.Context(), cfg, t.TempDir(), log)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	out := buf.String()
	if !strings.Contains(out, "component=nats-server") || !strings.Contains(out, "Starting nats-server") {
		t.Errorf("server log not routed to slog:\n%s", out)
	}
	if !strings.Contains(out, "bus ready") {
		t.Errorf("no lifecycle log:\n%s", out)
	}

	// At Info level the server's notices are filtered out.
	var quiet syncbuf.Buffer
	serverLog{log: slog.New(slog.NewTextHandler(&quiet, nil))}.Noticef("hello %d", 1)
	serverLog{log: slog.New(slog.NewTextHandler(&quiet, nil))}.Warnf("careful %d", 2)
	if got := quiet.String(); strings.Contains(got, "hello") || !strings.Contains(got, "level=WARN msg=\"careful 2\"") {
		t.Errorf("levels wrong:\n%s", got)
	}
}

package natsbus_test

import (
	"strings"
	"testing"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/switchboard-chat/switchboard/bus/natsbus"
)

// TestConfigReplicas: bus.replicas defaults to 1, is bounded to 1..5, and
// more than 1 with the embedded (single-node) server is refused at once
// with what to do.
func TestConfigReplicas(t *testing.T) {
	if got := natsbus.DefaultConfig().Replicas; got != 1 {
		t.Fatalf("default bus.replicas = %d, want 1", got)
	}
	tests := []struct {
		name    string
		edit    func(*natsbus.Config)
		wantErr []string
	}{
		{"default", func(*natsbus.Config) {}, nil},
		{"external R3", func(c *natsbus.Config) { c.URL, c.Replicas = "nats://a:4222,nats://b:4222", 3 }, nil},
		{"external R5", func(c *natsbus.Config) { c.URL, c.Replicas = "nats://a:4222", 5 }, nil},
		{"zero", func(c *natsbus.Config) { c.Replicas = 0 }, []string{"bus.replicas: must be between 1 and 5", "got 0"}},
		{"six", func(c *natsbus.Config) { c.URL, c.Replicas = "nats://a:4222", 6 }, []string{"bus.replicas: must be between 1 and 5", "got 6"}},
		{"embedded R3", func(c *natsbus.Config) { c.Replicas = 3 }, []string{"bus.replicas: 3 needs a NATS cluster", "set bus.url", "single node"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := natsbus.DefaultConfig()
			tt.edit(&cfg)
			err := cfg.Validate()
			if len(tt.wantErr) == 0 {
				if err != nil {
					t.Fatalf("Validate = %v, want nil", err)
				}
				return
			}
			if err == nil {
				t.Fatal("Validate = nil, want an error")
			}
			for _, w := range tt.wantErr {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not mention %q", err, w)
				}
			}
		})
	}
}

// TestOpenReplicasOnSingleNode: bus.replicas 3 against a NATS server that
// is one node (not a cluster) fails Open with an error that names the
// stream, says why and what to do, and leaves no stream behind.
func TestOpenReplicasOnSingleNode(t *testing.T) {
	opts := &server.Options{Host: "127.0.0.1", Port: server.RANDOM_PORT, JetStream: true, StoreDir: t.TempDir(), NoSigs: true, NoLog: true}
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
	cfg := natsbus.DefaultConfig()
	cfg.URL, cfg.Replicas = s.ClientURL(), 3
	b, err := natsbus.Open(t.Context(), cfg, "", nil)
	if err == nil {
		b.Close()
		t.Fatal("Open with bus.replicas 3 on one node succeeded")
	}
	msg := err.Error()
	for _, w := range []string{"ensure stream CHAT_", "bus.replicas is 3", "not part of a JetStream cluster", "set bus.replicas: 1", "replicas > 1 not supported"} {
		if !strings.Contains(msg, w) {
			t.Errorf("error %q does not mention %q", msg, w)
		}
	}

	// The same server with bus.replicas 1 works, and its streams have one
	// replica.
	cfg.Replicas = 1
	b, err = natsbus.Open(t.Context(), cfg, "", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
}

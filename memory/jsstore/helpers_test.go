package jsstore_test

import (
	"fmt"
	"net/url"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"go.uber.org/goleak"

	"github.com/switchboard-chat/switchboard/memory/jsstore"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// startServer starts a JetStream server on a random loopback port storing
// under dir. Stop it with stopServer (cleanup does it too).
func startServer(t testing.TB, dir string) *server.Server {
	t.Helper()
	s, err := server.NewServer(&server.Options{
		ServerName: "jsstore-test",
		Host:       "127.0.0.1",
		Port:       server.RANDOM_PORT,
		JetStream:  true,
		StoreDir:   dir,
		NoSigs:     true,
		NoLog:      true,
	})
	if err != nil {
		t.Fatalf("new server: %v", err)
	}
	s.Start()
	t.Cleanup(func() { stopServer(s) })
	if !s.ReadyForConnections(10 * time.Second) {
		t.Fatal("server not ready for connections")
	}
	return s
}

func stopServer(s *server.Server) {
	s.Shutdown()
	s.WaitForShutdown()
}

// connect connects to url; cleanup closes the connection.
func connect(t testing.TB, url string, opts ...nats.Option) *nats.Conn {
	t.Helper()
	nc, err := nats.Connect(url, append([]nats.Option{nats.Name("jsstore-test")}, opts...)...)
	if err != nil {
		t.Fatalf("connect %s: %v", url, err)
	}
	t.Cleanup(nc.Close)
	return nc
}

// openStore opens a store over nc; cleanup closes it.
func openStore(t testing.TB, nc *nats.Conn, opts jsstore.Options) *jsstore.Store {
	t.Helper()
	st, err := jsstore.Open(t.Context(), nc, opts)
	if err != nil {
		t.Fatalf("jsstore.Open: %v", err)
	}
	t.Cleanup(func() { _ = st.Close() })
	return st
}

var prefixes atomic.Int64

// freshPrefix returns a prefix no other store of the test binary uses.
func freshPrefix() string { return fmt.Sprintf("t%d", prefixes.Add(1)) }

// startCluster starts n JetStream servers on loopback with routes between
// them (random ports: the first is the seed the others route to) and
// waits until JetStream has a meta leader.
func startCluster(t *testing.T, n int) []*server.Server {
	t.Helper()
	var (
		servers []*server.Server
		seed    *url.URL
	)
	for i := range n {
		opts := &server.Options{
			ServerName: fmt.Sprintf("n%d", i+1),
			Host:       "127.0.0.1",
			Port:       server.RANDOM_PORT,
			JetStream:  true,
			StoreDir:   t.TempDir(),
			NoSigs:     true,
			NoLog:      true,
			Cluster: server.ClusterOpts{
				Name: "jsstore",
				Host: "127.0.0.1",
				Port: server.RANDOM_PORT,
			},
		}
		if seed != nil {
			opts.Routes = []*url.URL{seed}
		}
		s, err := server.NewServer(opts)
		if err != nil {
			t.Fatalf("new server %d: %v", i+1, err)
		}
		s.Start()
		t.Cleanup(func() { stopServer(s) })
		if !s.ReadyForConnections(10 * time.Second) {
			t.Fatalf("server %d not ready", i+1)
		}
		if seed == nil {
			addr := s.ClusterAddr()
			seed = &url.URL{Scheme: "nats", Host: addr.String()}
		}
		servers = append(servers, s)
	}
	waitFor(t, 20*time.Second, "a JetStream meta leader and all peers", func() bool {
		for _, s := range servers {
			if s.NumRoutes() < n-1 {
				return false
			}
		}
		for _, s := range servers {
			if s.JetStreamIsLeader() {
				return len(s.JetStreamClusterPeers()) == n
			}
		}
		return false
	})
	return servers
}

// waitFor polls cond until it holds or the deadline passes.
func waitFor(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
		<-tick.C
	}
}

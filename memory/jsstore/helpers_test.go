package jsstore_test

import (
	"fmt"
	"net"
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
// all of them and waits until JetStream has a meta leader that knows every
// peer. Route ports are picked free just before (JetStream clustering needs
// configured routes, so the OS cannot pick them at listen time).
func startCluster(t testing.TB, n int) []*server.Server {
	t.Helper()
	var servers []*server.Server
	// A port picked free may be taken by another process before the
	// server binds it (other tests start servers too): start again on
	// fresh ports then.
	for attempt := 1; ; attempt++ {
		var err error
		if servers, err = startClusterOnce(t, n); err == nil {
			break
		} else if attempt == 3 {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		for _, s := range servers {
			stopServer(s)
		}
	})
	waitFor(t, 30*time.Second, "a JetStream meta leader that knows all peers", func() bool {
		for _, s := range servers {
			if s.JetStreamIsLeader() {
				return len(s.JetStreamClusterPeers()) == n
			}
		}
		return false
	})
	return servers
}

// startClusterOnce starts n routed servers on fresh ports; on an error
// it stops what it started.
func startClusterOnce(t testing.TB, n int) ([]*server.Server, error) {
	ports := freePorts(t, n)
	var routes []*url.URL
	for _, p := range ports {
		routes = append(routes, &url.URL{Scheme: "nats", Host: fmt.Sprintf("127.0.0.1:%d", p)})
	}
	var servers []*server.Server
	stopAll := func() {
		for _, s := range servers {
			stopServer(s)
		}
	}
	for i := range n {
		s, err := server.NewServer(&server.Options{
			ServerName: fmt.Sprintf("n%d", i+1),
			Host:       "127.0.0.1",
			Port:       server.RANDOM_PORT,
			JetStream:  true,
			StoreDir:   t.TempDir(),
			NoSigs:     true,
			NoLog:      true,
			Cluster:    server.ClusterOpts{Name: "jsstore", Host: "127.0.0.1", Port: ports[i]},
			Routes:     routes,
		})
		if err != nil {
			stopAll()
			return nil, fmt.Errorf("new server %d: %w", i+1, err)
		}
		s.Start()
		servers = append(servers, s)
	}
	for i, s := range servers {
		if !s.ReadyForConnections(20 * time.Second) {
			stopAll()
			return nil, fmt.Errorf("server %d not ready", i+1)
		}
	}
	return servers, nil
}

// freePorts returns n loopback ports that were free a moment ago.
func freePorts(t testing.TB, n int) []int {
	t.Helper()
	var (
		ports []int
		ls    []net.Listener
	)
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	for _, l := range ls {
		_ = l.Close()
	}
	return ports
}

// waitFor polls cond until it holds or the deadline passes.
func waitFor(t testing.TB, timeout time.Duration, what string, cond func() bool) {
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

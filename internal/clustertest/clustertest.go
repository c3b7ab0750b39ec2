// Package clustertest runs, for tests, a real NATS cluster on loopback:
// nats-server processes built from the nats-server module the daemon
// depends on (the same version), JetStream on, routes between every node,
// random ports, a store directory per node under t.TempDir(). Each node
// can be stopped (SIGTERM), killed (SIGKILL) and started again on the
// same ports and store directory, as an operator restarts a server.
//
// Clients authenticate as an operator would configure production: one
// user and password for the daemons and the test's own clients (the same
// on every node, in every daemon's bus.url), and route credentials
// between the nodes. [Cluster.URL] is the comma-separated URL list with
// the credentials, for bus.url.
//
// [Start] returns once every node accepts clients and JetStream has a
// meta leader; [Cluster.WaitMetaLeader] waits for one again after nodes
// were stopped or restarted.
package clustertest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/switchboard-chat/switchboard/internal/syncbuf"
)

// Wait bounds every wait of this package (a node coming up, a meta
// leader being elected, a node going down).
const Wait = 30 * time.Second

// User is the client user every node accepts (with [Cluster.Password]).
const User = "switchboard"

var binary struct {
	once sync.Once
	path string
	err  error
}

// ServerBinary builds nats-server from the module cache (the version in
// go.mod) once per test binary and returns its path. The build is plain
// (no -race): the server is not under test.
func ServerBinary(t testing.TB) string {
	t.Helper()
	binary.once.Do(func() {
		dir, err := os.MkdirTemp("", "switchboard-nats-server-")
		if err != nil {
			binary.err = err
			return
		}
		binary.path = filepath.Join(dir, "nats-server")
		out, err := exec.Command("go", "build", "-o", binary.path, "github.com/nats-io/nats-server/v2").CombinedOutput()
		if err != nil {
			binary.err = fmt.Errorf("go build nats-server: %w\n%s", err, out)
		}
	})
	if binary.err != nil {
		t.Fatal(binary.err)
	}
	return binary.path
}

// Cluster is a running NATS cluster of len(Nodes) servers.
type Cluster struct {
	Name     string
	Password string // of [User]
	Nodes    []*Node
}

// Node is one server of a Cluster, on fixed loopback ports.
type Node struct {
	Name        string
	ClientAddr  string // host:port for clients
	ClusterAddr string // host:port for routes
	StoreDir    string // JetStream store directory, kept across restarts

	bin, confPath, password string
	logs                    *syncbuf.Buffer

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{}
}

// Start runs n nodes (n >= 1; 3 for a replicated cluster) and waits until
// every node accepts clients and JetStream has a meta leader. The nodes
// are killed when the test ends; with a failed test their logs are
// printed.
func Start(t testing.TB, n int) *Cluster {
	t.Helper()
	if n < 1 {
		t.Fatalf("clustertest.Start: %d nodes", n)
	}
	bin := ServerBinary(t)
	c := &Cluster{Name: "sb-" + secret(t)[:8], Password: secret(t)}
	routePass := secret(t)
	for i := range n {
		c.Nodes = append(c.Nodes, &Node{Name: fmt.Sprintf("n%d", i+1), ClientAddr: freePort(t), ClusterAddr: freePort(t),
			StoreDir: t.TempDir(), bin: bin, password: c.Password, logs: &syncbuf.Buffer{}})
	}
	dir := t.TempDir()
	for _, nd := range c.Nodes {
		var routes []string
		for _, other := range c.Nodes {
			if other != nd {
				routes = append(routes, fmt.Sprintf("%q", "nats-route://route:"+routePass+"@"+other.ClusterAddr))
			}
		}
		nd.confPath = filepath.Join(dir, nd.Name+".conf")
		conf := fmt.Sprintf(`server_name: %q
listen: %q
jetstream {
  store_dir: %q
  max_memory_store: 256MB
  max_file_store: 2GB
}
cluster {
  name: %q
  listen: %q
  authorization { user: route, password: %q }
  routes: [%s]
}
authorization {
  users: [ { user: %q, password: %q } ]
}
`, nd.Name, nd.ClientAddr, nd.StoreDir, c.Name, nd.ClusterAddr, routePass, strings.Join(routes, ", "), User, c.Password)
		if err := os.WriteFile(nd.confPath, []byte(conf), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		for _, nd := range c.Nodes {
			nd.Kill(t)
			if t.Failed() && testing.Verbose() {
				t.Logf("nats-server %s log (the last 80 lines):\n%s", nd.Name, lastLines(nd.logs.String(), 80))
			}
		}
	})
	// Start all before waiting: a node alone cannot elect a meta leader.
	for _, nd := range c.Nodes {
		nd.spawn(t)
	}
	for _, nd := range c.Nodes {
		nd.waitClients(t)
	}
	c.WaitMetaLeader(t)
	return c
}

// URL is the comma-separated list of every node's client URL with the
// client credentials, as bus.url takes it.
func (c *Cluster) URL() string {
	urls := make([]string, len(c.Nodes))
	for i, nd := range c.Nodes {
		urls[i] = nd.URL()
	}
	return strings.Join(urls, ",")
}

// Connect connects a client to the cluster (any node, reconnecting to
// the others) as [User].
func (c *Cluster) Connect(t testing.TB, opts ...nats.Option) *nats.Conn {
	t.Helper()
	nc, err := nats.Connect(c.URL(), append([]nats.Option{nats.Timeout(2 * time.Second)}, opts...)...)
	if err != nil {
		t.Fatalf("connect to the cluster: %v", err)
	}
	t.Cleanup(nc.Close)
	return nc
}

// WaitMetaLeader waits until every running node answers JetStream
// requests (which needs a meta leader: a quorum of the nodes up) and the
// meta leader can place a stream with a replica on every running node (a
// node that just joined is not a placement peer at once; a stream with
// bus.replicas 3 created before would fail with "no suitable peers").
func (c *Cluster) WaitMetaLeader(t testing.TB) {
	t.Helper()
	var running []*Node
	for _, nd := range c.Nodes {
		if nd.Running() {
			nd.waitJetStream(t)
			running = append(running, nd)
		}
	}
	if len(running) == 0 {
		return
	}
	nd := running[0]
	nd.until(t, fmt.Sprintf("place a stream on the %d running nodes", len(running)), func() error {
		nc, err := nats.Connect(nd.URL(), nats.Timeout(time.Second), nats.NoReconnect())
		if err != nil {
			return err
		}
		defer nc.Close()
		js, err := jetstream.New(nc)
		if err != nil {
			return err
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		const probe = "CLUSTERTEST_PROBE"
		if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: probe, Subjects: []string{"clustertest.probe"},
			Replicas: len(running), Storage: jetstream.MemoryStorage}); err != nil && !errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
			return err
		}
		return js.DeleteStream(ctx, probe)
	})
}

// StopAll stops every running node (SIGTERM).
func (c *Cluster) StopAll(t testing.TB) {
	t.Helper()
	for _, nd := range c.Nodes {
		nd.Stop(t)
	}
}

// RestartAll starts every node that is not running, all together (a node
// alone has no quorum), and waits until they accept clients and JetStream
// has a meta leader.
func (c *Cluster) RestartAll(t testing.TB) {
	t.Helper()
	var started []*Node
	for _, nd := range c.Nodes {
		if !nd.Running() {
			nd.spawn(t)
			started = append(started, nd)
		}
	}
	for _, nd := range started {
		nd.waitClients(t)
	}
	c.WaitMetaLeader(t)
}

// URL is this node's client URL with the client credentials.
func (nd *Node) URL() string { return "nats://" + User + ":" + nd.password + "@" + nd.ClientAddr }

// Connect connects a client to this node only (no reconnect to the
// others) as [User].
func (nd *Node) Connect(t testing.TB, opts ...nats.Option) *nats.Conn {
	t.Helper()
	nc, err := nats.Connect(nd.URL(), append([]nats.Option{nats.Timeout(2 * time.Second)}, opts...)...)
	if err != nil {
		t.Fatalf("connect to %s: %v", nd.Name, err)
	}
	t.Cleanup(nc.Close)
	return nc
}

// Running reports whether the node's process runs.
func (nd *Node) Running() bool {
	nd.mu.Lock()
	defer nd.mu.Unlock()
	return nd.cmd != nil
}

// Logs returns what the node's processes printed so far.
func (nd *Node) Logs() string { return nd.logs.String() }

// Restart starts a stopped or killed node again on the same ports and
// store directory and waits until it accepts clients. Call
// [Cluster.WaitMetaLeader] to wait for JetStream too.
func (nd *Node) Restart(t testing.TB) {
	t.Helper()
	if nd.Running() {
		t.Fatalf("clustertest: %s is running", nd.Name)
	}
	nd.spawn(t)
	nd.waitClients(t)
}

// Stop ends the node with SIGTERM (the server's orderly shutdown) and
// waits for it; a node not running is left alone.
func (nd *Node) Stop(t testing.TB) { t.Helper(); nd.signal(t, syscall.SIGTERM) }

// Kill ends the node with SIGKILL and waits for it; a node not running
// is left alone.
func (nd *Node) Kill(t testing.TB) { t.Helper(); nd.signal(t, syscall.SIGKILL) }

func (nd *Node) signal(t testing.TB, sig syscall.Signal) {
	t.Helper()
	nd.mu.Lock()
	cmd, done := nd.cmd, nd.done
	nd.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Signal(sig)
	select {
	case <-done:
	case <-time.After(Wait):
		_ = cmd.Process.Kill()
		<-done
		t.Errorf("nats-server %s did not stop on %v", nd.Name, sig)
	}
	nd.mu.Lock()
	nd.cmd = nil
	nd.mu.Unlock()
}

func (nd *Node) spawn(t testing.TB) {
	t.Helper()
	cmd := exec.Command(nd.bin, "-c", nd.confPath)
	cmd.Stdout, cmd.Stderr = nd.logs, nd.logs
	if err := cmd.Start(); err != nil {
		t.Fatalf("start nats-server %s: %v", nd.Name, err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	nd.mu.Lock()
	nd.cmd, nd.done = cmd, done
	nd.mu.Unlock()
}

// waitClients waits until the node accepts an authenticated client.
func (nd *Node) waitClients(t testing.TB) {
	t.Helper()
	nd.until(t, "accept clients", func() error {
		nc, err := nats.Connect(nd.URL(), nats.Timeout(time.Second), nats.NoReconnect())
		if err == nil {
			nc.Close()
		}
		return err
	})
}

// waitJetStream waits until the node answers a JetStream account request.
func (nd *Node) waitJetStream(t testing.TB) {
	t.Helper()
	nd.until(t, "answer JetStream requests (meta leader)", func() error {
		nc, err := nats.Connect(nd.URL(), nats.Timeout(time.Second), nats.NoReconnect())
		if err != nil {
			return err
		}
		defer nc.Close()
		js, err := jetstream.New(nc)
		if err != nil {
			return err
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_, err = js.AccountInfo(ctx)
		return err
	})
}

// until retries try every 50 ms until it succeeds; it fails t after
// [Wait] or when the node's process exits.
func (nd *Node) until(t testing.TB, what string, try func() error) {
	t.Helper()
	nd.mu.Lock()
	done := nd.done
	nd.mu.Unlock()
	deadline := time.Now().Add(Wait)
	for {
		err := try()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("nats-server %s did not %s within %s: %v\n%s", nd.Name, what, Wait, err, lastLines(nd.logs.String(), 40))
		}
		select {
		case <-done:
			t.Fatalf("nats-server %s exited while waiting to %s:\n%s", nd.Name, what, lastLines(nd.logs.String(), 40))
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// freePort returns a loopback address whose port was free a moment ago.
func freePort(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

func secret(t testing.TB) string {
	t.Helper()
	b := make([]byte, 16)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}

// lastLines returns the last n lines of s.
func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

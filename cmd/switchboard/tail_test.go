package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/switchboard-chat/switchboard/bus"
	"github.com/switchboard-chat/switchboard/bus/bustest"
	"github.com/switchboard-chat/switchboard/llm/llmtest"
)

// watchedBuffer is an io.Writer safe for concurrent use that lets a test
// wait for text to appear.
type watchedBuffer struct {
	mu      sync.Mutex
	b       bytes.Buffer
	changed chan struct{}
}

func newWatchedBuffer() *watchedBuffer { return &watchedBuffer{changed: make(chan struct{}, 1)} }

func (w *watchedBuffer) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	n, err := w.b.Write(p)
	select {
	case w.changed <- struct{}{}:
	default:
	}
	return n, err
}

func (w *watchedBuffer) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.String()
}

// waitLine waits until a line containing every part has been written and
// returns it.
func (w *watchedBuffer) waitLine(t *testing.T, parts ...string) string {
	t.Helper()
	deadline := time.NewTimer(wait)
	defer deadline.Stop()
	for {
		for _, l := range strings.Split(w.String(), "\n") {
			ok := true
			for _, p := range parts {
				ok = ok && strings.Contains(l, p)
			}
			if ok {
				return l
			}
		}
		select {
		case <-w.changed:
		case <-deadline.C:
			t.Fatalf("no line with %q within %s; output:\n%s", parts, wait, w.String())
			return ""
		}
	}
}

// tailRun runs `switchboard bus tail` with args until the test ends.
type tailRun struct {
	out    *watchedBuffer
	stderr *watchedBuffer
	cancel context.CancelFunc
	done   chan error
}

func startTail(t *testing.T, args ...string) *tailRun {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	r := &tailRun{out: newWatchedBuffer(), stderr: newWatchedBuffer(), cancel: cancel, done: make(chan error, 1)}
	go func() { r.done <- runBus(ctx, append([]string{"tail"}, args...), r.out, r.stderr) }()
	t.Cleanup(func() { r.stop(t) })
	r.out.waitLine(t, "Tailing ")
	return r
}

// stop ends the tail and returns its result (nil after the first call).
func (r *tailRun) stop(t *testing.T) error {
	t.Helper()
	r.cancel()
	select {
	case err, ok := <-r.done:
		if ok {
			close(r.done)
		}
		return err
	case <-time.After(wait):
		t.Fatal("bus tail did not stop")
		return nil
	}
}

// writeBusConfig writes a config file whose bus section reaches a running
// daemon at clientURL, whose data_dir is dataDir (where the daemon keeps the
// operator credential), with extra YAML lines under bus.
func writeBusConfig(t *testing.T, dataDir, clientURL string, extra ...string) string {
	t.Helper()
	body := fmt.Sprintf("data_dir: %q\nbus:\n  listen: %q\n", dataDir, strings.TrimPrefix(clientURL, "nats://"))
	for _, e := range extra {
		body += "  " + e + "\n"
	}
	path := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestBusTailShowsTraffic(t *testing.T) {
	model := llmtest.NewServer(t)
	model.Enqueue(llmtest.TextReply("Hello, Ann!\nHow can I help?"))
	d := startDaemon(t, testConfig(t, model.URL()))
	tr := startTail(t, "--config", writeBusConfig(t, d.cfg.DataDir, d.s.Bus.ClientURL()))
	if !strings.Contains(tr.out.String(), "Tailing all channels on nats://127.0.0.1:") {
		t.Fatalf("banner: %s", tr.out.String())
	}

	out := d.collectOut(t, "c1")
	d.send(t, "c1", "m1", "hi there")
	out.WaitOutbound(t, wait, finalFor("m1"))
	tr.out.waitLine(t, " IN    console/c1", `#m1 Ann: "hi there"`)
	tr.out.waitLine(t, " OUT   console/c1", "typing", "↩m1 seq 1")
	tr.out.waitLine(t, " OUT   console/c1", "reply", "↩m1", "final", `"Hello, Ann!↵How can I help?"`)
	tr.out.waitLine(t, " EVENT console/c1", "turn_start ↩m1")

	if err := d.nc.Publish(d.subjects().In("console", "c1"), []byte(`{"v":2,"id":"bad"}`)); err != nil {
		t.Fatal(err)
	}
	tr.out.waitLine(t, " IN    chat.in.console.c1", `#bad : ""  INVALID: bus: field "v": must be 1, got 2`)
	tr.out.waitLine(t, " DLQ   console", `bus: field "v": must be 1, got 2: invalid envelope (chat.in.console.c1, 18 bytes)`)
	if err := tr.stop(t); err != nil {
		t.Fatalf("bus tail returned %v after cancel, want nil", err)
	}
}

func TestBusTailOneChannelWithAdminCredentials(t *testing.T) {
	model := llmtest.NewServer(t, llmtest.WithResponder(llmtest.EchoResponder))
	d := startAuthDaemon(t, bridgeConfig(t, model.URL()))
	url := d.bus.ClientURL()

	// With a wrong operator token the tail cannot connect.
	wrong := writeBusConfig(t, t.TempDir(), url, "admin: {token: not-the-admin-token}")
	var stderr bytes.Buffer
	err := runBus(t.Context(), []string{"tail", "--config", wrong}, &bytes.Buffer{}, &stderr)
	if err == nil || !strings.Contains(err.Error(), "Authorization Violation") || strings.Contains(err.Error(), "not-the-admin-token") {
		t.Fatalf("tail with a wrong admin token = %v, want an authorization error", err)
	}

	tr := startTail(t, "--channel", "wechat", "--config", writeBusConfig(t, d.cfg.DataDir, url, "admin: {token: "+testAdminToken+"}"))
	if !strings.Contains(tr.out.String(), "Tailing channel wechat") {
		t.Fatalf("banner: %s", tr.out.String())
	}
	nc, _ := d.connectBridge(t, "wechat", nats.Token(testWechatToken))
	line, _ := d.connectBridge(t, "line", nats.UserInfo("line", testLinePass))
	bustest.PublishInbound(t, line, d.bus.Subjects(), bus.Inbound{V: 1, ID: "l1", Channel: "line", ChatID: "g", UserID: "u", Text: "not shown"})
	bustest.PublishInbound(t, nc, d.bus.Subjects(), bus.Inbound{V: 1, ID: "w1", Channel: "wechat", ChatID: "room@x", UserID: "wxid_a",
		Text: "shown", IsGroup: true, Mentioned: true, Attachments: []bus.Attachment{{Kind: bus.AttachImage, URL: "https://x/1.png", MIME: "image/png"}}})
	tr.out.waitLine(t, " IN    wechat/room@x", `#w1 wxid_a: "shown"  +1 image  group mentioned`)
	tr.out.waitLine(t, " OUT   wechat/room@x", "reply", "↩w1", "final", `"echo: `, "shown")
	if strings.Contains(tr.out.String(), "line/") {
		t.Fatalf("--channel wechat shows line traffic:\n%s", tr.out.String())
	}
}

func TestBusTailUsageErrors(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{nil, "want a subcommand"},
		{[]string{"follow"}, `unknown subcommand "follow"`},
		{[]string{"tail", "--channel", "No.Such"}, "--channel: must match"},
		{[]string{"tail", "extra"}, `unexpected argument "extra"`},
	} {
		var stdout, stderr bytes.Buffer
		err := runBus(t.Context(), tc.args, &stdout, &stderr)
		if !errors.Is(err, errUsage) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("bus %q = %v, want a usage error with %q", tc.args, err, tc.want)
		}
	}
	var stdout, stderr bytes.Buffer
	if code := run(t.Context(), []string{"bus", "tail", "--channel", "x y"}, nil, &stdout, &stderr); code != 2 {
		t.Errorf("exit code %d, want 2 (stderr %q)", code, stderr.String())
	}
	// A config whose bus is in-process only cannot be tailed from outside.
	path := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(path, []byte("bus:\n  listen: \"\"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := runBus(t.Context(), []string{"tail", "--config", path}, &stdout, &stderr); err == nil || !strings.Contains(err.Error(), "in-process only") {
		t.Errorf("tail of an in-process bus = %v", err)
	}
}

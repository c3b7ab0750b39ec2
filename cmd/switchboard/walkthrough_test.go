package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/switchboard-chat/switchboard/bus"
	"github.com/switchboard-chat/switchboard/bus/bustest"
	"github.com/switchboard-chat/switchboard/bus/natsbus"
	"github.com/switchboard-chat/switchboard/llm/llmtest"
)

const protocolDoc = "../../docs/bus-protocol.md"

// docSection returns the text of the section of the document whose heading
// line starts with heading, up to the next heading of the same or a higher
// level.
func docSection(t *testing.T, doc, heading string) string {
	t.Helper()
	level := strings.IndexByte(heading, ' ')
	lines := strings.Split(doc, "\n")
	start, fenced := -1, false
	for i, l := range lines {
		if strings.HasPrefix(l, "```") {
			fenced = !fenced
		}
		if fenced {
			continue
		}
		if start < 0 {
			if strings.HasPrefix(l, heading) {
				start = i
			}
			continue
		}
		if n := strings.IndexByte(l, ' '); n > 0 && n <= level && strings.Trim(l[:n], "#") == "" {
			return strings.Join(lines[start:i], "\n")
		}
	}
	if start < 0 {
		t.Fatalf("%s has no section %q", protocolDoc, heading)
	}
	return strings.Join(lines[start:], "\n")
}

// shBlocks returns the contents of the ```sh code blocks of text, in order.
func shBlocks(text string) []string {
	var blocks []string
	var cur []string
	in := false
	for _, l := range strings.Split(text, "\n") {
		switch {
		case !in && strings.TrimSpace(l) == "```sh":
			in, cur = true, nil
		case in && strings.TrimSpace(l) == "```":
			in = false
			blocks = append(blocks, strings.Join(cur, "\n"))
		case in:
			cur = append(cur, l)
		}
	}
	return blocks
}

// natsCLI runs documented commands with the nats CLI against one server.
type natsCLI struct {
	t   *testing.T
	env []string
	dir string // working directory of the commands; "" is the test's
}

// newNatsCLI runs the commands with a fresh home folder (so no nats context
// of the person running the test applies) and, when url is not empty, with
// NATS_URL set to it.
func newNatsCLI(t *testing.T, url string, extraEnv ...string) *natsCLI {
	t.Helper()
	home := t.TempDir()
	env := append(os.Environ(), "HOME="+home, "XDG_CONFIG_HOME="+filepath.Join(home, ".config"))
	if url != "" {
		env = append(env, "NATS_URL="+url)
	}
	return &natsCLI{t: t, env: append(env, extraEnv...)}
}

// run runs a command to completion and returns its output.
func (c *natsCLI) run(block string) (string, error) {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(c.t.Context(), wait)
	defer cancel()
	cmd := exec.CommandContext(ctx, "sh", "-c", block)
	cmd.Env, cmd.Dir = c.env, c.dir
	out, err := cmd.CombinedOutput()
	return string(out), err
}

func (c *natsCLI) mustRun(block string) string {
	c.t.Helper()
	out, err := c.run(block)
	if err != nil {
		c.t.Fatalf("%s\nfailed: %v\n%s", block, err, out)
	}
	return out
}

// start runs a long-running command (nats sub) until the test ends and
// waits for it to say it is subscribed.
func (c *natsCLI) start(block string) *watchedBuffer {
	c.t.Helper()
	ctx, cancel := context.WithCancel(c.t.Context())
	out := newWatchedBuffer()
	cmd := exec.CommandContext(ctx, "sh", "-c", "exec "+block)
	cmd.Env, cmd.Dir, cmd.Stdout, cmd.Stderr = c.env, c.dir, out, out
	if err := cmd.Start(); err != nil {
		c.t.Fatal(err)
	}
	c.t.Cleanup(func() {
		cancel()
		_ = cmd.Wait()
	})
	out.waitLine(c.t, "Subscribing on")
	return out
}

// jsonLines decodes the lines of a nats CLI output that are JSON objects.
func jsonLines[T any](out string) []T {
	var vs []T
	for _, l := range strings.Split(out, "\n") {
		var v T
		if strings.HasPrefix(l, "{") && json.Unmarshal([]byte(l), &v) == nil {
			vs = append(vs, v)
		}
	}
	return vs
}

// waitOutbound waits until out shows an outbound envelope matching pred.
func waitOutbound(t *testing.T, out *watchedBuffer, what string, pred func(bus.Outbound) bool) {
	t.Helper()
	deadline := time.NewTimer(wait)
	defer deadline.Stop()
	for {
		for _, o := range jsonLines[bus.Outbound](out.String()) {
			if pred(o) {
				return
			}
		}
		select {
		case <-out.changed:
		case <-deadline.C:
			t.Fatalf("no %s within %s; output:\n%s", what, wait, out.String())
		}
	}
}

func requireNatsCLI(t *testing.T) {
	t.Helper()
	if _, err := exec.LookPath("nats"); err != nil {
		t.Skip("the nats CLI is not on PATH, so the documented walkthrough cannot run; install it with `go install github.com/nats-io/natscli/nats@v0.5.0`")
	}
}

// TestDocWalkthroughOperator runs the commands of docs/bus-protocol.md
// §15.1 and §8 against an in-process daemon without bridges: the real
// `switchboard bus context` turns the daemon's generated operator
// credential into a nats CLI context, and the real nats CLI uses it (it
// gets no URL or credential from anywhere else).
func TestDocWalkthroughOperator(t *testing.T) {
	requireNatsCLI(t)
	data, err := os.ReadFile(protocolDoc)
	if err != nil {
		t.Fatal(err)
	}
	doc := string(data)
	blocks := shBlocks(docSection(t, doc, "### 15.1"))
	wantPrefixes := []string{"switchboard bus context\nnats context select switchboard", "nats sub 'chat.out.console.>'", "nats pub chat.in.console.demo -H 'Nats-Msg-Id:console:m1'",
		"nats pub chat.in.console.demo -H 'Nats-Msg-Id:console:m2'", "nats sub 'chat.dlq.>'", `nats pub chat.in.console.demo '{"v":2`}
	if len(blocks) != len(wantPrefixes) {
		t.Fatalf("§15.1 has %d sh blocks, the test knows %d:\n%q", len(blocks), len(wantPrefixes), blocks)
	}
	for i, p := range wantPrefixes {
		if !strings.HasPrefix(blocks[i], p) {
			t.Fatalf("§15.1 block %d = %q, want it to start with %q", i, blocks[i], p)
		}
	}

	model := llmtest.NewServer(t, llmtest.WithResponder(llmtest.EchoResponder))
	cfg := testConfig(t, model.URL())
	cfg.Bus.Listen = freePort(t) // a fixed port, as in the default configuration
	d := startDaemon(t, cfg)
	if anon, err := nats.Connect(d.s.Bus.ClientURL()); err == nil {
		anon.Close()
		t.Fatal("the daemon's listener accepts anonymous clients")
	}
	// The documented commands run from the folder of config.yaml, with the
	// switchboard binary on PATH.
	cli := newNatsCLI(t, "", "PATH="+filepath.Dir(buildBinary(t))+string(os.PathListSeparator)+os.Getenv("PATH"))
	cli.dir = t.TempDir()
	body := fmt.Sprintf("data_dir: %q\nbus:\n  listen: %q\n", cfg.DataDir, cfg.Bus.Listen)
	if err := os.WriteFile(filepath.Join(cli.dir, "config.yaml"), []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	if out := cli.mustRun(blocks[0]); !strings.Contains(out, `Wrote the nats CLI context "switchboard"`) {
		t.Fatalf("bus context output:\n%s", out)
	}
	// Without the context the CLI is refused: the walkthrough depends on it.
	if out, err := cli.run("nats --no-context -s " + d.s.Bus.ClientURL() + " pub chat.in.console.x '{}'"); err == nil || !strings.Contains(out, "Authorization Violation") {
		t.Fatalf("the nats CLI published without credentials:\n%s", out)
	}
	blocks = blocks[1:]

	outs := cli.start(blocks[0])
	cli.mustRun(blocks[1])
	waitOutbound(t, outs, "final reply to m1", func(o bus.Outbound) bool { return o.InReplyTo == "m1" && o.Final && o.Kind == bus.KindReply })
	outs.waitLine(t, "Nats-Msg-Id: ") // the final carries its header
	cli.mustRun(blocks[1])            // the same message again: no second answer
	cli.mustRun(blocks[2])
	waitOutbound(t, outs, "notice answering /help", func(o bus.Outbound) bool { return o.InReplyTo == "m2" && o.Final && o.Kind == bus.KindNotice })
	finals := 0
	for _, o := range jsonLines[bus.Outbound](outs.String()) {
		if o.InReplyTo == "m1" && o.Final {
			finals++
		}
	}
	if finals != 1 {
		t.Fatalf("%d finals for m1, want 1:\n%s", finals, outs.String())
	}

	dlq := cli.start(blocks[3])
	cli.mustRun(blocks[4])
	dlq.waitLine(t, `Received on "chat.dlq.console"`)
	dlq.waitLine(t, `"reason":"bus: field \"v\": must be 1, got 2: invalid envelope"`)

	// §8: the documented consumer has the daemon's own settings.
	add := shBlocks(docSection(t, doc, "## 8."))
	if len(add) != 1 || !strings.HasPrefix(add[0], "nats consumer add CHAT_OUT bridge_wechat") {
		t.Fatalf("§8 sh blocks = %q", add)
	}
	cli.mustRun(add[0])
	cons, err := d.s.Bus.JetStream().Consumer(t.Context(), "CHAT_OUT", "bridge_wechat")
	if err != nil {
		t.Fatal(err)
	}
	got, want := cons.CachedInfo().Config, natsbus.BridgeConsumerConfig("chat", "wechat", []string{"wechat"})
	if got.FilterSubject != want.FilterSubject || got.DeliverPolicy != want.DeliverPolicy || got.AckPolicy != want.AckPolicy ||
		got.AckWait != want.AckWait || got.MaxAckPending != want.MaxAckPending || got.MaxDeliver != want.MaxDeliver ||
		got.DeliverSubject != "" {
		t.Fatalf("consumer from §8 = %+v\nwant the settings of %+v", got, want)
	}
}

// TestDocWalkthroughIsolation runs §15.2 as the bridge wechat against a
// daemon that declares it.
func TestDocWalkthroughIsolation(t *testing.T) {
	requireNatsCLI(t)
	data, err := os.ReadFile(protocolDoc)
	if err != nil {
		t.Fatal(err)
	}
	blocks := shBlocks(docSection(t, string(data), "### 15.2"))
	if len(blocks) != 3 || !strings.Contains(blocks[0], " pub chat.in.wechat.demo") ||
		!strings.Contains(blocks[1], "consumer next CHAT_OUT bridge_wechat") || !strings.Contains(blocks[2], "sub 'chat.out.telegram.>'") {
		t.Fatalf("§15.2 sh blocks changed; update the test:\n%q", blocks)
	}
	model := llmtest.NewServer(t, llmtest.WithResponder(llmtest.EchoResponder))
	cfg := bridgeConfig(t, model.URL())
	// The doc shows typing, then the final: a reply slow enough on a busy
	// machine to stream a delta first would make "--count 2" stop short.
	cfg.Agent.DeltaInterval = time.Minute
	d := startAuthDaemon(t, cfg)
	cli := newNatsCLI(t, d.bus.ClientURL(), "WECHAT_BRIDGE_TOKEN="+testWechatToken)
	seen := bustest.Collect(t, d.admin, "chat.out.wechat.>")

	cli.mustRun(blocks[0])
	seen.WaitOutbound(t, wait, func(o bus.Outbound) bool { return o.InReplyTo == "w1" && o.Final })
	out := cli.mustRun(blocks[1])
	var final bool
	for _, o := range jsonLines[bus.Outbound](out) {
		final = final || (o.InReplyTo == "w1" && o.Final && strings.Contains(o.Text, "hello"))
	}
	if !final || strings.Count(out, "Acknowledged message") != 2 {
		t.Fatalf("consumer next did not show and acknowledge the final answer:\n%s", out)
	}
	cons, err := d.bus.JetStream().Consumer(t.Context(), "CHAT_OUT", "bridge_wechat")
	if err != nil {
		t.Fatal(err)
	}
	if n := cons.CachedInfo().NumAckPending; n != 0 {
		t.Errorf("%d messages left unacknowledged", n)
	}

	out, err = cli.run(blocks[2])
	if err == nil || !strings.Contains(out, `Permissions Violation for Subscription to "chat.out.telegram.>"`) {
		t.Fatalf("subscribing to telegram's replies: err %v, output:\n%s", err, out)
	}
}

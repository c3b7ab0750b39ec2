package main

import (
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/switchboard-chat/switchboard/bus"
	"github.com/switchboard-chat/switchboard/bus/bustest"
	"github.com/switchboard-chat/switchboard/llm/llmtest"
)

// TestE2EHeartbeatNow (issue 20): `switchboard heartbeat now main` on a
// running daemon, through the bus as the operator: the turn runs in the
// heartbeat session with HEARTBEAT.md's instruction; what the model says
// reaches the target chat as a proactive message (in_reply_to empty), and
// HEARTBEAT_OK sends nothing; both are counted.
func TestE2EHeartbeatNow(t *testing.T) {
	var beats atomic.Int64
	model := llmtest.NewServer(t, llmtest.WithResponder(func(req *llmtest.Request) llmtest.Reply {
		if strings.Contains(req.LastUserText(), "[Heartbeat]") {
			if beats.Add(1) == 1 {
				return llmtest.TextReply("Time to water the plants.")
			}
			return llmtest.TextReply("HEARTBEAT_OK")
		}
		return llmtest.TextReply("ok")
	}))
	dir := t.TempDir()
	ws := filepath.Join(dir, "ws")
	if err := os.MkdirAll(ws, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(ws, "HEARTBEAT.md"), []byte("- remind about the plants\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	yaml := `
data_dir: "` + filepath.Join(dir, "data") + `"
bus: {listen: "127.0.0.1:0"}
admin: {listen: "127.0.0.1:0"}
llm: {base_url: "` + model.URL() + `", api_key: k, model: m, max_retries: 0}
agent: {workspace: "` + ws + `"}
agents:
  main:
    heartbeat: {to: {channel: console, chat_id: ops}}
`
	d, cfg := startDaemonYAML(t, dir, yaml)
	url := d.operatorURL(t, cfg)
	out := bustest.Collect(t, d.nc, d.subjects().Out("console", "ops"))

	code, stdout, stderr := runVerb(t, "heartbeat", "now", "main", "--config", cfg.File, "--url", url, "--wait", wait.String())
	if code != 0 || !strings.Contains(stdout, "sent to console/ops") {
		t.Fatalf("heartbeat now: exit %d\n%s%s", code, stdout, stderr)
	}
	msg := out.WaitOutbound(t, wait, func(o bus.Outbound) bool { return o.Final })
	if msg.Text != "Time to water the plants." || msg.InReplyTo != "" || msg.Kind != bus.KindReply {
		t.Fatalf("heartbeat message %+v, want the model's text as a proactive reply", msg)
	}
	// HEARTBEAT_OK: nothing is sent (the verb returns once the daemon
	// decided, after which nothing more is published for the turn).
	code, stdout, stderr = runVerb(t, "heartbeat", "--config", cfg.File, "now", "main", "--url", url)
	if code != 0 || !strings.Contains(stdout, "nothing to say") {
		t.Fatalf("heartbeat now (silent): exit %d\n%s%s", code, stdout, stderr)
	}
	if n := len(out.Outbounds()); n != 1 {
		t.Fatalf("%d messages reached the chat, want 1 (HEARTBEAT_OK sends nothing)", n)
	}
	reqs := model.Requests()
	if len(reqs) != 2 || !strings.Contains(reqs[0].LastUserText(), "HEARTBEAT.md") {
		t.Fatalf("model requests %d, first %q", len(reqs), reqs[0].LastUserText())
	}
	metrics := scrape(t, d)
	for _, m := range []string{`switchboard_heartbeats_total{agent="main",outcome="sent"}`, `switchboard_heartbeats_total{agent="main",outcome="silent"}`} {
		if metricValue(metrics, m) != 1 {
			t.Errorf("%s not 1:\n%s", m, grepLines(metrics, "heartbeats_total"))
		}
	}
}

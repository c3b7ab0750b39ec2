package main

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/switchboard-chat/switchboard/bus"
	"github.com/switchboard-chat/switchboard/bus/bridge"
	"github.com/switchboard-chat/switchboard/bus/bustest"
)

// TestE2ERefusedMessageAnswered (issue 21): a message stored in CHAT_IN
// that the runtime refuses (a client in the daemon's account, as a
// built-in adapter or a bridge on an external server publishes: no
// ingress in the way) is dead-lettered and answered on its chat with an
// error final naming the limit, instead of leaving the client waiting.
func TestE2ERefusedMessageAnswered(t *testing.T) {
	d := startDaemon(t, testConfig(t, "http://127.0.0.1:1/v1"))
	outs := bustest.Collect(t, d.nc, "chat.out.console.>")
	dlq := bustest.Collect(t, d.nc, "chat.dlq.console")
	kit, err := bridge.New(d.nc, bridge.Options{Channel: "console", MaxTextBytes: 1 << 20}) // lets 70,000 bytes out
	if err != nil {
		t.Fatal(err)
	}
	defer kit.Close()
	big := bus.Inbound{ID: "big1", ChatID: "c1", UserID: "u", Text: strings.Repeat("y", 70000)}
	if err := kit.PublishInbound(t.Context(), big); err != nil {
		t.Fatalf("publish: %v", err)
	}
	m := outs.WaitFor(t, wait, func(m *nats.Msg) bool { return strings.Contains(string(m.Data), `"in_reply_to":"big1"`) })
	var out bus.Outbound
	if err := json.Unmarshal(m.Data, &out); err != nil {
		t.Fatal(err)
	}
	if m.Subject != "chat.out.console.c1" || out.Kind != bus.KindError || !out.Final ||
		!strings.Contains(out.Text, "Received 70000 bytes of text; the limit is 65536 bytes") {
		t.Fatalf("answer on %s: %+v", m.Subject, out)
	}
	dlq.WaitFor(t, wait, func(m *nats.Msg) bool { return strings.Contains(string(m.Data), "envelope too large") })
}

// TestE2EChatShowsRefusal (issue 21): `switchboard chat` against a daemon
// whose text limit is lower than the client's sends a 5,000-byte line; the
// daemon refuses it, and the terminal shows the reason (the limit and the
// size) and ends, instead of waiting for an answer that never comes.
func TestE2EChatShowsRefusal(t *testing.T) {
	cfg := testConfig(t, "http://127.0.0.1:1/v1")
	cfg.Bus.MaxTextBytes = 1000
	d := startDaemon(t, cfg)
	url := d.operatorURL(t, cfg)
	t.Chdir(t.TempDir()) // no config.yaml: the client's own limit is the default 65536
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	var out bytes.Buffer
	code := run(ctx, []string{"chat", "--url", url, "--chat", "c9"}, strings.NewReader(strings.Repeat("z", 5000)+"\n"), &out, &out)
	if code != 0 || ctx.Err() != nil {
		t.Fatalf("chat: exit %d, ctx %v:\n%.2000s", code, ctx.Err(), out.String())
	}
	if !strings.Contains(out.String(), "[error] Your message was not accepted: it is too long. Received 5000 bytes of text; the limit is 1000 bytes") {
		t.Fatalf("chat output lacks the refusal:\n%.2000s", out.String())
	}
}

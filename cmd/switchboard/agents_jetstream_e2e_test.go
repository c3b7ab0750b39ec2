package main

import (
	"strings"
	"testing"

	"github.com/switchboard-chat/switchboard/bus"
	"github.com/switchboard-chat/switchboard/bus/bustest"
	"github.com/switchboard-chat/switchboard/llm/llmtest"
)

// TestE2EAgentsOnJetStream (issue 20): with memory.store jetstream (the
// shared buckets) two agents keep their memory apart — a note written by
// work is not found by main and is found by work in another chat — and a
// task scheduled by work fires once, answered by work.
func TestE2EAgentsOnJetStream(t *testing.T) {
	respond := func(req *llmtest.Request) llmtest.Reply {
		last := req.Body.Messages[len(req.Body.Messages)-1]
		switch text := req.LastUserText(); {
		case last.Role == "tool":
			return agentModel(req)
		case strings.Contains(text, "[Scheduled task"):
			return llmtest.TextReply("hello from the task")
		case strings.Contains(text, "remind me"):
			return llmtest.ToolCallReply("schedule", `{"action":"create","prompt":"say hello","at":"in 2s"}`)
		}
		return agentModel(req)
	}
	mainModel := llmtest.NewServer(t, llmtest.WithResponder(respond))
	workModel := llmtest.NewServer(t, llmtest.WithResponder(respond))
	d := startDaemon(t, agentsConfig(t, mainModel.URL(), workModel.URL(), "memory: {store: jetstream}\n"))
	send := func(chat, id, text string) string {
		t.Helper()
		out := bustest.Collect(t, d.nc, d.subjects().Out("console", chat))
		bustest.PublishInbound(t, d.nc, d.subjects(), bus.Inbound{V: 1, ID: id, Channel: "console", ChatID: chat, UserID: "u1", UserName: "Ann", Text: text})
		return out.WaitOutbound(t, wait, finalFor(id)).Text
	}
	if got := send("w1", "j1", "please remember this"); !strings.Contains(got, "tool said") {
		t.Fatalf("memory_write turn answered %q", got)
	}
	if got := send("m1", "j2", "recall please"); strings.Contains(got, "OKAPI") {
		t.Errorf("main's memory_search found work's memory: %q", got)
	}
	if got := send("w2", "j3", "recall please"); !strings.Contains(got, "OKAPI") {
		t.Errorf("work's memory_search did not find work's memory (the check above proves nothing): %q", got)
	}

	fired := bustest.Collect(t, d.nc, d.subjects().Out("console", "w1"))
	if got := send("w1", "j4", "remind me"); !strings.Contains(got, "tool said") {
		t.Fatalf("schedule turn answered %q", got)
	}
	fired.WaitOutbound(t, wait, func(o bus.Outbound) bool { return o.Final && o.Text == "hello from the task" })
	send("w1", "j5", "anything else") // one more turn of the chat after the firing
	count := func(m *llmtest.Server) int {
		n := 0
		for _, r := range m.Requests() {
			if strings.Contains(r.LastUserText(), "[Scheduled task") {
				n++
			}
		}
		return n
	}
	if w, m := count(workModel), count(mainModel); w != 1 || m != 0 {
		t.Errorf("the task of work fired %d times at work's model and %d at main's, want 1 and 0", w, m)
	}
}

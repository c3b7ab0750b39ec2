package agent

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/switchboard-chat/switchboard/bus"
	"github.com/switchboard-chat/switchboard/llm/llmtest"
)

func TestMalformedSSE(t *testing.T) {
	h := newHarness(t)
	h.model.Enqueue(llmtest.Reply{RawChunks: []string{`{"choices":[{"index":0,"delta":{"content":"hel`, `not json at all`}})
	got := h.ask("m1", "hi")
	if got.Kind != bus.KindError || !strings.Contains(got.Text, "model request failed") {
		t.Fatalf("final = %+v", got)
	}
	h.model.Enqueue(llmtest.TextReply("recovered"))
	if got := h.ask("m2", "again"); got.Text != "recovered" {
		t.Fatalf("final = %+v", got)
	}
}

func TestStreamCutMidToolCall(t *testing.T) {
	echo := &testTool{name: "echo"}
	h := newHarness(t, withTools(echo))
	h.model.Enqueue(llmtest.Reply{ToolCalls: []llmtest.ToolCall{call("a", "echo", `{"x": "partial`)}, Truncate: true, ChunkSize: 4})
	got := h.ask("m1", "go")
	if got.Kind != bus.KindError || echo.runs.Load() != 0 {
		t.Fatalf("final = %+v, tool runs %d", got, echo.runs.Load())
	}
	h.model.Enqueue(llmtest.TextReply("fine"))
	h.ask("m2", "next")
	h.checkRequestsValid()
}

func TestToolCallIDsMissingOrDuplicated(t *testing.T) {
	echo := &testTool{name: "echo"}
	h := newHarness(t, withTools(echo))
	h.model.Enqueue(llmtest.Reply{RawChunks: []string{
		`{"id":"x","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"role":"assistant","tool_calls":[{"index":0,"id":"dup","type":"function","function":{"name":"echo","arguments":"{\"n\":1}"}}]}}]}`,
		`{"id":"x","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"tool_calls":[{"index":1,"id":"dup","type":"function","function":{"name":"echo","arguments":"{\"n\":2}"}}]}}]}`,
		`{"id":"x","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"tool_calls":[{"index":2,"type":"function","function":{"name":"echo","arguments":"{\"n\":3}"}}]}}]}`,
		`{"id":"x","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}]}`,
	}}, llmtest.TextReply("three done"))
	if got := h.ask("m1", "go"); got.Text != "three done" || echo.runs.Load() != 3 {
		t.Fatalf("final = %+v, runs %d", got, echo.runs.Load())
	}
	msgs := h.request(1).Body.Messages
	calls := msgs[len(msgs)-4].ToolCalls
	ids := map[string]bool{}
	for _, c := range calls {
		if c.ID == "" || ids[c.ID] {
			t.Fatalf("ids not unique: %+v", calls)
		}
		ids[c.ID] = true
	}
	h.checkRequestsValid()
}

func TestModelThatCallsToolsForever(t *testing.T) {
	echo := &testTool{name: "echo"}
	n := 0
	h := newHarness(t, withTools(echo), func(hc *harnessConfig) {
		hc.cfg.MaxSteps = 5
		hc.modelOption = append(hc.modelOption, llmtest.WithResponder(func(r *llmtest.Request) llmtest.Reply {
			if len(r.Body.Tools) == 0 {
				return llmtest.TextReply("summary of an endless task")
			}
			n++
			return calling(call("", "echo", `{"i":`+strings.Repeat("1", n)+`}`))
		}))
	})
	if got := h.ask("m1", "forever"); got.Text != "summary of an endless task" || echo.runs.Load() != 5 {
		t.Fatalf("final = %+v, runs %d", got, echo.runs.Load())
	}
	h.checkRequestsValid()
}

func TestProviderRejectsEverything(t *testing.T) {
	h := newHarness(t, func(hc *harnessConfig) {
		hc.llm.MaxRetries = 2
		hc.modelOption = append(hc.modelOption, llmtest.WithResponder(func(*llmtest.Request) llmtest.Reply {
			return llmtest.ErrorReply(400, "invalid_request_error", "bad request")
		}))
	})
	for _, id := range []string{"m1", "m2"} {
		got := h.ask(id, "hi")
		if got.Kind != bus.KindError || !strings.Contains(got.Text, "bad request") {
			t.Fatalf("final = %+v", got)
		}
	}
	if n := h.model.RequestCount(); n != 2 {
		t.Fatalf("%d requests: a 400 must not be retried", n)
	}
}

func TestInvalidEnvelopesDeadLettered(t *testing.T) {
	h := newHarness(t)
	d1 := h.bus.SendRaw("chat.in.console.c1", []byte("garbage"))
	d2 := h.bus.SendRaw("chat.in.console.c1", []byte(`{"v":1,"id":"x","channel":"slack","chat_id":"c1","user_id":"u","text":"t"}`))
	h.model.Enqueue(llmtest.TextReply("ok"))
	h.ask("m1", "valid")
	for _, d := range []interface{ State() (bool, bool) }{d1, d2} {
		if _, termed := d.State(); !termed {
			t.Fatal("invalid message not terminated")
		}
	}
	dl := h.bus.DeadLetters()
	if len(dl) != 2 || dl[0].Reason == "" || dl[1].Reason == "" || h.model.RequestCount() != 1 {
		t.Fatalf("dead letters %+v, model requests %d", dl, h.model.RequestCount())
	}
}

func TestToolPairingRejectionRetriedWithPlainHistory(t *testing.T) {
	echo := &testTool{name: "echo"}
	h := newHarness(t, withTools(echo))
	h.model.Enqueue(calling(call("a", "echo", `{}`)), llmtest.TextReply("first done"))
	h.ask("m1", "use the tool")
	h.model.Enqueue(llmtest.ErrorReply(400, "invalid_request_error", "messages with role 'tool' must be a response to a preceding message with 'tool_calls'"),
		llmtest.TextReply("second done"))
	if got := h.ask("m2", "again"); got.Text != "second done" {
		t.Fatalf("final = %+v", got)
	}
	for _, m := range h.request(3).Body.Messages {
		if m.Role == "tool" || len(m.ToolCalls) > 0 {
			t.Fatalf("retry still carries tool traffic: %+v", m)
		}
	}
}

func TestImageAttachmentWithoutMIME(t *testing.T) {
	h := newHarness(t)
	h.model.Enqueue(llmtest.TextReply("nice picture"))
	h.bus.Send(bus.Inbound{ID: "p1", Channel: "console", ChatID: "c1", UserID: "u1", Text: "look",
		Attachments: []bus.Attachment{{Kind: bus.AttachImage, URL: "https://example.com/cat.png"}}})
	if got := h.final("p1"); got.Text != "nice picture" {
		t.Fatalf("final = %+v", got)
	}
	parts := h.request(0).Body.Messages[1].MultiContent
	if len(parts) != 2 || parts[1].ImageURL == nil || parts[1].ImageURL.URL != "https://example.com/cat.png" {
		t.Fatalf("user message parts = %+v", parts)
	}
	if hist := h.history(); len(hist) != 2 {
		t.Fatalf("history = %v", hist)
	}
}

// TestRefusedMessageAnsweredWithErrorFinal: a message the runtime refuses
// whose subject names a valid channel and chat gets one error final saying
// why, besides its dead letter; an unaddressable one is dead-lettered only.
func TestRefusedMessageAnsweredWithErrorFinal(t *testing.T) {
	h := newHarness(t)
	big := fmt.Sprintf(`{"v":1,"id":"big1","channel":"console","chat_id":"c1","user_id":"u","text":%q}`, strings.Repeat("x", 70000))
	h.bus.SendRaw("chat.in.console.c1", []byte(big))
	att := `{"v":1,"id":"att1","channel":"console","chat_id":"c1","user_id":"u","text":"t","attachments":[{"kind":"image","name":"cat.png","data":"%%%"}]}`
	h.bus.SendRaw("chat.in.console.c1", []byte(att))
	h.bus.SendRaw("chat.in.console.bad token", []byte(big)) // no valid chat token: DLQ only
	tooLong := h.bus.WaitFinal(t, 10*time.Second, "big1")
	if tooLong.Kind != bus.KindError || !strings.Contains(tooLong.Text, "70000 bytes") || !strings.Contains(tooLong.Text, "65536 bytes") {
		t.Fatalf("too-large answer = %+v", tooLong)
	}
	bad := h.bus.WaitFinal(t, 10*time.Second, "att1")
	if bad.Kind != bus.KindError || !strings.Contains(bad.Text, `attachment 1 ("cat.png")`) {
		t.Fatalf("bad-attachment answer = %+v", bad)
	}
	h.bus.Wait(t, 10*time.Second, func() bool { return len(h.bus.DeadLetters()) == 3 }, "three dead letters")
	if n := len(h.bus.Outbounds()); n != 2 {
		t.Fatalf("%d outbound envelopes, want the two error finals: %+v", n, h.bus.Outbounds())
	}
	if h.model.RequestCount() != 0 {
		t.Fatal("a refused message reached the model")
	}
}

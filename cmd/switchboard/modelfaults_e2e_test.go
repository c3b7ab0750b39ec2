package main

import (
	"encoding/json"
	"fmt"
	"maps"
	"math/rand/v2"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/switchboard-chat/switchboard/bus"
	"github.com/switchboard-chat/switchboard/bus/bustest"
	"github.com/switchboard-chat/switchboard/llm/llmtest"
)

// Fault kinds the soak's scripted model injects.
const (
	faultRateLimit  = "429"      // 429 with a short Retry-After
	faultRateNoHint = "429-bare" // 429 without Retry-After (llm.rate_limit_backoff)
	fault500        = "500"
	fault502        = "502"
	fault503        = "503"
	faultCutText    = "cut-text"  // the stream ends mid-text, no finish reason
	faultCutTool    = "cut-tool"  // the stream ends mid tool-call arguments
	faultStall      = "stall"     // text, then silence past llm.idle_timeout
	faultResetEarly = "reset"     // connection reset before any response
	faultResetMid   = "reset-mid" // connection reset mid-stream
	faultOverflow   = "overflow"  // 400 context_length_exceeded (once per message)
)

var soakFaults = []string{faultRateLimit, faultRateNoHint, fault500, fault502, fault503, faultCutText, faultCutTool,
	faultStall, faultResetEarly, faultResetMid, faultOverflow}

// soakMessage is the scripted model's record of one inbound message.
type soakMessage struct {
	rng        *rand.Rand
	attempts   []string // "ok" or a fault kind, in request order
	chain      int      // retryable failures in a row of the current model call
	overflowed bool
	exhausted  bool // a model call failed on every attempt: an error final is due
}

// faultModel is a scripted model that answers every soak message with a
// tool call (list_dir) and then an answer, failing about half of the
// requests with a random fault. It keeps, per message, what every attempt
// got, so the test knows which messages had every attempt of a model call
// fail.
type faultModel struct {
	seed       uint64
	rate       float64 // share of faulty requests
	maxRetries int

	mu    sync.Mutex
	msgs  map[string]*soakMessage
	kinds map[string]int
	other int // requests that are not a soak message's (summaries)
}

func soakText(id string) string { return "soak " + id + ": what is in my workspace?" }
func soakAnswer(id string) string {
	return "Answer to " + id + ": your workspace holds the usual folders, and nothing in it has changed since we last looked."
}

// messageID reads the soak message id out of a request's last user text.
func messageID(r *llmtest.Request) string {
	rest, ok := strings.CutPrefix(r.LastUserText(), "soak ")
	if !ok {
		return ""
	}
	id, _, _ := strings.Cut(rest, ":")
	return id
}

func (m *faultModel) respond(r *llmtest.Request) llmtest.Reply {
	id := messageID(r)
	m.mu.Lock()
	defer m.mu.Unlock()
	if id == "" || strings.HasPrefix(r.Body.Messages[0].Content, "You maintain the running summary") {
		m.other++
		return llmtest.TextReply("- the user asked about the workspace")
	}
	msg := m.msgs[id]
	if msg == nil {
		n, _ := strconv.Atoi(strings.TrimPrefix(id, "m"))
		msg = &soakMessage{rng: rand.New(rand.NewPCG(m.seed, uint64(n)))}
		m.msgs[id] = msg
	}
	last, _ := r.LastMessage()
	answering := last.Role == "tool"
	kind := "ok"
	if msg.rng.Float64() < m.rate {
		kind = soakFaults[msg.rng.IntN(len(soakFaults))]
		if kind == faultOverflow && msg.overflowed {
			kind = fault500 // a second overflow would reset the context: not a fault of the model
		}
	}
	msg.attempts = append(msg.attempts, kind)
	m.kinds[kind]++
	switch kind {
	case "ok":
		msg.chain = 0
	case faultOverflow:
		msg.overflowed, msg.chain = true, 0 // not retried; the agent compacts and calls again
	default:
		msg.chain++
		if msg.chain > m.maxRetries {
			msg.exhausted = true
		}
	}

	text := "Let me look at your workspace for " + id + "."
	var calls []llmtest.ToolCall
	if answering {
		text = soakAnswer(id)
	} else {
		calls = []llmtest.ToolCall{{Name: "list_dir", Arguments: `{"path":"."}`}}
	}
	half := text[:len(text)/2]
	stream := func(rep llmtest.Reply) llmtest.Reply {
		rep.ChunkSize, rep.ChunkDelay = 8, 3*time.Millisecond
		return rep
	}
	switch kind {
	case "ok":
		return stream(llmtest.Reply{Text: text, ToolCalls: calls})
	case faultRateLimit:
		return llmtest.RateLimitReply("0.02")
	case faultRateNoHint:
		return llmtest.RateLimitReply("")
	case fault500, fault502, fault503:
		status, _ := strconv.Atoi(kind)
		return llmtest.ErrorReply(status, "", http.StatusText(status))
	case faultCutText:
		return stream(llmtest.Reply{Text: half, Truncate: true})
	case faultCutTool:
		return stream(llmtest.Reply{Text: text, ToolCalls: []llmtest.ToolCall{{Name: "list_dir", Arguments: `{"path":`}}, Truncate: true})
	case faultStall:
		return stream(llmtest.Reply{Text: half, Stall: true})
	case faultResetEarly:
		return llmtest.Reply{Reset: true}
	case faultResetMid:
		return stream(llmtest.Reply{Text: half, ToolCalls: calls, Reset: true})
	case faultOverflow:
		return llmtest.ContextOverflowReply()
	}
	panic("unknown fault " + kind)
}

// TestModelFaultSoak sends 100 messages in 16 chats (each chat waits for
// its answer before the next message) through the real daemon while the
// scripted model fails about half of the requests with a random mix of
// 429s (with and without Retry-After), 500/502/503, streams cut mid-text
// and mid-tool-call, streams that stall past the idle watchdog, connection
// resets before and during the response, and context-overflow 400s.
// Every message gets exactly one final; an error final only where a model
// call failed on every attempt (retries exhausted), and every such message
// gets one; the streamed deltas of an answer are always a prefix of it
// (a retried stream replaces the partial text); the tool runs at most once
// per message, never from a cut stream; every request the model received
// is valid for the API. SOAK_SEED picks another seed, SOAK_MESSAGES
// another size.
func TestModelFaultSoak(t *testing.T) {
	seed, messages, chats := uint64(14), 100, 16
	if s, err := strconv.ParseUint(os.Getenv("SOAK_SEED"), 10, 64); err == nil {
		seed = s
	}
	if n, err := strconv.Atoi(os.Getenv("SOAK_MESSAGES")); err == nil && n > 0 {
		messages = n
	}
	fm := &faultModel{seed: seed, rate: 0.5, maxRetries: 3, msgs: map[string]*soakMessage{}, kinds: map[string]int{}}
	model := llmtest.NewServer(t, llmtest.WithStrict(), llmtest.WithResponder(fm.respond))
	cfg := testConfig(t, model.URL())
	cfg.LLM.MaxRetries = fm.maxRetries
	cfg.LLM.RetryBackoff = time.Millisecond
	cfg.LLM.RateLimitBackoff = 5 * time.Millisecond
	cfg.LLM.IdleTimeout = time.Second // the smallest llm.idle_timeout
	d := startDaemon(t, cfg)
	out := bustest.Collect(t, d.nc, d.subjects().OutAll())
	events := bustest.Collect(t, d.nc, d.subjects().EventAll())

	// Message i goes to chat i mod chats; a chat's next message is sent
	// when its previous one got its final.
	queue := make([][]string, chats)
	for i := range messages {
		queue[i%chats] = append(queue[i%chats], "m"+strconv.Itoa(i))
	}
	chatOf := map[string]string{}
	pending := map[string]bool{}
	sendNext := func(c int) {
		if len(queue[c]) == 0 {
			return
		}
		id := queue[c][0]
		queue[c] = queue[c][1:]
		chat := "chat" + strconv.Itoa(c)
		chatOf[id] = chat
		pending[id] = true
		d.send(t, chat, id, soakText(id))
	}
	for c := range chats {
		sendNext(c)
	}
	start := time.Now()
	for answered := 0; answered < messages; answered++ {
		var got bus.Outbound
		out.WaitFor(t, 2*time.Minute, func(m *nats.Msg) bool {
			var o bus.Outbound
			if json.Unmarshal(m.Data, &o) != nil || !o.Final || !pending[o.InReplyTo] {
				return false
			}
			got = o
			return true
		})
		delete(pending, got.InReplyTo)
		c, _ := strconv.Atoi(strings.TrimPrefix(chatOf[got.InReplyTo], "chat"))
		sendNext(c)
	}
	elapsed := time.Since(start)

	finals := map[string][]bus.Outbound{}
	deltas := map[string][]string{}
	for _, o := range out.Outbounds() {
		switch {
		case o.Final:
			finals[o.InReplyTo] = append(finals[o.InReplyTo], o)
		case o.Kind == bus.KindDelta:
			deltas[o.InReplyTo] = append(deltas[o.InReplyTo], o.Text)
		}
	}
	toolRuns := map[string]int{}
	restarts := 0
	for _, m := range events.All() {
		var ev bus.Event
		if json.Unmarshal(m.Data, &ev) != nil {
			continue
		}
		switch ev.Type {
		case bus.EventToolCall:
			toolRuns[ev.InReplyTo]++
			var data struct{ Name, Arguments string }
			if json.Unmarshal(ev.Data, &data) != nil || data.Name != "list_dir" || data.Arguments != `{"path":"."}` {
				t.Errorf("%s: tool call %s", ev.InReplyTo, ev.Data)
			}
		case bus.EventLLMDelta:
			if strings.Contains(string(ev.Data), `"restart":true`) {
				restarts++
			}
		}
	}

	fm.mu.Lock()
	defer fm.mu.Unlock()
	var errorFinals, dueErrors, doubled []string
	attempts := 0
	for i := range messages {
		id := "m" + strconv.Itoa(i)
		msg := fm.msgs[id]
		if msg == nil {
			t.Errorf("%s never reached the model", id)
			continue
		}
		attempts += len(msg.attempts)
		if msg.exhausted {
			dueErrors = append(dueErrors, id)
		}
		fs := finals[id]
		if len(fs) != 1 {
			doubled = append(doubled, fmt.Sprintf("%s×%d", id, len(fs)))
			continue
		}
		f := fs[0]
		switch {
		case f.Kind == bus.KindError:
			errorFinals = append(errorFinals, id)
			if !strings.Contains(f.Text, "the model request failed") {
				t.Errorf("%s: error final %q does not say the model failed", id, f.Text)
			}
		case f.Text != soakAnswer(id):
			t.Errorf("%s: final %q (%s), want the answer; attempts %v", id, f.Text, f.Kind, msg.attempts)
		}
		if !msg.exhausted && f.Kind == bus.KindError {
			t.Errorf("%s: error final although no model call failed on every attempt: %v", id, msg.attempts)
		}
		if msg.exhausted && f.Kind != bus.KindError {
			t.Errorf("%s: every attempt of a model call failed (%v), yet the final is %q", id, msg.attempts, f.Text)
		}
		for _, s := range deltas[id] {
			if strings.HasPrefix(s, "Answer to") && !strings.HasPrefix(soakAnswer(id), s) {
				t.Errorf("%s: delta %q is not a prefix of the answer (a cut stream's text was kept)", id, s)
			}
		}
		if n := toolRuns[id]; n > 1 || n == 0 && f.Kind != bus.KindError {
			t.Errorf("%s: the tool ran %d times (final %s); attempts %v", id, n, f.Kind, msg.attempts)
		}
	}
	if len(doubled) > 0 {
		t.Errorf("messages without exactly one final: %v", doubled)
	}
	if v := model.Violations(); len(v) > 0 {
		t.Errorf("the model refused %d invalid requests: %q", len(v), v)
	}
	for _, r := range model.Requests() {
		if err := llmtest.Validate(&r.Body); err != nil {
			t.Errorf("request %d is not valid for the API: %v", r.Seq, err)
		}
	}
	faulty := 0
	var kinds []string
	for _, k := range slices.Sorted(maps.Keys(fm.kinds)) {
		if k != "ok" {
			faulty += fm.kinds[k]
		}
		kinds = append(kinds, fmt.Sprintf("%s=%d", k, fm.kinds[k]))
	}
	t.Logf("fault soak (seed %d): %d messages in %d chats, %d model requests (%d faulty: %s), %d stream restarts, "+
		"%d finals, %d error finals (%d due: every attempt of a model call failed), %d without exactly one final, "+
		"%d invalid requests, %d other requests, %s",
		seed, messages, chats, attempts, faulty, strings.Join(kinds, " "), restarts,
		len(finals), len(errorFinals), len(dueErrors), len(doubled), len(model.Violations()), fm.other, elapsed.Round(time.Millisecond))
}

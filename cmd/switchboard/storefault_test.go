package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/switchboard-chat/switchboard/bus"
	"github.com/switchboard-chat/switchboard/llm/llmtest"
	"github.com/switchboard-chat/switchboard/memory"
	"github.com/switchboard-chat/switchboard/memory/boltstore"
)

// countingHandler counts log records by message and level, passing them
// on to next.
type countingHandler struct {
	next slog.Handler
	mu   *sync.Mutex
	n    map[string]int // "LEVEL message"
}

func newCountingHandler(next slog.Handler) countingHandler {
	return countingHandler{next: next, mu: &sync.Mutex{}, n: map[string]int{}}
}

func (h countingHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h countingHandler) Handle(ctx context.Context, r slog.Record) error {
	h.mu.Lock()
	h.n[r.Level.String()+" "+r.Message]++
	h.mu.Unlock()
	if h.next.Enabled(ctx, r.Level) {
		return h.next.Handle(ctx, r)
	}
	return nil
}
func (h countingHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return countingHandler{next: h.next.WithAttrs(as), mu: h.mu, n: h.n}
}
func (h countingHandler) WithGroup(g string) slog.Handler {
	return countingHandler{next: h.next.WithGroup(g), mu: h.mu, n: h.n}
}

// count returns how many records at level had a message containing msg.
func (h countingHandler) count(level slog.Level, msg string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := 0
	for k, v := range h.n {
		if strings.HasPrefix(k, level.String()+" ") && strings.Contains(k, msg) {
			n += v
		}
	}
	return n
}

// TestStoreFailureRetriesUntilAnswered: the first history commits fail as
// a full disk would. No message is answered while its commit fails (no
// final is published without a stored receipt), none is acknowledged, and
// JetStream redelivers each until the store works again; then each is
// answered exactly once, the history holds each turn once, the failures
// are counted in switchboard_store_failures_total and logged once per
// interval, not once per message.
func TestStoreFailureRetriesUntilAnswered(t *testing.T) {
	const failing = 12
	var commits atomic.Int64
	testStoreFault = func(op string) error {
		if op == "commit" && commits.Add(1) <= failing {
			return errors.New("write history.db: no space left on device (injected)")
		}
		return nil
	}
	t.Cleanup(func() { testStoreFault = nil })

	model := llmtest.NewServer(t, llmtest.WithResponder(llmtest.EchoResponder))
	cfg := testConfig(t, model.URL())
	logs := newCountingHandler(testLog().Handler())
	d := startServe(t, cfg, slog.New(logs))
	nc, err := nats.Connect(d.s.Bus.ClientURL(), operatorAuth(t, cfg))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	pub := &publisher{js: js, subj: d.s.Bus.Subjects()}
	var ids []string
	for c := range 4 {
		for i := range 2 {
			id := fmt.Sprintf("c%d-m%d", c, i)
			if !pub.send(t.Context(), fmt.Sprintf("c%d", c), id) {
				t.Fatal("not accepted")
			}
			ids = append(ids, id)
		}
	}
	finals := waitAllAnswered(t, js, ids)
	for _, id := range ids {
		if finals[id] != 1 {
			t.Errorf("message %s has %d finals, want 1", id, finals[id])
		}
	}
	// Messages of one chat may be answered together (agent.queue_mode
	// collect): at least one commit per chat.
	if got := commits.Load(); got < failing+4 {
		t.Errorf("%d commits attempted; want the %d failing ones and at least one per chat", got, failing)
	}

	// The failures are counted (no ids in the labels).
	resp, err := http.Get(d.adminURL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if want := fmt.Sprintf(`switchboard_store_failures_total{op="commit"} %d`, failing); !strings.Contains(string(body), want) {
		t.Errorf("/metrics lacks %q", want)
	}
	// ... and logged once per interval, not once per message.
	if n := logs.count(slog.LevelError, "history store failing"); n != 1 {
		t.Errorf("%d store failure lines for %d failures within one interval, want 1", n, failing)
	}
	if n := logs.count(slog.LevelError, "answer not delivered"); n != 0 {
		t.Errorf("%d per-message error lines, want 0", n)
	}

	// Each request of a retried message carried it once: no partial turn
	// of a failed attempt stayed in the context.
	for _, r := range model.Requests() {
		seen := map[string]int{}
		for _, m := range r.Body.Messages {
			if m.Role == "user" {
				seen[llmtest.MessageText(m)]++
			}
		}
		for text, n := range seen {
			if n > 1 {
				t.Errorf("a model request carries the user message %q %d times", text, n)
			}
		}
	}
	d.stop()

	// The history holds each turn once.
	store, err := boltstore.Open(filepath.Join(cfg.DataDir, "history.db"), boltstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	for c := range 4 {
		var buf bytes.Buffer
		if err := store.Export(t.Context(), fmt.Sprintf("console/c%d", c), &buf); err != nil {
			t.Fatal(err)
		}
		// Each inbound message is stored once as a user message (a
		// collected turn stores each of its messages, the first one
		// starting the turn).
		turns := map[string]int{}
		dec := json.NewDecoder(&buf)
		for dec.More() {
			var m memory.Message
			if err := dec.Decode(&m); err != nil {
				t.Fatal(err)
			}
			if m.Role == memory.RoleUser && m.InboundID != "" {
				turns[m.InboundID]++
			}
		}
		for i := range 2 {
			in := bus.Inbound{Channel: "console", ID: fmt.Sprintf("c%d-m%d", c, i)}
			key := in.DedupKey()
			if turns[key] != 1 {
				t.Errorf("history of c%d holds %s %d times, want once (%v)", c, key, turns[key], turns)
			}
		}
	}
}

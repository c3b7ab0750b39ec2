package openai

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/switchboard-chat/switchboard/bus"
	"github.com/switchboard-chat/switchboard/channels/channeltest"
)

// TestConformance runs the channel adapter suite. The "platform" of this
// channel is its HTTP clients and its state file: a platform event is a
// chat completion request (conversation = session, event id =
// Idempotency-Key), and a message the platform accepted is a final stored
// in the state file, from which requests are answered (FailSends makes
// that store refuse writes).
func TestConformance(t *testing.T) {
	channeltest.Run(t, func(t *testing.T) channeltest.Harness {
		h := &harness{e: newEnv(t), sent: map[string][]string{}, changed: make(chan struct{})}
		h.e.onStore = h.hook
		return h
	})
}

type harness struct {
	e    *env
	r    *running
	reqs sync.WaitGroup // the requests' readers

	mu      sync.Mutex
	failing bool
	refused int
	sent    map[string][]string // chat → texts stored
	changed chan struct{}
}

func (h *harness) Conn() *nats.Conn       { return h.e.nc }
func (h *harness) Subjects() bus.Subjects { return h.e.subj }
func (h *harness) Channel() string        { return Name }
func (h *harness) Durable() string        { return "bridge_" + Name }
func (h *harness) Chat(conv string) string {
	return chatID("ann", conv)
}

func (h *harness) Start(t *testing.T) {
	t.Helper()
	// No agent answers: the suite publishes the outbound messages itself.
	h.e.agent.Set(func(bus.Inbound) []bus.Outbound { return nil })
	h.r = h.e.start(t, h.e.config())
}

// hook makes the store refuse writes while failing and records what it
// stores (Run calls it before it serves anything).
func (h *harness) hook(st *store) {
	st.failPut = func() error {
		h.mu.Lock()
		defer h.mu.Unlock()
		if !h.failing {
			return nil
		}
		h.refused++
		h.notify()
		return errors.New("state file refuses writes (test)")
	}
	st.onPut = func(a answer) {
		h.mu.Lock()
		defer h.mu.Unlock()
		h.sent[a.Chat] = append(h.sent[a.Chat], a.Text)
		h.notify()
	}
}

func (h *harness) notify() {
	close(h.changed)
	h.changed = make(chan struct{})
}

func (h *harness) Stop(t *testing.T) error {
	t.Helper()
	err := h.r.stop(t)
	h.reqs.Wait() // the server closed every request
	return err
}

// Event sends a streaming chat completion in session conv with the
// Idempotency-Key id, and returns once the first chunk (sent after the
// inbound envelope was stored) names the inbound id. The rest of the
// stream is read in the background until the server ends it.
func (h *harness) Event(t *testing.T, conv, id, text string) string {
	t.Helper()
	body := `{"model":"switchboard","stream":true,"messages":[{"role":"user","content":` + quote(text) + `}]}`
	req, err := http.NewRequestWithContext(context.Background(), http.MethodPost, h.r.url+"/v1/chat/completions", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+keyAnn)
	req.Header.Set(headerSession, conv)
	req.Header.Set(headerIdempotency, id)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(resp.Body)
	var first chunk
	for sc.Scan() {
		if line, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
			if err := json.Unmarshal([]byte(line), &first); err != nil {
				t.Fatalf("first chunk %q: %v", line, err)
			}
			break
		}
	}
	if first.ID == "" {
		resp.Body.Close()
		t.Fatalf("no first chunk (status %d)", resp.StatusCode)
	}
	h.reqs.Go(func() {
		defer resp.Body.Close()
		for sc.Scan() {
		}
	})
	return strings.TrimPrefix(first.ID, "chatcmpl-")
}

func quote(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

func (h *harness) FailSends(fail bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.failing = fail
}

func (h *harness) Sent(conv string) ([]string, int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]string(nil), h.sent[h.Chat(conv)]...), h.refused
}

func (h *harness) Changed() <-chan struct{} {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.changed
}

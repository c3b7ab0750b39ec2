package openai

import (
	"context"
	"errors"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	goopenai "github.com/sashabaranov/go-openai"

	"github.com/switchboard-chat/switchboard/bus"
	"github.com/switchboard-chat/switchboard/internal/kvstate"
)

// TestSessionMapping: a session (header first, then the "user" field) is
// one chat per API user; two sessions, or two users with the same session
// name, never share a chat; without a session every request is a chat of
// its own whose context is the request's earlier messages.
func TestSessionMapping(t *testing.T) {
	e := newEnv(t)
	r := e.start(t, e.config())
	send := func(key, header, user string, msgs ...goopenai.ChatCompletionMessage) bus.Inbound {
		t.Helper()
		req := chatReq(msgs...)
		req.User = user
		cfg := goopenai.DefaultConfig(key)
		cfg.BaseURL = r.url + "/v1"
		if header != "" {
			cfg.HTTPClient = &http.Client{Transport: headerTransport{headerSession: header}}
		}
		resp, err := goopenai.NewClientWithConfig(cfg).CreateChatCompletion(t.Context(), req)
		if err != nil {
			t.Fatal(err)
		}
		id := strings.TrimPrefix(resp.ID, "chatcmpl-")
		return e.agent.WaitInbound(t, id, func(in bus.Inbound) bool { return in.ID == id })
	}
	earlier := []goopenai.ChatCompletionMessage{{Role: "system", Content: "Answer in French."}, userMsg("my name is Ann"), {Role: "assistant", Content: "Bonjour Ann"}}
	work1 := send(keyAnn, "work", "ignored-user-field", append(earlier, userMsg("what is my name?"))...)
	work2 := send(keyAnn, "", "work", userMsg("again"))
	home := send(keyAnn, "home", "", userMsg("hi"))
	bobWork := send(keyBob, "work", "", userMsg("hi"))
	once1 := send(keyAnn, "", "", append(earlier, userMsg("what is my name?"))...)
	once2 := send(keyAnn, "", "", userMsg("what is my name?"))

	if work1.ChatID != work2.ChatID || work1.ChatID != chatID("ann", "work") {
		t.Errorf("session work: chats %q and %q, want both %q", work1.ChatID, work2.ChatID, chatID("ann", "work"))
	}
	if work1.Text != "what is my name?" {
		t.Errorf("with a session the earlier messages must not be sent (the stored history is the context): %q", work1.Text)
	}
	chats := map[string]string{"ann/work": work1.ChatID, "ann/home": home.ChatID, "bob/work": bobWork.ChatID, "once1": once1.ChatID, "once2": once2.ChatID}
	seen := map[string]string{}
	for name, c := range chats {
		if other, dup := seen[c]; dup {
			t.Errorf("%s and %s share the chat %q", name, other, c)
		}
		seen[c] = name
	}
	if bobWork.UserID != "bob" || !strings.HasPrefix(bobWork.ChatID, "bob:") || work1.UserID != "ann" {
		t.Errorf("user ids: %q %q", bobWork.UserID, work1.UserID)
	}
	for _, want := range []string{"[system]\nAnswer in French.", "[user]\nmy name is Ann", "[assistant]\nBonjour Ann", "what is my name?"} {
		if !strings.Contains(once1.Text, want) {
			t.Errorf("stateless context lacks %q:\n%s", want, once1.Text)
		}
	}
	if once2.Text != "what is my name?" || !strings.HasPrefix(once1.ChatID, "ann:once-") {
		t.Errorf("stateless single message: %+v", once2)
	}
	// A chat id is a valid bus chat id, whatever the session name.
	long := strings.Repeat("é.*> \x00", 60)
	if in := send(keyAnn, "", long, userMsg("hi")); in.ChatID != chatID("ann", long) || len(in.ChatID) > bus.MaxRefBytes {
		t.Errorf("odd session name: chat %q", in.ChatID)
	}
}

type headerTransport map[string]string

func (h headerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	for k, v := range h {
		r.Header.Set(k, v)
	}
	return http.DefaultTransport.RoundTrip(r)
}

func idemClient(r *running, key, idem string) *goopenai.Client {
	cfg := goopenai.DefaultConfig(key)
	cfg.BaseURL = r.url + "/v1"
	cfg.HTTPClient = &http.Client{Transport: headerTransport{headerIdempotency: idem}}
	return goopenai.NewClientWithConfig(cfg)
}

// TestIdempotencyKey: a retry with the same Idempotency-Key (scoped to the
// API key) gets the same answer and publishes no second turn, also while
// the first request still waits, and after a restart of the channel.
func TestIdempotencyKey(t *testing.T) {
	e := newEnv(t)
	r := e.start(t, e.config())
	release := make(chan struct{})
	var mu sync.Mutex
	turnsStarted := 0
	e.agent.Set(func(in bus.Inbound) []bus.Outbound {
		mu.Lock()
		turnsStarted++
		n := turnsStarted
		mu.Unlock()
		go func() {
			<-release
			e.agent.Publish(t, reply(in, bus.KindReply, "answer "+in.Text+" #"+string(rune('0'+n))))
		}()
		return nil
	})
	ask := func(c *goopenai.Client) (string, error) {
		resp, err := c.CreateChatCompletion(t.Context(), chatReq(userMsg("q")))
		if err != nil {
			return "", err
		}
		return resp.Choices[0].Message.Content, nil
	}
	type res struct {
		s   string
		err error
	}
	results := make(chan res, 2)
	for range 2 {
		go func() { s, err := ask(idemClient(r, keyAnn, "k1")); results <- res{s, err} }()
	}
	e.agent.WaitInbound(t, "q", func(in bus.Inbound) bool { return in.Text == "q" })
	close(release)
	for range 2 {
		got := <-results
		if got.err != nil || got.s != "answer q #1" {
			t.Fatalf("concurrent retry: %q, %v", got.s, got.err)
		}
	}
	if s, err := ask(idemClient(r, keyAnn, "k1")); err != nil || s != "answer q #1" {
		t.Fatalf("retry after the answer: %q, %v", s, err)
	}
	_ = r.stop(t)
	r = e.start(t, e.config())
	if s, err := ask(idemClient(r, keyAnn, "k1")); err != nil || s != "answer q #1" {
		t.Fatalf("retry after a restart: %q, %v", s, err)
	}
	// Another API key's Idempotency-Key "k1" is another request.
	if s, err := ask(idemClient(r, keyBob, "k1")); err != nil || s != "answer q #2" {
		t.Fatalf("bob's k1: %q, %v", s, err)
	}
	if n := len(e.agent.Inbounds()); n != 2 {
		t.Errorf("%d inbound envelopes reached the agent, want 2 (one per API key)", n)
	}
}

// TestDisconnectStopsTheTurn: a streaming client that goes away before the
// answer stops its turn (/stop in its session); one with an
// Idempotency-Key does not (it can come back for the answer); nothing of
// the request is left running (goleak, TestMain).
func TestDisconnectStopsTheTurn(t *testing.T) {
	e := newEnv(t)
	r := e.start(t, e.config())
	e.agent.Set(func(bus.Inbound) []bus.Outbound { return nil })
	streamThenHangUp := func(c *goopenai.Client, text string) {
		t.Helper()
		ctx, cancel := context.WithCancel(t.Context())
		req := chatReq(userMsg(text))
		req.Stream = true
		req.User = "s1"
		stream, err := c.CreateChatCompletionStream(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := stream.Recv(); err != nil { // the role chunk: the turn was published
			t.Fatal(err)
		}
		cancel()
		_, err = stream.Recv()
		if !errors.Is(err, context.Canceled) {
			t.Logf("after the hang-up: %v", err)
		}
		stream.Close()
	}
	streamThenHangUp(r.client(keyAnn), "long task")
	task := e.agent.WaitInbound(t, "long task", func(in bus.Inbound) bool { return in.Text == "long task" })
	stop := e.agent.WaitInbound(t, "/stop", func(in bus.Inbound) bool { return in.Text == "/stop" })
	if stop.ChatID != task.ChatID || stop.UserID != "ann" {
		t.Errorf("/stop went to %q as %q, want the turn's chat %q", stop.ChatID, stop.UserID, task.ChatID)
	}
	streamThenHangUp(idemClient(r, keyAnn, "keep-going"), "idempotent task")
	e.agent.WaitInbound(t, "idempotent task", func(in bus.Inbound) bool { return in.Text == "idempotent task" })
	_ = r.stop(t) // Run returns once every request handler has
	stops := 0
	for _, in := range e.agent.Inbounds() {
		if in.Text == "/stop" {
			stops++
		}
	}
	if stops != 1 {
		t.Errorf("%d /stop messages, want 1 (none for the request with an Idempotency-Key)", stops)
	}
}

// TestIdempotencyKeyAcrossInstances: with the records in a shared store
// (memory.store jetstream), a client that retries its request through
// another instance — the first one stopped while the turn ran, and the
// second has its own empty state file — joins the first request: no
// second turn, and the answer is the first turn's.
func TestIdempotencyKeyAcrossInstances(t *testing.T) {
	e := newEnv(t)
	shared, err := kvstate.OpenBucket(t.Context(), e.nc, kvstate.Config{Prefix: "test"}, kvstate.NameDelivered, "")
	if err != nil {
		t.Fatal(err)
	}
	instance := func(state string) func(*Deps) {
		return func(d *Deps) {
			d.StatePath, d.Records, d.Seen = state, shared, kvstate.Seen{Store: shared, Channel: Name}
		}
	}
	release := make(chan struct{})
	e.agent.Set(func(in bus.Inbound) []bus.Outbound {
		go func() {
			<-release
			e.agent.Publish(t, reply(in, bus.KindReply, "answer "+in.Text))
		}()
		return nil
	})
	a := e.start(t, e.config(), instance(filepath.Join(t.TempDir(), "a.db")))
	first := make(chan error, 1)
	go func() {
		_, err := idemClient(a, keyAnn, "k1").CreateChatCompletion(t.Context(), chatReq(userMsg("q")))
		first <- err
	}()
	e.agent.WaitInbound(t, "q", func(in bus.Inbound) bool { return in.Text == "q" })
	_ = a.stop(t) // the instance goes away while the turn runs
	<-first

	b := e.start(t, e.config(), instance(filepath.Join(t.TempDir(), "b.db")))
	close(release)
	resp, err := idemClient(b, keyAnn, "k1").CreateChatCompletion(t.Context(), chatReq(userMsg("q")))
	if err != nil || resp.Choices[0].Message.Content != "answer q" {
		t.Fatalf("retry through the other instance: %+v, %v", resp, err)
	}
	// The retry publishes the first request's envelope again (in case the
	// first instance died before its publish): the same id, which the
	// stream's de-duplication drops. A second turn would be a second id.
	ids := map[string]bool{}
	for _, in := range e.agent.Inbounds() {
		ids[in.ID] = true
	}
	if len(ids) != 1 {
		t.Errorf("%d inbound ids reached the bus, want 1: the retry started a second turn", len(ids))
	}
	st, err := e.js.Stream(t.Context(), "CHAT_IN")
	if err != nil {
		t.Fatal(err)
	}
	if info, err := st.Info(t.Context()); err != nil || info.State.Msgs != 1 {
		t.Errorf("CHAT_IN holds %v messages (%v), want 1", info.State.Msgs, err)
	}
}

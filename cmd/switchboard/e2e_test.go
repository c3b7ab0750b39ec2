package main

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/switchboard-chat/switchboard/bus"
	"github.com/switchboard-chat/switchboard/bus/bustest"
	"github.com/switchboard-chat/switchboard/bus/natsbus"
	"github.com/switchboard-chat/switchboard/internal/syncbuf"
	"github.com/switchboard-chat/switchboard/llm/llmtest"
	"github.com/switchboard-chat/switchboard/memory"
	"github.com/switchboard-chat/switchboard/memory/boltstore"
	"github.com/switchboard-chat/switchboard/memory/jsstore"
	"github.com/switchboard-chat/switchboard/memory/memcfg"
)

const wait = 20 * time.Second

// daemon is one in-process `switchboard serve` for a test.
type daemon struct {
	cfg  Config
	s    started
	nc   *nats.Conn
	stop func()
}

func testConfig(t testing.TB, llmURL string) Config {
	t.Helper()
	dir := t.TempDir()
	cfg := defaultConfig()
	cfg.DataDir = filepath.Join(dir, "data")
	cfg.Agent.Workspace = filepath.Join(dir, "workspace")
	cfg.Agent.DeltaInterval = 20 * time.Millisecond
	cfg.Bus.Listen = "127.0.0.1:0"
	cfg.Admin.Listen = "127.0.0.1:0"
	cfg.LLM.BaseURL = llmURL
	cfg.LLM.APIKey = "test-key"
	cfg.LLM.Model = "test-model"
	cfg.LLM.MaxRetries = 0
	return cfg
}

// eachStore runs test once per history store (memory.store), as subtests
// "bolt" and "jetstream": a single instance on jetstream must pass what
// passes on bolt (issue 17).
func eachStore(t *testing.T, test func(t *testing.T, store string)) {
	for _, store := range []string{memcfg.StoreBolt, memcfg.StoreJetStream} {
		t.Run(store, func(t *testing.T) { test(t, store) })
	}
}

// storeConfig is testConfig with history in store (memory.store).
func storeConfig(t testing.TB, llmURL, store string) Config {
	cfg := testConfig(t, llmURL)
	cfg.Memory.Store = store
	return cfg
}

// startDaemon runs serve until the test ends (or stop is called) and
// connects a client to its bus listener.
func startDaemon(t testing.TB, cfg Config) *daemon {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan started, 1)
	done := make(chan error, 1)
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	if testing.Verbose() {
		log = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	go func() { done <- serve(ctx, cfg, log, func(s started) { ready <- s }) }()
	d := &daemon{cfg: cfg}
	select {
	case d.s = <-ready:
	case err := <-done:
		cancel()
		t.Fatalf("serve: %v", err)
	case <-time.After(wait):
		cancel()
		t.Fatal("daemon did not start")
	}
	nc, err := nats.Connect(d.s.Bus.ClientURL(), operatorAuth(t, cfg))
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	d.nc = nc
	stopped := false
	d.stop = func() {
		if stopped {
			return
		}
		stopped = true
		nc.Close()
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("serve returned %v", err)
			}
		case <-time.After(wait):
			t.Error("daemon did not stop")
		}
	}
	t.Cleanup(d.stop)
	return d
}

// operatorAuth returns the connect option that authenticates a test client
// as the operator of a daemon started with cfg: bus.admin, or the token the
// daemon generated in data_dir (the embedded listener accepts no anonymous
// client).
func operatorAuth(t testing.TB, cfg Config) nats.Option {
	t.Helper()
	switch a := cfg.Bus.Admin; {
	case a.Token != "":
		return nats.Token(a.Token)
	case a.User != "":
		return nats.UserInfo(a.User, a.Password)
	}
	token, err := natsbus.ReadOperatorToken(cfg.DataDir)
	if err != nil {
		t.Fatalf("operator credential of the test daemon: %v", err)
	}
	return nats.Token(token)
}

// operatorURL is the daemon's bus URL with the operator token of cfg's
// data_dir in it, for verbs given --url.
func (d *daemon) operatorURL(t testing.TB, cfg Config) string {
	t.Helper()
	token, err := natsbus.ReadOperatorToken(cfg.DataDir)
	if err != nil {
		t.Fatalf("operator credential of the test daemon: %v", err)
	}
	return "nats://" + token + "@" + strings.TrimPrefix(d.s.Bus.ClientURL(), "nats://")
}

// startDaemonYAML writes yaml as dir/config.yaml, loads it and starts the
// daemon with it.
func startDaemonYAML(t *testing.T, dir, yaml string) (*daemon, Config) {
	t.Helper()
	path := filepath.Join(dir, "config.yaml")
	if err := os.WriteFile(path, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, _, err := LoadConfig(path)
	if err != nil {
		t.Fatal(err)
	}
	return startDaemon(t, cfg), cfg
}

func (d *daemon) subjects() bus.Subjects { return d.s.Bus.Subjects() }

func (d *daemon) collectOut(t *testing.T, chat string) *bustest.Collector {
	return bustest.Collect(t, d.nc, d.subjects().Out("console", chat))
}

func (d *daemon) send(t *testing.T, chat, id, text string) bus.Inbound {
	t.Helper()
	in := bus.Inbound{V: 1, ID: id, Channel: "console", ChatID: chat, UserID: "u1", UserName: "Ann", Text: text,
		Meta: map[string]string{"k": "v"}}
	bustest.PublishInbound(t, d.nc, d.subjects(), in)
	return in
}

func finalFor(id string) func(bus.Outbound) bool {
	return func(o bus.Outbound) bool { return o.InReplyTo == id && o.Final }
}

func countFinals(outs []bus.Outbound, id string) int {
	n := 0
	for _, o := range outs {
		if o.InReplyTo == id && o.Final {
			n++
		}
	}
	return n
}

func TestE2EPlainReply(t *testing.T) { eachStore(t, testE2EPlainReply) }

func testE2EPlainReply(t *testing.T, store string) {
	model := llmtest.NewServer(t)
	model.Enqueue(llmtest.TextReply("Hello, Ann!"))
	d := startDaemon(t, storeConfig(t, model.URL(), store))
	out := d.collectOut(t, "c1")
	d.send(t, "c1", "m1", "hi")
	got := out.WaitOutbound(t, wait, finalFor("m1"))
	if got.Kind != bus.KindReply || got.Text != "Hello, Ann!" || got.Meta["k"] != "v" || got.Channel != "console" || got.ChatID != "c1" {
		t.Fatalf("final = %+v", got)
	}
	// Typing came first, with a lower seq.
	outs := out.Outbounds()
	if outs[0].Kind != bus.KindTyping || outs[0].Seq >= got.Seq {
		t.Fatalf("outbounds = %+v", outs)
	}
	reqs := model.Requests()
	if len(reqs) != 1 {
		t.Fatalf("%d model requests", len(reqs))
	}
	sys := reqs[0].Body.Messages[0]
	if sys.Role != "system" || !strings.Contains(sys.Content, "## AGENT.md") || !strings.Contains(sys.Content, "Channel: console") {
		t.Fatalf("system prompt = %q", sys.Content)
	}
}

func TestE2EToolRoundTrip(t *testing.T) { eachStore(t, testE2EToolRoundTrip) }

func testE2EToolRoundTrip(t *testing.T, store string) {
	model := llmtest.NewServer(t)
	model.Enqueue(
		llmtest.Reply{ToolCalls: []llmtest.ToolCall{{ID: "call_1", Name: "write_file", Arguments: `{"path":"notes/todo.txt","content":"buy milk"}`}}, ChunkSize: 7},
		llmtest.TextReply("Saved your note."),
	)
	cfg := storeConfig(t, model.URL(), store)
	d := startDaemon(t, cfg)
	out := d.collectOut(t, "c1")
	d.send(t, "c1", "m1", "note: buy milk")
	got := out.WaitOutbound(t, wait, finalFor("m1"))
	if got.Text != "Saved your note." {
		t.Fatalf("final = %+v", got)
	}
	data, err := os.ReadFile(filepath.Join(cfg.Agent.Workspace, "notes", "todo.txt"))
	if err != nil || string(data) != "buy milk" {
		t.Fatalf("file = %q, %v", data, err)
	}
	msgs := model.Requests()[1].Body.Messages
	last := msgs[len(msgs)-1]
	if last.Role != "tool" || last.ToolCallID != "call_1" || last.Content == "" {
		t.Fatalf("tool result message = %+v", last)
	}
	prev := msgs[len(msgs)-2]
	if len(prev.ToolCalls) != 1 || prev.ToolCalls[0].Function.Arguments != `{"path":"notes/todo.txt","content":"buy milk"}` {
		t.Fatalf("assistant tool call = %+v", prev)
	}
}

func TestE2EStreamingDeltas(t *testing.T) { eachStore(t, testE2EStreamingDeltas) }

func testE2EStreamingDeltas(t *testing.T, store string) {
	model := llmtest.NewServer(t)
	model.Enqueue(llmtest.Reply{Text: "one two three four five six", ChunkSize: 4, ChunkDelay: 30 * time.Millisecond})
	d := startDaemon(t, storeConfig(t, model.URL(), store))
	out := d.collectOut(t, "c1")
	d.send(t, "c1", "m1", "count")
	final := out.WaitOutbound(t, wait, finalFor("m1"))
	var deltas []bus.Outbound
	for _, o := range out.Outbounds() {
		if o.Kind == bus.KindDelta {
			deltas = append(deltas, o)
		}
	}
	if len(deltas) == 0 {
		t.Fatal("no delta was streamed")
	}
	lastSeq := 0
	for _, dl := range deltas {
		if !strings.HasPrefix(final.Text, dl.Text) || dl.Seq <= lastSeq || dl.Final {
			t.Fatalf("bad delta %+v (final %q)", dl, final.Text)
		}
		lastSeq = dl.Seq
	}
	if final.Seq <= lastSeq {
		t.Fatalf("final seq %d not after deltas %d", final.Seq, lastSeq)
	}
}

func TestE2EPromptEditTakesEffect(t *testing.T) { eachStore(t, testE2EPromptEditTakesEffect) }

func testE2EPromptEditTakesEffect(t *testing.T, store string) {
	model := llmtest.NewServer(t)
	model.Enqueue(llmtest.TextReply("a"), llmtest.TextReply("b"))
	cfg := storeConfig(t, model.URL(), store)
	d := startDaemon(t, cfg)
	out := d.collectOut(t, "c1")
	d.send(t, "c1", "m1", "one")
	out.WaitOutbound(t, wait, finalFor("m1"))
	if err := os.WriteFile(filepath.Join(cfg.Agent.Workspace, "RULE.md"), []byte("Always answer like a pirate (rule v2)."), 0o644); err != nil {
		t.Fatal(err)
	}
	d.send(t, "c1", "m2", "two")
	out.WaitOutbound(t, wait, finalFor("m2"))
	reqs := model.Requests()
	if strings.Contains(reqs[0].Body.Messages[0].Content, "rule v2") || !strings.Contains(reqs[1].Body.Messages[0].Content, "rule v2") {
		t.Fatal("RULE.md edit not used on the next turn")
	}
}

func TestE2EPersistenceAcrossRestart(t *testing.T) { eachStore(t, testE2EPersistenceAcrossRestart) }

func testE2EPersistenceAcrossRestart(t *testing.T, store string) {
	model := llmtest.NewServer(t)
	model.Enqueue(llmtest.TextReply("Noted: 42."), llmtest.TextReply("It was 42."))
	cfg := storeConfig(t, model.URL(), store)
	d := startDaemon(t, cfg)
	out := d.collectOut(t, "c1")
	d.send(t, "c1", "m1", "remember 42")
	out.WaitOutbound(t, wait, finalFor("m1"))
	d.stop()

	d2 := startDaemon(t, cfg)
	out2 := d2.collectOut(t, "c1")
	d2.send(t, "c1", "m2", "what number?")
	out2.WaitOutbound(t, wait, finalFor("m2"))
	msgs := model.Requests()[1].Body.Messages
	var roles, texts []string
	for _, m := range msgs[1:] {
		roles = append(roles, m.Role)
		texts = append(texts, m.Content)
	}
	if strings.Join(roles, ",") != "user,assistant,user" || texts[0] != "remember 42" || texts[1] != "Noted: 42." {
		t.Fatalf("history after restart: %v %q", roles, texts)
	}
	if _, err := os.Stat(filepath.Join(cfg.DataDir, "history.db")); (err == nil) != (store == memcfg.StoreBolt) {
		t.Fatalf("memory.store %s: history.db: %v", store, err)
	}
}

func TestE2EDuplicateInboundAnsweredOnce(t *testing.T) {
	eachStore(t, testE2EDuplicateInboundAnsweredOnce)
}

func testE2EDuplicateInboundAnsweredOnce(t *testing.T, store string) {
	model := llmtest.NewServer(t)
	model.Enqueue(llmtest.TextReply("first"), llmtest.TextReply("second"))
	d := startDaemon(t, storeConfig(t, model.URL(), store))
	out := d.collectOut(t, "c1")
	in := d.send(t, "c1", "m1", "hello")
	out.WaitOutbound(t, wait, finalFor("m1"))
	// Re-publish the same envelope: once with the same Nats-Msg-Id (JetStream
	// de-duplicates) and once over core NATS without a header (the runtime's
	// durable receipt de-duplicates).
	bustest.PublishInbound(t, d.nc, d.subjects(), in)
	data, _ := json.Marshal(in)
	if err := d.nc.Publish(d.subjects().In("console", "c1"), data); err != nil {
		t.Fatal(err)
	}
	// Messages of a session are processed in order: once m2 is answered the
	// duplicates have been handled.
	d.send(t, "c1", "m2", "next")
	out.WaitOutbound(t, wait, finalFor("m2"))
	if n := countFinals(out.Outbounds(), "m1"); n != 1 {
		t.Fatalf("%d finals for m1", n)
	}
	if n := model.RequestCount(); n != 2 {
		t.Fatalf("model called %d times, want 2", n)
	}
	msgs := model.Requests()[1].Body.Messages
	if len(msgs) != 4 { // system, hello, first, next
		t.Fatalf("history holds %d messages: %+v", len(msgs), msgs)
	}
}

func TestE2EInvalidEnvelopesGoToDLQ(t *testing.T) {
	model := llmtest.NewServer(t)
	model.Enqueue(llmtest.TextReply("fine"))
	d := startDaemon(t, testConfig(t, model.URL()))
	dlq := bustest.Collect(t, d.nc, d.subjects().DLQAll())
	subj := d.subjects().In("console", "c1")
	big := strings.Repeat("x", d.cfg.Bus.MaxTextBytes+1)
	bad := []string{
		`not json`,
		`{"v":2,"id":"a","channel":"console","chat_id":"c1","user_id":"u","text":"x"}`,
		`{"v":1,"channel":"console","chat_id":"c1","user_id":"u","text":"x"}`,
		`{"v":1,"id":"b","channel":"slack","chat_id":"c1","user_id":"u","text":"x"}`,
		`{"v":1,"id":"c","channel":"console","chat_id":"other","user_id":"u","text":"x"}`,
		`{"v":1,"id":"d","channel":"console","chat_id":"c1","user_id":"u","text":"` + big + `"}`,
	}
	for _, b := range bad {
		if err := d.nc.Publish(subj, []byte(b)); err != nil {
			t.Fatal(err)
		}
	}
	seen := 0
	dlq.WaitFor(t, wait, func(*nats.Msg) bool { seen++; return len(dlq.All()) >= len(bad) })
	for _, m := range dlq.All() {
		var rec bus.DLQRecord
		if err := json.Unmarshal(m.Data, &rec); err != nil || rec.Reason == "" || rec.Subject != subj || len(rec.Payload) > 4096 {
			t.Fatalf("DLQ record %s: %v", m.Data, err)
		}
	}
	if model.RequestCount() != 0 {
		t.Fatal("an invalid envelope reached the model")
	}
	out := d.collectOut(t, "c1")
	d.send(t, "c1", "ok", "still alive?")
	if got := out.WaitOutbound(t, wait, finalFor("ok")); got.Text != "fine" {
		t.Fatalf("final = %+v", got)
	}
}

func TestE2EStopCancelsRunningTurn(t *testing.T) { eachStore(t, testE2EStopCancelsRunningTurn) }

func testE2EStopCancelsRunningTurn(t *testing.T, store string) {
	model := llmtest.NewServer(t)
	block := make(chan struct{})
	t.Cleanup(func() { close(block) })
	model.Enqueue(llmtest.Reply{Text: "never", Block: block}, llmtest.TextReply("after stop"))
	d := startDaemon(t, storeConfig(t, model.URL(), store))
	out := d.collectOut(t, "c1")
	d.send(t, "c1", "m1", "a long task")
	model.WaitRequests(t, 1, wait)
	d.send(t, "c1", "s1", "/stop")
	stop := out.WaitOutbound(t, wait, finalFor("s1"))
	if stop.Kind != bus.KindNotice || !strings.Contains(stop.Text, "Stopping") {
		t.Fatalf("/stop answer = %+v", stop)
	}
	first := out.WaitOutbound(t, wait, finalFor("m1"))
	if first.Kind != bus.KindNotice || first.Text != "Stopped." {
		t.Fatalf("stopped turn final = %+v", first)
	}
	// The session goes on, and the stopped turn is in the history.
	d.send(t, "c1", "m2", "next")
	if got := out.WaitOutbound(t, wait, finalFor("m2")); got.Text != "after stop" {
		t.Fatalf("final = %+v", got)
	}
	// With nothing running, /stop says so.
	d.send(t, "c1", "s2", "/stop")
	if got := out.WaitOutbound(t, wait, finalFor("s2")); !strings.Contains(got.Text, "Nothing is running") {
		t.Fatalf("/stop answer = %+v", got)
	}
}

func TestE2ECommands(t *testing.T) { eachStore(t, testE2ECommands) }

func testE2ECommands(t *testing.T, store string) {
	model := llmtest.NewServer(t)
	model.Enqueue(llmtest.TextReply("r1"), llmtest.TextReply("r2"))
	d := startDaemon(t, storeConfig(t, model.URL(), store))
	out := d.collectOut(t, "c1")
	d.send(t, "c1", "m1", "first")
	out.WaitOutbound(t, wait, finalFor("m1"))
	d.send(t, "c1", "h", "/help")
	if got := out.WaitOutbound(t, wait, finalFor("h")); !strings.Contains(got.Text, "/new") || got.Kind != bus.KindNotice {
		t.Fatalf("/help = %+v", got)
	}
	d.send(t, "c1", "st", "/status")
	if got := out.WaitOutbound(t, wait, finalFor("st")); !strings.Contains(got.Text, "Turns in context: 1") {
		t.Fatalf("/status = %+v", got)
	}
	d.send(t, "c1", "n", "/new")
	out.WaitOutbound(t, wait, finalFor("n"))
	d.send(t, "c1", "m2", "second")
	out.WaitOutbound(t, wait, finalFor("m2"))
	if msgs := model.Requests()[1].Body.Messages; len(msgs) != 2 || msgs[1].Content != "second" {
		t.Fatalf("after /new the context still holds %d messages", len(msgs))
	}
	if model.RequestCount() != 2 {
		t.Fatal("a command reached the model")
	}
}

func TestE2ENotConfiguredExplainsHowToConfigure(t *testing.T) {
	cfg := testConfig(t, "")
	cfg.LLM.BaseURL, cfg.LLM.APIKey = "https://api.openai.com/v1", ""
	d := startDaemon(t, cfg)
	out := d.collectOut(t, "c1")
	d.send(t, "c1", "m1", "hi")
	got := out.WaitOutbound(t, wait, finalFor("m1"))
	if got.Kind != bus.KindError || !strings.Contains(got.Text, "OPENAI_API_KEY") {
		t.Fatalf("final = %+v", got)
	}
}

// TestE2EHistoryHasNoDuplicates checks the stored history directly.
func TestE2EHistoryHasNoDuplicates(t *testing.T) { eachStore(t, testE2EHistoryHasNoDuplicates) }

func testE2EHistoryHasNoDuplicates(t *testing.T, store string) {
	model := llmtest.NewServer(t)
	model.Enqueue(llmtest.TextReply("one"), llmtest.TextReply("two"))
	cfg := storeConfig(t, model.URL(), store)
	d := startDaemon(t, cfg)
	out := d.collectOut(t, "c1")
	in := d.send(t, "c1", "m1", "hello")
	out.WaitOutbound(t, wait, finalFor("m1"))
	data, _ := json.Marshal(in)
	if err := d.nc.Publish(d.subjects().In("console", "c1"), data); err != nil {
		t.Fatal(err)
	}
	// In-order processing: once m2 is answered the duplicate was handled.
	d.send(t, "c1", "m2", "next")
	out.WaitOutbound(t, wait, finalFor("m2"))
	d.stop()
	assertHistoryOnce(t, cfg, "console/c1", "console:m1")
}

// assertHistoryOnce opens the stopped daemon's history (data_dir/history.db,
// or with memory.store: jetstream its stream, on the embedded server
// started again on data_dir) and checks the inbound message is stored
// exactly once, with its receipt.
func assertHistoryOnce(t *testing.T, cfg Config, session, key string) {
	t.Helper()
	var st memory.Store
	if cfg.Memory.Store == memcfg.StoreJetStream {
		busCfg := cfg.Bus
		busCfg.Listen = ""
		b, err := natsbus.Open(t.Context(), busCfg, filepath.Join(cfg.DataDir, "jetstream"), nil)
		if err != nil {
			t.Fatal(err)
		}
		defer b.Close()
		js, err := jsstore.Open(t.Context(), b.Conn(), jsstore.Options{Prefix: "chat"})
		if err != nil {
			t.Fatal(err)
		}
		defer js.Close()
		if info, err := js.StreamInfo(t.Context()); err != nil || info.Config.Name != "CHAT_HISTORY" {
			t.Fatalf("history stream: %v, %v", info, err)
		}
		st = js
	} else {
		bolt, err := boltstore.Open(filepath.Join(cfg.DataDir, "history.db"), boltstore.Options{})
		if err != nil {
			t.Fatal(err)
		}
		defer bolt.Close()
		st = bolt
	}
	snap, err := st.Load(context.Background(), session, 1000)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, m := range snap.Messages {
		if m.InboundID == key {
			n++
		}
	}
	if n != 1 {
		t.Fatalf("history holds %s %d times", key, n)
	}
	if _, ok, err := st.Receipt(context.Background(), key); err != nil || !ok {
		t.Fatalf("no receipt for %s: %v", key, err)
	}
}

func scrape(t *testing.T, d *daemon) string {
	t.Helper()
	resp, err := http.Get("http://" + d.s.Admin.Addr() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /metrics: %d %v", resp.StatusCode, err)
	}
	return string(body)
}

// metricValue returns the value of the sample line that starts with prefix.
func metricValue(body, prefix string) float64 {
	for _, line := range strings.Split(body, "\n") {
		if strings.HasPrefix(line, prefix+" ") {
			v, _ := strconv.ParseFloat(strings.TrimSpace(strings.TrimPrefix(line, prefix)), 64)
			return v
		}
	}
	return 0
}

func TestE2EMetricsMove(t *testing.T) { eachStore(t, testE2EMetricsMove) }

func testE2EMetricsMove(t *testing.T, store string) {
	model := llmtest.NewServer(t)
	model.Enqueue(
		llmtest.Reply{ToolCalls: []llmtest.ToolCall{{ID: "c1", Name: "list_dir", Arguments: `{}`}}},
		llmtest.TextReply("done"),
	)
	d := startDaemon(t, storeConfig(t, model.URL(), store))
	before := scrape(t, d)
	out := d.collectOut(t, "c1")
	d.send(t, "c1", "m1", "list")
	out.WaitOutbound(t, wait, finalFor("m1"))
	if err := d.nc.Publish(d.subjects().In("console", "c1"), []byte("garbage")); err != nil {
		t.Fatal(err)
	}
	d.send(t, "c1", "m2", "again") // processed after the garbage
	model.Enqueue(llmtest.TextReply("again done"))
	out.WaitOutbound(t, wait, finalFor("m2"))
	after := scrape(t, d)
	for _, m := range []string{
		`switchboard_inbound_messages_total{channel="console",outcome="accepted"}`,
		`switchboard_inbound_messages_total{channel="console",outcome="rejected_invalid"}`,
		`switchboard_turns_total{agent="main",stop_reason="completed"}`,
		`switchboard_turn_duration_seconds_count{phase="final"}`,
		`switchboard_llm_requests_total{model="test-model",status="ok"}`,
		`switchboard_tool_calls_total{outcome="ok",tool="list_dir"}`,
		`switchboard_outbound_messages_total{channel="console",kind="reply"}`,
		`switchboard_store_commit_duration_seconds_count`,
	} {
		if b, a := metricValue(before, m), metricValue(after, m); a <= b {
			t.Errorf("%s did not move: %v -> %v\n%s", m, b, a, grepLines(after, "tool_calls"))
		}
	}
	for _, g := range []string{"switchboard_active_sessions", "switchboard_jetstream_pending_messages", "switchboard_queued_messages"} {
		if !strings.Contains(after, g+" ") {
			t.Errorf("gauge %s missing", g)
		}
	}
	if strings.Contains(after, `"c1"`) || strings.Contains(after, "m1") {
		t.Error("a chat or message id leaked into a label")
	}
}

func grepLines(body, sub string) string {
	var out []string
	for _, l := range strings.Split(body, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// TestE2ESecretsNeverLogged runs turns that fail at the model and at a tool
// with debug logging, and checks no configured secret appears in the logs
// or in any message on the bus.
func TestE2ESecretsNeverLogged(t *testing.T) {
	const key = "sk-SECRET-do-not-log-7f3a"
	model := llmtest.NewServer(t)
	model.Enqueue(llmtest.ErrorReply(401, "invalid_api_key", "Incorrect API key provided"),
		llmtest.Reply{ToolCalls: []llmtest.ToolCall{{ID: "c", Name: "read_file", Arguments: `{"path":"/etc/shadow"}`}}},
		llmtest.TextReply("ok"))
	cfg := testConfig(t, model.URL())
	cfg.LLM.APIKey = key
	var logs syncbuf.Buffer
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan started, 1)
	done := make(chan error, 1)
	go func() {
		done <- serve(ctx, cfg, slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug})), func(s started) { ready <- s })
	}()
	var s started
	select {
	case s = <-ready:
	case err := <-done:
		t.Fatal(err)
	}
	nc, err := nats.Connect(s.Bus.ClientURL(), operatorAuth(t, cfg))
	if err != nil {
		t.Fatal(err)
	}
	all := bustest.Collect(t, nc, ">")
	subj := s.Bus.Subjects()
	out := bustest.Collect(t, nc, subj.Out("console", "c1"))
	for _, id := range []string{"m1", "m2"} {
		bustest.PublishInbound(t, nc, subj, bus.Inbound{V: 1, ID: id, Channel: "console", ChatID: "c1", UserID: "u", Text: "hi"})
		out.WaitOutbound(t, wait, finalFor(id))
	}
	nc.Close()
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if model.Requests()[0].Header.Get("Authorization") != "Bearer "+key {
		t.Fatal("the key was not even used")
	}
	token, err := natsbus.ReadOperatorToken(cfg.DataDir)
	if err != nil {
		t.Fatal(err)
	}
	for what, secret := range map[string]string{"the API key": key, "the bus operator token": token} {
		if strings.Contains(logs.String(), secret) {
			t.Fatalf("%s appears in the log:\n%s", what, logs.String())
		}
		for _, m := range all.All() {
			if strings.Contains(string(m.Data), secret) {
				t.Fatalf("%s appears on the bus in %s", what, m.Subject)
			}
		}
	}
}

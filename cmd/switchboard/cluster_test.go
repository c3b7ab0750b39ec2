package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"go.yaml.in/yaml/v3"

	"github.com/switchboard-chat/switchboard/bus"
	"github.com/switchboard-chat/switchboard/internal/clustertest"
	"github.com/switchboard-chat/switchboard/internal/polltest"
	"github.com/switchboard-chat/switchboard/llm/llmtest"
	"github.com/switchboard-chat/switchboard/memory/memcfg"
)

// The cluster tests (issue 17): a real 3-node NATS cluster on loopback
// (internal/clustertest: nats-server processes, JetStream, routes,
// user/password) and three processes of the release binary (built
// without -race: six servers on a shared machine; the single-daemon tests
// run the race build) with the
// same configuration (bus.url the three nodes, bus.replicas 3,
// memory.store jetstream), each with its own admin.listen, data_dir and
// workspace, as three machines would have. Bridges publish on several
// chats through JetStream; the finals are read from CHAT_OUT; which
// instance ran a turn is read from its log ("turn done", JSON).
//
// Short mode (the default, for CI) has each chat answered 3 more times
// before and after each fault (a few seconds of traffic);
// SWITCHBOARD_CLUSTER_TURNS=<n> makes it n. SWITCHBOARD_CLUSTER_PARTITIONS=<n> adds agent.partitions: n to the
// instances' configuration (without it, the default applies: 16 with
// memory.store jetstream once partitions exist).
//
//	SWITCHBOARD_CLUSTER_TURNS=100 go test -race -run TestCluster -v ./cmd/switchboard/

// clusterMovedDeadline bounds the time from killing an instance to the
// first answer of each of its chats by another instance (issue 17).
const clusterMovedDeadline = 10 * time.Second

// clusterTurns is how many more answers each chat gets before and after
// a fault.
func clusterTurns(t *testing.T) int {
	t.Helper()
	if v := os.Getenv("SWITCHBOARD_CLUSTER_TURNS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			t.Fatalf("SWITCHBOARD_CLUSTER_TURNS=%q: want a positive number", v)
		}
		return n
	}
	return 3
}

// clusterModel is the scripted model of the cluster tests. A message
// "message <id>" is answered "answer to message <id>" after a short delay
// (so that turns are in flight when an instance dies); a message holding
// a marker of scripts gets that marker's tool calls, one per step, then
// "done". It records, per inbound id, the user texts of every request
// made for it, and every tool result it was shown.
type clusterModel struct {
	scripts map[string][]llmtest.ToolCall
	delay   time.Duration // before each plain answer

	mu       sync.Mutex
	requests []clusterRequest
	results  map[string]string // tool call id -> result text
}

type clusterRequest struct {
	at    time.Time
	id    string   // the inbound id of the last user message
	users []string // the user texts of the request, oldest first
}

func newClusterModel(t testing.TB, scripts map[string][]llmtest.ToolCall, delay time.Duration) (*clusterModel, *llmtest.Server) {
	m := &clusterModel{scripts: scripts, delay: delay, results: map[string]string{}}
	return m, llmtest.NewServer(t, llmtest.WithResponder(m.respond), llmtest.WithRecordLimit(0))
}

func (m *clusterModel) respond(r *llmtest.Request) llmtest.Reply {
	text := r.LastUserText()
	if len(r.Body.Messages) > 0 && strings.HasPrefix(llmtest.MessageText(r.Body.Messages[0]), "You maintain the running summary") {
		return llmtest.TextReply(text)
	}
	req := clusterRequest{at: time.Now(), id: strings.TrimPrefix(text, "message ")}
	last, step := 0, 0
	for i, msg := range r.Body.Messages {
		if msg.Role == "user" {
			req.users = append(req.users, llmtest.MessageText(msg))
			last = i
		}
	}
	m.mu.Lock()
	m.requests = append(m.requests, req)
	for _, msg := range r.Body.Messages[last:] {
		switch {
		case msg.Role == "assistant" && len(msg.ToolCalls) > 0:
			step++
		case msg.Role == "tool":
			m.results[msg.ToolCallID] = llmtest.MessageText(msg)
		}
	}
	m.mu.Unlock()
	for _, marker := range slices.Sorted(maps.Keys(m.scripts)) {
		if calls := m.scripts[marker]; strings.Contains(text, marker) {
			if step < len(calls) {
				return llmtest.Reply{ToolCalls: []llmtest.ToolCall{calls[step]}}
			}
			return llmtest.TextReply("done")
		}
	}
	return llmtest.Reply{Text: "answer to " + text, Delay: m.delay}
}

// requestsFor returns the requests made for inbound id after since.
func (m *clusterModel) requestsFor(id string, since time.Time) []clusterRequest {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []clusterRequest
	for _, r := range m.requests {
		if r.id == id && r.at.After(since) {
			out = append(out, r)
		}
	}
	return out
}

func (m *clusterModel) result(callID string) string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.results[callID]
}

// finalWatcher follows CHAT_OUT (everything stored, from the start) and
// records the distinct final ids per inbound id. It reads through a
// durable consumer of its own, replicated like the stream, so that it
// survives the loss of a node as the daemons' consumers do (an ordered
// consumer, a single copy on one node, stalled now and then when that
// node was killed).
type finalWatcher struct {
	cc jetstream.ConsumeContext

	mu      sync.Mutex
	finals  map[string]map[string]bool // inbound id -> final ids
	changed chan struct{}              // closed and replaced on every final
}

// watchers numbers the watchers' consumers (a new one after a restart).
var watchers int

func watchFinals(t *testing.T, js jetstream.JetStream) *finalWatcher {
	t.Helper()
	w := &finalWatcher{finals: map[string]map[string]bool{}, changed: make(chan struct{})}
	watchers++
	cons, err := js.CreateOrUpdateConsumer(t.Context(), "CHAT_OUT", jetstream.ConsumerConfig{
		Durable: fmt.Sprintf("test_watch_%d", watchers), AckPolicy: jetstream.AckNonePolicy, DeliverPolicy: jetstream.DeliverAllPolicy})
	if err != nil {
		t.Fatal(err)
	}
	w.cc, err = cons.Consume(func(m jetstream.Msg) {
		var o bus.Outbound
		if json.Unmarshal(m.Data(), &o) != nil || !o.Final {
			return
		}
		w.mu.Lock()
		defer w.mu.Unlock()
		if w.finals[o.InReplyTo] == nil {
			w.finals[o.InReplyTo] = map[string]bool{}
		}
		w.finals[o.InReplyTo][o.ID] = true
		close(w.changed)
		w.changed = make(chan struct{})
	}, jetstream.ConsumeErrHandler(func(jetstream.ConsumeContext, error) {}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.cc.Stop)
	return w
}

func (w *finalWatcher) answered(id string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.finals[id]) > 0
}

// waitAnswered waits until every id has a final, at most timeout.
func (w *finalWatcher) waitAnswered(t *testing.T, timeout time.Duration, ids []string) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		w.mu.Lock()
		var missing []string
		for _, id := range ids {
			if len(w.finals[id]) == 0 {
				missing = append(missing, id)
			}
		}
		ch := w.changed
		w.mu.Unlock()
		if len(missing) == 0 {
			return
		}
		left := time.Until(deadline)
		if left <= 0 {
			t.Fatalf("%d of %d accepted messages have no final after %s, e.g. %v", len(missing), len(ids), timeout, missing[:min(5, len(missing))])
		}
		select {
		case <-ch:
		case <-time.After(left):
		}
	}
}

// assertOnce fails for every id without exactly one final.
func (w *finalWatcher) assertOnce(t *testing.T, ids []string) {
	t.Helper()
	w.mu.Lock()
	defer w.mu.Unlock()
	bad := 0
	for _, id := range ids {
		if n := len(w.finals[id]); n != 1 {
			bad++
			if bad <= 10 {
				t.Errorf("message %s has %d distinct finals, want exactly 1", id, n)
			}
		}
	}
	if bad > 0 {
		t.Errorf("%d of %d accepted messages broke exactly-once", bad, len(ids))
	}
}

// clusterInstance is one daemon process of the cluster tests.
type clusterInstance struct {
	name, config, admin string
	p                   *process
	running             bool   // started and not yet killed or stopped
	earlier             string // the logs of its earlier runs
}

// turnDone is one "turn done" line of an instance's log.
type turnDone struct {
	at      time.Time
	session string
	msgID   string
}

// turns parses the instance's log (of every run so far) for finished turns.
func (in *clusterInstance) turns() []turnDone {
	if in.p == nil {
		return nil
	}
	var out []turnDone
	sc := bufio.NewScanner(strings.NewReader(in.earlier + in.p.out.String()))
	sc.Buffer(make([]byte, 0, 1<<16), 1<<20)
	for sc.Scan() {
		var l struct {
			Time    time.Time `json:"time"`
			Msg     string    `json:"msg"`
			Session string    `json:"session"`
			MsgID   string    `json:"msg_id"`
		}
		if json.Unmarshal(sc.Bytes(), &l) == nil && l.Msg == "turn done" {
			out = append(out, turnDone{at: l.Time, session: l.Session, msgID: l.MsgID})
		}
	}
	return out
}

// clusterRig is the 3-node cluster, the model and the three instances.
type clusterRig struct {
	t     *testing.T
	bin   string
	cl    *clustertest.Cluster
	model *clusterModel
	inst  []*clusterInstance
	js    jetstream.JetStream
	pub   *publisher
	w     *finalWatcher
}

// rigOptions say what a cluster rig runs.
type rigOptions struct {
	store      string                        // memory.store; "" is jetstream
	scripts    map[string][]llmtest.ToolCall // the model's tool calls by marker
	modelDelay time.Duration                 // before each plain answer
	start      []int                         // the instances (of three) started and waited for
}

// startClusterRig starts the cluster, the model and the instances of
// o.start, waits until they are ready and starts watching CHAT_OUT.
func startClusterRig(t *testing.T, o rigOptions) *clusterRig {
	t.Helper()
	if testing.Short() {
		t.Skip("builds and runs the binary and a 3-node NATS cluster; skipped with -short")
	}
	if o.store == "" {
		o.store = "jetstream"
	}
	r := &clusterRig{t: t, bin: buildPlainBinary(t)}
	r.cl = clustertest.Start(t, 3)
	var srv *llmtest.Server
	r.model, srv = newClusterModel(t, o.scripts, o.modelDelay)
	partitions := ""
	if v := os.Getenv("SWITCHBOARD_CLUSTER_PARTITIONS"); v != "" {
		partitions = "  partitions: " + v + "\n"
	}
	for i := range 3 {
		dir := t.TempDir()
		in := &clusterInstance{name: fmt.Sprintf("i%d", i+1), admin: freePort(t), config: filepath.Join(dir, "config.yaml")}
		cfg := fmt.Sprintf(`data_dir: %s
log:
  level: info
  format: json
bus:
  url: %q
  replicas: 3
admin:
  listen: %q
memory:
  store: %s
llm:
  base_url: %s
  api_key: test
  model: cluster-model
  max_retries: 0
agent:
  workspace: %s
  delta_interval: 20ms
%s`, filepath.Join(dir, "data"), r.cl.URL(), in.admin, o.store, srv.URL(), filepath.Join(dir, "workspace"), partitions)
		if err := os.WriteFile(in.config, []byte(cfg), 0o600); err != nil {
			t.Fatal(err)
		}
		r.inst = append(r.inst, in)
	}
	for _, i := range o.start {
		r.startInstance(i)
	}
	for _, i := range o.start {
		r.waitReady(i)
	}
	r.connect()
	return r
}

// connect opens the test's own connection (a bridge's: the cluster's
// user) and the CHAT_OUT watcher.
func (r *clusterRig) connect() {
	nc := r.cl.Connect(r.t, quietReconnecting()...)
	js, err := jetstream.New(nc)
	if err != nil {
		r.t.Fatal(err)
	}
	r.js = js
	if r.pub == nil {
		r.pub = &publisher{subj: bus.Subjects{Prefix: "chat"}}
	}
	r.pub.js = js
	r.w = watchFinals(r.t, js)
}

func (r *clusterRig) startInstance(i int) {
	r.t.Helper()
	in := r.inst[i]
	if in.running {
		r.t.Fatalf("%s is running", in.name)
	}
	if in.p != nil {
		in.earlier += in.p.out.String()
	}
	in.p = startProcess(r.t, r.bin, in.config)
	in.running = true
}

// waitReady waits until instance i's /readyz says 200.
func (r *clusterRig) waitReady(i int) {
	r.t.Helper()
	in := r.inst[i]
	code, body := 0, ""
	polltest.Until(r.t, 60*time.Second, 50*time.Millisecond, func() bool {
		select {
		case err := <-in.p.done:
			r.t.Fatalf("%s exited: %v\n%s", in.name, err, in.p.out.String())
		default:
		}
		resp, err := http.Get("http://" + in.admin + "/readyz")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		code, body = resp.StatusCode, string(b)
		return code == http.StatusOK
	}, func() string { return fmt.Sprintf("%s not ready: /readyz %d %q", in.name, code, body) })
}

func (r *clusterRig) kill(i int) time.Time {
	r.t.Helper()
	in := r.inst[i]
	at := time.Now()
	if err := in.p.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		r.t.Fatal(err)
	}
	select {
	case <-in.p.done:
	case <-time.After(wait):
		r.t.Fatalf("%s did not die", in.name)
	}
	in.running = false
	return at
}

func (r *clusterRig) stop(i int) {
	r.t.Helper()
	stopProcess(r.t, r.inst[i].p)
	r.inst[i].running = false
}

// lastOwner maps each session to the instance (index) whose log holds its
// latest finished turn before until.
func (r *clusterRig) lastOwner(until time.Time) map[string]int {
	owner, at := map[string]int{}, map[string]time.Time{}
	for i, in := range r.inst {
		for _, td := range in.turns() {
			if td.at.Before(until) && td.at.After(at[td.session]) {
				owner[td.session], at[td.session] = i, td.at
			}
		}
	}
	return owner
}

// sender keeps chats sending: each chat publishes its next message when
// it has fewer than 3 unanswered ones, about every 100 ms.
type sender struct {
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

func (r *clusterRig) startSending(chats []string) *sender {
	ctx, cancel := context.WithCancel(context.Background())
	s := &sender{cancel: cancel}
	for _, chat := range chats {
		s.wg.Go(func() {
			var open []string
			for n := 0; ctx.Err() == nil; n++ {
				open = slices.DeleteFunc(open, r.w.answered)
				if len(open) >= 3 {
					n--
				} else if id := fmt.Sprintf("%s-m%03d", chat, n); r.pub.send(ctx, chat, id) {
					open = append(open, id)
				}
				select {
				case <-ctx.Done():
				case <-time.After(100 * time.Millisecond):
				}
			}
		})
	}
	r.t.Cleanup(s.stop)
	return s
}

func (s *sender) stop() { s.cancel(); s.wg.Wait() }

// drain stops the senders, waits until every accepted message has a
// final, then sends one more message per chat and waits for its answer
// (a session answers in order, so nothing older is still to come), and
// checks that each message got exactly one final.
func (r *clusterRig) drain(s *sender, chats []string) []string {
	r.t.Helper()
	s.stop()
	ids := r.pub.ids()
	r.w.waitAnswered(r.t, 90*time.Second, ids)
	var last []string
	for _, chat := range chats {
		id := chat + "-last"
		ctx, cancel := context.WithTimeout(r.t.Context(), wait)
		if !r.pub.send(ctx, chat, id) {
			r.t.Fatalf("%s not accepted", id)
		}
		cancel()
		last = append(last, id)
	}
	r.w.waitAnswered(r.t, 60*time.Second, last)
	ids = append(ids, last...)
	r.w.assertOnce(r.t, ids)
	return ids
}

func clusterChats(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("chat%02d", i)
	}
	return out
}

// answeredPerChat counts the answered messages of each chat.
func (r *clusterRig) answeredPerChat() map[string]int {
	count := map[string]int{}
	for _, id := range r.pub.ids() {
		if r.w.answered(id) {
			chat, _, _ := strings.Cut(id, "-")
			count[chat]++
		}
	}
	return count
}

// waitMoreAnswered waits until each chat has n more answered messages
// than now (the senders keep sending meanwhile).
func (r *clusterRig) waitMoreAnswered(chats []string, n int) {
	r.t.Helper()
	base := r.answeredPerChat()
	var count map[string]int
	polltest.Until(r.t, 90*time.Second, 50*time.Millisecond, func() bool {
		count = r.answeredPerChat()
		for _, c := range chats {
			if count[c] < base[c]+n {
				return false
			}
		}
		return true
	}, func() string {
		return fmt.Sprintf("not every chat got %d more answers: before %v, now %v", n, base, count)
	})
}

// TestClusterKillInstance (issue 17): while twelve chats send, one of the
// three instances (the one that ran the most chats last) is killed with
// SIGKILL. Every chat whose latest turn ran on it is answered by another
// instance within 10 s (the time to the first and the last such answer
// is logged); the first request of each such chat after the kill holds
// the turn the dead instance wrote last (its history is on JetStream);
// every accepted message gets exactly one final.
func TestClusterKillInstance(t *testing.T) {
	r := startClusterRig(t, rigOptions{modelDelay: 50 * time.Millisecond, start: []int{0, 1, 2}})
	chats := clusterChats(12)
	s := r.startSending(chats)
	r.waitMoreAnswered(chats, clusterTurns(t)) // traffic before the fault

	f := r.failover(clusterMovedDeadline)
	r.waitMoreAnswered(chats, clusterTurns(t)) // traffic after the fault
	r.drain(s, chats)

	for sess, td := range f.lastByVictim {
		want := "message " + td.msgID
		reqs := r.model.requestsFor(nextID(r, sess, td.msgID, f.killedAt), f.killedAt)
		if len(reqs) == 0 {
			t.Errorf("%s: no request after the kill", sess)
			continue
		}
		if !slices.Contains(reqs[0].users, want) {
			t.Errorf("%s: the first request after the kill lacks %q (written by the killed instance); its user messages: %q",
				sess, want, reqs[0].users)
		}
	}
}

// failoverResult is what failover measured.
type failoverResult struct {
	victim       int
	killedAt     time.Time
	lastByVictim map[string]turnDone      // per session: the victim's last finished turn
	firstAnswer  map[string]time.Duration // per such session: SIGKILL to its first answer by another instance
}

// failover kills (SIGKILL) the instance that ran the most sessions last
// and waits, at most deadline, until each session whose latest turn ran
// on it is answered by another instance; it logs the time from the kill
// to the first and the last of those answers.
func (r *clusterRig) failover(deadline time.Duration) failoverResult {
	t := r.t
	t.Helper()
	owner := r.lastOwner(time.Now())
	perInstance := make([]int, 3)
	for _, i := range owner {
		perInstance[i]++
	}
	victim := 0
	for i, n := range perInstance {
		if n > perInstance[victim] {
			victim = i
		}
	}
	killedAt := r.kill(victim)
	// What the victim finished last, per chat: its history must follow.
	f := failoverResult{victim: victim, killedAt: killedAt, firstAnswer: map[string]time.Duration{}}
	lastByVictim := map[string]turnDone{}
	for _, td := range r.inst[victim].turns() {
		if owner[td.session] == victim && td.at.After(lastByVictim[td.session].at) {
			lastByVictim[td.session] = td
		}
	}
	t.Logf("killed %s (sessions last run per instance: %v); its chats: %d", r.inst[victim].name, perInstance, len(lastByVictim))

	firstAnswer := f.firstAnswer
	polltest.Until(t, deadline, 20*time.Millisecond, func() bool {
		for i, in := range r.inst {
			if i == victim {
				continue
			}
			for _, td := range in.turns() {
				if _, moved := lastByVictim[td.session]; moved && td.at.After(killedAt) {
					if d, seen := firstAnswer[td.session]; !seen || td.at.Sub(killedAt) < d {
						firstAnswer[td.session] = td.at.Sub(killedAt)
					}
				}
			}
		}
		return len(firstAnswer) == len(lastByVictim)
	}, func() string {
		var waiting []string
		for sess := range lastByVictim {
			if _, ok := firstAnswer[sess]; !ok {
				waiting = append(waiting, sess)
			}
		}
		return fmt.Sprintf("%d chats of the killed instance not answered by another within %s: %v (answered after %v)",
			len(waiting), deadline, waiting, firstAnswer)
	})
	times := make([]time.Duration, 0, len(firstAnswer))
	for _, d := range firstAnswer {
		times = append(times, d)
	}
	slices.Sort(times)
	if len(times) > 0 {
		t.Logf("SIGKILL to the first answer of a moved chat: first %s, last %s (%d chats)",
			times[0].Round(time.Millisecond), times[len(times)-1].Round(time.Millisecond), len(times))
	}
	f.lastByVictim = lastByVictim
	return f
}

// nextID returns the id of the first message of session's chat after
// prev that a model request was made for after since.
func nextID(r *clusterRig, session, prev string, since time.Time) string {
	chat := strings.TrimPrefix(session, "console/")
	best, bestAt := "", time.Time{}
	r.model.mu.Lock()
	defer r.model.mu.Unlock()
	for _, req := range r.model.requests {
		c, _, _ := strings.Cut(req.id, "-")
		if c == chat && req.id > prev && req.at.After(since) && (best == "" || req.at.Before(bestAt)) {
			best, bestAt = req.id, req.at
		}
	}
	return best
}

// TestClusterNodeDown (issue 17): with bus.replicas 3, one NATS node of
// three is killed while eight chats send: messages keep being accepted
// and answered, and every accepted message gets exactly one final.
func TestClusterNodeDown(t *testing.T) {
	r := startClusterRig(t, rigOptions{modelDelay: 50 * time.Millisecond, start: []int{0, 1, 2}})
	chats := clusterChats(8)
	s := r.startSending(chats)
	r.waitMoreAnswered(chats, clusterTurns(t))

	r.cl.Nodes[0].Kill(t)
	// Service continues: every chat keeps being answered.
	r.waitMoreAnswered(chats, clusterTurns(t))
	ids := r.drain(s, chats)
	t.Logf("%d messages on %d chats answered once each with a node down", len(ids), len(chats))
}

// TestClusterRestartEverything (issue 17): after turns on four chats, a
// memory note and a schedule written (each through the instance that ran
// its turn), all three
// instances and all three NATS nodes are stopped and started again. The
// recall runs on an instance that did not write them (the writers are
// started last): the note is found, the schedule listed, each chat's
// next request holds its earlier turns; then every message has exactly
// one final.
func TestClusterRestartEverything(t *testing.T) {
	const codeWord = "PELICAN-7"
	const task = "water the plants"
	r := startClusterRig(t, rigOptions{start: []int{0, 1, 2}, scripts: map[string][]llmtest.ToolCall{
		"remember-note": {{ID: "w1", Name: "memory_write", Arguments: `{"text":"The code word is ` + codeWord + `","kind":"core"}`}},
		"recall-note":   {{ID: "r1", Name: "memory_search", Arguments: `{"query":"code word"}`}},
		"make-schedule": {{ID: "s1", Name: "schedule", Arguments: `{"action":"create","prompt":"` + task + `","every":"24h"}`}},
		"list-schedule": {{ID: "l1", Name: "schedule", Arguments: `{"action":"list"}`}},
	}})
	chats := clusterChats(4)
	send := func(chat, id string) {
		t.Helper()
		ctx, cancel := context.WithTimeout(t.Context(), wait)
		defer cancel()
		if !r.pub.send(ctx, chat, id) {
			t.Fatalf("%s not accepted", id)
		}
	}
	for n := range 3 {
		for _, c := range chats {
			send(c, fmt.Sprintf("%s-m%d", c, n))
		}
		r.w.waitAnswered(t, 60*time.Second, r.pub.ids())
	}
	// One at a time: two messages sent together may be answered in one
	// turn (collected), and each must be its own turn here.
	send("notes", "notes-remember-note")
	r.w.waitAnswered(t, 60*time.Second, r.pub.ids())
	send("notes", "notes-make-schedule")
	r.w.waitAnswered(t, 60*time.Second, r.pub.ids())
	if res := r.model.result("w1"); res == "" || strings.Contains(strings.ToLower(res), "error") {
		t.Fatalf("memory_write result %q", res)
	}
	if res := r.model.result("s1"); res == "" || strings.Contains(strings.ToLower(res), "error") {
		t.Fatalf("schedule create result %q", res)
	}
	// The instances that wrote the note and created the task start last.
	writers := map[int]bool{}
	for _, id := range []string{"notes-remember-note", "notes-make-schedule"} {
		by := -1
		// An instance logs "turn done" just after it published the final.
		polltest.Until(t, wait, 20*time.Millisecond, func() bool {
			for i, in := range r.inst {
				for _, td := range in.turns() {
					if td.msgID == id {
						by = i
					}
				}
			}
			return by >= 0
		}, func() string { return "no instance logged the turn of " + id })
		writers[by] = true
		t.Logf("%s ran on %s", id, r.inst[by].name)
	}

	for i := range r.inst {
		r.stop(i)
	}
	r.w.cc.Stop()
	r.cl.StopAll(t)
	r.cl.RestartAll(t)
	var others []int
	for i := range r.inst {
		if !writers[i] {
			others = append(others, i)
			r.startInstance(i)
		}
	}
	for _, i := range others {
		r.waitReady(i)
	}
	r.connect()
	restarted := time.Now()

	for _, c := range chats {
		send(c, c+"-after")
	}
	send("notes", "notes-recall-note")
	r.w.waitAnswered(t, 60*time.Second, r.pub.ids())
	send("notes", "notes-list-schedule")
	r.w.waitAnswered(t, 60*time.Second, r.pub.ids())
	for _, c := range chats {
		reqs := r.model.requestsFor(c+"-after", restarted)
		if len(reqs) == 0 {
			t.Fatalf("%s: no request after the restart", c)
		}
		for n := range 3 {
			if want := fmt.Sprintf("message %s-m%d", c, n); !slices.Contains(reqs[0].users, want) {
				t.Errorf("%s: the request after the restart lacks the earlier turn %q; its user messages: %q", c, want, reqs[0].users)
			}
		}
	}
	if res := r.model.result("r1"); !strings.Contains(res, codeWord) {
		t.Errorf("after the restart, on an instance that did not write it, memory_search does not find the note %q: %q", codeWord, res)
	}
	if res := r.model.result("l1"); !strings.Contains(res, task) {
		t.Errorf("after the restart, on an instance that did not create it, the schedule list lacks %q: %q", task, res)
	}

	for i := range writers {
		r.startInstance(i)
	}
	for i := range writers {
		r.waitReady(i)
	}
	for _, c := range chats {
		send(c, c+"-last")
	}
	r.w.waitAnswered(t, 60*time.Second, r.pub.ids())
	r.w.assertOnce(t, r.pub.ids())
}

// The compose file of deploy/cluster, as far as the checks below read it.
// Decoded strictly: a key not listed here (a typo such as depend_on) is an
// error.
type composeFile struct {
	Name     string                    `yaml:"name"`
	Services map[string]composeService `yaml:"services"`
	Volumes  map[string]any            `yaml:"volumes"`
}

type composeService struct {
	Image string `yaml:"image"`
	Build struct {
		Context string `yaml:"context"`
	} `yaml:"build"`
	Command     []string          `yaml:"command"`
	Environment map[string]string `yaml:"environment"`
	Volumes     []string          `yaml:"volumes"`
	Ports       []string          `yaml:"ports"`
	DependsOn   []string          `yaml:"depends_on"`
	Deploy      struct {
		Replicas int `yaml:"replicas"`
	} `yaml:"deploy"`
	Restart         string `yaml:"restart"`
	StopGracePeriod string `yaml:"stop_grace_period"`
}

var composeVarRE = regexp.MustCompile(`\$\{([A-Z0-9_]+)(?:(:-|:\?)([^}]*))?\}`)

// interpolate replaces ${VAR}, ${VAR:-default} and ${VAR:?message} as
// compose does, from env; it reports the variables without a value that
// ":?" requires.
func interpolate(s string, env map[string]string) (string, []string) {
	var missing []string
	out := composeVarRE.ReplaceAllStringFunc(s, func(m string) string {
		g := composeVarRE.FindStringSubmatch(m)
		v := env[g[1]]
		switch {
		case v != "":
			return v
		case g[2] == ":?":
			missing = append(missing, g[1])
		case g[2] == ":-":
			return g[3]
		}
		return ""
	})
	return out, missing
}

// flagValues reads a nats-server command line: "--flag value" pairs and
// lone boolean flags.
func flagValues(args []string) map[string]string {
	out := map[string]string{}
	for i := 0; i < len(args); i++ {
		if !strings.HasPrefix(args[i], "-") {
			continue
		}
		if i+1 < len(args) && !strings.HasPrefix(args[i+1], "-") {
			out[args[i]] = args[i+1]
			i++
		} else {
			out[args[i]] = "true"
		}
	}
	return out
}

// hostPorts returns the host ports a "host:from[-to]:container" entry
// publishes.
func hostPorts(entry string) ([]int, error) {
	parts := strings.Split(entry, ":")
	if len(parts) != 3 {
		return nil, fmt.Errorf("port %q: want host_ip:host_port:container_port", entry)
	}
	from, to, ranged := strings.Cut(parts[1], "-")
	if !ranged {
		to = from
	}
	a, err1 := strconv.Atoi(from)
	b, err2 := strconv.Atoi(to)
	if err1 != nil || err2 != nil || b < a {
		return nil, fmt.Errorf("port %q: bad host port", entry)
	}
	var out []int
	for p := a; p <= b; p++ {
		out = append(out, p)
	}
	return out, nil
}

// composeProblems checks the compose file of deploy/cluster (its text,
// env for the variables, dir the folder it is in) and lists what is
// inconsistent: the NATS nodes (names, JetStream store on a volume, one
// cluster name, routes to every other node with the route credentials,
// one client user), the Switchboard service (built from the repository's
// Dockerfile, the config file mounted where the image reads it, replicas,
// bus URL naming every node with the client credentials, depends_on),
// ports published once, named volumes declared and used.
func composeProblems(data []byte, env map[string]string, dir string) []string {
	var probs []string
	bad := func(format string, args ...any) { probs = append(probs, fmt.Sprintf(format, args...)) }
	text, missing := interpolate(string(data), env)
	if len(missing) > 0 {
		bad("variables required but not set: %v", missing)
	}
	var f composeFile
	dec := yaml.NewDecoder(strings.NewReader(text))
	dec.KnownFields(true)
	if err := dec.Decode(&f); err != nil {
		return append(probs, "decode: "+err.Error())
	}
	var natsNames []string
	for name, s := range f.Services {
		if strings.HasPrefix(s.Image, "nats:") {
			natsNames = append(natsNames, name)
		}
	}
	slices.Sort(natsNames)
	if len(natsNames) != 3 {
		bad("%d NATS services (%v), want 3", len(natsNames), natsNames)
	}
	var clusterName, user, pass, routeUser, routePass, routePort string
	for i, name := range natsNames {
		s := f.Services[name]
		fl := flagValues(s.Command)
		if fl["--name"] != name {
			bad("%s: --name %q, want the service name", name, fl["--name"])
		}
		if fl["--jetstream"] != "true" {
			bad("%s: JetStream is off (--jetstream)", name)
		}
		if !slices.ContainsFunc(s.Volumes, func(v string) bool { return strings.HasSuffix(v, ":"+fl["--store_dir"]) }) {
			bad("%s: the JetStream store %q is on no volume", name, fl["--store_dir"])
		}
		cu, err := url.Parse(fl["--cluster"])
		if err != nil || cu.User == nil {
			bad("%s: --cluster %q: want nats://route_user:route_password@0.0.0.0:port", name, fl["--cluster"])
			continue
		}
		cp, _ := cu.User.Password()
		if i == 0 {
			clusterName, user, pass, routeUser, routePass, routePort = fl["--cluster_name"], fl["--user"], fl["--pass"], cu.User.Username(), cp, cu.Port()
		}
		if fl["--cluster_name"] != clusterName || fl["--user"] != user || fl["--pass"] != pass || cu.User.Username() != routeUser || cp != routePass || cu.Port() != routePort {
			bad("%s: cluster name, client user/password or route credentials/port differ from %s's", name, natsNames[0])
		}
		var routed []string
		for _, r := range strings.Split(fl["--routes"], ",") {
			ru, err := url.Parse(r)
			if err != nil || ru.User == nil {
				bad("%s: route %q without credentials", name, r)
				continue
			}
			rp, _ := ru.User.Password()
			if ru.User.Username() != routeUser || rp != routePass || ru.Port() != routePort {
				bad("%s: route %q: credentials or port differ from --cluster", name, r)
			}
			routed = append(routed, ru.Hostname())
		}
		slices.Sort(routed)
		others := slices.DeleteFunc(slices.Clone(natsNames), func(n string) bool { return n == name })
		if !slices.Equal(routed, others) {
			bad("%s: routes to %v, want every other node %v", name, routed, others)
		}
	}
	sb, ok := f.Services["switchboard"]
	if !ok {
		return append(probs, "no service switchboard")
	}
	if _, err := os.Stat(filepath.Join(dir, sb.Build.Context, "Dockerfile")); err != nil {
		bad("switchboard: build context %q has no Dockerfile: %v", sb.Build.Context, err)
	}
	dockerfile, _ := os.ReadFile(filepath.Join(dir, sb.Build.Context, "Dockerfile"))
	mounted := false
	for _, v := range sb.Volumes {
		src, dst, _ := strings.Cut(strings.TrimSuffix(v, ":ro"), ":")
		if dst == "/etc/switchboard/config.yaml" && strings.HasPrefix(src, ".") {
			mounted = true
			if _, err := os.Stat(filepath.Join(dir, src)); err != nil {
				bad("switchboard: mounted config %s: %v", src, err)
			}
		}
	}
	if !mounted || !strings.Contains(string(dockerfile), `"--config", "/etc/switchboard/config.yaml"`) {
		bad("switchboard: the config file is not mounted at the path the image's ENTRYPOINT reads")
	}
	if sb.Deploy.Replicas != 3 {
		bad("switchboard: %d replicas, want 3", sb.Deploy.Replicas)
	}
	deps := slices.Sorted(slices.Values(sb.DependsOn))
	if !slices.Equal(deps, natsNames) {
		bad("switchboard: depends_on %v, want %v", deps, natsNames)
	}
	var hosts []string
	for _, u := range strings.Split(sb.Environment["SWITCHBOARD_BUS_URL"], ",") {
		pu, err := url.Parse(u)
		if err != nil || pu.User == nil {
			bad("switchboard: bus URL %q without credentials", u)
			continue
		}
		pw, _ := pu.User.Password()
		if pu.User.Username() != user || pw != pass || pu.Port() != "4222" {
			bad("switchboard: bus URL %q: not the nodes' client user/password on port 4222", u)
		}
		hosts = append(hosts, pu.Hostname())
	}
	slices.Sort(hosts)
	if !slices.Equal(hosts, natsNames) {
		bad("switchboard: bus URL names %v, want every node %v", hosts, natsNames)
	}
	published := map[int]string{}
	for name, s := range f.Services {
		n := 0
		for _, p := range s.Ports {
			ports, err := hostPorts(p)
			if err != nil {
				bad("%s: %v", name, err)
			}
			for _, hp := range ports {
				if prev, dup := published[hp]; dup {
					bad("host port %d published by %s and %s", hp, prev, name)
				}
				published[hp] = name
				n++
			}
		}
		if s.Deploy.Replicas > 1 && n < s.Deploy.Replicas {
			bad("%s: %d replicas but %d host ports", name, s.Deploy.Replicas, n)
		}
		for _, v := range s.Volumes {
			src, _, _ := strings.Cut(v, ":")
			if strings.HasPrefix(src, ".") || strings.HasPrefix(src, "/") {
				continue
			}
			if _, ok := f.Volumes[src]; !ok {
				bad("%s: volume %q is not declared", name, src)
			}
		}
	}
	for v := range f.Volumes {
		used := false
		for _, s := range f.Services {
			used = used || slices.ContainsFunc(s.Volumes, func(m string) bool { return strings.HasPrefix(m, v+":") })
		}
		if !used {
			bad("volume %q is declared but not used", v)
		}
	}
	slices.Sort(probs)
	return probs
}

// TestDeployClusterCompose checks deploy/cluster without a Docker engine:
// the compose file is consistent (composeProblems; a broken copy of it is
// caught), its config.yaml loads with the daemon's own loader in the
// environment compose gives the instances (every key real, every value
// valid, bus.replicas the number of nodes, memory.store jetstream), and
// the README's commands name the services and containers the file
// defines.
func TestDeployClusterCompose(t *testing.T) {
	const dir = "../../deploy/cluster"
	data, err := os.ReadFile(filepath.Join(dir, "docker-compose.yml"))
	if err != nil {
		t.Fatal(err)
	}
	env := map[string]string{"SWITCHBOARD_NATS_PASSWORD": "0123abcd", "SWITCHBOARD_NATS_ROUTE_PASSWORD": "4567ef01", "OPENAI_API_KEY": "sk-test"}
	if probs := composeProblems(data, env, dir); len(probs) > 0 {
		t.Errorf("deploy/cluster/docker-compose.yml:\n  %s", strings.Join(probs, "\n  "))
	}
	// The checks can fail: a route to a node that does not exist, a
	// password not set.
	broken := strings.Replace(string(data), "@nats3:6222", "@nats4:6222", 1)
	if probs := composeProblems([]byte(broken), env, dir); len(probs) == 0 {
		t.Error("a route to nats4 (no such node) was not caught")
	}
	if probs := composeProblems(data, map[string]string{}, dir); len(probs) == 0 || !strings.Contains(strings.Join(probs, " "), "SWITCHBOARD_NATS_PASSWORD") {
		t.Errorf("no password set: problems %q", probs)
	}

	text, _ := interpolate(string(data), env)
	var f composeFile
	if err := yaml.Unmarshal([]byte(text), &f); err != nil {
		t.Fatal(err)
	}
	sb := f.Services["switchboard"]
	cfgData, err := os.ReadFile(filepath.Join(dir, "config.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	instanceEnv := map[string]string{"SWITCHBOARD_ADMIN_LISTEN": "0.0.0.0:9090"} // the image's ENV
	maps.Copy(instanceEnv, sb.Environment)
	cfg, err := ParseConfig(cfgData, envMap(instanceEnv))
	if err != nil {
		t.Fatalf("deploy/cluster/config.yaml does not load:\n%v", err)
	}
	nodes := 0
	for _, s := range f.Services {
		if strings.HasPrefix(s.Image, "nats:") {
			nodes++
		}
	}
	if cfg.Bus.URL != sb.Environment["SWITCHBOARD_BUS_URL"] || cfg.Bus.Replicas != nodes || cfg.Memory.Store != memcfg.StoreJetStream {
		t.Errorf("deploy/cluster/config.yaml: bus.url %q, bus.replicas %d (nodes %d), memory.store %q; want the compose file's bus URL, one replica per node, jetstream",
			bus.RedactURL(cfg.Bus.URL), cfg.Bus.Replicas, nodes, cfg.Memory.Store)
	}

	readme, err := os.ReadFile(filepath.Join(dir, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	// `dc <verb> [flags] <service>` and `docker kill ... <container>`.
	dcRE := regexp.MustCompile(`(?m)^dc (?:stop|start|logs -f|exec --index \d+|port --index \d+) ([a-z0-9-]+)`)
	named := 0
	for _, m := range dcRE.FindAllStringSubmatch(string(readme), -1) {
		named++
		if _, ok := f.Services[m[1]]; !ok {
			t.Errorf("README: %q names no service of the compose file", m[0])
		}
	}
	for _, m := range regexp.MustCompile(`docker kill --signal KILL ([a-z0-9-]+)`).FindAllStringSubmatch(string(readme), -1) {
		named++
		if !strings.HasPrefix(m[1], f.Name+"-switchboard-") {
			t.Errorf("README: docker kill %s is not a container of project %q's switchboard service", m[1], f.Name)
		}
	}
	if named == 0 || !strings.Contains(string(readme), "switchboard status --config") {
		t.Error("README: the commands naming services, or `switchboard status --config`, are missing")
	}
}

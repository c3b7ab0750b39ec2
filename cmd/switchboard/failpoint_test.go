package main

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/switchboard-chat/switchboard/bus"
	"github.com/switchboard-chat/switchboard/bus/bustest"
	"github.com/switchboard-chat/switchboard/internal/failpoint"
	"github.com/switchboard-chat/switchboard/llm/llmtest"
)

// outRetention is the shortened outbound de-duplication window (CHAT_OUT's
// MaxAge and Duplicates, config key bus.out_retention) of the crash tests
// that restart after the window.
const outRetention = 2 * time.Second

// outRetentionKey reports whether this build's configuration has
// bus.out_retention. (It arrives with the outbound de-duplication work of
// issue 14; until then the "after the window" crash tests are skipped.)
func outRetentionKey() bool {
	_, err := ParseConfig(fmt.Appendf(nil, "bus:\n  out_retention: %s\n", outRetention), nil)
	return err == nil
}

// crashModel answers the crash tests' messages by their text, the same way
// before and after a crash: "use a tool" calls list_dir and then answers;
// "remind me" schedules a task two seconds ahead (both only when the
// request offers the tool: summaries do not); a scheduled task's run
// gets a short text; anything else is answered in streamed pieces. Every
// request is checked with llmtest's Request.Validate.
type crashModel struct {
	*llmtest.Server
	mu      sync.Mutex
	invalid []string
}

func newCrashModel(t *testing.T) *crashModel {
	m := &crashModel{}
	m.Server = llmtest.NewServer(t, llmtest.WithResponder(m.respond), llmtest.WithRecordLimit(1))
	return m
}

func (m *crashModel) respond(r *llmtest.Request) llmtest.Reply {
	if err := r.Validate(); err != nil {
		m.mu.Lock()
		m.invalid = append(m.invalid, fmt.Sprintf("request %d: %v", r.Seq, err))
		m.mu.Unlock()
		return llmtest.ErrorReply(400, "invalid_request", err.Error())
	}
	last, _ := r.LastMessage()
	text := r.LastUserText()
	switch {
	case last.Role == "tool":
		return llmtest.TextReply("done: " + strings.TrimSpace(strings.SplitN(llmtest.MessageText(last), "\n", 2)[0]))
	case strings.Contains(text, "use a tool") && r.HasTool("list_dir"):
		return llmtest.ToolCallReply("list_dir", `{"path":"."}`)
	case strings.Contains(text, "remind me") && r.HasTool("schedule"):
		return llmtest.ToolCallReply("schedule", `{"action":"create","prompt":"say hello","at":"in 2s"}`)
	case strings.Contains(text, "[Scheduled task"):
		return llmtest.TextReply("hello from the task")
	}
	return llmtest.Reply{Text: "the answer to " + text + ", streamed in pieces", ChunkSize: 6, ChunkDelay: 5 * time.Millisecond}
}

func (m *crashModel) checkValid(t *testing.T) {
	t.Helper()
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, e := range m.invalid {
		t.Errorf("API-invalid request at the model: %s", e)
	}
}

// configKey adds "key: value" to a top-level section of a config file
// written by writeConfig.
func configKey(t testing.TB, path, section, key, value string) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	head := "\n" + section + ":\n"
	if !strings.Contains(string(data), head) {
		t.Fatalf("config %s has no section %s", path, section)
	}
	data = []byte(strings.Replace(string(data), head, head+"  "+key+": "+value+"\n", 1))
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestFailpointCrashAnswersExactlyOnce kills the daemon (built with
// -tags failpoints) with SIGKILL at each named crash point, restarts it
// (at once, and once after the outbound de-duplication window), and
// checks that every inbound message has exactly one distinct final
// answer, on the wire (a core subscriber, where a copy of the same final
// may come twice) and shown once by the Go bridge kit; that the message
// is stored once in history; and that the model never got an API-invalid
// request.
func TestFailpointCrashAnswersExactlyOnce(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binary; skipped with -short")
	}
	bin := buildBinaryTags(t, "failpoints")
	for _, point := range failpoint.Names() {
		t.Run(point+"/restart-at-once", func(t *testing.T) { crashAt(t, bin, point, false) })
		t.Run(point+"/restart-after-dedup-window", func(t *testing.T) {
			// Needs bus.out_retention (outbound de-duplication, issue 14
			// item 1) to shorten CHAT_OUT's 2-minute window; the kit
			// check also needs the bridge kit's drop of shown ids.
			if !outRetentionKey() {
				t.Skip("bus.out_retention is not a config key yet (outbound de-duplication not merged)")
			}
			crashAt(t, bin, point, true)
		})
	}
}

func crashAt(t *testing.T, bin, point string, afterWindow bool) {
	model := newCrashModel(t)
	dir := t.TempDir()
	dataDir := filepath.Join(dir, "data")
	busAddr := freePort(t)
	config := writeConfig(t, dir, busAddr, "", model.URL())
	configKey(t, config, "agent", "delta_interval", "10ms")
	if afterWindow {
		configKey(t, config, "bus", "out_retention", outRetention.String())
	}
	if _, _, err := LoadConfig(config); err != nil {
		t.Fatal(err)
	}
	url := "nats://" + busAddr
	subj := bus.Subjects{Prefix: "chat"}
	msg := func(id, text string) bus.Inbound {
		return bus.Inbound{V: 1, ID: id, Channel: "console", ChatID: "c1", UserID: "u", Text: text}
	}
	first := msg("fp-1", "answer me")
	switch point {
	case failpoint.MidTool:
		first.Text = "please use a tool"
	case failpoint.ScheduleFire:
		first.Text = "remind me in two seconds"
	}

	p1 := startProcessEnv(t, bin, config, failpoint.EnvVar+"="+point)
	nc := connectWhenUp(t, p1, url, dataDir)
	w := newOutWatcher(t, url, dataDir)
	defer w.Close()
	// The daemon may die at its failpoint before the stream's
	// acknowledgement reaches this client (the message is stored, the ack
	// is lost with the process). A client then does what a bridge does:
	// it publishes again, with the same id, once the bus is back.
	published := publishInbound(t, nc, subj, first) == nil
	select {
	case err := <-p1.done:
		if !killedBySIGKILL(err) {
			t.Fatalf("daemon ended with %v, want SIGKILL at %s", err, point)
		}
	case <-time.After(wait):
		t.Fatalf("daemon did not crash at %s", point)
	}
	nc.Close()
	if want := "failpoint: SIGKILL at " + point; !strings.Contains(p1.out.String(), want) {
		t.Fatalf("daemon log lacks %q", want)
	}
	if afterWindow {
		// The subject of this test is the passing of time: a copy published
		// after the window is no longer de-duplicated by CHAT_OUT.
		time.Sleep(outRetention + time.Second)
	}

	p2 := startProcess(t, bin, config)
	nc = connectWhenUp(t, p2, url, dataDir)
	defer nc.Close()
	if !published {
		bustest.PublishInbound(t, nc, subj, first)
	}
	ids := []string{first.ID}
	if point == failpoint.ScheduleFire {
		var run string
		w.waitFor(wait, "the scheduled run is answered", func(byIn map[string]*inboundView) bool {
			for id := range byIn {
				if strings.HasPrefix(id, "sched:") && answered(byIn, id) {
					run = id
					return true
				}
			}
			return false
		})
		ids = append(ids, run)
	}
	w.waitFor(wait, "answers after the restart", func(byIn map[string]*inboundView) bool {
		for _, id := range ids {
			if !answered(byIn, id) {
				return false
			}
		}
		return true
	})
	if point == failpoint.AfterAck {
		// The receipt is not marked published: a bridge's retry of the same
		// message must not bring a second answer.
		bustest.PublishInbound(t, nc, subj, first)
	}
	// The session answers in order: once the next message of the chat is
	// answered (on the wire and at the kit), no copy of an earlier answer
	// is still to come.
	next := msg("fp-2", "and now?")
	bustest.PublishInbound(t, nc, subj, next)
	ids = append(ids, next.ID)
	w.waitFor(wait, "the next message is answered and shown", func(byIn map[string]*inboundView) bool {
		v := byIn[next.ID]
		return v != nil && len(v.wire) > 0 && len(v.shown) > 0
	})
	nc.Close()
	stopProcess(t, p2)
	w.Close()

	seen := w.snapshot()
	hist := historyInbound(t, dataDir)
	for _, id := range ids {
		v := seen[id]
		finals := v.finalIDs()
		if len(finals) != 1 {
			t.Errorf("%s: %d distinct finals %v, want 1", id, len(finals), finals)
		}
		if len(v.wire) > 1 {
			t.Errorf("%s: %d distinct finals on the wire: %v", id, len(v.wire), v.wire)
		}
		// Shown exactly once by the bridge kit. After the window, the
		// re-published copy is stored again: this holds only with the
		// kit's drop of already shown ids (outbound de-duplication).
		if total := sum(v.shown); total != 1 {
			t.Errorf("%s: the bridge kit showed %d finals %v, want 1", id, total, v.shown)
		}
		key := "console:" + id
		if hist[key] != 1 {
			t.Errorf("history holds %s %d times, want 1", key, hist[key])
		}
		t.Logf("%s: final copies on the wire %v, shown by the kit %v, on the wire after the final %v", id, v.wire, v.shown, v.violation)
	}
	model.checkValid(t)
}

func sum(m map[string]int) int {
	n := 0
	for _, c := range m {
		n += c
	}
	return n
}

// TestReleaseBinaryHasNoFailpoints checks that the binary built without
// the tag (as `go build ./cmd/switchboard` builds it) has no failpoints:
// with SWITCHBOARD_FAILPOINT set to every point it answers a turn that
// passes them, and neither the variable's name, the points' names nor
// the package's code are in the file. The same checks on the failpoints
// build show that they can fail.
func TestReleaseBinaryHasNoFailpoints(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binary; skipped with -short")
	}
	release := buildBinary(t)
	tagged := buildBinaryTags(t, "failpoints")

	markers := []string{failpoint.EnvVar, "failpoint: SIGKILL"}
	for _, n := range failpoint.Names() {
		if n != failpoint.Received { // an everyday word, also in other code
			markers = append(markers, n)
		}
	}
	check := func(bin string) (found []string) {
		data, err := os.ReadFile(bin)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range markers {
			if strings.Contains(string(data), m) {
				found = append(found, m)
			}
		}
		out, err := exec.Command("go", "tool", "nm", bin).Output()
		if err != nil {
			t.Fatalf("go tool nm: %v", err)
		}
		if strings.Contains(string(out), "github.com/switchboard-chat/switchboard/internal/failpoint.") {
			found = append(found, "symbols of switchboard/internal/failpoint")
		}
		out, err = exec.Command("go", "version", "-m", bin).Output()
		if err != nil {
			t.Fatalf("go version -m: %v", err)
		}
		if strings.Contains(string(out), "failpoints") {
			found = append(found, "build tag failpoints")
		}
		return found
	}
	if found := check(release); len(found) > 0 {
		t.Errorf("release binary contains %q", found)
	}
	if found := check(tagged); len(found) != len(markers)+2 {
		t.Errorf("failpoints binary: found only %q of %q, the nm symbols and the tag: the check cannot fail", found, markers)
	}

	// Behaviour: every point armed, a turn with a tool call runs through.
	model := newCrashModel(t)
	dir := t.TempDir()
	dataDir := filepath.Join(dir, "data")
	busAddr := freePort(t)
	config := writeConfig(t, dir, busAddr, "", model.URL())
	p := startProcessEnv(t, release, config, failpoint.EnvVar+"="+strings.Join(failpoint.Names(), ","))
	nc := connectWhenUp(t, p, "nats://"+busAddr, dataDir)
	defer nc.Close()
	got := bustest.Collect(t, nc, bus.Subjects{Prefix: "chat"}.OutAll())
	bustest.PublishInbound(t, nc, bus.Subjects{Prefix: "chat"}, bus.Inbound{V: 1, ID: "r-1", Channel: "console", ChatID: "c1", UserID: "u", Text: "please use a tool"})
	got.WaitFor(t, wait, func(m *nats.Msg) bool { return strings.Contains(string(m.Data), `"final":true`) })
	stopProcess(t, p)
	if !strings.Contains(p.out.String(), "turn done") || strings.Contains(p.out.String(), "failpoint") {
		t.Errorf("release daemon log:\n%s", p.out.String())
	}
	if err := p.cmd.ProcessState.Sys().(syscall.WaitStatus); err.Signaled() {
		t.Errorf("release daemon ended by signal %v", err.Signal())
	}
}

// publishInbound publishes in durably with its de-duplication id and
// returns the error instead of failing the test.
func publishInbound(t *testing.T, nc *nats.Conn, subj bus.Subjects, in bus.Inbound) error {
	data, err := json.Marshal(in)
	if err != nil {
		t.Fatal(err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	_, err = js.Publish(t.Context(), subj.In(in.Channel, in.ChatID), data, jetstream.WithMsgID(in.DedupKey()))
	return err
}

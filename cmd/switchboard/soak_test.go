package main

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/switchboard-chat/switchboard/bus"
	"github.com/switchboard-chat/switchboard/bus/natsbus"
)

// Settings of the kill soak.
const (
	soakChats    = 16
	soakInFlight = 3  // accepted, unanswered messages per chat
	soakKills    = 20 // short mode (CI); SWITCHBOARD_SOAK_KILLS for more
	soakDrain    = time.Minute
)

// TestKillSoak keeps 16 chats sending (each with up to 3 messages in
// flight) while the real daemon (the release build) is killed with SIGKILL
// at random moments and restarted, then drains and counts, as one line:
// accepted messages (the stream acknowledged them), lost (accepted, no
// final after the drain), doubled (two different finals for one message),
// after_final (every outbound message, typing and deltas included, that
// came after a final for the same in_reply_to: on the wire, in the out
// stream's stored order, or handed to the bridge kit's handler after it
// handed over the final; the three also apart), history doubles (the
// message stored twice), wire repeats (the same final id delivered again
// to a core subscriber: allowed) and kit repeats (the bridge kit showed
// the same final twice: not allowed). Lost, doubled, after_final, history
// doubles, kit repeats and API-invalid model requests must be zero.
//
// Short mode (the default, for CI): 20 kills. Long mode:
//
//	SWITCHBOARD_SOAK_KILLS=100 go test -race -run TestKillSoak -v -timeout 60m ./cmd/switchboard/
//
// The kill moments come from a seeded generator; the seed is printed, and
// SWITCHBOARD_SOAK_SEED=<seed> replays the same schedule of kills.
func TestKillSoak(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binary; skipped with -short")
	}
	kills := envCount(t, "SWITCHBOARD_SOAK_KILLS", soakKills)
	seed := envSeed(t, "SWITCHBOARD_SOAK_SEED")
	t.Logf("kill soak: seed=%d kills=%d (replay: SWITCHBOARD_SOAK_SEED=%d)", seed, kills, seed)
	rng := rand.New(rand.NewPCG(seed, seed>>1|1))
	began := time.Now()

	bin := buildBinary(t)
	model := newCrashModel(t)
	dir := t.TempDir()
	dataDir := filepath.Join(dir, "data")
	busAddr := freePort(t)
	config := writeConfig(t, dir, busAddr, "", model.URL())
	configKey(t, config, "agent", "delta_interval", "20ms")
	data, err := os.ReadFile(config)
	if err != nil {
		t.Fatal(err)
	}
	// Hundreds of turns per process: keep the logs printed on failure short.
	if err := os.WriteFile(config, []byte(strings.Replace(string(data), "level: debug", "level: warn", 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	url := "nats://" + busAddr

	p := startProcess(t, bin, config)
	connectWhenUp(t, p, url, dataDir).Close()
	w := newOutWatcher(t, url, dataDir)
	defer w.Close()
	token, err := natsbus.ReadOperatorToken(dataDir)
	if err != nil {
		t.Fatal(err)
	}
	pubNC, err := nats.Connect(url, reconnecting(token)...)
	if err != nil {
		t.Fatal(err)
	}
	defer pubNC.Close()
	js, err := jetstream.New(pubNC)
	if err != nil {
		t.Fatal(err)
	}
	subj := bus.Subjects{Prefix: "chat"}

	var accMu sync.Mutex
	var accepted []string // inbound ids the stream acknowledged
	// send publishes in until the stream acknowledges it (retrying the same
	// id, as a bridge does, while the daemon is down) or stop is closed.
	send := func(stop <-chan struct{}, in bus.Inbound) bool {
		data, err := json.Marshal(in)
		if err != nil {
			t.Error(err)
			return false
		}
		for {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			_, err := js.Publish(ctx, subj.In(in.Channel, in.ChatID), data, jetstream.WithMsgID(in.DedupKey()))
			cancel()
			if err == nil {
				accMu.Lock()
				accepted = append(accepted, in.ID)
				accMu.Unlock()
				return true
			}
			select {
			case <-stop:
				return false
			case <-time.After(20 * time.Millisecond): // the bus is down: retry
			}
		}
	}
	stop := make(chan struct{})
	var senders sync.WaitGroup
	for c := range soakChats {
		senders.Go(func() {
			var open []string // this chat's accepted, unanswered ids
			for n := 0; ; n++ {
				for {
					w.mu.Lock()
					still := open[:0]
					for _, id := range open {
						if !answered(w.byIn, id) {
							still = append(still, id)
						}
					}
					open = still
					ch := w.changed
					w.mu.Unlock()
					if len(open) < soakInFlight {
						break
					}
					select {
					case <-stop:
						return
					case <-ch:
					case <-time.After(100 * time.Millisecond):
					}
				}
				text := fmt.Sprintf("message %d of chat %d", n, c)
				if n%4 == 3 {
					text += ", use a tool"
				}
				in := bus.Inbound{V: 1, ID: fmt.Sprintf("k%02d-%05d", c, n), Channel: "console",
					ChatID: fmt.Sprintf("chat%02d", c), UserID: "u", Text: text}
				if !send(stop, in) {
					return
				}
				open = append(open, in.ID)
				select {
				case <-stop:
					return
				default:
				}
			}
		})
	}

	var firstAnswer []time.Duration // per restart: until the first new final
	for k := range kills {
		// A random moment: the daemon runs 0.2 to 1.5 s, then dies.
		time.Sleep(time.Duration(200+rng.IntN(1300)) * time.Millisecond)
		if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		select {
		case <-p.done:
		case <-time.After(wait):
			t.Fatalf("kill %d: daemon did not die", k+1)
		}
		// Time from the restart to the first new answer (messages are
		// always in flight).
		before, restarted := w.freshFinals(), time.Now()
		p = startProcess(t, bin, config)
		connectWhenUp(t, p, url, dataDir).Close()
		if w.waitFresh(before, wait) {
			firstAnswer = append(firstAnswer, time.Since(restarted))
		}
	}
	close(stop)
	senders.Wait()

	// Drain: every accepted message answered, then one more message per
	// chat; sessions answer in order, so when those are answered (on the
	// wire and at the kit) nothing older is still to come.
	accMu.Lock()
	ids := append([]string(nil), accepted...)
	accMu.Unlock()
	drainEnd := time.Now().Add(soakDrain)
	for {
		w.mu.Lock()
		left, ch := 0, w.changed
		for _, id := range ids {
			if !answered(w.byIn, id) {
				left++
			}
		}
		w.mu.Unlock()
		if left == 0 || time.Now().After(drainEnd) {
			break
		}
		select {
		case <-ch:
		case <-time.After(time.Until(drainEnd)):
		}
	}
	never := make(chan struct{})
	var last []string
	for c := range soakChats {
		in := bus.Inbound{V: 1, ID: fmt.Sprintf("k%02d-last", c), Channel: "console", ChatID: fmt.Sprintf("chat%02d", c), UserID: "u", Text: "last one"}
		send(never, in)
		last = append(last, in.ID)
	}
	ids = append(ids, last...)
	w.waitFor(soakDrain, "the last message of every chat is answered and shown", func(byIn map[string]*inboundView) bool {
		for _, id := range last {
			if v := byIn[id]; v == nil || len(v.wire) == 0 || len(v.shown) == 0 {
				return false
			}
		}
		return true
	})
	pubNC.Close()
	stored := storedAfterFinal(t, url, token)
	stopProcess(t, p)
	w.Close()

	seen := w.snapshot()
	hist := historyInbound(t, dataDir)
	var lost, doubled, wireAfter, storedAfter, kitAfter, histDoubles, wireRepeats, kitRepeats int
	var examples []string
	example := func(format string, args ...any) {
		if len(examples) < 10 {
			examples = append(examples, fmt.Sprintf(format, args...))
		}
	}
	for _, id := range ids {
		v := seen[id]
		finals := v.finalIDs()
		switch {
		case len(finals) == 0:
			lost++
			example("lost %s", id)
		case len(finals) > 1:
			doubled++
			example("doubled %s: %v", id, finals)
		}
		if len(v.violation) > 0 {
			wireAfter += len(v.violation)
			example("on the wire after the final of %s: %v", id, v.violation)
		}
		if len(v.kitAfter) > 0 {
			kitAfter += len(v.kitAfter)
			example("handed to the kit's handler after the final of %s: %v", id, v.kitAfter)
		}
		if kinds := stored[id]; len(kinds) > 0 {
			storedAfter += len(kinds)
			example("stored after the final of %s: %v", id, kinds)
		}
		wireRepeats += sum(v.wire) - len(v.wire)
		if n := sum(v.shown) - len(v.shown); n > 0 {
			kitRepeats += n
			example("the kit showed a final of %s again: %v", id, v.shown)
		}
	}
	for key, n := range hist {
		if n > 1 {
			histDoubles++
			example("history holds %s %d times", key, n)
		}
	}
	model.mu.Lock()
	invalid := len(model.invalid)
	model.mu.Unlock()
	slices.Sort(firstAnswer)
	var p50, pmax time.Duration
	if n := len(firstAnswer); n > 0 {
		p50, pmax = firstAnswer[n/2], firstAnswer[n-1]
	}
	afterFinal := wireAfter + storedAfter + kitAfter
	t.Logf("kill soak: seed=%d kills=%d chats=%d accepted=%d lost=%d doubled=%d after_final=%d (wire %d, stored %d, kit %d) history_doubles=%d wire_repeats=%d kit_repeats=%d invalid_requests=%d restart_to_answer_p50=%s max=%s elapsed=%s",
		seed, kills, soakChats, len(ids), lost, doubled, afterFinal, wireAfter, storedAfter, kitAfter, histDoubles, wireRepeats, kitRepeats, invalid,
		p50.Round(time.Millisecond), pmax.Round(time.Millisecond), time.Since(began).Round(time.Second))
	for _, e := range examples {
		t.Log("  " + e)
	}
	if lost+doubled+afterFinal+histDoubles+kitRepeats > 0 {
		t.Errorf("kill soak broke exactly-once: lost=%d doubled=%d after_final=%d history_doubles=%d kit_repeats=%d (seed %d)",
			lost, doubled, afterFinal, histDoubles, kitRepeats, seed)
	}
	model.checkValid(t)
}

// storedAfterFinal reads the out stream of the running daemon at url from
// its first message to its last, in the order the stream stored them, and
// returns, per inbound id, the kinds of the messages stored after the
// first final for it (a copy of that final, which the stream
// de-duplicates, is not one): the daemon's own order, which a core
// subscriber that reconnects after a restart may not see whole.
func storedAfterFinal(t *testing.T, url, token string) map[string][]string {
	t.Helper()
	nc, err := nats.Connect(url, nats.Token(token))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), wait)
	defer cancel()
	st, err := js.Stream(ctx, "CHAT_OUT")
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	last := info.State.LastSeq
	cons, err := st.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	finals := map[string]string{} // inbound id → its first final's id
	after := map[string][]string{}
	for seq := uint64(0); seq < last; {
		m, err := cons.Next(jetstream.FetchMaxWait(wait))
		if err != nil {
			t.Fatalf("reading CHAT_OUT at %d of %d: %v", seq, last, err)
		}
		md, err := m.Metadata()
		if err != nil {
			t.Fatal(err)
		}
		seq = md.Sequence.Stream
		var o bus.Outbound
		if json.Unmarshal(m.Data(), &o) != nil || o.InReplyTo == "" {
			continue
		}
		switch f, ok := finals[o.InReplyTo]; {
		case !ok && o.Final:
			finals[o.InReplyTo] = o.ID
		case ok && !(o.Final && o.ID == f):
			after[o.InReplyTo] = append(after[o.InReplyTo], fmt.Sprintf("%s seq %d (stream %d)", o.Kind, o.Seq, seq))
		}
	}
	return after
}

package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/switchboard-chat/switchboard/bus"
	"github.com/switchboard-chat/switchboard/bus/bustest"
	"github.com/switchboard-chat/switchboard/internal/polltest"
	"github.com/switchboard-chat/switchboard/llm/llmtest"
)

// schedAttackModel is the scripted model of the scheduling attack. A
// message "schedule <n>" makes n schedule calls in one step: every other
// one a recurring task (every minute), the others tasks due in 2 seconds.
// (A recurring task runs first after tools.schedule.min_interval, at least
// a minute: too long to wait for here. The pace treats every run alike,
// and tools/schedule's TestPaceDefersRunsNotDrops runs recurring tasks over
// minutes of fake time.) The step after the calls answers "created X
// refused Y" (refused: told about tools.schedule.max_per_channel); a
// scheduled run and anything else get a short text.
func schedAttackModel(r *llmtest.Request) llmtest.Reply {
	last, _ := r.LastMessage()
	text := r.LastUserText()
	switch {
	case last.Role == "tool":
		created, refused := 0, 0
		for i := len(r.Body.Messages) - 1; i >= 0 && r.Body.Messages[i].Role == "tool"; i-- {
			switch res := llmtest.MessageText(r.Body.Messages[i]); {
			case strings.HasPrefix(res, "scheduled task "):
				created++
			case strings.Contains(res, "tools.schedule.max_per_channel"):
				refused++
			}
		}
		return llmtest.TextReply(fmt.Sprintf("created %d refused %d", created, refused))
	case strings.Contains(text, "[Scheduled task"):
		return llmtest.TextReply("ran")
	case strings.HasPrefix(text, "schedule ") && r.HasTool("schedule"):
		var n int
		fmt.Sscanf(strings.TrimPrefix(text, "schedule "), "%d", &n)
		var calls []llmtest.ToolCall
		for i := range n {
			when := `"at":"in 2s"`
			if i%2 == 1 {
				when = `"every":"1m"`
			}
			calls = append(calls, llmtest.ToolCall{Name: "schedule", Arguments: fmt.Sprintf(`{"action":"create","prompt":"run %d",%s}`, i, when)})
		}
		return llmtest.Reply{ToolCalls: calls}
	}
	return llmtest.TextReply("answer to " + text)
}

// runLog records when each scheduled run on a subject was seen on the
// bus (a core subscription: a run is seen after it was published).
type runLog struct {
	mu      sync.Mutex
	at      []time.Time
	tasks   map[string]int
	changed chan struct{}
}

func watchRuns(t *testing.T, nc *nats.Conn, subject string) *runLog {
	t.Helper()
	l := &runLog{tasks: map[string]int{}, changed: make(chan struct{})}
	sub, err := nc.Subscribe(subject, func(m *nats.Msg) {
		seen := time.Now()
		var in bus.Inbound
		if json.Unmarshal(m.Data, &in) != nil || in.Meta["scheduled_task"] == "" {
			return // the bridge's own messages
		}
		l.mu.Lock()
		defer l.mu.Unlock()
		l.at = append(l.at, seen)
		l.tasks[in.Meta["scheduled_task"]]++
		close(l.changed)
		l.changed = make(chan struct{})
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	return l
}

// waitRuns waits until n runs were seen.
func (l *runLog) waitRuns(t *testing.T, n int) {
	t.Helper()
	timer := time.NewTimer(wait)
	defer timer.Stop()
	for {
		l.mu.Lock()
		got, changed := len(l.at), l.changed
		l.mu.Unlock()
		if got >= n {
			return
		}
		select {
		case <-changed:
		case <-timer.C:
			t.Fatalf("%d scheduled runs seen within %s, want %d", got, wait, n)
		}
	}
}

// TestAttackBridgeScheduledRunsBoundedPerChannel: a bridge with its own
// credential (wechat, max_msgs_per_sec 2) sends messages from five made-up
// user ids, each asking the model for 20 tasks, half of them recurring,
// half due in 2 seconds: 100 tasks within each user's quota of 20. The channel's cap (max_per_channel 30)
// refuses the rest and tells the model why, and the runs are published no
// faster than the bridge's rate (the bucket of 2, plus 2 per second since
// the first task could be due); runs over it are deferred, not dropped:
// they keep coming after the bucket is spent. Meanwhile a message of the
// line bridge is answered.
func TestAttackBridgeScheduledRunsBoundedPerChannel(t *testing.T) {
	const (
		users, perUser = 5, 20
		capPerChannel  = 30
		perSec         = 2
		observe        = 10 // runs watched (of the 15 due in 2s): seconds of deferral
	)
	model := llmtest.NewServer(t, llmtest.WithResponder(schedAttackModel), llmtest.WithRecordLimit(0))
	cfg := bridgeConfig(t, model.URL())
	wechat := cfg.Bus.Bridges["wechat"]
	wechat.MaxMsgsPerSec = perSec
	cfg.Bus.Bridges["wechat"] = wechat
	cfg.Tools.Schedule.MaxPerChannel = capPerChannel
	d := startAuthDaemon(t, cfg)
	runs := watchRuns(t, d.admin, "chat.in.wechat.>")
	finals := bustest.Collect(t, d.admin, "chat.out.>")
	_, wechatJS := d.connectBridge(t, "wechat", nats.Token(testWechatToken))
	line, _ := d.connectBridge(t, "line", nats.UserInfo("line", testLinePass))

	// No run can be due before firstDue: every task is created after t0,
	// due 2 seconds (or a minute) after its creation.
	t0 := time.Now()
	firstDue := t0.Add(2 * time.Second)
	for i := range users {
		in := bus.Inbound{V: 1, ID: fmt.Sprint("ask-", i), Channel: "wechat", ChatID: fmt.Sprint("wxid_fake", i),
			UserID: fmt.Sprint("wxid_fake", i), Text: fmt.Sprint("schedule ", perUser)}
		data, _ := json.Marshal(in)
		// The bridge's own messages pass its rate limit too: resend what
		// the ingress refused with 429 until the bucket lets it in.
		var last error
		polltest.Until(t, wait, 50*time.Millisecond, func() bool {
			_, last = wechatJS.Publish(t.Context(), d.bus.Subjects().In(in.Channel, in.ChatID), data, jetstream.WithMsgID(in.DedupKey()))
			var api *jetstream.APIError
			if errors.As(last, &api) && api.Code == http.StatusTooManyRequests {
				return false
			}
			if last != nil {
				t.Fatalf("publish %s: %v", in.ID, last)
			}
			return true
		}, func() string { return fmt.Sprintf("message %s never let in: %v", in.ID, last) })
	}

	created, refused := 0, 0
	for i := range users {
		o := finals.WaitOutbound(t, wait, func(o bus.Outbound) bool { return o.InReplyTo == fmt.Sprint("ask-", i) && o.Final })
		var c, r int
		if _, err := fmt.Sscanf(o.Text, "created %d refused %d", &c, &r); err != nil {
			t.Fatalf("user %d's final = %+v", i, o)
		}
		created, refused = created+c, refused+r
	}
	if created != capPerChannel || refused != users*perUser-capPerChannel {
		t.Errorf("made-up users created %d tasks (%d refused for the channel's cap); want %d created, %d refused",
			created, refused, capPerChannel, users*perUser-capPerChannel)
	}

	// The runs: at no moment more than the bucket plus the rate since the
	// first possible due time (one run of slack for rounding).
	runs.waitRuns(t, perSec+1)
	other := bus.Inbound{V: 1, ID: "line-1", Channel: "line", ChatID: "g1", UserID: "alice", Text: "are you there?"}
	bustest.PublishInbound(t, line, d.bus.Subjects(), other)
	if o := finals.WaitOutbound(t, wait, func(o bus.Outbound) bool { return o.InReplyTo == "line-1" && o.Final }); o.Text != "answer to are you there?" {
		t.Fatalf("line's message answered with %+v", o)
	}
	runs.waitRuns(t, observe)
	runs.mu.Lock()
	defer runs.mu.Unlock()
	for k, at := range runs.at {
		if bound := perSec + 1 + int(perSec*at.Sub(firstDue).Seconds()); k+1 > bound {
			t.Fatalf("%d scheduled runs of wechat published %s after the first could be due: over its %d per second (bound %d)",
				k+1, at.Sub(firstDue).Round(time.Millisecond), perSec, bound)
		}
	}
	for task, n := range runs.tasks {
		if n != 1 {
			t.Errorf("task %s ran %d times", task, n)
		}
	}
	if len(runs.tasks) > capPerChannel {
		t.Errorf("%d tasks ran on wechat, over the channel's cap of %d", len(runs.tasks), capPerChannel)
	}
}

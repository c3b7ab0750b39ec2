package channeltest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/switchboard-chat/switchboard/bus"
)

// Script answers one inbound envelope: it returns what the agent
// publishes (deltas and typing through core NATS, finals through
// JetStream), or nil to answer nothing.
type Script func(in bus.Inbound) []bus.Outbound

// Agent stands for the agent runtime in a channel's tests: it reads the
// channel's inbound envelopes with a core subscription (what the channel
// published, before the stream's de-duplication) and answers each with
// its Script, by default "echo: <text>". Safe for concurrent use.
type Agent struct {
	nc   *nats.Conn
	js   jetstream.JetStream
	subj bus.Subjects
	wait time.Duration

	mu      sync.Mutex
	script  Script
	seen    []bus.Inbound
	changed chan struct{}
}

// NewAgent starts an agent for channel on nc (subjects subj); waits are
// bounded by wait. The test's cleanup unsubscribes it.
func NewAgent(t *testing.T, nc *nats.Conn, js jetstream.JetStream, subj bus.Subjects, channel string, wait time.Duration) *Agent {
	t.Helper()
	a := &Agent{nc: nc, js: js, subj: subj, wait: wait, changed: make(chan struct{}), script: func(in bus.Inbound) []bus.Outbound {
		return []bus.Outbound{Reply(in, bus.KindReply, "echo: "+in.Text)}
	}}
	sub, err := nc.Subscribe(subj.Prefix+".in."+channel+".>", func(m *nats.Msg) {
		var in bus.Inbound
		if err := json.Unmarshal(m.Data, &in); err != nil {
			t.Errorf("fake agent: %v", err)
			return
		}
		a.mu.Lock()
		a.seen = append(a.seen, in)
		s := a.script
		close(a.changed)
		a.changed = make(chan struct{})
		a.mu.Unlock()
		for _, o := range s(in) {
			a.Publish(t, o)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	return a
}

// Set replaces the agent's script.
func (a *Agent) Set(s Script) {
	a.mu.Lock()
	a.script = s
	a.mu.Unlock()
}

// Inbounds returns the inbound envelopes seen so far.
func (a *Agent) Inbounds() []bus.Inbound {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]bus.Inbound(nil), a.seen...)
}

// Count is the number of inbound envelopes seen so far.
func (a *Agent) Count() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.seen)
}

// WaitInbound waits until an inbound envelope satisfies pred.
func (a *Agent) WaitInbound(t *testing.T, what string, pred func(bus.Inbound) bool) bus.Inbound {
	t.Helper()
	deadline := time.After(a.wait)
	for {
		a.mu.Lock()
		ch := a.changed
		for _, in := range a.seen {
			if pred(in) {
				a.mu.Unlock()
				return in
			}
		}
		a.mu.Unlock()
		select {
		case <-ch:
		case <-deadline:
			t.Fatalf("no inbound %s within %s; got %+v", what, a.wait, a.Inbounds())
		}
	}
}

// Publish publishes o as the agent would: a final through JetStream with
// its id as the de-duplication id, anything else through core NATS. A
// reply racing the end of its test finds the connection closed: not an
// error.
func (a *Agent) Publish(t *testing.T, o bus.Outbound) {
	data, err := json.Marshal(o)
	if err != nil {
		t.Error(err)
		return
	}
	subject := a.subj.Out(o.Channel, o.ChatID)
	if !o.Final {
		if err := a.nc.Publish(subject, data); err != nil && !errors.Is(err, nats.ErrConnectionClosed) {
			t.Error(err)
		}
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), a.wait)
	defer cancel()
	if _, err := a.js.Publish(ctx, subject, data, jetstream.WithMsgID(o.ID)); err != nil && !errors.Is(err, nats.ErrConnectionClosed) {
		t.Errorf("publish final: %v", err)
	}
}

// Event publishes an agent event of type typ for in.
func (a *Agent) Event(t *testing.T, in bus.Inbound, typ string, data any) {
	raw, _ := json.Marshal(data)
	ev := bus.Event{V: 1, Type: typ, Session: in.SessionKey(), Channel: in.Channel, ChatID: in.ChatID, InReplyTo: in.ID, Time: time.Now(), Data: raw}
	b, _ := json.Marshal(ev)
	if err := a.nc.Publish(a.subj.Event(in.Channel, in.ChatID), b); err != nil && !errors.Is(err, nats.ErrConnectionClosed) {
		t.Error(err)
	}
}

var (
	replyMu sync.Mutex
	replyN  int
)

// Reply is an outbound envelope answering in, with an id and seq unique
// in the test binary; a final unless kind is delta or typing.
func Reply(in bus.Inbound, kind, text string) bus.Outbound {
	replyMu.Lock()
	replyN++
	n := replyN
	replyMu.Unlock()
	final := kind != bus.KindDelta && kind != bus.KindTyping
	return bus.Outbound{V: 1, ID: fmt.Sprintf("%s.%d", in.ID, n), Channel: in.Channel, ChatID: in.ChatID, InReplyTo: in.ID,
		Kind: kind, Text: text, Seq: n, Final: final}
}

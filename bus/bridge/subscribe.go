package bridge

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/switchboard-chat/switchboard/bus"
	"github.com/switchboard-chat/switchboard/internal/retry"
)

// subscribePending bounds the messages a core subscription buffers while
// the handler is busy (nats.go drops beyond it and reports a slow
// consumer).
const subscribePending = 65536

// readyTimeout bounds the round trip that confirms the subscriptions
// before [Subscription.Ready] is called.
const readyTimeout = 10 * time.Second

// SubscribeOutbound delivers the outbound envelopes of the client's channel
// to h over a plain core NATS subscription on "<p>.out.<channel>.>" until
// ctx is cancelled, then unsubscribes and returns nil. It is the lighter
// alternative to [Client.ConsumeOutbound] for a bridge that needs no
// catch-up: what is published while it is not subscribed is not received,
// and nothing is acknowledged. It is [Client.Subscribe] with only
// [Subscription.Outbound] set.
//
// Envelopes are validated as by ConsumeOutbound (invalid ones are logged
// and skipped) and handed to h one at a time, in the order the server
// delivered them. A remembered envelope ([Remembered]) whose id was already
// shown is dropped without calling h: JetStream's de-duplication keeps a
// final the daemon publishes again out of the stream, but core subscribers
// receive every copy. So is a typing or delta message of a turn whose
// final h was given. A failing h is retried with [Options.Backoff] like
// ConsumeOutbound's handler, unless the error wraps [ErrPermanent].
//
// It returns an error if the subscription fails or the connection closes.
func (c *Client) SubscribeOutbound(ctx context.Context, h Handler) error {
	return c.Subscribe(ctx, Subscription{Outbound: h})
}

// EventHandler receives one agent event (docs/bus-protocol.md §10). Events
// are informational: there is no retry and nothing to acknowledge.
type EventHandler func(ctx context.Context, ev bus.Event)

// Subscription says what [Client.Subscribe] listens to. Outbound or Events
// (or both) must be set.
type Subscription struct {
	// Outbound receives the outbound envelopes, as [Client.SubscribeOutbound]
	// describes. Nil: the outbound subjects are not subscribed (a client
	// that reads its outbound envelopes with [Client.ConsumeOutbound] and
	// wants the events only).
	Outbound Handler
	// ChatID, when set, narrows the subscription to the subjects of that
	// chat ("<p>.out.<channel>.<chat>", "<p>.event.<channel>.<chat>")
	// instead of every chat of the channel. A client that shows one
	// conversation (the terminal console) sets it.
	ChatID string
	// Events, when set, also receives the agent events of the same chats
	// ("<p>.event.<channel>.<chat>" or "<p>.event.<channel>.>"). An event
	// that is not JSON, or of another channel or chat than its subject, is
	// logged and skipped.
	Events EventHandler
	// Ready, when set, is called once, after the server has confirmed the
	// subscriptions (a round trip, bounded to 10 s) and before anything is
	// delivered: what is published after Ready is called is received.
	Ready func()
}

// Subscribe delivers what s asks for over plain core NATS subscriptions
// until ctx is cancelled, then unsubscribes and returns nil. Outbound
// envelopes and events are handed to their handlers one at a time, in the
// order the server delivered them (one queue for both), with the rules of
// [Client.SubscribeOutbound]. It returns an error if s sets neither
// handler, a subscription fails or the connection closes.
func (c *Client) Subscribe(ctx context.Context, s Subscription) error {
	if s.Outbound == nil && s.Events == nil {
		return errors.New("bridge: subscribe outbound: handler is nil")
	}
	if c.closed.Load() {
		return fmt.Errorf("bridge: subscribe outbound: %w", ErrClosed)
	}
	outSubject := c.subj.OutChannel(c.opts.Channel)
	evSubject := c.subj.Prefix + ".event." + c.opts.Channel + ".>"
	if s.ChatID != "" {
		outSubject, evSubject = c.subj.Out(c.opts.Channel, s.ChatID), c.subj.Event(c.opts.Channel, s.ChatID)
	}
	var subjects []string
	if s.Outbound != nil {
		subjects = append(subjects, outSubject)
	}
	if s.Events != nil {
		subjects = append(subjects, evSubject)
	}
	// A channel subscription does not end when the connection closes:
	// watch for that.
	closed := c.nc.StatusChanged(nats.CLOSED)
	defer c.nc.RemoveStatusListener(closed)
	msgs := make(chan *nats.Msg, subscribePending)
	var outSub *nats.Subscription
	for _, subject := range subjects {
		sub, err := c.nc.ChanSubscribe(subject, msgs)
		if err != nil {
			return fmt.Errorf("bridge: subscribe outbound %s: %w", subject, err)
		}
		defer func() { _ = sub.Unsubscribe() }()
		if outSub == nil && s.Outbound != nil {
			outSub = sub
		}
	}
	if s.Ready != nil {
		fctx, cancel := context.WithTimeout(ctx, readyTimeout)
		err := c.nc.FlushWithContext(fctx)
		cancel()
		if ctx.Err() != nil {
			return nil
		}
		if err != nil {
			return fmt.Errorf("bridge: subscribe outbound %s: %w", outSubject, err)
		}
	}
	c.log.Info("subscribed to outbound", "subjects", subjects)
	if s.Ready != nil {
		s.Ready()
	}
	for {
		var m *nats.Msg
		select {
		case <-ctx.Done():
			return nil
		case <-closed:
			return fmt.Errorf("bridge: subscribe outbound %s: %w", outSubject, nats.ErrConnectionClosed)
		case m = <-msgs:
		}
		if m.Sub != outSub {
			c.event(ctx, s.Events, m)
			continue
		}
		out, err := c.decodeOutbound(m.Data, m.Subject)
		if err != nil {
			c.log.Error("dropping invalid outbound message", "subject", m.Subject, "reason", err.Error())
			continue
		}
		if c.seen.afterFinal(&out) || c.seen.shown(ctx, c, &out) {
			continue
		}
		if c.handleCore(ctx, s.Outbound, out) {
			c.seen.record(ctx, c, &out)
		}
	}
}

// event decodes one event message and hands it to h.
func (c *Client) event(ctx context.Context, h EventHandler, m *nats.Msg) {
	var ev bus.Event
	if err := json.Unmarshal(m.Data, &ev); err != nil {
		c.log.Warn("dropping an event that is not JSON", "subject", m.Subject, "err", err)
		return
	}
	if want := c.subj.Event(c.opts.Channel, ev.ChatID); ev.Channel != c.opts.Channel || m.Subject != want {
		c.log.Warn("dropping an event whose channel or chat does not match its subject", "subject", m.Subject, "channel", ev.Channel, "chat_id", ev.ChatID)
		return
	}
	h(ctx, ev)
}

// decodeOutbound decodes an outbound message and checks it belongs to the
// client's channel and to the chat of its subject.
func (c *Client) decodeOutbound(data []byte, subject string) (bus.Outbound, error) {
	var out bus.Outbound
	if err := json.Unmarshal(data, &out); err != nil {
		return out, fmt.Errorf("not a JSON outbound envelope: %w", err)
	}
	if err := out.Validate(); err != nil {
		return out, err
	}
	if out.Channel != c.opts.Channel {
		return out, fmt.Errorf("envelope channel %s is not %s", out.Channel, c.opts.Channel)
	}
	if want := c.subj.Out(out.Channel, out.ChatID); subject != want {
		return out, fmt.Errorf("subject does not match the envelope's chat_id: want %s", want)
	}
	return out, nil
}

// handleCore calls h until it succeeds (true), fails permanently or ctx
// ends (false).
func (c *Client) handleCore(ctx context.Context, h Handler, out bus.Outbound) bool {
	err := retry.Do(ctx, retry.Policy{
		Schedule:  retry.Schedule(c.opts.Backoff),
		Retryable: func(err error) bool { return !errors.Is(err, ErrPermanent) },
		OnRetry: func(attempt int, wait time.Duration, err error) {
			c.log.Warn("outbound handler failed; retrying", "chat_id", out.ChatID, "id", out.ID, "kind", out.Kind,
				"attempt", attempt, "retry_in", wait, "err", err)
		},
	}, func(ctx context.Context, _ int) error { return h(ctx, out) })
	if err == nil {
		return true
	}
	if ctx.Err() == nil && errors.Is(err, ErrPermanent) {
		c.log.Error("outbound message failed permanently; dropping it", "chat_id", out.ChatID, "id", out.ID, "kind", out.Kind, "err", err)
	}
	return false
}

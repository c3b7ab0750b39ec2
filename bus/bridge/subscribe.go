package bridge

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/switchboard-chat/switchboard/bus"
	"github.com/switchboard-chat/switchboard/internal/retry"
)

// subscribePending bounds the messages a core subscription buffers while
// the handler is busy (nats.go drops beyond it and reports a slow
// consumer).
const subscribePending = 65536

// SubscribeOutbound delivers the outbound envelopes of the client's channel
// to h over a plain core NATS subscription on "<p>.out.<channel>.>" until
// ctx is cancelled, then unsubscribes and returns nil. It is the lighter
// alternative to [Client.ConsumeOutbound] for a bridge that needs no
// catch-up: what is published while it is not subscribed is not received,
// and nothing is acknowledged.
//
// Envelopes are validated as by ConsumeOutbound (invalid ones are logged
// and skipped) and handed to h one at a time, in the order the server
// delivered them. A remembered envelope ([Remembered]) whose id was already
// shown is dropped without calling h: JetStream's de-duplication keeps a
// final the daemon publishes again out of the stream, but core subscribers
// receive every copy. A failing h is retried with [Options.Backoff] like
// ConsumeOutbound's handler, unless the error wraps [ErrPermanent].
//
// It returns an error if the subscription fails or the connection closes.
func (c *Client) SubscribeOutbound(ctx context.Context, h Handler) error {
	if h == nil {
		return errors.New("bridge: subscribe outbound: handler is nil")
	}
	if c.closed.Load() {
		return fmt.Errorf("bridge: subscribe outbound: %w", ErrClosed)
	}
	subject := c.subj.OutChannel(c.opts.Channel)
	sub, err := c.nc.SubscribeSync(subject)
	if err != nil {
		return fmt.Errorf("bridge: subscribe outbound %s: %w", subject, err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	if err := sub.SetPendingLimits(subscribePending, -1); err != nil {
		return fmt.Errorf("bridge: subscribe outbound %s: %w", subject, err)
	}
	c.log.Info("subscribed to outbound", "subject", subject)
	for {
		m, err := sub.NextMsgWithContext(ctx)
		if ctx.Err() != nil {
			return nil
		}
		if err != nil {
			return fmt.Errorf("bridge: subscribe outbound %s: %w", subject, err)
		}
		out, err := c.decodeOutbound(m.Data, m.Subject)
		if err != nil {
			c.log.Error("dropping invalid outbound message", "subject", m.Subject, "reason", err.Error())
			continue
		}
		if c.seen.shown(ctx, c, &out) {
			continue
		}
		if c.handleCore(ctx, h, out) {
			c.seen.record(ctx, c, &out)
		}
	}
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

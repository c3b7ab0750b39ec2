package slack

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"

	slackapi "github.com/slack-go/slack"
	"github.com/slack-go/slack/socketmode"
	"golang.org/x/sync/errgroup"
)

// runSocket receives events over Socket Mode until ctx is cancelled. The
// slack-go client reconnects by itself (on Slack's disconnect requests, on
// a missing ping, on network errors); it gives up only on a rejected
// app-level token, which is returned.
func (a *Adapter) runSocket(ctx context.Context) error {
	opts := []socketmode.Option{socketmode.OptionLog(slog.NewLogLogger(a.log.Handler(), slog.LevelDebug))}
	if a.pingInterval > 0 {
		opts = append(opts, socketmode.OptionPingInterval(a.pingInterval))
	}
	client := socketmode.New(a.api, opts...)
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error {
		err := client.RunContext(gctx)
		if gctx.Err() != nil {
			return nil
		}
		return fmt.Errorf("slack: socket mode: %w (check channels.slack.app_token)", err)
	})
	g.Go(func() error {
		for {
			select {
			case <-gctx.Done():
				return nil
			case evt := <-client.Events:
				a.socketEvent(gctx, client, evt)
			}
		}
	})
	return g.Wait()
}

// socketEvent acknowledges one Socket Mode event at once, then hands an
// Events API payload to the inbound pipeline.
func (a *Adapter) socketEvent(ctx context.Context, client *socketmode.Client, evt socketmode.Event) {
	if evt.Request != nil && evt.Request.EnvelopeID != "" {
		if err := client.AckCtx(ctx, evt.Request.EnvelopeID, nil); err != nil && ctx.Err() == nil {
			a.log.Warn("socket mode ack failed", "envelope_id", evt.Request.EnvelopeID, "err", err)
		}
	}
	switch evt.Type {
	case socketmode.EventTypeConnected:
		a.log.Info("socket mode connected")
		a.setStatus(nil)
	case socketmode.EventTypeConnectionError:
		var err error = errors.New("connection error")
		if ce, ok := evt.Data.(*slackapi.ConnectionErrorEvent); ok && ce.ErrorObj != nil {
			err = ce.ErrorObj
		}
		a.log.Warn("socket mode connection failed; retrying", "err", err)
		a.setStatus(fmt.Errorf("slack: socket mode: %w", err))
	case socketmode.EventTypeInvalidAuth:
		a.setStatus(errors.New("slack: socket mode: channels.slack.app_token rejected"))
	case socketmode.EventTypeEventsAPI:
		if evt.Request != nil {
			a.receive(ctx, evt.Request.Payload, evt.Request.RetryAttempt, nil)
		}
	case socketmode.EventTypeErrorBadMessage:
		// slack-go could not parse the envelope (an event shape it does
		// not know): acknowledge it all the same, so Slack does not
		// retry, and let the adapter's own, more lenient parser try.
		bm, ok := evt.Data.(*socketmode.ErrorBadMessage)
		if !ok {
			return
		}
		var req socketmode.Request
		if err := json.Unmarshal(bm.Message, &req); err != nil || req.EnvelopeID == "" {
			a.log.Warn("socket mode: unreadable message", "err", bm.Cause)
			return
		}
		if err := client.AckCtx(ctx, req.EnvelopeID, nil); err != nil && ctx.Err() == nil {
			a.log.Warn("socket mode ack failed", "envelope_id", req.EnvelopeID, "err", err)
		}
		if req.Type == socketmode.RequestTypeEventsAPI {
			a.receive(ctx, req.Payload, req.RetryAttempt, nil)
		}
	}
}

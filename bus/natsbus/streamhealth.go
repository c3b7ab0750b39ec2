package natsbus

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go/jetstream"
)

// storeHealthTimeout bounds one StoreHealth check within WatchHealth.
const storeHealthTimeout = 2 * time.Second

// StoreHealth reports whether each of the bus's streams (in, out, dlq)
// can store a new message: nil when all can, else one error per stream
// that cannot, naming it and why. A stream cannot store when
//
//   - the server has recorded a write error for it (the embedded server's
//     own health check of the stream; e.g. a message block that could not
//     be opened while the process was out of file descriptors). The
//     server refuses every later write to the stream until it restarts,
//     so the error stays until the daemon is restarted. With an external
//     server (bus.url) this is that server's own /healthz to watch;
//   - it refuses new messages once full (discard new: the in stream) and
//     holds its max_msgs, or its max_bytes less than a message of the
//     largest size the server accepts (max_payload).
func (b *Bus) StoreHealth(ctx context.Context) error {
	var errs []error
	for _, name := range []string{b.streams.In, b.streams.Out, b.streams.DLQ} {
		if err := b.streamStores(ctx, name); err != nil {
			errs = append(errs, fmt.Errorf("natsbus: not ready: stream %s cannot store new messages: %w", name, err))
		}
	}
	return errors.Join(errs...)
}

// streamStores checks one stream (StoreHealth).
func (b *Bus) streamStores(ctx context.Context, name string) error {
	if b.ns != nil {
		hs := b.ns.Healthz(&server.HealthzOptions{Account: b.ns.GlobalAccount().GetName(), Stream: name, Details: true})
		if len(hs.Errors) > 0 || hs.Error != "" {
			msgs := []string{hs.Error}
			for _, e := range hs.Errors {
				msgs = append(msgs, e.Error)
			}
			return fmt.Errorf("%s (restart the daemon once the cause, such as a full disk or too many open files, is gone)",
				strings.Trim(strings.Join(msgs, "; "), "; "))
		}
	}
	s, err := b.js.Stream(ctx, name)
	if err != nil {
		return err
	}
	info, err := s.Info(ctx)
	if err != nil {
		return err
	}
	return full(info, b.nc.MaxPayload())
}

// full describes why a stream that refuses new messages once full
// (discard new) cannot take one of up to maxMsg bytes; nil when it can or
// when it makes room by dropping old messages.
func full(info *jetstream.StreamInfo, maxMsg int64) error {
	c, st := info.Config, info.State
	if c.Discard != jetstream.DiscardNew {
		return nil
	}
	if c.MaxMsgs > 0 && st.Msgs >= uint64(c.MaxMsgs) {
		return fmt.Errorf("it is full: %d messages of its max_msgs %d, and it refuses new ones", st.Msgs, c.MaxMsgs)
	}
	if c.MaxBytes > 0 && int64(st.Bytes)+maxMsg > c.MaxBytes {
		return fmt.Errorf("it is full: %d bytes of its max_bytes %d, no room for a message of the largest size (%d bytes), and it refuses new ones",
			st.Bytes, c.MaxBytes, maxMsg)
	}
	return nil
}

// WatchHealth is [Bus.WatchReady] with [Bus.StoreHealth]: while the bus
// is ready it also reports whether its streams can store, at once,
// whenever the connection changes and every interval, until ctx ends.
func (b *Bus) WatchHealth(ctx context.Context, interval time.Duration, report func(error)) {
	b.WatchReady(ctx, interval, func(err error) {
		if err == nil {
			sctx, cancel := context.WithTimeout(ctx, storeHealthTimeout)
			err = b.StoreHealth(sctx)
			cancel()
		}
		report(err)
	})
}

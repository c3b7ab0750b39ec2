// Package provision sends the requests that create or update the
// JetStream resources the daemon owns (its streams and key-value buckets)
// at start and after a server restart, when several instances of a
// cluster may send the same request at the same moment.
//
// The contract: [Do] gives each attempt its own deadline and sends the
// request again when an attempt got no answer before it while ctx still
// runs, at most [Attempts] times, waiting a little (with jitter, through
// internal/retry) in between. On a JetStream cluster the server may
// answer none of several identical creates that arrive together although
// the stream is created (nats-io/nats-server#3677, nats-io/nats.go#949);
// the create or update sent again is answered. Any other error is
// returned at once: a refused configuration is not a missing answer.
package provision

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/switchboard-chat/switchboard/internal/retry"
)

// Attempts bounds the attempts of one request, the first one included.
const Attempts = 4

// DefaultTimeout bounds one attempt when Do is given none (the nats.go
// JetStream client's default request timeout).
const DefaultTimeout = 5 * time.Second

// Do calls f with a context that ends after timeout (DefaultTimeout when
// 0) or with ctx, until f returns nil, an error that is not a missing
// answer, ctx ends, or Attempts are used up; it returns f's last error.
// what names the resource in the log line of each retry ("stream
// CHAT_IN"); a nil log logs nothing.
func Do(ctx context.Context, log *slog.Logger, what string, timeout time.Duration, f func(ctx context.Context) error) error {
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	return retry.Do(ctx, retry.Policy{
		Schedule:  retry.Exponential(100*time.Millisecond, time.Second).Jitter(0.5),
		Attempts:  Attempts,
		Retryable: Unanswered,
		OnRetry: func(n int, wait time.Duration, err error) {
			if log != nil {
				log.Warn("JetStream request not answered; sending it again", "resource", what, "retry", n, "retry_in", wait, "err", err)
			}
		},
	}, func(ctx context.Context, _ int) error {
		actx, cancel := context.WithTimeout(ctx, timeout)
		defer cancel()
		return f(actx)
	})
}

// Unanswered reports whether err says a request got no answer in time.
func Unanswered(err error) bool {
	return errors.Is(err, context.DeadlineExceeded) || errors.Is(err, nats.ErrTimeout)
}

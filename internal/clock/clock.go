// Package clock holds the one context-aware sleep of the project, used by
// every loop that waits before trying again (the model client's backoff,
// the channel adapters' retries and rate limits).
package clock

import (
	"context"
	"time"
)

// Sleep waits for d or until ctx ends, returning ctx's error then (and nil
// after a full wait). A d of zero or less returns at once.
func Sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

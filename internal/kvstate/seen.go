package kvstate

import (
	"context"
	"time"
)

// Seen is a channel adapter's record of the outbound envelopes it showed,
// in the delivered bucket (Set.Delivered), so that the instance taking a
// channel over drops a final the daemon publishes again after the first
// one was shown by another instance. It has the methods of the bridge
// kit's SeenStore (bus/bridge); ids are kept as long as the bucket keeps
// values (Config.DeliveredTTL, at least the daemon's bus.out_retention).
type Seen struct {
	Store Store
	// Channel names the adapter: its ids live under "seen.<Channel>.".
	Channel string
}

func (s Seen) key(id string) string { return "seen." + s.Channel + "." + Key(id) }

// Seen reports whether id was recorded.
func (s Seen) Seen(ctx context.Context, id string) (bool, error) {
	_, _, ok, err := s.Store.Get(ctx, s.key(id))
	return ok, err
}

// Record remembers that id was shown at at.
func (s Seen) Record(ctx context.Context, id string, at time.Time) error {
	_, err := s.Store.Put(ctx, s.key(id), at.UTC().AppendFormat(nil, time.RFC3339))
	return err
}

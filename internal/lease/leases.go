package lease

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/switchboard-chat/switchboard/internal/provision"
)

// DefaultTTL is the daemon's lease TTL: a dead holder's work moves to
// another instance about this long after its last renewal.
const DefaultTTL = 10 * time.Second

// Config says where the daemon's leases live.
type Config struct {
	// Prefix names the bucket "<Prefix>_leases" ("leases" when empty); the
	// daemon passes the same prefix as to memory/jsstore.
	Prefix string
	// Replicas of the bucket (bus.replicas); 0 means 1.
	Replicas int
	// TTL of every lease in the bucket; 0 means DefaultTTL.
	TTL time.Duration
}

// Leases is the daemon's lease bucket and this process's holder id. A nil
// *Leases means one instance only (memory.store bolt): nothing is wrapped.
type Leases struct {
	kv     jetstream.KeyValue
	holder string
	ttl    time.Duration
	log    *slog.Logger
}

// Open creates or updates the bucket on nc (its TTL and replicas as
// configured) and returns the daemon's leases. A nil log discards.
func Open(ctx context.Context, nc *nats.Conn, cfg Config, log *slog.Logger) (*Leases, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, fmt.Errorf("lease: %w", err)
	}
	bucket := "leases"
	if cfg.Prefix != "" {
		bucket = cfg.Prefix + "_leases"
	}
	ttl := cfg.TTL
	if ttl <= 0 {
		ttl = DefaultTTL
	}
	// Instances starting together send this at once: see internal/provision.
	var kv jetstream.KeyValue
	err = provision.Do(ctx, log, "bucket "+bucket, 0, func(ctx context.Context) error {
		kv, err = js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: bucket, TTL: ttl,
			Replicas: max(cfg.Replicas, 1), History: 1, Description: "Switchboard leases: who runs what once"})
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("lease: bucket %s: %w", bucket, err)
	}
	return &Leases{kv: kv, holder: hostHolder() + "/" + nonce(), ttl: ttl, log: log}, nil
}

// Lease returns the lease named key held as this process.
func (ls *Leases) Lease(key string) Lease {
	return Lease{KV: ls.kv, Key: key, Holder: ls.holder, TTL: ls.ttl, Log: ls.log.With("component", "lease")}
}

// Key names a lease: name alone, or name and a hash of secret (a bot
// token), so that two bots of one platform are two leases and the token
// never appears in the bucket.
func Key(name, secret string) string {
	if secret == "" {
		return name
	}
	sum := sha256.Sum256([]byte(secret))
	return name + "." + hex.EncodeToString(sum[:8])
}

// Exclusive runs fn only while this instance holds its lease (a [Lease]).
type Exclusive interface {
	Run(ctx context.Context, fn func(context.Context) error) error
}

// Exclusive returns the lease named key for work that must run on one
// instance at a time (the scheduler: "scheduler"), or nil with nil ls (one
// instance: run the work as it is).
func (ls *Leases) Exclusive(key string) Exclusive {
	if ls == nil {
		return nil
	}
	return ls.Lease(key)
}

// Runner is what [Leases.Channel] wraps: a channels.Channel.
type Runner interface {
	Name() string
	Run(ctx context.Context) error
}

// Channel wraps c so that its Run runs only while this instance holds the
// lease Key(name, secret). While standing by, status (when set) is told the
// channel is healthy: a standby instance is ready. With nil ls (one
// instance), c is returned as it is.
func (ls *Leases) Channel(c Runner, name, secret string, status func(error)) Runner {
	if ls == nil || c == nil {
		return c
	}
	l := ls.Lease(Key("channel."+name, secret))
	if status != nil {
		l.OnStandby = func() { status(nil) }
	}
	return guarded{Runner: c, lease: l}
}

// guarded is a Runner that runs under a lease.
type guarded struct {
	Runner
	lease Lease
}

func (g guarded) Run(ctx context.Context) error { return g.lease.Run(ctx, g.Runner.Run) }

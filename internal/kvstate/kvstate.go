// Package kvstate keeps the daemon's small replicated state in JetStream
// key-value buckets when memory.store is jetstream: the long-term memory
// notes, the scheduled tasks, the channel adapters' state (the Telegram
// getUpdates offset), the deliveries shown and the pairing state (package
// access). It is the one helper over a key-value bucket; the
// parts that keep state define the small interface they need, and a
// [*Bucket] satisfies it. With memory.store bolt nothing here is opened and
// each part keeps its state in its own file as before.
//
// Buckets are named "<prefix>_<name>" (prefix: bus.subject_prefix with dots
// turned into underscores), hold bus.replicas copies and keep one value per
// key (history 1): see [Open] and [Names]. [Open] also opens the lease
// bucket (internal/lease), so that the daemon opens what several instances
// share, besides history (memory/jsstore), in one call.
//
// Contract of a [Bucket]:
//   - Get returns the value and its revision, or ok false for a missing or
//     deleted key.
//   - Put and Delete write unconditionally; Modify is a read-modify-write
//     checked on the revision read (optimistic concurrency), retried while
//     another writer moved the key in between, so two instances changing
//     one key never lose each other's change.
//   - All returns every live key's value; Watch replays them, says when
//     the replay is complete, and then streams every later change, in the
//     bucket's order, until ctx ends.
//
// Keys are the bucket's keys ([-/_=.a-zA-Z0-9]+, no leading or trailing
// dot); [Key] turns any text (a file path) into one.
package kvstate

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/switchboard-chat/switchboard/internal/lease"
	"github.com/switchboard-chat/switchboard/internal/provision"
)

// Names of the buckets [Open] opens (after "<prefix>_").
const (
	NameMemory    = "memory"
	NameSchedules = "schedules"
	NameChannels  = "channels"
	// NameDelivered holds what proves a delivery happened, for as long as
	// a repeat can arrive: the outbound ids the channel adapters showed
	// ([Seen]) and the OpenAI-compatible API's idempotency records. Its
	// values expire after Config.DeliveredTTL.
	NameDelivered = "delivered"
	// NameAccess holds the pairing state (package access): pending code
	// hashes, the record of every code issued, rate-limit stamps and the
	// approved users, so that every instance gates alike and
	// `switchboard pairing` changes them for all.
	NameAccess = "access"
)

// DefaultDeliveredTTL is how long the delivered bucket keeps a value when
// Config.DeliveredTTL is 0: twice bus.out_retention's default.
const DefaultDeliveredTTL = 48 * time.Hour

// maxModifyTries bounds Modify's retries on a conflicting write.
const maxModifyTries = 64

// Config says where the buckets live.
type Config struct {
	// Prefix names the buckets "<Prefix>_<name>" (just "<name>" when
	// empty); the daemon passes the same prefix as to memory/jsstore and
	// internal/lease.
	Prefix string
	// Replicas of every bucket (bus.replicas); 0 means 1.
	Replicas int
	// LeaseTTL is the leases' TTL (0: lease.DefaultTTL).
	LeaseTTL time.Duration
	// DeliveredTTL is how long the delivered bucket keeps a value (0:
	// [DefaultDeliveredTTL]); the daemon passes twice bus.out_retention.
	DeliveredTTL time.Duration
}

// Store is what a [Bucket] offers; [Set] hands buckets out as Stores so
// that a part not opened (memory.store bolt) is a nil interface.
type Store interface {
	Get(ctx context.Context, key string) (value []byte, rev uint64, ok bool, err error)
	Put(ctx context.Context, key string, value []byte) (uint64, error)
	Delete(ctx context.Context, key string) error
	Modify(ctx context.Context, key string, fn func(old []byte, ok bool) ([]byte, error)) ([]byte, uint64, error)
	All(ctx context.Context) (map[string][]byte, error)
	Watch(ctx context.Context, fn func(Change)) error
}

var _ Store = (*Bucket)(nil)

// Set is the daemon's state buckets and its leases. The zero Set
// (memory.store bolt) has nil Stores and nil Leases (nil *lease.Leases
// wraps nothing).
type Set struct {
	Memory    Store         // long-term memory notes, by workspace path ([Key])
	Schedules Store         // scheduled tasks, by task id
	Channels  Store         // channel adapters' state, keys chosen by each adapter
	Delivered Store         // shown outbound ids ([Seen]), idempotency records; values expire
	Access    Store         // pairing state (package access)
	Leases    *lease.Leases // "<prefix>_leases": what runs once (channels, the scheduler)
}

// Open creates (or updates: replicas) the daemon's buckets on nc and its
// leases (logging to log; nil discards).
func Open(ctx context.Context, nc *nats.Conn, cfg Config, log *slog.Logger) (Set, error) {
	ls, err := lease.Open(ctx, nc, lease.Config{Prefix: cfg.Prefix, Replicas: cfg.Replicas, TTL: cfg.LeaseTTL}, log)
	if err != nil {
		return Set{}, err
	}
	s := Set{Leases: ls}
	delivered := cfg.DeliveredTTL
	if delivered <= 0 {
		delivered = DefaultDeliveredTTL
	}
	for _, b := range []struct {
		name, desc string
		ttl        time.Duration
		dst        *Store
	}{
		{NameMemory, "Switchboard long-term memory notes (workspace path → file)", 0, &s.Memory},
		{NameSchedules, "Switchboard scheduled tasks", 0, &s.Schedules},
		{NameChannels, "Switchboard channel adapter state (Telegram offset, ...)", 0, &s.Channels},
		{NameDelivered, "Switchboard deliveries: outbound ids shown, idempotency records", delivered, &s.Delivered},
		{NameAccess, descAccess, 0, &s.Access},
	} {
		bk, err := openBucket(ctx, nc, cfg, b.name, b.desc, b.ttl)
		if err != nil {
			return Set{}, err
		}
		*b.dst = bk
	}
	return s, nil
}

// Names returns the full names of the buckets [Open] opens for prefix.
func Names(prefix string) []string {
	var out []string
	for _, n := range []string{NameMemory, NameSchedules, NameChannels, NameDelivered, NameAccess} {
		out = append(out, bucketName(prefix, n))
	}
	return out
}

func bucketName(prefix, name string) string {
	if prefix == "" {
		return name
	}
	return prefix + "_" + name
}

// Bucket is one key-value bucket. Safe for concurrent use.
type Bucket struct {
	kv jetstream.KeyValue
}

// OpenBucket creates or updates the bucket "<prefix>_<name>" on nc.
func OpenBucket(ctx context.Context, nc *nats.Conn, cfg Config, name, desc string) (*Bucket, error) {
	return openBucket(ctx, nc, cfg, name, desc, 0)
}

// openBucket is OpenBucket whose values expire after ttl (0: never).
func openBucket(ctx context.Context, nc *nats.Conn, cfg Config, name, desc string, ttl time.Duration) (*Bucket, error) {
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, fmt.Errorf("kvstate: %w", err)
	}
	bucket := bucketName(cfg.Prefix, name)
	var kv jetstream.KeyValue
	err = provision.Do(ctx, nil, "bucket "+bucket, 0, func(ctx context.Context) error {
		kv, err = js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: bucket, Description: desc,
			History: 1, Replicas: max(cfg.Replicas, 1), Storage: jetstream.FileStorage, TTL: ttl})
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("kvstate: bucket %s: %w", bucket, err)
	}
	return &Bucket{kv: kv}, nil
}

const descAccess = "Switchboard pairing: pending code hashes, issued codes, approved users"

// OpenAccess opens (creating it when missing) the access bucket of [Open]
// on its own, for `switchboard pairing` run by an operator next to the
// daemons.
func OpenAccess(ctx context.Context, nc *nats.Conn, cfg Config) (*Bucket, error) {
	return openBucket(ctx, nc, cfg, NameAccess, descAccess, 0)
}

// Key turns any text (a workspace path) into a valid key: its unpadded
// URL-safe base64.
func Key(text string) string { return base64.RawURLEncoding.EncodeToString([]byte(text)) }

// KeyText is the text [Key] encoded; ok is false for a key Key did not make.
func KeyText(key string) (string, bool) {
	b, err := base64.RawURLEncoding.DecodeString(key)
	return string(b), err == nil
}

// Get returns key's value and revision; ok is false when it has none.
func (b *Bucket) Get(ctx context.Context, key string) ([]byte, uint64, bool, error) {
	e, err := b.kv.Get(ctx, key)
	switch {
	case errors.Is(err, jetstream.ErrKeyNotFound) || errors.Is(err, jetstream.ErrKeyDeleted):
		return nil, 0, false, nil
	case err != nil:
		return nil, 0, false, fmt.Errorf("kvstate: get %s/%s: %w", b.kv.Bucket(), key, err)
	}
	return e.Value(), e.Revision(), true, nil
}

// Put stores value under key and returns its revision.
func (b *Bucket) Put(ctx context.Context, key string, value []byte) (uint64, error) {
	rev, err := b.kv.Put(ctx, key, value)
	if err != nil {
		return 0, fmt.Errorf("kvstate: put %s/%s: %w", b.kv.Bucket(), key, err)
	}
	return rev, nil
}

// Delete removes key (a missing key is no error).
func (b *Bucket) Delete(ctx context.Context, key string) error {
	if err := b.kv.Delete(ctx, key); err != nil && !errors.Is(err, jetstream.ErrKeyNotFound) {
		return fmt.Errorf("kvstate: delete %s/%s: %w", b.kv.Bucket(), key, err)
	}
	return nil
}

// Modify stores fn(current value) under key, checked on the revision read:
// when another writer changed the key in between, it reads again and calls
// fn again. fn returning an error stops Modify with that error and writes
// nothing. It returns what it stored and its revision.
func (b *Bucket) Modify(ctx context.Context, key string, fn func(old []byte, ok bool) ([]byte, error)) ([]byte, uint64, error) {
	for range maxModifyTries {
		old, rev, ok, err := b.Get(ctx, key)
		if err != nil {
			return nil, 0, err
		}
		next, err := fn(old, ok)
		if err != nil {
			return nil, 0, err
		}
		var nrev uint64
		if ok {
			nrev, err = b.kv.Update(ctx, key, next, rev)
		} else {
			// Create also succeeds over a deleted key, and fails when a
			// value appeared meanwhile.
			nrev, err = b.kv.Create(ctx, key, next)
		}
		if err == nil {
			return next, nrev, nil
		}
		if !conflict(err) {
			return nil, 0, fmt.Errorf("kvstate: modify %s/%s: %w", b.kv.Bucket(), key, err)
		}
		if err := ctx.Err(); err != nil {
			return nil, 0, err
		}
	}
	return nil, 0, fmt.Errorf("kvstate: modify %s/%s: still conflicting after %d tries", b.kv.Bucket(), key, maxModifyTries)
}

// conflict reports a write refused because the key's revision moved.
func conflict(err error) bool {
	var apiErr *jetstream.APIError
	return errors.Is(err, jetstream.ErrKeyExists) || errors.Is(err, jetstream.ErrKeyRevisionMismatch) ||
		(errors.As(err, &apiErr) && (apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence ||
			apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant))
}

// All returns every live key's value.
func (b *Bucket) All(ctx context.Context) (map[string][]byte, error) {
	w, err := b.kv.WatchAll(ctx, jetstream.IgnoreDeletes())
	if err != nil {
		return nil, fmt.Errorf("kvstate: list %s: %w", b.kv.Bucket(), err)
	}
	defer func() { _ = w.Stop() }()
	out := make(map[string][]byte)
	for {
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case e, open := <-w.Updates():
			if !open {
				return nil, fmt.Errorf("kvstate: list %s: the watch ended", b.kv.Bucket())
			}
			if e == nil { // the replay is complete
				return out, nil
			}
			out[e.Key()] = e.Value()
		}
	}
}

// Change is one key's change seen by [Bucket.Watch].
type Change struct {
	Key      string
	Value    []byte // nil when Deleted
	Revision uint64
	Deleted  bool // deleted or purged
	// Replayed is true for the values present when the watch started.
	Replayed bool
	// Synced marks the one Change, with no key, that ends the replay:
	// what came before it is the bucket as it was when the watch started.
	Synced bool
}

// Watch calls fn with every key's value (deleted keys as deletions), then
// once with a Synced Change, then with every later change,
// one at a time in the bucket's order, until ctx ends (then it returns nil)
// or the watch fails.
func (b *Bucket) Watch(ctx context.Context, fn func(Change)) error {
	w, err := b.kv.WatchAll(ctx)
	if err != nil {
		return fmt.Errorf("kvstate: watch %s: %w", b.kv.Bucket(), err)
	}
	defer func() { _ = w.Stop() }()
	replay := true
	for {
		select {
		case <-ctx.Done():
			return nil
		case e, open := <-w.Updates():
			if !open {
				if ctx.Err() != nil {
					return nil
				}
				return fmt.Errorf("kvstate: watch %s: the watch ended", b.kv.Bucket())
			}
			if e == nil {
				replay = false
				fn(Change{Synced: true})
				continue
			}
			del := e.Operation() != jetstream.KeyValuePut
			c := Change{Key: e.Key(), Revision: e.Revision(), Deleted: del, Replayed: replay}
			if !del {
				c.Value = e.Value()
			}
			fn(c)
		}
	}
}

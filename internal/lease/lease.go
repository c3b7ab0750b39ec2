// Package lease runs a piece of work on one instance at a time among
// several daemon instances sharing a NATS cluster. The arbiter is a key in
// a JetStream key-value bucket whose TTL is the lease's TTL: no membership,
// gossip or election of our own.
//
// Contract of [Lease.Run]:
//   - Acquire: KeyValue.Create of the key, which fails while the key
//     exists. The value is the holder's id and a random nonce, unique to
//     this Run, so that a write can be told apart from anyone else's.
//   - Hold: fn runs with a context derived from Run's. The holder renews
//     with KeyValue.Update on its last revision every TTL/3, each renewal
//     bounded by TTL/3, and watches the key.
//   - Lose: fn's context is cancelled the moment a renewal fails (the
//     revision moved, the connection is gone, the server did not answer in
//     time) or the watch shows a write that is not the holder's (another
//     holder, a delete or purge by an operator). Run waits for fn to return,
//     then tries to acquire again.
//   - Stand by: while another holds the key, Run tries again every TTL/3,
//     and at once when the watch shows the key deleted or purged (a release).
//   - Expire: a holder that stops renewing (dead process, cut connection)
//     leaves a key the server removes TTL after its last write (the bucket's
//     TTL, set by [Open]); another instance then acquires it.
//   - Release: when fn returns on its own, Run deletes the key, checked on
//     its last revision (never another holder's key), and returns fn's
//     error. When Run's ctx ends, Run cancels fn, waits for it, releases the
//     same way and returns nil.
//   - At most one holder runs fn at a time, provided fn returns within TTL/3
//     of its context's cancellation: a holder cut off from NATS fails its
//     renewal at most 2·TTL/3 after its last successful write, the server
//     lets the key expire TTL after it.
//
// [Leases] is the daemon's use: one bucket "<prefix>_leases", one holder id
// per process, and [Leases.Channel], which wraps a channel adapter so that it
// runs only on the instance holding its lease.
package lease

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// Lease is one named lease in a bucket. Its fields are set once; Run may
// be called by one goroutine at a time per Lease value.
type Lease struct {
	KV     jetstream.KeyValue
	Key    string        // a valid key-value key ([-/_=.a-zA-Z0-9]+)
	Holder string        // who holds it, for humans reading the key (host, pid, ...)
	TTL    time.Duration // the bucket's TTL; renewals every TTL/3
	Log    *slog.Logger  // nil discards
	// OnStandby, when set, is called each time Run starts waiting for the
	// lease (another holds it, or NATS cannot be reached).
	OnStandby func()
}

// Run runs fn only while holding the lease, until ctx ends (then it
// returns nil) or fn returns on its own while the lease is held (then it
// returns fn's error). See the package contract.
func (l Lease) Run(ctx context.Context, fn func(context.Context) error) error {
	if l.TTL <= 0 {
		return fmt.Errorf("lease %s: TTL must be positive", l.Key)
	}
	if l.Log == nil {
		l.Log = slog.New(slog.DiscardHandler)
	}
	value := []byte(l.Holder + " " + nonce())
	r := &run{Lease: l, value: value, every: l.TTL / 3}
	defer r.stopWatch()
	tick := time.NewTicker(r.every)
	defer tick.Stop()
	standby := false
	for {
		r.startWatch(ctx)
		octx, cancel := context.WithTimeout(ctx, r.every)
		rev, err := l.KV.Create(octx, l.Key, value)
		cancel()
		switch {
		case ctx.Err() != nil:
			return nil
		case err == nil:
			l.Log.Info("lease acquired", "lease", l.Key, "holder", l.Holder)
			standby = false
			done, ferr := r.hold(ctx, rev, tick, fn)
			if done {
				return ferr
			}
			continue // lost: try again at once (the key is usually another's now)
		case errors.Is(err, jetstream.ErrKeyExists):
			if !standby {
				l.Log.Info("lease held by another instance; standing by", "lease", l.Key, "holder", l.Holder)
			}
		case !standby:
			l.Log.Warn("lease: cannot reach the key-value bucket; standing by", "lease", l.Key, "err", err)
		default:
			l.Log.Debug("lease: cannot reach the key-value bucket", "lease", l.Key, "err", err)
		}
		if !standby && l.OnStandby != nil {
			l.OnStandby()
		}
		standby = true
		if !r.wait(ctx, tick) {
			return nil
		}
	}
}

// run is the state of one Lease.Run.
type run struct {
	Lease
	value []byte
	every time.Duration
	w     jetstream.KeyWatcher // nil until a watch could be started
}

// startWatch starts watching the key, if not yet done (a failure is logged
// and tried again on the next round; polling every TTL/3 still works).
func (r *run) startWatch(ctx context.Context) {
	if r.w != nil {
		return
	}
	w, err := r.KV.Watch(ctx, r.Key, jetstream.UpdatesOnly())
	if err != nil {
		r.Log.Debug("lease: watch not started; polling only", "lease", r.Key, "err", err)
		return
	}
	r.w = w
}

func (r *run) stopWatch() {
	if r.w != nil {
		_ = r.w.Stop()
	}
}

// updates is the watch's channel, nil (blocking forever) without a watch.
func (r *run) updates() <-chan jetstream.KeyValueEntry {
	if r.w == nil {
		return nil
	}
	return r.w.Updates()
}

// wait waits for the next attempt: a tick, or a release seen on the watch.
// It returns false when ctx ended.
func (r *run) wait(ctx context.Context, tick *time.Ticker) bool {
	for {
		select {
		case <-ctx.Done():
			return false
		case <-tick.C:
			return true
		case e, ok := <-r.updates():
			if !ok {
				r.w = nil // closed (connection closed): start again next round
				return true
			}
			if e != nil && e.Operation() != jetstream.KeyValuePut {
				return true
			}
		}
	}
}

// hold runs fn while holding the lease at revision rev. done reports that
// Run must return err (ctx ended, or fn returned on its own); otherwise
// the lease was lost and fn has returned.
func (r *run) hold(ctx context.Context, rev uint64, tick *time.Ticker, fn func(context.Context) error) (done bool, err error) {
	fctx, cancel := context.WithCancel(ctx)
	defer cancel()
	res := make(chan error, 1)
	go func() { res <- fn(fctx) }()
	lost := func(why string, err error) (bool, error) {
		r.Log.Warn("lease lost; stopping until it is acquired again", "lease", r.Key, "holder", r.Holder, "why", why, "err", err)
		cancel()
		<-res
		return false, nil
	}
	tick.Reset(r.every)
	for {
		select {
		case err := <-res:
			r.release(ctx, rev)
			if ctx.Err() != nil {
				return true, nil
			}
			return true, err
		case <-ctx.Done():
			cancel()
			<-res
			r.release(ctx, rev)
			return true, nil
		case <-tick.C:
			octx, ocancel := context.WithTimeout(ctx, r.every)
			next, err := r.KV.Update(octx, r.Key, r.value, rev)
			ocancel()
			if err != nil {
				if ctx.Err() != nil {
					continue // the ctx.Done case releases
				}
				return lost("renewal failed", err)
			}
			rev = next
		case e, ok := <-r.updates():
			if !ok {
				r.w = nil
				continue // renewals still guard the lease
			}
			if e == nil || e.Revision() <= rev {
				continue // history up to our last write
			}
			if e.Operation() == jetstream.KeyValuePut && string(e.Value()) == string(r.value) {
				continue // our own renewal, seen before Update returned
			}
			return lost("the key changed hands", fmt.Errorf("%s at revision %d: %q", e.Operation(), e.Revision(), e.Value()))
		}
	}
}

// release deletes the key if it is still at rev (ours), so that another
// instance takes over at once instead of after the TTL.
func (r *run) release(ctx context.Context, rev uint64) {
	octx, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.every)
	defer cancel()
	if err := r.KV.Delete(octx, r.Key, jetstream.LastRevision(rev)); err != nil {
		r.Log.Debug("lease: release failed; the key expires after its TTL", "lease", r.Key, "err", err)
		return
	}
	r.Log.Info("lease released", "lease", r.Key, "holder", r.Holder)
}

// nonce is 8 random bytes in hex.
func nonce() string {
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// hostHolder names this process: host name and pid.
func hostHolder() string {
	h, err := os.Hostname()
	if err != nil {
		h = "unknown"
	}
	return fmt.Sprintf("%s/%d", h, os.Getpid())
}

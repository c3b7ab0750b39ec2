package telegram

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	bolt "go.etcd.io/bbolt"
	bolterrors "go.etcd.io/bbolt/errors"
)

// offsetMaxAge bounds how old a stored offset may be to be used. Telegram
// keeps pending updates for 24 hours, and after a week without updates it
// picks the next update id at random, so a week-old offset may lie above
// every new id and would make getUpdates skip them. An older offset is
// dropped; the server then starts from its earliest unconfirmed update
// and the bus's de-duplication absorbs any repeat.
const offsetMaxAge = 6 * 24 * time.Hour

var offsetBucket = []byte("telegram_offsets")

// sharedSaveTimeout bounds one save to a shared [State].
const sharedSaveTimeout = 5 * time.Second

// State is where the getUpdates offset is kept when several instances
// share the bot (memory.store jetstream: the daemon's channels bucket, a
// *kvstate.Bucket): the instance that takes the channel over resumes from
// the offset the last holder stored, neither re-processing nor skipping
// updates.
type State interface {
	Get(ctx context.Context, key string) (value []byte, rev uint64, ok bool, err error)
	Put(ctx context.Context, key string, value []byte) (uint64, error)
}

// offsets persists the getUpdates offset (one past the last update
// published and acknowledged) per bot, in the adapter's state file, or in
// shared when set. Safe for concurrent use.
type offsets struct {
	db     *bolt.DB
	shared State // nil: db
	key    []byte
	now    func() time.Time
	owned  bool // close closes db
}

// stateKey is the bot's key in a shared [State].
func stateKey(botID int64) string { return "telegram.offset." + strconv.FormatInt(botID, 10) }

type offsetRecord struct {
	Offset int       `json:"offset"`
	Saved  time.Time `json:"saved"`
}

// openState opens (creating) the adapter's state file at path
// (data_dir/telegram.db): the getUpdates offsets and the outbound ids
// already shown. A file held by another process is an error after a
// second, not a hang.
func openState(path string) (*bolt.DB, error) {
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: time.Second})
	if err != nil {
		if errors.Is(err, bolterrors.ErrTimeout) {
			return nil, fmt.Errorf("telegram: open %s: the file is locked by another process (is another switchboard using this data_dir?)", path)
		}
		return nil, fmt.Errorf("telegram: open %s: %w", path, err)
	}
	return db, nil
}

// newOffsets returns the offset store of bot botID in db, creating its
// bucket, or in shared when it is not nil.
func newOffsets(db *bolt.DB, shared State, botID int64, now func() time.Time) (*offsets, error) {
	if shared != nil {
		return &offsets{db: db, shared: shared, key: []byte(stateKey(botID)), now: now}, nil
	}
	if err := db.Update(func(tx *bolt.Tx) error {
		_, err := tx.CreateBucketIfNotExists(offsetBucket)
		return err
	}); err != nil {
		return nil, fmt.Errorf("telegram: open %s: %w", db.Path(), err)
	}
	return &offsets{db: db, key: []byte("bot:" + strconv.FormatInt(botID, 10)), now: now}, nil
}

// openOffsets opens the state file at path and its offset store; close
// closes the file.
func openOffsets(path string, botID int64, now func() time.Time) (*offsets, error) {
	db, err := openState(path)
	if err != nil {
		return nil, err
	}
	o, err := newOffsets(db, nil, botID, now)
	if err != nil {
		_ = db.Close()
		return nil, err
	}
	o.owned = true
	return o, nil
}

// load returns the stored offset, or 0 when there is none or it is older
// than offsetMaxAge (stale reports that case).
func (o *offsets) load(ctx context.Context) (offset int, stale bool, err error) {
	var rec offsetRecord
	if o.shared != nil {
		v, _, ok, err := o.shared.Get(ctx, string(o.key))
		if err == nil && ok {
			err = json.Unmarshal(v, &rec)
		}
		if err != nil {
			return 0, false, fmt.Errorf("telegram: load offset: %w", err)
		}
	} else if err := o.db.View(func(tx *bolt.Tx) error {
		v := tx.Bucket(offsetBucket).Get(o.key)
		if v == nil {
			return nil
		}
		return json.Unmarshal(v, &rec)
	}); err != nil {
		return 0, false, fmt.Errorf("telegram: load offset: %w", err)
	}
	if rec.Offset > 0 && o.now().Sub(rec.Saved) > offsetMaxAge {
		return 0, true, nil
	}
	return rec.Offset, false, nil
}

// save stores offset durably (one fsynced transaction, or a put the
// shared store acknowledged).
func (o *offsets) save(ctx context.Context, offset int) error {
	v, err := json.Marshal(offsetRecord{Offset: offset, Saved: o.now().UTC()})
	if err != nil {
		return fmt.Errorf("telegram: save offset: %w", err)
	}
	if o.shared != nil {
		// The updates are on the bus: store their offset even when the
		// channel is being stopped (the lease moved), so the next holder
		// does not fetch them again.
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), sharedSaveTimeout)
		defer cancel()
		if _, err := o.shared.Put(ctx, string(o.key), v); err != nil {
			return fmt.Errorf("telegram: save offset %d: %w", offset, err)
		}
		return nil
	}
	if err := o.db.Update(func(tx *bolt.Tx) error { return tx.Bucket(offsetBucket).Put(o.key, v) }); err != nil {
		return fmt.Errorf("telegram: save offset %d: %w", offset, err)
	}
	return nil
}

// close closes the file when the store opened it.
func (o *offsets) close() error {
	if !o.owned {
		return nil
	}
	return o.db.Close()
}

package telegram

import (
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

// offsets persists the getUpdates offset (one past the last update
// published and acknowledged) per bot, in the adapter's state file. Safe
// for concurrent use.
type offsets struct {
	db    *bolt.DB
	key   []byte
	now   func() time.Time
	owned bool // close closes db
}

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
// bucket.
func newOffsets(db *bolt.DB, botID int64, now func() time.Time) (*offsets, error) {
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
	o, err := newOffsets(db, botID, now)
	if err != nil {
		_ = db.Close()
		return nil, err
	}
	o.owned = true
	return o, nil
}

// load returns the stored offset, or 0 when there is none or it is older
// than offsetMaxAge (stale reports that case).
func (o *offsets) load() (offset int, stale bool, err error) {
	var rec offsetRecord
	err = o.db.View(func(tx *bolt.Tx) error {
		v := tx.Bucket(offsetBucket).Get(o.key)
		if v == nil {
			return nil
		}
		return json.Unmarshal(v, &rec)
	})
	if err != nil {
		return 0, false, fmt.Errorf("telegram: load offset: %w", err)
	}
	if rec.Offset > 0 && o.now().Sub(rec.Saved) > offsetMaxAge {
		return 0, true, nil
	}
	return rec.Offset, false, nil
}

// save stores offset durably (one fsynced transaction).
func (o *offsets) save(offset int) error {
	v, err := json.Marshal(offsetRecord{Offset: offset, Saved: o.now().UTC()})
	if err != nil {
		return fmt.Errorf("telegram: save offset: %w", err)
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

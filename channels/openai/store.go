package openai

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	bolt "go.etcd.io/bbolt"
)

// Records is where the idempotency records and the finals are kept when
// several instances may serve the API in turn (memory.store jetstream:
// the delivered bucket, whose values expire): a client retrying through
// the instance that took the listener over finds its request and its
// answer there. Modify is a read-modify-write checked on the revision
// read, so two instances claiming one key agree on one record.
type Records interface {
	Get(ctx context.Context, key string) (value []byte, rev uint64, ok bool, err error)
	Put(ctx context.Context, key string, value []byte) (uint64, error)
	Modify(ctx context.Context, key string, fn func(old []byte, ok bool) ([]byte, error)) ([]byte, uint64, error)
}

// sharedTimeout bounds one read or write of the shared Records.
const sharedTimeout = 5 * time.Second

// sharedKey is the key of a record in the shared Records: kind ("req" or
// "ans") and the record's own key, made a valid bucket key.
func sharedKey(kind, key string) string {
	return "openai." + kind + "." + base64.RawURLEncoding.EncodeToString([]byte(key))
}

// Buckets of openai.db.
var (
	// bucketRequests maps "<key scope>\x00<Idempotency-Key>" to the
	// request it started (a [request]).
	bucketRequests = []byte("requests")
	// bucketAnswers maps an inbound id to the final the agent published
	// for it (an [answer]); proactive finals (no in_reply_to) are kept
	// under "out:<outbound id>".
	bucketAnswers = []byte("answers")
)

// seenBucket holds the outbound ids already handled (the bridge kit's
// SeenStore, package boltseen).
const seenBucket = "outbound_shown"

// pruneEvery is the least time between two prunes of expired records.
const pruneEvery = 10 * time.Minute

// request is what an Idempotency-Key stands for.
type request struct {
	ID   string `json:"id"`   // the inbound id
	Chat string `json:"chat"` // the bus chat id
	At   int64  `json:"at"`   // unix seconds
}

// answer is the final of one inbound message.
type answer struct {
	Kind string `json:"kind"`
	Text string `json:"text,omitempty"`
	// AnsweredBy is the inbound id whose final carries the answer (the
	// agent answered several messages of a session with one turn).
	AnsweredBy string `json:"answered_by,omitempty"`
	Chat       string `json:"chat"`
	At         int64  `json:"at"`
}

// store keeps the idempotency records and the finals in a bbolt file. It
// is safe for concurrent use.
type store struct {
	db     *bolt.DB
	shared Records // nil: the records are in db
	ttl    time.Duration
	now    func() time.Time

	// failPut, when set (tests), makes putAnswer fail with its error;
	// onPut, when set, sees every final stored.
	failPut func() error
	onPut   func(answer)

	mu        sync.Mutex
	lastPrune time.Time
}

// openStore opens (creating) the file at path, creates the buckets and
// deletes the records older than ttl.
func openStore(path string, ttl time.Duration, now func() time.Time) (*store, error) {
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: 5 * time.Second})
	if err != nil {
		return nil, fmt.Errorf("openai: open %s: %w", path, err)
	}
	err = db.Update(func(tx *bolt.Tx) error {
		for _, b := range [][]byte{bucketRequests, bucketAnswers} {
			if _, err := tx.CreateBucketIfNotExists(b); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("openai: %s: %w", path, err)
	}
	s := &store{db: db, ttl: ttl, now: now}
	if err := s.prune(); err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("openai: %s: %w", path, err)
	}
	return s, nil
}

func (s *store) close() error { return s.db.Close() }

// claim returns the request stored under idem, or stores fresh under it
// and returns it with created true. One transaction: two concurrent
// requests with the same key get the same record.
func (s *store) claim(idem string, fresh request) (request, bool, error) {
	if s.shared != nil {
		return s.claimShared(idem, fresh)
	}
	var got request
	created := false
	err := s.db.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketRequests)
		if v := b.Get([]byte(idem)); v != nil {
			if err := json.Unmarshal(v, &got); err == nil && s.live(got.At) {
				return nil
			}
		}
		got, created = fresh, true
		v, err := json.Marshal(fresh)
		if err != nil {
			return err
		}
		return b.Put([]byte(idem), v)
	})
	if err != nil {
		return request{}, false, fmt.Errorf("openai: store idempotency key: %w", err)
	}
	s.maybePrune()
	return got, created, nil
}

// putAnswer stores the final of inbound id (key "out:<outbound id>" for a
// proactive final).
func (s *store) putAnswer(key string, a answer) error {
	if s.failPut != nil {
		if err := s.failPut(); err != nil {
			return err
		}
	}
	v, err := json.Marshal(a)
	if err != nil {
		return err
	}
	if s.shared != nil {
		ctx, cancel := context.WithTimeout(context.Background(), sharedTimeout)
		_, err = s.shared.Put(ctx, sharedKey("ans", key), v)
		cancel()
	} else {
		err = s.db.Update(func(tx *bolt.Tx) error { return tx.Bucket(bucketAnswers).Put([]byte(key), v) })
	}
	if err != nil {
		return fmt.Errorf("openai: store final: %w", err)
	}
	if s.onPut != nil {
		s.onPut(a)
	}
	s.maybePrune()
	return nil
}

// getAnswer returns the final stored for inbound id, if any.
func (s *store) getAnswer(id string) (answer, bool, error) {
	if s.shared != nil {
		return s.getAnswerShared(id)
	}
	var a answer
	found := false
	err := s.db.View(func(tx *bolt.Tx) error {
		v := tx.Bucket(bucketAnswers).Get([]byte(id))
		if v == nil {
			return nil
		}
		if err := json.Unmarshal(v, &a); err != nil {
			return err
		}
		found = s.live(a.At)
		return nil
	})
	if err != nil {
		return answer{}, false, fmt.Errorf("openai: read final: %w", err)
	}
	return a, found, nil
}

// live reports whether a record written at unix second at is within the
// retention.
func (s *store) live(at int64) bool { return s.now().Sub(time.Unix(at, 0)) <= s.ttl }

// maybePrune prunes at most every pruneEvery; a failure is only retried
// later.
func (s *store) maybePrune() {
	s.mu.Lock()
	due := s.now().Sub(s.lastPrune) >= pruneEvery
	s.mu.Unlock()
	if due {
		_ = s.prune()
	}
}

// prune deletes the records older than the retention.
func (s *store) prune() error {
	s.mu.Lock()
	s.lastPrune = s.now()
	s.mu.Unlock()
	return s.db.Update(func(tx *bolt.Tx) error {
		var errs []error
		for _, name := range [][]byte{bucketRequests, bucketAnswers} {
			b := tx.Bucket(name)
			var stale [][]byte
			_ = b.ForEach(func(k, v []byte) error {
				var rec struct {
					At int64 `json:"at"`
				}
				if json.Unmarshal(v, &rec) != nil || !s.live(rec.At) {
					stale = append(stale, k)
				}
				return nil
			})
			for _, k := range stale {
				errs = append(errs, b.Delete(k))
			}
		}
		return errors.Join(errs...)
	})
}

// claimShared is claim on the shared Records.
func (s *store) claimShared(idem string, fresh request) (request, bool, error) {
	ctx, cancel := context.WithTimeout(context.Background(), sharedTimeout)
	defer cancel()
	var got request
	_, _, err := s.shared.Modify(ctx, sharedKey("req", idem), func(old []byte, ok bool) ([]byte, error) {
		if ok && json.Unmarshal(old, &got) == nil && s.live(got.At) {
			return old, nil
		}
		got = fresh
		return json.Marshal(fresh)
	})
	if err != nil {
		return request{}, false, fmt.Errorf("openai: store idempotency key: %w", err)
	}
	return got, got == fresh, nil
}

// getAnswerShared is getAnswer on the shared Records.
func (s *store) getAnswerShared(id string) (answer, bool, error) {
	ctx, cancel := context.WithTimeout(context.Background(), sharedTimeout)
	defer cancel()
	v, _, ok, err := s.shared.Get(ctx, sharedKey("ans", id))
	if err != nil || !ok {
		if err != nil {
			err = fmt.Errorf("openai: read final: %w", err)
		}
		return answer{}, false, err
	}
	var a answer
	if err := json.Unmarshal(v, &a); err != nil {
		return answer{}, false, fmt.Errorf("openai: read final: %w", err)
	}
	return a, s.live(a.At), nil
}

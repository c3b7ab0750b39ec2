package access

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	bolt "go.etcd.io/bbolt"
)

// The pairing rules.
const (
	// Alphabet is the codes' alphabet: upper-case letters and digits
	// without 0, 1, I and O, which people confuse.
	Alphabet = "ABCDEFGHJKLMNPQRSTUVWXYZ23456789"
	// CodeLen is the length of a code.
	CodeLen = 8
	// CodeTTL is how long a code can be approved.
	CodeTTL = time.Hour
	// UserEvery is how often one user can get a new code (or the note that
	// too many codes are pending).
	UserEvery = 10 * time.Minute
	// MaxPending is how many unexpired codes may wait at once.
	MaxPending = 20
	// FileName is the state file in data_dir.
	FileName = "access.db"

	lockTimeout = 5 * time.Second
)

var (
	bucketPending  = []byte("pending")  // sha256(code) hex → pendingRec
	bucketIssued   = []byte("issued")   // sha256(code) hex → unix seconds; never removed
	bucketApproved = []byte("approved") // "<channel>:<user>" → approvedRec
)

// Errors of Approve and Revoke; the messages are for the person who typed
// the code.
var (
	ErrNoSuchCode   = errors.New("this pairing code is unknown: check it with the user who got it")
	ErrCodeExpired  = errors.New("this pairing code has expired: the user gets a new one by writing to the bot again")
	ErrCodeUsed     = errors.New("this pairing code was already used, has expired or was replaced by a newer one: the user gets a new one by writing to the bot again")
	ErrNotApproved  = errors.New("not on the approved list")
	errMalformedKey = errors.New("not a pairing code: want " + fmt.Sprint(CodeLen) + " characters of " + Alphabet)
)

type pendingRec struct {
	Channel string `json:"channel"`
	User    string `json:"user"`
	Name    string `json:"name,omitempty"`
	Issued  int64  `json:"issued"`
	Expires int64  `json:"expires"`
}

type approvedRec struct {
	Name     string `json:"name,omitempty"`
	Approved int64  `json:"approved"`
	By       string `json:"by"`
}

// Decision is the gate's answer for one message.
type Decision struct {
	// Admit lets the message in.
	Admit bool
	// Pairing reports that the pairing policy answered: the adapter sends
	// Reply when it is not empty and otherwise stays silent. Without
	// Pairing (and without Admit) the adapter refuses as it always did.
	Pairing bool
	Reply   string
}

// Options are a Store's collaborators.
type Options struct {
	Now func() time.Time // nil: time.Now
	Log *slog.Logger     // nil: discards
}

// Store is the gate and the pairing state of one data_dir. Safe for
// concurrent use, also across processes.
type Store struct {
	cfg  atomic.Pointer[Config] // swapped by a configuration reload (SetConfig)
	path string
	now  func() time.Time
	log  *slog.Logger
	gen  func() string // newCode; tests replace it

	mu   sync.Mutex
	busy map[string]time.Time // users told "too many pending" and when
}

// New returns the store of dataDir. It does no I/O.
func New(cfg Config, dataDir string, opt Options) *Store {
	if opt.Now == nil {
		opt.Now = time.Now
	}
	if opt.Log == nil {
		opt.Log = slog.New(slog.DiscardHandler)
	}
	s := &Store{path: filepath.Join(dataDir, FileName), now: opt.Now, log: opt.Log, gen: newCode, busy: map[string]time.Time{}}
	s.cfg.Store(&cfg)
	return s
}

// SetConfig puts cfg (dm_policy, owners) in force for the
// decisions from now on (a configuration reload) and returns a line per
// changed key, for the reload's log.
func (s *Store) SetConfig(cfg Config) []string {
	old := s.cfg.Swap(&cfg)
	if reflect.DeepEqual(*old, cfg) {
		return nil
	}
	return []string{"access: applied (dm_policy and owners in force from the next message)"}
}

// Owner reports whether channel:user is in access.owners.
func (s *Store) Owner(channel, user string) bool { return s.cfg.Load().Owner(channel, user) }

// Check decides for a user who is not on the channel's allow_users list
// (the adapter checked that first); direct reports a direct chat, name is
// the user's display name (for `pairing list`).
func (s *Store) Check(channel, user, name string, direct bool) Decision {
	who := channel + ":" + user
	if s.cfg.Load().Owner(channel, user) {
		return Decision{Admit: true}
	}
	ok, err := s.approved(who)
	if err != nil {
		s.log.Error("access: could not read the approved users; refusing", "user", who, "err", err)
		if direct && s.cfg.Load().Policy(channel) == Pairing {
			return Decision{Pairing: true, Reply: "Sorry, I cannot check who may talk to me right now. Please write again later."}
		}
		return Decision{}
	}
	switch {
	case ok:
		return Decision{Admit: true}
	case !direct:
		return Decision{}
	}
	switch s.cfg.Load().Policy(channel) {
	case Open:
		return Decision{Admit: true}
	case Pairing:
		return s.pair(channel, user, name)
	}
	return Decision{}
}

// approved reports whether who is on the approved list.
func (s *Store) approved(who string) (bool, error) {
	found := false
	err := s.view(func(tx *bolt.Tx) error {
		if b := tx.Bucket(bucketApproved); b != nil {
			found = b.Get([]byte(who)) != nil
		}
		return nil
	})
	return found, err
}

// pair is the pairing policy for an unknown user in a direct chat.
func (s *Store) pair(channel, user, name string) Decision {
	who := channel + ":" + user
	now := s.now()
	var code string
	busy := false
	err := s.update(func(tx *bolt.Tx) error {
		pending, issued := tx.Bucket(bucketPending), tx.Bucket(bucketIssued)
		var mine, expired [][]byte
		live, quiet := 0, false
		_ = pending.ForEach(func(k, v []byte) error {
			var p pendingRec
			if json.Unmarshal(v, &p) != nil || now.Unix() >= p.Expires {
				expired = append(expired, bytes.Clone(k))
				return nil
			}
			live++
			if p.Channel == channel && p.User == user {
				quiet = quiet || now.Sub(time.Unix(p.Issued, 0)) < UserEvery
				mine = append(mine, bytes.Clone(k))
			}
			return nil
		})
		// Deleted after the walk: a bbolt cursor may skip a key after a
		// delete.
		for _, k := range expired {
			if err := pending.Delete(k); err != nil {
				return err
			}
		}
		switch {
		case quiet:
			return nil // one code per UserEvery: silence
		case live-len(mine) >= MaxPending:
			busy = true
			return nil
		}
		for _, k := range mine { // the new code replaces the user's older one
			if err := pending.Delete(k); err != nil {
				return err
			}
		}
		for {
			code = s.gen()
			h := digest(code)
			if issued.Get(h) != nil {
				continue // never the same code twice
			}
			b, _ := json.Marshal(pendingRec{Channel: channel, User: user, Name: name, Issued: now.Unix(), Expires: now.Add(CodeTTL).Unix()})
			if err := pending.Put(h, b); err != nil {
				return err
			}
			return issued.Put(h, fmt.Appendf(nil, "%d", now.Unix()))
		}
	})
	switch {
	case err != nil:
		s.log.Error("access: could not issue a pairing code", "user", who, "err", err)
		return Decision{Pairing: true, Reply: "Sorry, I cannot give you a pairing code right now. Please write again later."}
	case busy:
		s.log.Warn("access: too many pairing codes pending; not issuing one", "user", who, "pending_max", MaxPending)
		if !s.tellBusy(who, now) {
			return Decision{Pairing: true}
		}
		return Decision{Pairing: true, Reply: "Sorry, too many people are waiting for approval right now. Please write again in a while."}
	case code == "":
		s.log.Info("access: message from a user waiting for approval dropped", "user", who)
		return Decision{Pairing: true}
	}
	s.log.Info("access: pairing code issued", "user", who, "name", name, "expires", now.Add(CodeTTL).Format(time.RFC3339))
	return Decision{Pairing: true, Reply: fmt.Sprintf("Hi! I don't know you yet, so I won't read your messages until the owner of this bot lets you in.\n\n"+
		"Your pairing code is %s (valid for 1 hour). Send it to the owner; they approve it with: switchboard pairing approve %s", code, code)}
}

// tellBusy reports whether who should be told that too many codes are
// pending (once per UserEvery).
func (s *Store) tellBusy(who string, now time.Time) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for k, t := range s.busy {
		if now.Sub(t) >= UserEvery {
			delete(s.busy, k)
		}
	}
	if _, told := s.busy[who]; told {
		return false
	}
	s.busy[who] = now
	return true
}

// Approve approves code and returns the user it admits
// ("<channel>:<user_id>", with their name when known). by names who
// approved it (for `pairing list`).
func (s *Store) Approve(code, by string) (string, error) {
	c, err := normCode(code)
	if err != nil {
		return "", err
	}
	h := digest(c)
	now := s.now()
	var who string
	err = s.update(func(tx *bolt.Tx) error {
		v := tx.Bucket(bucketPending).Get(h)
		if v == nil {
			if tx.Bucket(bucketIssued).Get(h) != nil {
				return ErrCodeUsed
			}
			return ErrNoSuchCode
		}
		var p pendingRec
		if err := json.Unmarshal(v, &p); err != nil {
			return fmt.Errorf("access: pending code record: %w", err)
		}
		if now.Unix() >= p.Expires {
			return ErrCodeExpired // removed when the next code is issued
		}
		if err := tx.Bucket(bucketPending).Delete(h); err != nil {
			return err
		}
		who = p.Channel + ":" + p.User
		b, _ := json.Marshal(approvedRec{Name: p.Name, Approved: now.Unix(), By: by})
		return tx.Bucket(bucketApproved).Put([]byte(who), b)
	})
	if err != nil {
		return "", err
	}
	s.log.Info("access: user approved", "user", who, "by", by)
	return who, nil
}

// Revoke removes who ("<channel>:<user_id>") from the approved list.
func (s *Store) Revoke(who string) error {
	if _, err := ParseUser(who); err != nil {
		return err
	}
	err := s.update(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketApproved)
		if b.Get([]byte(who)) == nil {
			return fmt.Errorf("%s is %w (users of allow_users and access.owners are changed in the configuration)", who, ErrNotApproved)
		}
		return b.Delete([]byte(who))
	})
	if err == nil {
		s.log.Info("access: user revoked", "user", who)
	}
	return err
}

// Entry is one line of List.
type Entry struct {
	Who     string    // <channel>:<user_id>
	Name    string    // display name when known
	At      time.Time // issued (pending) or approved
	Expires time.Time // pending only
	By      string    // approved only: who approved
}

// List returns the unexpired pending requests (their codes are not
// stored, only the codes' hashes) and the approved users, each sorted by
// time.
func (s *Store) List() (pending, approved []Entry, err error) {
	now := s.now()
	err = s.view(func(tx *bolt.Tx) error {
		if b := tx.Bucket(bucketPending); b != nil {
			_ = b.ForEach(func(_, v []byte) error {
				var p pendingRec
				if json.Unmarshal(v, &p) == nil && now.Unix() < p.Expires {
					pending = append(pending, Entry{Who: p.Channel + ":" + p.User, Name: p.Name, At: time.Unix(p.Issued, 0), Expires: time.Unix(p.Expires, 0)})
				}
				return nil
			})
		}
		if b := tx.Bucket(bucketApproved); b != nil {
			_ = b.ForEach(func(k, v []byte) error {
				var a approvedRec
				_ = json.Unmarshal(v, &a)
				approved = append(approved, Entry{Who: string(k), Name: a.Name, At: time.Unix(a.Approved, 0), By: a.By})
				return nil
			})
		}
		return nil
	})
	byTime := func(a, b Entry) int { return a.At.Compare(b.At) }
	slices.SortFunc(pending, byTime)
	slices.SortFunc(approved, byTime)
	return pending, approved, err
}

// view runs fn in a read transaction of the state file; a missing file
// is an empty state (fn is not called).
func (s *Store) view(fn func(*bolt.Tx) error) error {
	if _, err := os.Stat(s.path); errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	db, err := bolt.Open(s.path, 0o600, &bolt.Options{ReadOnly: true, Timeout: lockTimeout})
	if err != nil {
		return fmt.Errorf("access: %w", err)
	}
	defer db.Close()
	return db.View(fn)
}

// update runs fn in a write transaction of the state file, which it
// creates (and its buckets) when missing.
func (s *Store) update(fn func(*bolt.Tx) error) error {
	if err := os.MkdirAll(filepath.Dir(s.path), 0o700); err != nil {
		return fmt.Errorf("access: %w", err)
	}
	db, err := bolt.Open(s.path, 0o600, &bolt.Options{Timeout: lockTimeout})
	if err != nil {
		return fmt.Errorf("access: %w", err)
	}
	err = db.Update(func(tx *bolt.Tx) error {
		for _, b := range [][]byte{bucketPending, bucketIssued, bucketApproved} {
			if _, err := tx.CreateBucketIfNotExists(b); err != nil {
				return err
			}
		}
		return fn(tx)
	})
	if cerr := db.Close(); err == nil && cerr != nil {
		err = fmt.Errorf("access: %w", cerr)
	}
	return err
}

// newCode returns a random code of CodeLen characters of Alphabet.
func newCode() string {
	b := make([]byte, CodeLen)
	_, _ = rand.Read(b) // never fails (crypto/rand)
	for i := range b {
		b[i] = Alphabet[int(b[i])%len(Alphabet)] // 256 is a multiple of 32: no bias
	}
	return string(b)
}

// normCode upper-cases code and drops the dashes and spaces people type,
// and checks the result is a code.
func normCode(code string) (string, error) {
	c := strings.Map(func(r rune) rune {
		if r == '-' || r == ' ' {
			return -1
		}
		return r
	}, strings.ToUpper(strings.TrimSpace(code)))
	if len(c) != CodeLen || strings.Trim(c, Alphabet) != "" {
		return "", errMalformedKey
	}
	return c, nil
}

// digest is the hex sha256 of a code: the only form of it stored.
func digest(code string) []byte {
	h := sha256.Sum256([]byte(code))
	return []byte(hex.EncodeToString(h[:]))
}

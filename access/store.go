package access

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/switchboard-chat/switchboard/internal/kvstate"
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
	// Shared, when set (memory.store jetstream: the "<prefix>_access"
	// bucket of internal/kvstate), holds the pairing state instead of
	// data_dir/access.db, so that every instance of a cluster sees the
	// same codes, rate limits and approved users.
	Shared kvstate.Store
}

// Store is the gate and the pairing state of one data_dir, or of one
// cluster (Options.Shared). Safe for concurrent use, also across
// processes.
type Store struct {
	cfg atomic.Pointer[Config] // swapped by a configuration reload (SetConfig)
	st  backend
	now func() time.Time
	log *slog.Logger
	gen func() string // newCode; tests replace it
}

// New returns the store of dataDir (or of opt.Shared). It does no I/O.
func New(cfg Config, dataDir string, opt Options) *Store {
	if opt.Now == nil {
		opt.Now = time.Now
	}
	if opt.Log == nil {
		opt.Log = slog.New(slog.DiscardHandler)
	}
	var st backend = fileState{path: filepath.Join(dataDir, FileName)}
	if opt.Shared != nil {
		st = kvState{kv: opt.Shared}
	}
	s := &Store{st: st, now: opt.Now, log: opt.Log, gen: newCode}
	s.cfg.Store(&cfg)
	return s
}

// SetConfig puts cfg (dm_policy, owners, the channels' allow_users) in
// force for the decisions from now on (a configuration reload) and
// returns a line per changed key, for the reload's log.
func (s *Store) SetConfig(cfg Config) []string {
	old := s.cfg.Swap(&cfg)
	var lines []string
	if !reflect.DeepEqual(old.DMPolicy, cfg.DMPolicy) || !slices.Equal(old.Owners, cfg.Owners) {
		lines = append(lines, "access: applied (dm_policy and owners in force from the next message)")
	}
	for _, ch := range slices.Sorted(maps.Keys(cfg.AllowUsers)) {
		if prev, ok := old.AllowUsers[ch]; ok && !slices.Equal(prev, cfg.AllowUsers[ch]) {
			lines = append(lines, allowKey(ch)+": applied (in force from the next message)")
		}
	}
	return lines
}

// AllowUsers returns the allow_users list of channel in force (the
// configuration's, or the last reload's); ok is false when the
// configuration given to the Store does not carry it, and the adapter
// keeps its own.
func (s *Store) AllowUsers(channel string) ([]string, bool) {
	l, ok := s.cfg.Load().AllowUsers[channel]
	return l, ok
}

// Owner reports whether channel:user is an owner in force
// ([Config.Owner]: in access.owners, or on the operator's console).
func (s *Store) Owner(channel, user string) bool { return s.cfg.Load().Owner(channel, user) }

// opCtx bounds one operation on the state: the gate's callers (the
// adapters' Check, the agent's /pair approve) carry no context.
func opCtx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), lockTimeout)
}

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
	ctx, cancel := opCtx()
	defer cancel()
	st, err := s.st.load(ctx)
	_, found := st.Approved[who]
	return found, err
}

// pair is the pairing policy for an unknown user in a direct chat. The
// whole decision is one read-modify-write of the state, so that two
// instances answering at once cannot both take the user's slot.
func (s *Store) pair(channel, user, name string) Decision {
	who := channel + ":" + user
	now := s.now()
	var code string
	busy, tell := false, false
	ctx, cancel := opCtx()
	defer cancel()
	err := s.st.modify(ctx, func(st *state, claim func(hash string) (bool, error)) error {
		code, busy, tell = "", false, false // fn runs again after a conflicting write
		var mine []string
		live, quiet := 0, false
		for k, p := range st.Pending {
			if now.Unix() >= p.Expires {
				delete(st.Pending, k)
				continue
			}
			live++
			if p.Channel == channel && p.User == user {
				quiet = quiet || now.Sub(time.Unix(p.Issued, 0)) < UserEvery
				mine = append(mine, k)
			}
		}
		for k, t := range st.Told {
			if now.Sub(time.Unix(t, 0)) >= UserEvery {
				delete(st.Told, k)
			}
		}
		switch {
		case quiet:
			return errUnchanged // one code per UserEvery: silence
		case live-len(mine) >= MaxPending:
			busy = true
			if _, told := st.Told[who]; told {
				return errUnchanged
			}
			tell = true
			st.Told[who] = now.Unix()
			return nil
		}
		for _, k := range mine { // the new code replaces the user's older one
			delete(st.Pending, k)
		}
		for {
			c := s.gen()
			h := string(digest(c))
			fresh, err := claim(h)
			if err != nil {
				return err
			}
			if !fresh {
				continue // never the same code twice
			}
			code = c
			st.Pending[h] = pendingRec{Channel: channel, User: user, Name: name, Issued: now.Unix(), Expires: now.Add(CodeTTL).Unix()}
			return nil
		}
	})
	switch {
	case err != nil:
		s.log.Error("access: could not issue a pairing code", "user", who, "err", err)
		return Decision{Pairing: true, Reply: "Sorry, I cannot give you a pairing code right now. Please write again later."}
	case busy:
		s.log.Warn("access: too many pairing codes pending; not issuing one", "user", who, "pending_max", MaxPending)
		if !tell {
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

// Approve approves code and returns the user it admits
// ("<channel>:<user_id>", with their name when known). by names who
// approved it (for `pairing list`).
func (s *Store) Approve(code, by string) (string, error) {
	c, err := normCode(code)
	if err != nil {
		return "", err
	}
	h := string(digest(c))
	now := s.now()
	var who string
	ctx, cancel := opCtx()
	defer cancel()
	err = s.st.modify(ctx, func(st *state, _ func(string) (bool, error)) error {
		p, ok := st.Pending[h]
		switch {
		case !ok:
			return ErrNoSuchCode
		case now.Unix() >= p.Expires:
			return ErrCodeExpired // removed when the next code is issued
		}
		delete(st.Pending, h)
		who = p.Channel + ":" + p.User
		st.Approved[who] = approvedRec{Name: p.Name, Approved: now.Unix(), By: by}
		return nil
	})
	if errors.Is(err, ErrNoSuchCode) {
		if used, ierr := s.st.issued(ctx, h); ierr != nil {
			err = ierr
		} else if used {
			err = ErrCodeUsed
		}
	}
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
	ctx, cancel := opCtx()
	defer cancel()
	err := s.st.modify(ctx, func(st *state, _ func(string) (bool, error)) error {
		if _, ok := st.Approved[who]; !ok {
			return fmt.Errorf("%s is %w (users of allow_users and access.owners are changed in the configuration)", who, ErrNotApproved)
		}
		delete(st.Approved, who)
		return nil
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
	ctx, cancel := opCtx()
	defer cancel()
	st, err := s.st.load(ctx)
	for _, p := range st.Pending {
		if now.Unix() < p.Expires {
			pending = append(pending, Entry{Who: p.Channel + ":" + p.User, Name: p.Name, At: time.Unix(p.Issued, 0), Expires: time.Unix(p.Expires, 0)})
		}
	}
	for who, a := range st.Approved {
		approved = append(approved, Entry{Who: who, Name: a.Name, At: time.Unix(a.Approved, 0), By: a.By})
	}
	byTime := func(a, b Entry) int {
		if c := a.At.Compare(b.At); c != 0 {
			return c
		}
		return strings.Compare(a.Who, b.Who)
	}
	slices.SortFunc(pending, byTime)
	slices.SortFunc(approved, byTime)
	return pending, approved, err
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

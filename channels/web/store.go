package web

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	bolt "go.etcd.io/bbolt"
)

// Buckets of web.db.
var (
	// bucketLogins maps sha256(session cookie) to a [login].
	bucketLogins = []byte("logins")
	// bucketConvs maps "<user>\x00<conversation id>" to a [conv].
	bucketConvs = []byte("conversations")
	// bucketMsgs holds one nested bucket per bus chat id: sequence →
	// [message], the last maxHistory messages of the chat.
	bucketMsgs = []byte("messages")
	// bucketMsgIDs maps "<chat>\x00<message id>" to the message's key in
	// its chat's bucket, so a message stored again (a retried post, a
	// redelivered final) is kept once.
	bucketMsgIDs = []byte("message_ids")
)

// seenBucket holds the outbound ids already shown (bridge kit SeenStore).
const seenBucket = "outbound_shown"

// Bounds of what the state file keeps.
const (
	maxHistory = 500
	loginTTL   = 30 * 24 * time.Hour
)

// login is one browser's session.
type login struct {
	User    string `json:"user"`
	CSRF    string `json:"csrf"`
	Created int64  `json:"created"`
}

// conv is one conversation of a user.
type conv struct {
	ID      string `json:"id"`
	Title   string `json:"title"`
	Updated int64  `json:"updated"`
}

// message is one line of a conversation as the page shows it.
type message struct {
	ID        string   `json:"id"`
	Role      string   `json:"role"` // user or agent
	Kind      string   `json:"kind"` // reply, notice, error (agent); text (user)
	Text      string   `json:"text"`
	Files     []string `json:"files,omitempty"`
	InReplyTo string   `json:"in_reply_to,omitempty"`
	At        int64    `json:"at"`
}

// store is the console's bbolt file. It is safe for concurrent use.
type store struct {
	db  *bolt.DB
	now func() time.Time

	// failPut, when set (tests), makes putMessage fail with its error;
	// onPut sees every agent message stored.
	failPut func() error
	onPut   func(chat string, m message)
}

func openStore(path string, now func() time.Time) (*store, error) {
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: 5 * time.Second})
	if err != nil {
		return nil, fmt.Errorf("web: open %s: %w", path, err)
	}
	err = db.Update(func(tx *bolt.Tx) error {
		for _, b := range [][]byte{bucketLogins, bucketConvs, bucketMsgs, bucketMsgIDs} {
			if _, err := tx.CreateBucketIfNotExists(b); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("web: %s: %w", path, err)
	}
	return &store{db: db, now: now}, nil
}

func (s *store) close() error { return s.db.Close() }

func digest(secret string) []byte {
	d := sha256.Sum256([]byte(secret))
	return d[:]
}

func (s *store) putLogin(token string, l login) error {
	b, _ := json.Marshal(l)
	return s.db.Update(func(tx *bolt.Tx) error { return tx.Bucket(bucketLogins).Put(digest(token), b) })
}

// getLogin returns the login of a session cookie, if it exists and has
// not expired.
func (s *store) getLogin(token string) (login, bool) {
	var l login
	found := false
	_ = s.db.View(func(tx *bolt.Tx) error {
		if v := tx.Bucket(bucketLogins).Get(digest(token)); v != nil {
			found = json.Unmarshal(v, &l) == nil
		}
		return nil
	})
	if found && s.now().Sub(time.Unix(l.Created, 0)) > loginTTL {
		return login{}, false
	}
	return l, found
}

func (s *store) deleteLogin(token string) error {
	return s.db.Update(func(tx *bolt.Tx) error { return tx.Bucket(bucketLogins).Delete(digest(token)) })
}

// touchConv creates or updates a user's conversation; a title is set once
// (from the first message).
func (s *store) touchConv(user, id, title string) error {
	return s.db.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketConvs)
		k := []byte(user + "\x00" + id)
		c := conv{ID: id}
		if v := b.Get(k); v != nil {
			_ = json.Unmarshal(v, &c)
		}
		if c.Title == "" {
			c.Title = title
		}
		c.Updated = s.now().Unix()
		v, _ := json.Marshal(c)
		return b.Put(k, v)
	})
}

// convs returns a user's conversations, the last updated first.
func (s *store) convs(user string) ([]conv, error) {
	var out []conv
	err := s.db.View(func(tx *bolt.Tx) error {
		c := tx.Bucket(bucketConvs).Cursor()
		p := []byte(user + "\x00")
		for k, v := c.Seek(p); k != nil && strings.HasPrefix(string(k), string(p)); k, v = c.Next() {
			var cv conv
			if json.Unmarshal(v, &cv) == nil {
				out = append(out, cv)
			}
		}
		return nil
	})
	slices.SortStableFunc(out, func(a, b conv) int { return int(b.Updated - a.Updated) })
	return out, err
}

// putMessage appends m to chat's history, dropping the oldest beyond
// maxHistory; a message whose id is already there is not added again.
func (s *store) putMessage(chat string, m message) error {
	if s.failPut != nil && m.Role == "agent" {
		if err := s.failPut(); err != nil {
			return err
		}
	}
	v, _ := json.Marshal(m)
	stored := false
	err := s.db.Update(func(tx *bolt.Tx) error {
		ids := tx.Bucket(bucketMsgIDs)
		idKey := []byte(chat + "\x00" + m.ID)
		if ids.Get(idKey) != nil {
			return nil
		}
		stored = true
		b, err := tx.Bucket(bucketMsgs).CreateBucketIfNotExists([]byte(chat))
		if err != nil {
			return err
		}
		seq, _ := b.NextSequence()
		k := binary.BigEndian.AppendUint64(nil, seq)
		if err := errors.Join(b.Put(k, v), ids.Put(idKey, k)); err != nil {
			return err
		}
		n := 0
		c := b.Cursor()
		for k, _ := c.First(); k != nil; k, _ = c.Next() {
			n++
		}
		for ; n > maxHistory; n-- {
			k, old := b.Cursor().First()
			var om message
			_ = json.Unmarshal(old, &om)
			if err := errors.Join(b.Delete(k), ids.Delete([]byte(chat+"\x00"+om.ID))); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("web: store message: %w", err)
	}
	if s.onPut != nil && stored && m.Role == "agent" {
		s.onPut(chat, m)
	}
	return nil
}

// messages returns chat's history, oldest first.
func (s *store) messages(chat string) ([]message, error) {
	var out []message
	err := s.db.View(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketMsgs).Bucket([]byte(chat))
		if b == nil {
			return nil
		}
		return b.ForEach(func(_, v []byte) error {
			var m message
			if err := json.Unmarshal(v, &m); err != nil {
				return errors.Join(errors.New("web: corrupt message record"), err)
			}
			out = append(out, m)
			return nil
		})
	})
	return out, err
}

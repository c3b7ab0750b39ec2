package message

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/switchboard-chat/switchboard/internal/groupcommit"
	"github.com/switchboard-chat/switchboard/tools"
)

// bucketChats holds one record per chat (and thread) the agent served.
var bucketChats = []byte("chats")

// maxUsersPerChat bounds the users remembered per chat; a chat with more
// than one is nobody's own anyway.
const maxUsersPerChat = 4

// Chat identifies a chat, or a thread of one.
type Chat struct {
	Channel  string `json:"channel"`
	ChatID   string `json:"chat_id"`
	ThreadID string `json:"thread_id,omitempty"`
}

func (c Chat) key() string { return c.Channel + "\x00" + c.ChatID + "\x00" + c.ThreadID }

// String is how a chat is shown to the model: "<channel>:<chat_id>" plus
// " thread <thread_id>".
func (c Chat) String() string {
	s := c.Channel + ":" + c.ChatID
	if c.ThreadID != "" {
		s += " thread " + c.ThreadID
	}
	return s
}

// chatRecord is what is stored per chat.
type chatRecord struct {
	Chat
	Users []string  `json:"users"` // user ids seen, first ones first
	Group bool      `json:"group,omitempty"`
	First time.Time `json:"first"`
}

// Chats remembers which users the agent served in which chats, so that
// send_message can tell a user's own chats: a chat is owned by a user when
// it is not a group chat and that user is the only one ever seen in it.
// The records live in bbolt and are read from there whenever ownership is
// asked. Recording every turn costs a map lookup and no allocation: a bounded cache
// (maxCachedChats) of recently recorded chats says when nothing new is
// learnt; a new chat, a new user in a chat or a chat found to be a group
// is merged into the stored record in one transaction, outside the lock;
// sessions learning at the same time share a transaction and its fsync
// (internal/groupcommit). The cache only ever holds what
// was stored, so a stale entry can only send Record to the store, never
// let it skip a write; a hundred thousand quiet chats cost no memory. It
// is safe for concurrent use.
type Chats struct {
	db    *bolt.DB
	group *groupcommit.Writer

	mu    sync.Mutex
	cache map[Chat]chatRecord // at most maxCachedChats; emptied when full
}

// maxCachedChats bounds Chats' cache of recently recorded chats.
const maxCachedChats = 4096

// NewChats opens the chat records of db (creating the bucket). db stays
// the caller's to close.
func NewChats(db *bolt.DB) (*Chats, error) {
	c := &Chats{db: db, group: groupcommit.New(db), cache: make(map[Chat]chatRecord)}
	if err := db.Update(func(tx *bolt.Tx) error {
		_, err := tx.CreateBucketIfNotExists(bucketChats)
		return err
	}); err != nil {
		return nil, fmt.Errorf("message: open chats: %w", err)
	}
	return c, nil
}

// Record notes that s's user was served in s's chat.
func (c *Chats) Record(s tools.Session) error {
	if s.Channel == "" || s.ChatID == "" || s.UserID == "" {
		return nil
	}
	chat := Chat{Channel: s.Channel, ChatID: s.ChatID, ThreadID: s.Thread()}
	c.mu.Lock()
	r, known := c.cache[chat]
	c.mu.Unlock()
	if known && !learns(&r, s) {
		return nil
	}
	return c.write(chat, s)
}

// write merges what s tells about chat into its stored record and caches
// the result. (Its own function: the record the transaction fills in lives
// on the heap, which Record's check of the cache must not pay for.)
func (c *Chats) write(chat Chat, s tools.Session) error {
	k := chat.key()
	var r chatRecord
	err := c.group.Update(func(tx *bolt.Tx) error { // may run twice: r is set from the bucket each time
		b := tx.Bucket(bucketChats)
		stored := false
		if v := b.Get([]byte(k)); v != nil {
			r, stored = chatRecord{}, json.Unmarshal(v, &r) == nil // an unreadable record is written afresh
		}
		if !stored {
			r = chatRecord{Chat: chat, First: time.Now().UTC()}
		}
		if !learns(&r, s) && stored {
			return nil
		}
		data, err := json.Marshal(r)
		if err != nil {
			return err
		}
		return b.Put([]byte(k), data)
	})
	if err != nil {
		return fmt.Errorf("message: record chat %s: %w", chat, err)
	}
	c.mu.Lock()
	if len(c.cache) >= maxCachedChats {
		c.cache = make(map[Chat]chatRecord) // a Go map keeps its memory after deletes
	}
	c.cache[chat] = r
	c.mu.Unlock()
	return nil
}

// learns adds what s tells about its chat to r (its user, that it is a
// group) and reports whether that was new.
func learns(r *chatRecord, s tools.Session) bool {
	changed := false
	if !slices.Contains(r.Users, s.UserID) && len(r.Users) < maxUsersPerChat {
		r.Users = append(slices.Clip(r.Users), s.UserID) // r may share Users with a cached record
		changed = true
	}
	if s.IsGroup && !r.Group {
		r.Group = true
		changed = true
	}
	return changed
}

// read is the stored record of key k; ok is false when there is none or
// it cannot be read.
func (c *Chats) read(k string) (r chatRecord, ok bool, err error) {
	err = c.db.View(func(tx *bolt.Tx) error {
		if v := tx.Bucket(bucketChats).Get([]byte(k)); v != nil {
			ok = json.Unmarshal(v, &r) == nil
		}
		return nil
	})
	if err != nil {
		return chatRecord{}, false, fmt.Errorf("message: read chat %s: %w", k, err)
	}
	return r, ok, nil
}

// Owned returns the chats owned by user on channel, sorted. It reads every
// record (send_message asks for it, not every turn).
func (c *Chats) Owned(channel, user string) []Chat {
	var out []Chat
	_ = c.db.View(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketChats).ForEach(func(_, v []byte) error {
			var r chatRecord
			if json.Unmarshal(v, &r) == nil && owns(r, channel, user) {
				out = append(out, r.Chat)
			}
			return nil // an unreadable record is skipped, not fatal
		})
	})
	slices.SortFunc(out, func(a, b Chat) int { return strings.Compare(a.key(), b.key()) })
	return out
}

// Owns reports whether chat is owned by user on chat's channel, from the
// stored record.
func (c *Chats) Owns(chat Chat, user string) bool {
	r, ok, err := c.read(chat.key())
	return err == nil && ok && owns(r, chat.Channel, user)
}

func owns(r chatRecord, channel, user string) bool {
	return r.Channel == channel && !r.Group && len(r.Users) == 1 && r.Users[0] == user
}

// Recorder returns the post-turn tool that records every turn's session
// (stage [tools.StagePostTurn]: never offered to the model).
func (c *Chats) Recorder() tools.Tool { return recorder{c} }

type recorder struct{ c *Chats }

func (recorder) Name() string { return "record_chat" }
func (recorder) Description() string {
	return "Remembers which user was served in which chat (for send_message)."
}

// recorderSchema is recorder's argument schema, built once (Schema hands out the
// same bytes; callers must not modify them).
var recorderSchema = json.RawMessage(`{"type":"object","properties":{"reply":{"type":"string"}}}`)

func (recorder) Schema() json.RawMessage { return recorderSchema }
func (recorder) Permission() string      { return tools.PermRead }
func (recorder) ParallelSafe() bool      { return true }
func (recorder) Stage() string           { return tools.StagePostTurn }

func (r recorder) Run(ctx context.Context, call tools.Call) (tools.Result, error) {
	if err := ctx.Err(); err != nil {
		return tools.Result{}, err
	}
	if err := r.c.Record(call.Session); err != nil {
		return tools.Result{}, err
	}
	return tools.Result{Text: "recorded"}, nil
}

var errNotOwned = errors.New("not one of your chats")

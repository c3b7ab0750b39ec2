package message_test

import (
	"fmt"
	"path/filepath"
	"sync"
	"testing"

	bolt "go.etcd.io/bbolt"

	"github.com/switchboard-chat/switchboard/tools"
	"github.com/switchboard-chat/switchboard/tools/message"
)

// TestRecordKnownChatIsFree: the post-turn record of a chat already known
// with the same facts writes nothing and allocates nothing (it runs every
// turn); a new user or a chat found to be a group is still written.
func TestRecordKnownChatIsFree(t *testing.T) {
	db, c := openChats(t)
	threaded := aliceDM
	threaded.ThreadID = "7"
	for _, s := range []tools.Session{aliceDM, threaded} {
		if err := c.Record(s); err != nil {
			t.Fatal(err)
		}
	}
	writes := pageWrites(db)
	if n := testing.AllocsPerRun(100, func() {
		if err := c.Record(aliceDM); err != nil {
			t.Fatal(err)
		}
		if err := c.Record(threaded); err != nil {
			t.Fatal(err)
		}
	}); n != 0 {
		t.Errorf("Record of known chats: %.0f allocations, want 0", n)
	}
	if got := pageWrites(db); got != writes {
		t.Errorf("Record of known chats wrote %d times", got-writes)
	}
	bob := sess("telegram", "100", "bob")
	if err := c.Record(bob); err != nil {
		t.Fatal(err)
	}
	if pageWrites(db) == writes {
		t.Error("a new user in a known chat was not written")
	}
	if c.Owns(message.Chat{Channel: "telegram", ChatID: "100"}, "alice") {
		t.Error("a chat with two users is still owned")
	}
	if !c.Owns(message.Chat{Channel: "telegram", ChatID: "100", ThreadID: "7"}, "alice") {
		t.Error("the thread is not alice's")
	}
}

// openChats opens the chat records of a fresh tools.db.
func openChats(t *testing.T) (*bolt.DB, *message.Chats) {
	t.Helper()
	db := openDB(t, filepath.Join(t.TempDir(), "tools.db"))
	t.Cleanup(func() { _ = db.Close() })
	c, err := message.NewChats(db)
	if err != nil {
		t.Fatal(err)
	}
	return db, c
}

// pageWrites is how many pages db's write transactions wrote so far.
func pageWrites(db *bolt.DB) int64 {
	st := db.Stats()
	return st.TxStats.GetWrite()
}

// Sessions recording new chats at the same moment share transactions
// (internal/groupcommit) and lose none of them: each chat is its user's,
// and one written twice by two users at once is nobody's.
func TestConcurrentRecordsLoseNothing(t *testing.T) {
	db, c := openChats(t)
	const n = 64
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			if err := c.Record(sess("telegram", fmt.Sprint(1000+i), fmt.Sprint("u", i))); err != nil {
				t.Error(err)
			}
			if err := c.Record(sess("slack", "shared", fmt.Sprint("u", i))); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	fresh, err := message.NewChats(db) // no cache: what the file holds
	if err != nil {
		t.Fatal(err)
	}
	for i := range n {
		chat := message.Chat{Channel: "telegram", ChatID: fmt.Sprint(1000 + i)}
		if !fresh.Owns(chat, fmt.Sprint("u", i)) {
			t.Errorf("%v is not u%d's", chat, i)
		}
		if fresh.Owns(message.Chat{Channel: "slack", ChatID: "shared"}, fmt.Sprint("u", i)) {
			t.Errorf("the shared chat is u%d's", i)
		}
	}
}

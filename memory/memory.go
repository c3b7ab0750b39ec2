// Package memory defines how Switchboard keeps conversation history: messages
// made of content blocks (DESIGN.md §5), turn records committed atomically with
// their de-duplication receipt, and the Store contract. The bbolt
// implementation lives in [github.com/switchboard-chat/switchboard/memory/boltstore].
//
// It also names what long-term memory shows a turn ([View]); the facade
// that builds it from the notes, their search index and the memory tools
// is [github.com/switchboard-chat/switchboard/memory/longterm].
package memory

import (
	"context"
	"encoding/json"
	"errors"
	"time"
)

// Roles of a stored message.
const (
	RoleUser      = "user"
	RoleAssistant = "assistant"
	RoleTool      = "tool" // carries tool_result blocks only
)

// Block types.
const (
	BlockText       = "text"
	BlockThinking   = "thinking"
	BlockToolUse    = "tool_use"
	BlockToolResult = "tool_result"
	BlockImage      = "image"
)

// Block is one piece of a message's content.
//
//   - text, thinking: Text.
//   - tool_use: ToolID, ToolName, Input (the JSON arguments as the model sent
//     them after repair; always a JSON object).
//   - tool_result: ToolID, Text, IsError.
//   - image: MIME and URL or Data (base64).
type Block struct {
	Type     string          `json:"type"`
	Text     string          `json:"text,omitempty"`
	ToolID   string          `json:"tool_id,omitempty"`
	ToolName string          `json:"tool_name,omitempty"`
	Input    json.RawMessage `json:"input,omitempty"`
	IsError  bool            `json:"is_error,omitempty"`
	MIME     string          `json:"mime,omitempty"`
	URL      string          `json:"url,omitempty"`
	Data     string          `json:"data,omitempty"`
}

// Message is one stored message.
type Message struct {
	Role   string  `json:"role"`
	Blocks []Block `json:"blocks"`
	// TurnStart is true on the user message that opens a turn; trimming and
	// loading work in whole turns and use it as the boundary.
	TurnStart bool `json:"turn_start,omitempty"`
	// InboundID is the de-duplication key ("<channel>:<id>") of the inbound
	// message that started the turn; set on the turn's first message.
	InboundID string    `json:"inbound_id,omitempty"`
	Time      time.Time `json:"time"`
}

// Text returns the concatenated text blocks of m.
func (m *Message) Text() string {
	var s string
	for _, b := range m.Blocks {
		if b.Type == BlockText {
			s += b.Text
		}
	}
	return s
}

// Receipt records that an inbound message was handled: the final outbound
// envelope (JSON) that answers it, so a redelivery re-publishes the same final
// message instead of running the turn again.
type Receipt struct {
	// Key is the inbound de-duplication key, "<channel>:<id>".
	Key string `json:"key"`
	// Session is the session key the message belonged to.
	Session string `json:"session"`
	// Final is the JSON-encoded final bus.Outbound envelope.
	Final json.RawMessage `json:"final"`
	// Published is set once the final envelope was acknowledged by the bus.
	Published bool      `json:"published,omitempty"`
	Time      time.Time `json:"time"`
}

// TurnRecord is everything one turn writes, committed in one transaction.
type TurnRecord struct {
	Session string
	// Messages are appended to the session's history in order (may be empty,
	// e.g. for a command).
	Messages []Message
	// Receipt is stored under Receipt.Key in the same transaction.
	Receipt Receipt
	// Also are the receipts of the other inbound messages the turn answered
	// (messages collected into one turn), stored in the same transaction.
	// The commit is a duplicate when any of the keys exists.
	Also []Receipt
	// Fresh, when true, moves the session's context start past all existing
	// messages before appending (the /new command): earlier history stays on
	// disk but is no longer loaded.
	Fresh bool
}

// Snapshot is what the next request of a session needs.
type Snapshot struct {
	// Summary is the running summary of compacted history ("" if none).
	Summary string
	// Messages are the most recent messages after the context start, oldest
	// first, holding at most the requested number of whole turns.
	Messages []Message
	// Turns is the total number of turns stored for the session since the
	// context start (may exceed the turns returned).
	Turns int
	// LastActive is the time of the session's last commit (zero if new).
	LastActive time.Time
}

// ErrDuplicate is returned by CommitTurn when a receipt with the same key
// already exists; nothing was written.
var ErrDuplicate = errors.New("memory: duplicate inbound message")

// ErrClosed is returned by every method after Close.
var ErrClosed = errors.New("memory: store closed")

// Store keeps sessions' history durably.
//
// Implementations are safe for concurrent use. Every method blocks until its
// work is durable (CommitTurn) or read, and honours ctx only while waiting
// to start; a commit that started completes. MarkPublished is the
// exception: its mark may become durable shortly after it returns (the
// bbolt store writes it with the next commit), because losing it costs
// nothing but a second publication of the same final under the same
// message id, which the bus drops as a duplicate — the state a crash
// right after the acknowledgement leaves anyway.
type Store interface {
	// Load returns the session's summary and its last maxTurns whole turns
	// after the context start. It reads only those, never the whole history.
	Load(ctx context.Context, session string, maxTurns int) (Snapshot, error)
	// CommitTurn appends rec.Messages and stores rec.Receipt atomically. It
	// returns ErrDuplicate (writing nothing) if the receipt key exists.
	// Concurrent callers share one transaction and one fsync (group commit).
	CommitTurn(ctx context.Context, rec TurnRecord) error
	// Receipt returns the receipt stored under key, or ok=false.
	Receipt(ctx context.Context, key string) (r Receipt, ok bool, err error)
	// MarkPublished records that the receipt's final envelope was
	// published; Receipt reports it at once, the disk shortly after (see
	// above).
	MarkPublished(ctx context.Context, key string) error
	// Close releases the store; it is idempotent.
	Close() error
}

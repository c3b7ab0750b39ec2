// Package tools defines the Tool contract and the Registry that the agent
// executor calls. Built-in tools live one level down (tools/files, ...); the
// registry is built explicitly in main — there is no init() registration.
package tools

import (
	"context"
	"encoding/json"
	"errors"
	"strings"

	"github.com/switchboard-chat/switchboard/bus"
)

// Permission classes of a tool.
const (
	PermRead    = "read"
	PermWrite   = "write"
	PermExec    = "exec"
	PermNetwork = "network"
	PermMessage = "message"
)

// Session identifies who a tool call runs for: the speaker (channel, chat,
// thread, user, is_group — [bus.Speaker], declared once for every layer)
// and the agent's session key. Tools take it from the Call, never from
// their arguments. A Session with an empty Speaker runs for no chat member
// (e.g. a test or a call of no chat); tools that act for "the user" must
// refuse it (bus.Speaker.Validate). IsGroup reports that the chat has more
// than one human: tools that act on "the user's own chats" treat a group
// chat as nobody's.
//
// Owner is set by the runtime, never from a message: the speaker is an
// owner of the agent (access.owners, or the operator's console), who may
// change the shared prompt inputs ([SharedWrites]).
type Session struct {
	Key string // session key "<channel>/<chat>[/<thread>]"
	bus.Speaker
	Owner bool
}

// Thread returns the session's thread id: ThreadID when set, else what Key
// holds after "<channel>/<chat>/" (a runtime that left ThreadID empty),
// else "".
func (s Session) Thread() string {
	if s.ThreadID != "" {
		return s.ThreadID
	}
	if s.Channel == "" || s.ChatID == "" {
		return ""
	}
	rest, ok := strings.CutPrefix(s.Key, s.Channel+"/"+s.ChatID+"/")
	if !ok {
		return ""
	}
	return rest
}

// Call is one invocation of a tool.
type Call struct {
	ID      string          // the model's tool call id
	Args    json.RawMessage // a JSON object, already repaired and validated as an object
	Session Session
}

// File is a file a tool hands back for the user.
type File struct {
	Name string
	MIME string
	Data []byte
}

// Tool stages.
const (
	// StageModel tools are offered to the model and called by it (the default).
	StageModel = "model"
	// StagePostTurn tools are never offered to the model: the executor runs
	// them once after each turn (with the turn's final text as
	// {"reply": "..."}), e.g. to index memory.
	StagePostTurn = "post_turn"
)

// Staged is implemented by tools whose stage is not StageModel.
type Staged interface {
	Stage() string
}

// StageOf returns t's stage: Staged.Stage() or StageModel.
func StageOf(t Tool) string {
	if s, ok := t.(Staged); ok {
		return s.Stage()
	}
	return StageModel
}

// Result is what a tool returns. Text is never empty in what reaches the
// model: the registry replaces an empty text with "(no output)".
type Result struct {
	Text    string
	IsError bool
	// Denied is set by the registry when the tool refused the call for lack
	// of permission (an error wrapping ErrDenied); such failures do not
	// count toward the executor's circuit breakers.
	Denied bool
	// Files are files for the user (the executor may deliver them).
	Files []File
	// Images are images for the model to look at (e.g. the image content
	// of an MCP tool result), each with an image/* MIME type. An executor
	// whose model cannot see images may ignore them; Text always describes
	// them in words as well.
	Images []File
}

// Tool is one capability offered to the model.
//
// Run must honour ctx (cancellation, deadline) and must be safe for
// concurrent use when ParallelSafe reports true. Errors returned by Run are
// given back to the model as "Error: ..." results; they never end the turn.
type Tool interface {
	Name() string
	Description() string
	// Schema is the JSON Schema (an object schema) of the arguments. It
	// is called for every model request: return the same bytes each time
	// (built once); callers never modify them.
	Schema() json.RawMessage
	// Permission is one of the Perm* classes.
	Permission() string
	// ParallelSafe reports whether calls may run concurrently with others.
	ParallelSafe() bool
	Run(ctx context.Context, call Call) (Result, error)
}

// Sentinel errors (wrapped; use errors.Is).
var (
	// ErrUnknownTool: no tool with that name is registered.
	ErrUnknownTool = errors.New("tools: unknown tool")
	// ErrDuplicateTool: two tools with the same name were registered.
	ErrDuplicateTool = errors.New("tools: duplicate tool name")
	// ErrBadArgs: the arguments do not fit the tool's schema.
	ErrBadArgs = errors.New("tools: invalid arguments")
	// ErrDenied: the caller is not allowed to use the tool this way.
	ErrDenied = errors.New("tools: permission denied")
)

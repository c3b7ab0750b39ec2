// Package message provides the send_message tool: the agent sends a
// message (text and/or a workspace file) to the current chat, or to
// another chat that belongs to the same user.
//
// Safety: a chat other than the current one is reachable only when it is
// one of the user's own chats on the same channel: a chat (or thread)
// where the agent served this same user id, that is not a group chat, and
// where no other user was ever seen ([Chats]). User ids are per channel,
// so chats on other channels are never reachable. Everything else is
// refused with an error wrapping [tools.ErrDenied]. Files come from the
// workspace only, through a [workspace.Guard] with the session's
// [tools.PathGuard] ([WithGuard]): another user's private memory, another
// chat's inbox, a symbolic link leading there and a hard-linked file are
// refused (wrapping [tools.ErrDenied]) before anything is published.
// Files are bounded by tools.send_message.max_file_bytes.
//
// Messages are published as outbound envelopes of kind "reply" with an
// empty in_reply_to (a proactive message, docs/bus-protocol.md §4.2) and
// final set, through JetStream with the envelope id as Nats-Msg-Id.
package message

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"path/filepath"
	"strings"
	"unicode/utf8"

	"github.com/switchboard-chat/switchboard/bus"
	"github.com/switchboard-chat/switchboard/tools"
	"github.com/switchboard-chat/switchboard/workspace"
)

// MaxTextBytes bounds the text of one message.
const MaxTextBytes = 64 << 10

// Option configures the send_message tool.
type Option func(*sendTool)

// WithGuard limits the files a session may attach to the workspace paths
// g allows (on the path as given and on its real path). A nil g allows
// every workspace file (hard-linked files are refused all the same).
func WithGuard(g tools.PathGuard) Option { return func(t *sendTool) { t.guard = g } }

// New returns the send_message tool publishing through pub on the
// subjects of subj, recording and checking chat ownership in chats.
func New(ws *workspace.Workspace, chats *Chats, pub tools.Publisher, subj bus.Subjects, cfg tools.SendMessageConfig, opts ...Option) tools.Tool {
	t := &sendTool{ws: ws, chats: chats, pub: pub, subj: subj, cfg: cfg, desc: sendDescription(cfg)}
	for _, o := range opts {
		o(t)
	}
	return t
}

type sendTool struct {
	ws    *workspace.Workspace
	chats *Chats
	pub   tools.Publisher
	subj  bus.Subjects
	cfg   tools.SendMessageConfig
	guard tools.PathGuard
	desc  string
}

func (*sendTool) Name() string { return "send_message" }

// Description is built once, with the tool: it is asked for every turn.
func (t *sendTool) Description() string { return t.desc }

func sendDescription(cfg tools.SendMessageConfig) string {
	d := "Send a separate message now: text, a file from the workspace, or both. By default it goes to the current chat; " +
		"with channel and chat_id it goes to another of the user's own private chats (list_chats: true shows which). " +
		"Do not use it to answer the current message — your reply is delivered anyway; use it to send files, or to reach the user elsewhere."
	if cfg.MaxFileBytes > 0 {
		d += fmt.Sprintf(" Files up to %d bytes.", cfg.MaxFileBytes)
	}
	return d
}

// sendToolSchema is sendTool's argument schema, built once (Schema hands out the
// same bytes; callers must not modify them).
var sendToolSchema = json.RawMessage(`{"type":"object","properties":{` +
	`"text":{"type":"string","description":"The message text (Markdown)."},` +
	`"file":{"type":"string","description":"Path of a workspace file to attach."},` +
	`"channel":{"type":"string","description":"With chat_id: the channel of another chat of this user. Default: the current chat."},` +
	`"chat_id":{"type":"string","description":"With channel: the chat to send to."},` +
	`"thread_id":{"type":"string","description":"Thread within that chat, if any."},` +
	`"list_chats":{"type":"boolean","description":"List the chats of this user that messages can be sent to, instead of sending."}` +
	`},"additionalProperties":false}`)

func (*sendTool) Schema() json.RawMessage { return sendToolSchema }

func (*sendTool) Permission() string { return tools.PermMessage }
func (*sendTool) ParallelSafe() bool { return false }

type sendArgs struct {
	Text      string `json:"text"`
	File      string `json:"file"`
	Channel   string `json:"channel"`
	ChatID    string `json:"chat_id"`
	ThreadID  string `json:"thread_id"`
	ListChats bool   `json:"list_chats"`
}

func (t *sendTool) Run(ctx context.Context, call tools.Call) (tools.Result, error) {
	var a sendArgs
	if err := tools.DecodeArgs(call.Args, &a); err != nil {
		return tools.Result{}, err
	}
	s := call.Session
	if s.Channel == "" || s.ChatID == "" || s.UserID == "" {
		return tools.Result{}, errors.New("send_message needs a chat session; this call has none")
	}
	// The current turn's chat counts as served even before the post-turn
	// recording runs.
	if err := t.chats.Record(s); err != nil {
		return tools.Result{}, err
	}
	current := Chat{Channel: s.Channel, ChatID: s.ChatID, ThreadID: s.Thread()}
	if a.ListChats {
		if a.Text != "" || a.File != "" || a.Channel != "" || a.ChatID != "" || a.ThreadID != "" {
			return tools.Result{}, fmt.Errorf("%w: list_chats takes no other arguments", tools.ErrBadArgs)
		}
		return tools.Result{Text: t.list(current, s.UserID)}, nil
	}
	if strings.TrimSpace(a.Text) == "" && a.File == "" {
		return tools.Result{}, fmt.Errorf("%w: give text, file, or both", tools.ErrBadArgs)
	}
	if len(a.Text) > MaxTextBytes || !utf8.ValidString(a.Text) {
		return tools.Result{}, fmt.Errorf("%w: text must be valid UTF-8 of at most %d bytes", tools.ErrBadArgs, MaxTextBytes)
	}
	target, err := t.target(current, s.UserID, a)
	if err != nil {
		return tools.Result{}, err
	}
	out := bus.Outbound{V: bus.Version, ID: newID(), Channel: target.Channel, ChatID: target.ChatID, ThreadID: target.ThreadID,
		Kind: bus.KindReply, Text: a.Text, Final: true}
	if a.File != "" {
		att, err := t.attachment(s, a.File)
		if err != nil {
			return tools.Result{}, err
		}
		out.Attachments = []bus.Attachment{att}
	}
	if err := out.Validate(); err != nil {
		return tools.Result{}, fmt.Errorf("%w: %v", tools.ErrBadArgs, err)
	}
	data, err := json.Marshal(out)
	if err != nil {
		return tools.Result{}, fmt.Errorf("message: encode: %w", err)
	}
	if err := t.pub.Publish(ctx, t.subj.Out(target.Channel, target.ChatID), data, out.ID); err != nil {
		return tools.Result{}, fmt.Errorf("message not sent: %w", err)
	}
	what := "message"
	if len(out.Attachments) > 0 {
		what = "message with " + out.Attachments[0].Name
	}
	if target == current {
		return tools.Result{Text: fmt.Sprintf("%s sent to the current chat; do not repeat it in your reply", what)}, nil
	}
	return tools.Result{Text: fmt.Sprintf("%s sent to %s", what, target)}, nil
}

// target resolves and checks where the message goes.
func (t *sendTool) target(current Chat, user string, a sendArgs) (Chat, error) {
	if a.Channel == "" && a.ChatID == "" {
		if a.ThreadID != "" && a.ThreadID != current.ThreadID {
			return Chat{}, fmt.Errorf("%w: thread_id needs channel and chat_id", tools.ErrBadArgs)
		}
		return current, nil
	}
	if a.Channel == "" || a.ChatID == "" {
		return Chat{}, fmt.Errorf("%w: give both channel and chat_id, or neither for the current chat", tools.ErrBadArgs)
	}
	target := Chat{Channel: a.Channel, ChatID: a.ChatID, ThreadID: a.ThreadID}
	if target == current {
		return current, nil
	}
	if target.Channel != current.Channel {
		return Chat{}, fmt.Errorf("%w: %s: messages go only to chats on the current channel (%s); user ids differ between channels",
			tools.ErrDenied, target, current.Channel)
	}
	if !t.chats.Owns(target, user) {
		return Chat{}, fmt.Errorf("%w: %s is %v (only private chats where this user talked to you alone can be reached; list_chats shows them)",
			tools.ErrDenied, target, errNotOwned)
	}
	return target, nil
}

func (t *sendTool) list(current Chat, user string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "current chat: channel %q, chat_id %q", current.Channel, current.ChatID)
	if current.ThreadID != "" {
		fmt.Fprintf(&b, ", thread_id %q", current.ThreadID)
	}
	n := 0
	for _, c := range t.chats.Owned(current.Channel, user) {
		if c == current {
			continue
		}
		if n == 0 {
			b.WriteString("\nother chats of this user:")
		}
		n++
		fmt.Fprintf(&b, "\n- channel %q, chat_id %q", c.Channel, c.ChatID)
		if c.ThreadID != "" {
			fmt.Fprintf(&b, ", thread_id %q", c.ThreadID)
		}
	}
	if n == 0 {
		b.WriteString("\nno other chats of this user are known (a chat becomes known once the user talks to you there privately)")
	}
	return b.String()
}

// attachment reads a workspace file s may see into an attachment.
func (t *sendTool) attachment(s tools.Session, path string) (bus.Attachment, error) {
	if t.cfg.MaxFileBytes <= 0 {
		return bus.Attachment{}, fmt.Errorf("%w: sending files is turned off (tools.send_message.max_file_bytes is 0)", tools.ErrDenied)
	}
	rel, err := t.ws.Rel(path)
	if err != nil {
		if errors.Is(err, workspace.ErrOutside) {
			return bus.Attachment{}, fmt.Errorf("file %s is outside the workspace; only workspace files can be sent", path)
		}
		return bus.Attachment{}, fmt.Errorf("%w: %v", tools.ErrBadArgs, err)
	}
	f, _, err := t.ws.Guard(t.guard.For(s)).Open(rel)
	if err != nil {
		return bus.Attachment{}, fileErr(path, err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return bus.Attachment{}, fileErr(path, err)
	}
	if !fi.Mode().IsRegular() {
		return bus.Attachment{}, fmt.Errorf("file %s is not a regular file", path)
	}
	if fi.Size() > t.cfg.MaxFileBytes {
		return bus.Attachment{}, fmt.Errorf("file %s has %d bytes, more than the %d bytes a message may carry", path, fi.Size(), t.cfg.MaxFileBytes)
	}
	data, err := io.ReadAll(io.LimitReader(f, t.cfg.MaxFileBytes+1))
	if err != nil {
		return bus.Attachment{}, fileErr(path, err)
	}
	if int64(len(data)) > t.cfg.MaxFileBytes {
		return bus.Attachment{}, fmt.Errorf("file %s grew past %d bytes while being read", path, t.cfg.MaxFileBytes)
	}
	name := filepath.Base(rel)
	mt := mime.TypeByExtension(filepath.Ext(name))
	if mt == "" {
		mt = http.DetectContentType(data)
	}
	kind := bus.AttachFile
	switch {
	case strings.HasPrefix(mt, "image/"):
		kind = bus.AttachImage
	case strings.HasPrefix(mt, "audio/"):
		kind = bus.AttachAudio
	}
	return bus.Attachment{Kind: kind, Data: base64.StdEncoding.EncodeToString(data), MIME: mt, Name: name, Size: int64(len(data))}, nil
}

// fileErr explains why a file could not be attached ([tools.PathError]);
// nothing was sent.
func fileErr(path string, err error) error {
	return fmt.Errorf("%w; nothing was sent", tools.PathError("file "+path, err))
}

// newID returns a unique outbound id: "msg_" and 24 hex digits.
func newID() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return "msg_" + hex.EncodeToString(b[:])
}

// Package bus defines Switchboard's bus protocol v1: the inbound and outbound
// envelopes, their validation, and the subject scheme (DESIGN.md §3–4).
//
// This package is pure data: it does no I/O. The NATS connection, the embedded
// server and the JetStream streams live in [github.com/switchboard-chat/switchboard/bus/natsbus]; test
// helpers in [github.com/switchboard-chat/switchboard/bus/bustest].
//
// All functions and methods here are safe for concurrent use.
package bus

import "errors"

// Version is the protocol version carried in every envelope's "v" field.
const Version = 1

// Outbound kinds (Outbound.Kind).
const (
	KindReply  = "reply"  // a complete assistant message
	KindDelta  = "delta"  // streaming: the whole text so far
	KindTyping = "typing" // the agent is working
	KindNotice = "notice" // e.g. "cancelled", command answers
	KindError  = "error"  // a user-visible failure
)

// Attachment kinds (Attachment.Kind).
const (
	AttachImage = "image"
	AttachAudio = "audio"
	AttachFile  = "file"
)

// Attachment is a file, image or audio clip carried by an envelope. Exactly one
// of URL or Data (base64) is normally set.
type Attachment struct {
	Kind string `json:"kind"`
	URL  string `json:"url,omitempty"`
	Data string `json:"data,omitempty"` // base64 (standard encoding)
	MIME string `json:"mime,omitempty"`
	Name string `json:"name,omitempty"`
	Size int64  `json:"size,omitempty"`
}

// Inbound is a user message published on chat.in.<channel>.<chat> (DESIGN.md §3).
type Inbound struct {
	V           int               `json:"v"`
	ID          string            `json:"id"`
	Channel     string            `json:"channel"`
	ChatID      string            `json:"chat_id"`
	ThreadID    string            `json:"thread_id,omitempty"`
	UserID      string            `json:"user_id"`
	UserName    string            `json:"user_name,omitempty"`
	Text        string            `json:"text,omitempty"`
	Attachments []Attachment      `json:"attachments,omitempty"`
	IsGroup     bool              `json:"is_group,omitempty"`
	Mentioned   bool              `json:"mentioned,omitempty"`
	ReplyTo     string            `json:"reply_to,omitempty"`
	TS          string            `json:"ts,omitempty"`
	Meta        map[string]string `json:"meta,omitempty"`
}

// Outbound is a message from the agent runtime published on
// chat.out.<channel>.<chat> (DESIGN.md §3).
type Outbound struct {
	V           int               `json:"v"`
	ID          string            `json:"id"`
	Channel     string            `json:"channel"`
	ChatID      string            `json:"chat_id"`
	ThreadID    string            `json:"thread_id,omitempty"`
	InReplyTo   string            `json:"in_reply_to,omitempty"`
	Kind        string            `json:"kind"`
	Text        string            `json:"text,omitempty"`
	Seq         int               `json:"seq"`
	Final       bool              `json:"final,omitempty"`
	Attachments []Attachment      `json:"attachments,omitempty"`
	Meta        map[string]string `json:"meta,omitempty"`
}

// SessionKey returns the session an inbound message belongs to:
// "<channel>/<chat_id>" plus "/<thread_id>" when set (DESIGN.md §5).
func (in *Inbound) SessionKey() string { return in.Speaker().SessionKey() }

// DedupKey is the de-duplication key of an inbound message, "<channel>:<id>",
// the same string used as its Nats-Msg-Id header.
func (in *Inbound) DedupKey() string { return in.Channel + ":" + in.ID }

// Sentinel errors returned (wrapped) by validation. Use errors.Is.
var (
	// ErrInvalid marks an envelope that breaks a protocol rule; the wrapped
	// message names the field and the rule.
	ErrInvalid = errors.New("invalid envelope")
	// ErrTooLarge marks an envelope whose text or payload exceeds the limit.
	ErrTooLarge = errors.New("envelope too large")
	// ErrUnprocessable marks a valid inbound message the runtime gave up
	// on: something it needs refused the message for good (the history
	// store), or it failed on every one of a bounded number of deliveries.
	// The wrapping error says what failed; the message is dead-lettered
	// like an invalid one.
	ErrUnprocessable = errors.New("message could not be processed")
)

// Header names used on the bus.
const (
	// HeaderMsgID is JetStream's de-duplication header.
	HeaderMsgID = "Nats-Msg-Id"
)

package bus

import (
	"errors"
	"fmt"
)

// Speaker is who is speaking in which chat: the identity part of an
// inbound envelope (channel, chat_id, thread_id, user_id, is_group), the
// one type every layer that acts for a chat member passes around — the
// agent's scoped memory, the tools' sessions (tools.Session) and the
// memory notes (notes.Scope) embed it instead of copying its fields.
//
// The zero Speaker speaks for nobody (e.g. a tool call of no chat); see
// [Speaker.Validate] for what acting for a member needs.
type Speaker struct {
	Channel string // the adapter's channel name, e.g. "telegram"
	ChatID  string // the conversation on that channel
	// ThreadID is the thread inside the chat, "" for none.
	ThreadID string
	UserID   string // the sender, unique within Channel
	// IsGroup reports that the chat has more than one human (the
	// envelope's is_group): what one member says there is said to all, and
	// nothing private of one member may reach it.
	IsGroup bool
}

// ErrIncompleteSpeaker is returned (wrapped) by [Speaker.Validate] when a
// Speaker lacks what acting for a chat member needs.
var ErrIncompleteSpeaker = errors.New("incomplete speaker")

// Speaker returns the identity part of the envelope: who is speaking in
// which chat.
func (in *Inbound) Speaker() Speaker {
	return Speaker{Channel: in.Channel, ChatID: in.ChatID, ThreadID: in.ThreadID, UserID: in.UserID, IsGroup: in.IsGroup}
}

// SessionKey returns the session the speaker's chat belongs to:
// "<channel>/<chat_id>" plus "/<thread_id>" when set (DESIGN.md §5). It
// does not depend on the user: every member of a chat shares its session.
func (s Speaker) SessionKey() string {
	k := s.Channel + "/" + s.ChatID
	if s.ThreadID != "" {
		k += "/" + s.ThreadID
	}
	return k
}

// Validate reports whether s names a member someone can act for: a
// channel and a user, and a chat when it is a group. The error wraps
// [ErrIncompleteSpeaker] and names the missing field.
func (s Speaker) Validate() error {
	switch {
	case s.Channel == "":
		return fmt.Errorf("%w: channel is empty", ErrIncompleteSpeaker)
	case s.UserID == "":
		return fmt.Errorf("%w: user id is empty", ErrIncompleteSpeaker)
	case s.IsGroup && s.ChatID == "":
		return fmt.Errorf("%w: chat id is empty in a group", ErrIncompleteSpeaker)
	}
	return nil
}

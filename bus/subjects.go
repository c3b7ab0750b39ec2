package bus

import (
	"fmt"
	"strings"
)

// DefaultPrefix is the default first subject token (config bus.subject_prefix).
const DefaultPrefix = "chat"

// InvalidChannel is the channel token used for the dead-letter subject of a
// message whose subject carries no valid channel token (see [Subjects.DLQ]
// and [Subjects.DLQFor]). It matches [ValidChannel], so the DLQ subject built
// from it is well-formed; bridges should not name a channel "_invalid".
const InvalidChannel = "_invalid"

// HeartbeatChannel is the channel of the agents' heartbeat turns
// (agent/heartbeat), which only the daemon and its operator publish: no
// bridge may claim it.
const HeartbeatChannel = "heartbeat"

// MaxChannelBytes is the longest channel instance name ([ValidChannel]).
const MaxChannelBytes = 32

// Subjects builds and parses the bus subjects under one prefix (DESIGN.md §3):
//
//	<p>.in.<channel>.<chat>     inbound envelopes
//	<p>.out.<channel>.<chat>    outbound envelopes
//	<p>.event.<channel>.<chat>  agent events
//	<p>.dlq.<channel>           dead letters
//
// <chat> is the chat id encoded with [EncodeToken]. Prefix must be one or
// more dot-separated tokens of [A-Za-z0-9_-] (natsbus.Config.Validate checks
// it); the zero value is not usable. Methods do not validate their arguments:
// channel must satisfy [ValidChannel] and chatID must be non-empty, or the
// subject built will not parse back. A Subjects value is immutable and safe
// for concurrent use.
type Subjects struct {
	// Prefix is the first subject token(s), e.g. "chat".
	Prefix string
}

// In returns the inbound subject of a chat: "<p>.in.<channel>.<encoded chat>".
func (s Subjects) In(channel, chatID string) string {
	return s.build("in", channel, chatID)
}

// Out returns the outbound subject of a chat: "<p>.out.<channel>.<encoded chat>".
func (s Subjects) Out(channel, chatID string) string {
	return s.build("out", channel, chatID)
}

// Event returns the agent-event subject of a chat:
// "<p>.event.<channel>.<encoded chat>".
func (s Subjects) Event(channel, chatID string) string {
	return s.build("event", channel, chatID)
}

// DLQ returns the dead-letter subject of a channel: "<p>.dlq.<channel>".
// A channel that fails [ValidChannel] is replaced by [InvalidChannel].
func (s Subjects) DLQ(channel string) string {
	if !ValidChannel(channel) {
		channel = InvalidChannel
	}
	return s.Prefix + ".dlq." + channel
}

// DLQFor returns the dead-letter subject for a message received on subject:
// [Subjects.DLQ] of the subject's channel token when the subject has the
// inbound shape "<p>.in.<channel>...", else DLQ([InvalidChannel]). Use it
// when [Subjects.ParseIn] or [ParseInbound] rejected the message.
func (s Subjects) DLQFor(subject string) string {
	rest, ok := strings.CutPrefix(subject, s.Prefix+".in.")
	if !ok {
		return s.DLQ(InvalidChannel)
	}
	channel, _, _ := strings.Cut(rest, ".")
	return s.DLQ(channel)
}

// InAll returns the wildcard of every inbound subject: "<p>.in.>".
func (s Subjects) InAll() string { return s.Prefix + ".in.>" }

// OutAll returns the wildcard of every outbound subject: "<p>.out.>".
func (s Subjects) OutAll() string { return s.Prefix + ".out.>" }

// EventAll returns the wildcard of every event subject: "<p>.event.>".
func (s Subjects) EventAll() string { return s.Prefix + ".event.>" }

// DLQAll returns the wildcard of every dead-letter subject: "<p>.dlq.>".
func (s Subjects) DLQAll() string { return s.Prefix + ".dlq.>" }

// OutChannel returns the wildcard of one channel's outbound subjects:
// "<p>.out.<channel>.>". An adapter or bridge subscribes (or filters a
// durable consumer) on it.
func (s Subjects) OutChannel(channel string) string {
	return s.Prefix + ".out." + EncodeToken(channel) + ".>"
}

// ParseIn splits an inbound subject "<p>.in.<channel>.<chat>" into the
// channel name and the decoded chat id. It rejects a subject with another
// prefix or kind, a wrong number of tokens, an invalid channel name or a chat
// token that is not the canonical [EncodeToken] form. Errors wrap
// [ErrInvalid].
func (s Subjects) ParseIn(subject string) (channel, chatID string, err error) {
	rest, ok := strings.CutPrefix(subject, s.Prefix+".in.")
	if !ok {
		return "", "", subjectErr(subject, fmt.Sprintf("must start with %q", s.Prefix+".in."))
	}
	channel, chatTok, ok := strings.Cut(rest, ".")
	if !ok || strings.Contains(chatTok, ".") {
		return "", "", subjectErr(subject, fmt.Sprintf("must have the shape %s.in.<channel>.<chat>", s.Prefix))
	}
	if !ValidChannel(channel) {
		return "", "", subjectErr(subject, fmt.Sprintf("channel token %q must match ^[a-z0-9_-]{1,32}$", channel))
	}
	chatID, err = DecodeToken(chatTok)
	if err != nil {
		return "", "", subjectErr(subject, fmt.Sprintf("chat token: %v", err))
	}
	return channel, chatID, nil
}

func (s Subjects) build(kind, channel, chatID string) string {
	return s.Prefix + "." + kind + "." + EncodeToken(channel) + "." + EncodeToken(chatID)
}

func subjectErr(subject, rule string) error {
	return fmt.Errorf("bus: subject %q: %s: %w", subject, rule, ErrInvalid)
}

// ValidChannel reports whether name is a valid channel instance name:
// ^[a-z0-9_-]{1,32}$.
func ValidChannel(name string) bool {
	if len(name) == 0 || len(name) > MaxChannelBytes {
		return false
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !('a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

// tokenSafe reports whether c may appear unescaped in a subject token.
func tokenSafe(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '_' || c == '-'
}

const upperHex = "0123456789ABCDEF"

// EncodeToken makes s safe as one subject token: every byte outside
// [A-Za-z0-9_-] is written as %XX with upper-case hex (DESIGN.md §3), e.g.
// "-100123" stays "-100123", "a.b" becomes "a%2Eb", "user@host" becomes
// "user%40host", "é" becomes "%C3%A9". Strings that need no escaping are
// returned without allocating. EncodeToken("") is "", which is not a valid
// token.
func EncodeToken(s string) string {
	n := 0
	for i := 0; i < len(s); i++ {
		if !tokenSafe(s[i]) {
			n++
		}
	}
	if n == 0 {
		return s
	}
	var b strings.Builder
	b.Grow(len(s) + 2*n)
	for i := 0; i < len(s); i++ {
		c := s[i]
		if tokenSafe(c) {
			b.WriteByte(c)
			continue
		}
		b.WriteByte('%')
		b.WriteByte(upperHex[c>>4])
		b.WriteByte(upperHex[c&0x0F])
	}
	return b.String()
}

// DecodeToken reverses [EncodeToken]. It accepts only the canonical form, so
// that DecodeToken(tok) succeeds exactly when EncodeToken of the result is
// tok: it rejects an empty token, a byte outside [A-Za-z0-9_-%], a '%' not
// followed by two upper-case hex digits, and an escaped byte that needs no
// escaping (e.g. "%41" for "A"). Errors wrap [ErrInvalid].
func DecodeToken(tok string) (string, error) {
	if tok == "" {
		return "", fmt.Errorf("bus: token is empty: %w", ErrInvalid)
	}
	n := 0
	for i := 0; i < len(tok); i++ {
		c := tok[i]
		switch {
		case tokenSafe(c):
		case c == '%':
			if i+2 >= len(tok) {
				return "", fmt.Errorf("bus: token %q: truncated escape at byte %d: %w", tok, i, ErrInvalid)
			}
			hi, ok1 := unhex(tok[i+1])
			lo, ok2 := unhex(tok[i+2])
			if !ok1 || !ok2 {
				return "", fmt.Errorf("bus: token %q: escape at byte %d must be %%XX with upper-case hex: %w", tok, i, ErrInvalid)
			}
			if tokenSafe(hi<<4 | lo) {
				return "", fmt.Errorf("bus: token %q: escape at byte %d encodes %q, which must not be escaped: %w", tok, i, rune(hi<<4|lo), ErrInvalid)
			}
			n++
			i += 2
		default:
			return "", fmt.Errorf("bus: token %q: byte %q at %d is not allowed: %w", tok, c, i, ErrInvalid)
		}
	}
	if n == 0 {
		return tok, nil
	}
	b := make([]byte, 0, len(tok)-2*n)
	for i := 0; i < len(tok); i++ {
		if tok[i] != '%' {
			b = append(b, tok[i])
			continue
		}
		hi, _ := unhex(tok[i+1])
		lo, _ := unhex(tok[i+2])
		b = append(b, hi<<4|lo)
		i += 2
	}
	return string(b), nil
}

func unhex(c byte) (byte, bool) {
	switch {
	case '0' <= c && c <= '9':
		return c - '0', true
	case 'A' <= c && c <= 'F':
		return c - 'A' + 10, true
	}
	return 0, false
}

package bus

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"strings"
	"time"
	"unicode/utf8"
)

// Limits enforced by [ParseInbound] and [Outbound.Validate]. The text limit
// is configurable (bus.max_text_bytes) and passed to ParseInbound. Every
// key the runtime derives from an envelope that passes them (the session
// "<channel>/<chat_id>/<thread_id>", at most 1058 bytes; the de-duplication
// key "<channel>:<id>", at most 289) is within what the history stores
// accept (memory.MaxKeyLen).
const (
	// DefaultMaxTextBytes is the default bound on an inbound text (64 KiB).
	DefaultMaxTextBytes = 64 << 10
	// MaxIDBytes bounds message ids: id, reply_to, in_reply_to.
	MaxIDBytes = 256
	// MaxRefBytes bounds chat_id, thread_id, user_id and user_name.
	MaxRefBytes = 512
	// MaxAttachments bounds the number of attachments of an envelope.
	MaxAttachments = 32
	// MaxMetaKeys bounds the number of meta entries.
	MaxMetaKeys = 32
	// MaxMetaBytes bounds the summed length of meta keys and values (4 KiB).
	MaxMetaBytes = 4 << 10
	// maxAttachNameBytes, maxAttachMIMEBytes and maxAttachURLBytes bound the
	// attachment metadata strings.
	maxAttachNameBytes = 1024
	maxAttachMIMEBytes = 255
	maxAttachURLBytes  = 8192
)

// FieldError reports an envelope field that breaks a protocol rule. Err is
// [ErrInvalid] or [ErrTooLarge]; use errors.Is on the error rather than
// comparing Err. Its message reads
//
//	bus: field "v": must be 1, got 2: invalid envelope
type FieldError struct {
	// Field is the JSON field path, e.g. "chat_id" or "attachments[1].kind".
	Field string
	// Rule says what the field must be and what it was.
	Rule string
	// Err is the sentinel: ErrInvalid or ErrTooLarge.
	Err error
	// Limit and Got are the bound and the size received (in bytes) of a
	// size rule (ErrTooLarge), else zero.
	Limit, Got int
}

// Error implements error.
func (e *FieldError) Error() string {
	return fmt.Sprintf("bus: field %q: %s: %v", e.Field, e.Rule, e.Err)
}

// Unwrap returns the sentinel, so errors.Is(err, ErrInvalid) works.
func (e *FieldError) Unwrap() error { return e.Err }

func invalid(field, format string, args ...any) error {
	return &FieldError{Field: field, Rule: fmt.Sprintf(format, args...), Err: ErrInvalid}
}

// ParseInbound decodes and validates an inbound envelope received on
// subject (DESIGN.md §3). The checks, in order:
//
//   - subject has the shape "<p>.in.<channel>.<chat>" ([Subjects.ParseIn]);
//   - data is valid UTF-8 and one JSON object; unknown fields are ignored;
//   - v is 1; id is non-empty and at most [MaxIDBytes];
//   - channel is non-empty, a [ValidChannel] and equals the subject's channel
//     token; chat_id is non-empty, at most [MaxRefBytes] and its
//     [EncodeToken] form equals the subject's chat token;
//   - user_id is non-empty; user_id, user_name and thread_id are at most
//     [MaxRefBytes]; reply_to is at most [MaxIDBytes];
//   - the ids (id, chat_id, thread_id, user_id, reply_to) hold no control
//     character ([ValidID]); user_name, text, attachment names and meta
//     keys and values hold no NUL; attachment urls and mime types no control
//     character; every string is valid UTF-8;
//   - text is non-empty unless attachments is non-empty, and at most
//     maxTextBytes (else [ErrTooLarge]);
//   - at most [MaxAttachments] attachments, each with kind image, audio or
//     file, data valid standard base64 when set, size not negative;
//   - ts, when set, is an RFC 3339 time;
//   - meta has at most [MaxMetaKeys] entries of at most [MaxMetaBytes] in
//     total.
//
// A maxTextBytes ≤ 0 means [DefaultMaxTextBytes]. The first violation is
// returned; it wraps [ErrInvalid] or [ErrTooLarge] and, for a field, is a
// [*FieldError] naming the field and the rule.
func ParseInbound(subj Subjects, subject string, data []byte, maxTextBytes int) (*Inbound, error) {
	if maxTextBytes <= 0 {
		maxTextBytes = DefaultMaxTextBytes
	}
	channel, chatID, err := subj.ParseIn(subject)
	if err != nil {
		return nil, err
	}
	if !utf8.Valid(data) {
		return nil, fmt.Errorf("bus: payload: not valid UTF-8: %w", ErrInvalid)
	}
	in := new(Inbound)
	if err := json.Unmarshal(data, in); err != nil {
		return nil, decodeErr(err)
	}
	if err := in.validate(maxTextBytes); err != nil {
		return nil, err
	}
	if in.Channel != channel {
		return nil, invalid("channel", "must equal the subject's channel token %q, got %q", channel, in.Channel)
	}
	if in.ChatID != chatID {
		return nil, invalid("chat_id", "encoded as %q, must equal the subject's chat token %q", EncodeToken(in.ChatID), EncodeToken(chatID))
	}
	return in, nil
}

// decodeErr turns a json.Unmarshal error into one that names the field.
func decodeErr(err error) error {
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) {
		field := te.Field
		if field == "" {
			return fmt.Errorf("bus: payload: must be a JSON object, got JSON %s: %w", te.Value, ErrInvalid)
		}
		return invalid(field, "must be of type %s, got JSON %s", te.Type, te.Value)
	}
	return fmt.Errorf("bus: payload: not a valid JSON object: %v: %w", err, ErrInvalid)
}

func (in *Inbound) validate(maxTextBytes int) error {
	if in.V != Version {
		return invalid("v", "must be %d, got %d", Version, in.V)
	}
	if err := checkID("id", in.ID, true, MaxIDBytes); err != nil {
		return err
	}
	if err := checkChannel(in.Channel); err != nil {
		return err
	}
	if err := checkID("chat_id", in.ChatID, true, MaxRefBytes); err != nil {
		return err
	}
	if err := checkID("thread_id", in.ThreadID, false, MaxRefBytes); err != nil {
		return err
	}
	if err := checkID("user_id", in.UserID, true, MaxRefBytes); err != nil {
		return err
	}
	if err := checkString("user_name", in.UserName, false, MaxRefBytes); err != nil {
		return err
	}
	if err := checkChars("user_name", in.UserName, noNUL); err != nil {
		return err
	}
	if err := checkID("reply_to", in.ReplyTo, false, MaxIDBytes); err != nil {
		return err
	}
	if in.Text == "" && len(in.Attachments) == 0 {
		return invalid("text", "required unless attachments is non-empty")
	}
	if len(in.Text) > maxTextBytes {
		return &FieldError{Field: "text", Rule: fmt.Sprintf("must be at most %d bytes, got %d", maxTextBytes, len(in.Text)), Err: ErrTooLarge,
			Limit: maxTextBytes, Got: len(in.Text)}
	}
	if err := checkChars("text", in.Text, noNUL); err != nil {
		return err
	}
	if err := checkAttachments(in.Attachments); err != nil {
		return err
	}
	if in.TS != "" {
		if _, err := time.Parse(time.RFC3339, in.TS); err != nil {
			return invalid("ts", "must be an RFC 3339 time, got %q", in.TS)
		}
	}
	return checkMeta(in.Meta)
}

func checkString(field, v string, required bool, maxBytes int) error {
	if v == "" {
		if required {
			return invalid(field, "required")
		}
		return nil
	}
	if len(v) > maxBytes {
		return invalid(field, "must be at most %d bytes, got %d", maxBytes, len(v))
	}
	return nil
}

// checkID is checkString for an id: it also holds no control character
// and is valid UTF-8 ([ValidID]).
func checkID(field, v string, required bool, maxBytes int) error {
	if err := checkString(field, v, required, maxBytes); err != nil {
		return err
	}
	return checkChars(field, v, noControl)
}

// ValidID reports whether id may be an envelope id (id, chat_id,
// thread_id, user_id, reply_to, in_reply_to) as far as its characters go:
// valid UTF-8 without control characters, neither C0 (U+0000 to U+001F,
// NUL, tab and line breaks included), DEL (U+007F) nor C1 (U+0080 to
// U+009F). Ids are keys: of the history store (which refuses NUL), of
// subjects, file names and platform APIs, and they are printed in logs and
// terminals, where a control character would forge output. The lengths
// are checked separately.
func ValidID(id string) bool { return badChar(id, noControl) == "" }

// charRule is what a string field may not hold besides invalid UTF-8
// (checkChars).
type charRule uint8

const (
	// anyChar: valid UTF-8 is all.
	anyChar charRule = iota
	// noNUL: no NUL, which no free text may hold (the history store and
	// the notes files refuse it).
	noNUL
	// noControl: no C0 or C1 control character and no DEL (ids).
	noControl
)

// forbids reports whether the rule refuses r.
func (c charRule) forbids(r rune) bool {
	switch c {
	case noNUL:
		return r == 0
	case noControl:
		return r < 0x20 || 0x7F <= r && r <= 0x9F
	}
	return false
}

// printableASCII reports whether v holds bytes 0x20 to 0x7E only.
func printableASCII(v string) bool {
	for i := 0; i < len(v); i++ {
		if b := v[i]; b < 0x20 || b >= 0x7F {
			return false
		}
	}
	return true
}

// checkChars checks that v is valid UTF-8 and holds no rune the rule
// forbids; the error names the first offending rune and its byte offset.
func checkChars(field, v string, rule charRule) error {
	if broken := badChar(v, rule); broken != "" {
		return invalid(field, "%s", broken)
	}
	return nil
}

// badChar is the rule v breaks (checkChars), "" when none. Most strings
// are printable ASCII, which breaks no rule, and most texts hold no NUL:
// both are answered without decoding runes.
func badChar(v string, rule charRule) string {
	if printableASCII(v) {
		return ""
	}
	if rule != noControl && strings.IndexByte(v, 0) < 0 && utf8.ValidString(v) {
		return ""
	}
	for i, r := range v {
		if r == utf8.RuneError {
			if _, size := utf8.DecodeRuneInString(v[i:]); size == 1 {
				return fmt.Sprintf("must be valid UTF-8, got byte 0x%02X at %d", v[i], i)
			}
		}
		if rule.forbids(r) {
			what := "control characters"
			if r == 0 {
				what = "NUL"
			}
			return fmt.Sprintf("must not contain %s, got U+%04X at byte %d", what, r, i)
		}
	}
	return ""
}

func checkChannel(channel string) error {
	if channel == "" {
		return invalid("channel", "required")
	}
	if !ValidChannel(channel) {
		return invalid("channel", "must match ^[a-z0-9_-]{1,32}$, got %q", channel)
	}
	return nil
}

func checkAttachments(atts []Attachment) error {
	if len(atts) > MaxAttachments {
		return invalid("attachments", "must have at most %d entries, got %d", MaxAttachments, len(atts))
	}
	for i := range atts {
		a := &atts[i]
		field := func(name string) string { return fmt.Sprintf("attachments[%d].%s", i, name) }
		switch a.Kind {
		case AttachImage, AttachAudio, AttachFile:
		case "":
			return invalid(field("kind"), "required (image, audio or file)")
		default:
			return invalid(field("kind"), "must be image, audio or file, got %q", a.Kind)
		}
		if len(a.URL) > maxAttachURLBytes {
			return invalid(field("url"), "must be at most %d bytes, got %d", maxAttachURLBytes, len(a.URL))
		}
		if err := checkChars(field("url"), a.URL, noControl); err != nil {
			return err
		}
		if a.Data != "" {
			if _, err := base64.StdEncoding.DecodeString(a.Data); err != nil {
				return invalid(field("data"), "must be standard base64: %v", err)
			}
		}
		if len(a.MIME) > maxAttachMIMEBytes {
			return invalid(field("mime"), "must be at most %d bytes, got %d", maxAttachMIMEBytes, len(a.MIME))
		}
		if err := checkChars(field("mime"), a.MIME, noControl); err != nil {
			return err
		}
		if len(a.Name) > maxAttachNameBytes {
			return invalid(field("name"), "must be at most %d bytes, got %d", maxAttachNameBytes, len(a.Name))
		}
		if err := checkChars(field("name"), a.Name, noNUL); err != nil {
			return err
		}
		if a.Size < 0 {
			return invalid(field("size"), "must not be negative, got %d", a.Size)
		}
	}
	return nil
}

func checkMeta(meta map[string]string) error {
	if len(meta) > MaxMetaKeys {
		return invalid("meta", "must have at most %d keys, got %d", MaxMetaKeys, len(meta))
	}
	total := 0
	for k, v := range meta {
		total += len(k) + len(v)
	}
	if total > MaxMetaBytes {
		return invalid("meta", "keys and values must total at most %d bytes, got %d", MaxMetaBytes, total)
	}
	return checkMetaChars(meta, noNUL)
}

// checkMetaChars checks meta's keys and values with badChar; of several
// offending entries it names the one with the smallest key, so the error
// is the same every time.
func checkMetaChars(meta map[string]string, rule charRule) error {
	var bad, broken string
	for k, v := range meta {
		if broken != "" && k >= bad {
			continue
		}
		if r := badChar(k, rule); r != "" {
			bad, broken = k, fmt.Sprintf("key %q %s", k, r)
		} else if r := badChar(v, rule); r != "" {
			bad, broken = k, fmt.Sprintf("value of %q %s", k, r)
		}
	}
	if broken != "" {
		return invalid("meta", "%s", broken)
	}
	return nil
}

// Validate checks an outbound envelope before it is published: v is 1, id is
// non-empty and at most [MaxIDBytes], channel is a [ValidChannel], chat_id is
// non-empty and at most [MaxRefBytes], thread_id and in_reply_to are within
// [MaxRefBytes] and [MaxIDBytes], the ids (id, chat_id, thread_id,
// in_reply_to) hold no control character ([ValidID]), kind is one of
// [KindReply], [KindDelta], [KindTyping], [KindNotice], [KindError], seq is
// not negative, text and meta are valid UTF-8, and attachments follow the
// inbound rules. Errors are [*FieldError]s wrapping [ErrInvalid].
func (o *Outbound) Validate() error {
	if o.V != Version {
		return invalid("v", "must be %d, got %d", Version, o.V)
	}
	if err := checkID("id", o.ID, true, MaxIDBytes); err != nil {
		return err
	}
	if err := checkChannel(o.Channel); err != nil {
		return err
	}
	if err := checkID("chat_id", o.ChatID, true, MaxRefBytes); err != nil {
		return err
	}
	if err := checkID("thread_id", o.ThreadID, false, MaxRefBytes); err != nil {
		return err
	}
	if err := checkID("in_reply_to", o.InReplyTo, false, MaxIDBytes); err != nil {
		return err
	}
	switch o.Kind {
	case KindReply, KindDelta, KindTyping, KindNotice, KindError:
	case "":
		return invalid("kind", "required (reply, delta, typing, notice or error)")
	default:
		return invalid("kind", "must be reply, delta, typing, notice or error, got %q", o.Kind)
	}
	if o.Seq < 0 {
		return invalid("seq", "must not be negative, got %d", o.Seq)
	}
	if err := checkChars("text", o.Text, anyChar); err != nil {
		return err
	}
	if err := checkMetaChars(o.Meta, anyChar); err != nil {
		return err
	}
	return checkAttachments(o.Attachments)
}

// ReplyTo returns the skeleton of an outbound envelope answering in: v
// ([Version]), channel, chat_id, thread_id and in_reply_to set from in, and meta a copy of
// in.Meta (same contents, not the same map, so the caller may modify either).
// The caller sets id, kind, text, seq and final.
func ReplyTo(in *Inbound) Outbound {
	return Outbound{
		V:         Version,
		Channel:   in.Channel,
		ChatID:    in.ChatID,
		ThreadID:  in.ThreadID,
		InReplyTo: in.ID,
		Meta:      maps.Clone(in.Meta),
	}
}

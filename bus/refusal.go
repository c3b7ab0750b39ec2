package bus

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"unicode/utf8"
)

// RefusalIDPrefix starts the id of every [RefusalFinal]: a client can tell
// an answer to a refused message from a turn's answer by it.
const RefusalIDPrefix = "refused-"

// RefusalFinal builds the error final that tells the sender why the runtime
// refused an inbound message received on subject (docs/bus-protocol.md §7):
// kind [KindError], final, seq 1, on the outbound subject of the channel and
// chat the inbound subject names, with the reason in plain words
// ([RefusalText]). in_reply_to is the message's id, thread_id its thread and
// meta its meta (the adapter's routing, as [ReplyTo] copies it) when the
// payload carries valid ones (the payload is read leniently: the message
// was refused, so only those fields are looked at; a payload that is not
// UTF-8 is not read at all).
//
// ok is false when the message is not addressable: its subject is not a
// well-formed inbound subject ([Subjects.ParseIn]) or names a chat id
// that breaks the id rules ([ValidID], at most [MaxRefBytes]); such a
// message is dead-lettered only. An id or thread_id that breaks them is
// not copied (the answer then has no in_reply_to, or goes to the chat
// rather than the thread): the answer is always a valid outbound envelope
// ([Outbound.Validate]). The subject, not the payload, decides where the
// answer goes: it is what the sender was allowed to publish on, so a
// refusal is only ever answered on the sender's own channel.
//
// The id is derived from the subject and the message's id (or its bytes
// when it has no valid id), so a message refused twice (a redelivery) gets
// the same answer id and is de-duplicated by the out stream and the
// clients. Publish it with that id as its de-duplication key.
func RefusalFinal(subj Subjects, subject string, data []byte, reason error) (out Outbound, outSubject string, ok bool) {
	channel, chatID, err := subj.ParseIn(subject)
	if err != nil || checkID("chat_id", chatID, true, MaxRefBytes) != nil {
		return Outbound{}, "", false
	}
	var loose struct {
		ID          string `json:"id"`
		ThreadID    string `json:"thread_id"`
		Attachments []struct {
			Name string `json:"name"`
		} `json:"attachments"`
		Meta map[string]string `json:"meta"`
	}
	if utf8.Valid(data) {
		// Best effort: the payload is invalid. Not UTF-8, its strings would
		// decode altered (U+FFFD for the bad bytes): possibly another
		// message's id.
		_ = json.Unmarshal(data, &loose)
	}
	key := data
	out = Outbound{V: Version, Channel: channel, ChatID: chatID, Kind: KindError, Seq: 1, Final: true}
	if loose.ID != "" && checkID("id", loose.ID, true, MaxIDBytes) == nil {
		out.InReplyTo = loose.ID
		key = []byte(loose.ID)
	}
	if checkID("thread_id", loose.ThreadID, false, MaxRefBytes) == nil {
		out.ThreadID = loose.ThreadID
	}
	if len(loose.Meta) > 0 && checkMeta(loose.Meta) == nil {
		out.Meta = loose.Meta // the adapter's routing (e.g. a room id), as in [ReplyTo]
	}
	names := make([]string, len(loose.Attachments))
	for i, a := range loose.Attachments {
		names[i] = a.Name
	}
	out.Text = RefusalText(reason, names)
	h := sha256.New()
	h.Write([]byte(subject))
	h.Write([]byte{0})
	h.Write(key)
	out.ID = RefusalIDPrefix + hex.EncodeToString(h.Sum(nil)[:16])
	if out.Validate() != nil {
		return Outbound{}, "", false
	}
	return out, subj.Out(channel, chatID), true
}

var attachmentField = regexp.MustCompile(`^attachments\[(\d+)\]\.(\w+)$`)

// maxNameInText bounds an attachment name quoted in a refusal.
const maxNameInText = 64

// RefusalText says in plain words why a message was refused: for a text
// over the limit the size received and the limit, for a bad attachment
// which one (its number, counted from 1, and its name when names has it)
// and why, for a message the runtime gave up on ([ErrUnprocessable]) only
// that (the cause is for the operator, in the dead letter), else the rule
// the message broke. It always starts with "Your message was not
// accepted: ".
func RefusalText(reason error, names []string) string {
	const lead = "Your message was not accepted: "
	var fe *FieldError
	switch {
	case reason == nil:
		return lead + "it is invalid."
	case errors.Is(reason, ErrUnprocessable):
		return lead + "Switchboard could not process it and gave up (the operator can see why in the dead-letter queue). " +
			"Please try again later."
	case errors.As(reason, &fe) && fe.Field == "text" && errors.Is(fe, ErrTooLarge) && fe.Limit > 0:
		return fmt.Sprintf("%sit is too long. Received %d bytes of text; the limit is %d bytes "+
			"(%d characters of plain ASCII text, fewer in other scripts, whose characters take 2 to 4 bytes). "+
			"Please send it in shorter parts.", lead, fe.Got, fe.Limit, fe.Limit)
	case errors.As(reason, &fe):
		if m := attachmentField.FindStringSubmatch(fe.Field); m != nil {
			i, _ := strconv.Atoi(m[1])
			which := fmt.Sprintf("attachment %d", i+1)
			if i < len(names) && names[i] != "" {
				which += fmt.Sprintf(" (%q)", truncate(names[i], maxNameInText))
			}
			return fmt.Sprintf("%s%s is invalid: its %s %s.", lead, which, m[2], fe.Rule)
		}
		return fmt.Sprintf("%sfield %q %s.", lead, fe.Field, fe.Rule)
	}
	msg := strings.TrimPrefix(reason.Error(), "bus: ")
	msg = strings.TrimSuffix(strings.TrimSuffix(msg, ": "+ErrInvalid.Error()), ": "+ErrTooLarge.Error())
	return lead + msg + "."
}

// truncate cuts s to at most n bytes on a rune boundary, marking the cut.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "…"
}

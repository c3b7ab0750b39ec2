package bus

import (
	"encoding/base64"
	"time"
	"unicode/utf8"
)

// DLQPayloadBytes bounds the payload kept in a [DLQRecord] (4 KiB).
const DLQPayloadBytes = 4 << 10

// DLQRecord is published (JSON) on "<p>.dlq.<channel>" for an inbound
// message the runtime rejected as invalid (DESIGN.md §3). It is captured by
// the CHAT_DLQ stream.
type DLQRecord struct {
	// V is the protocol version, [Version].
	V int `json:"v"`
	// Reason is the validation error, naming the field and the rule.
	Reason string `json:"reason"`
	// Subject is the subject the message arrived on.
	Subject string `json:"subject"`
	// Payload is at most the first [DLQPayloadBytes] of the message: the text
	// itself when it is valid UTF-8 (cut on a rune boundary), else base64.
	Payload string `json:"payload"`
	// PayloadBase64 is true when Payload is standard base64 of raw bytes.
	PayloadBase64 bool `json:"payload_base64,omitempty"`
	// Size is the full payload size in bytes (Payload may be cut).
	Size int `json:"size"`
	// Time is when the message was rejected.
	Time time.Time `json:"time"`
}

// NewDLQRecord builds the dead-letter record of data received on subject and
// rejected with reason (nil reason reads "unknown"). It copies what it keeps
// of data.
func NewDLQRecord(subject string, data []byte, reason error, now time.Time) DLQRecord {
	r := DLQRecord{V: Version, Reason: "unknown", Subject: subject, Size: len(data), Time: now}
	if reason != nil {
		r.Reason = reason.Error()
	}
	n := min(len(data), DLQPayloadBytes)
	end := n
	if n < len(data) && !utf8.RuneStart(data[n]) {
		// The cut may split a rune: back up to its start, if a valid rune
		// straddles the cut.
		s := n - 1
		for s > 0 && s > n-utf8.UTFMax && !utf8.RuneStart(data[s]) {
			s--
		}
		if r, size := utf8.DecodeRune(data[s:]); (r != utf8.RuneError || size > 1) && s+size > n {
			end = s
		}
	}
	if utf8.Valid(data[:end]) {
		r.Payload = string(data[:end])
	} else {
		r.Payload = base64.StdEncoding.EncodeToString(data[:n])
		r.PayloadBase64 = true
	}
	return r
}

package agent

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"
	"unicode"
)

// Speaker labels (issue 13: identity in groups is not a display name).
const (
	// speakerIDLen is how many hex digits of the id hash a label shows.
	speakerIDLen = 6
	// speakerNameMax bounds the display name in a label (runes).
	speakerNameMax = 32
	// speakerNoName stands for a member without a usable display name.
	speakerNoName = "user"
)

// SpeakerLabel returns how the model sees a chat member: their display
// name, cleaned, and a short id derived from the channel and user id,
// e.g. "Ann (#3f9a1c)". The id part is the first 6 hex digits of the
// SHA-256 of channel, a NUL byte and userID: stable across messages and
// restarts, and different for two members who share a display name, so a
// member cannot pass for another by taking their name. The name loses
// control and format characters (newlines, bidi overrides, zero-width
// characters) and the characters a label is made of ("[", "]", "(", ")",
// ":", "#"), blank space is collapsed, and it is cut to 32 runes; a member
// without a name (or with nothing left of it) is "user (#…)".
func SpeakerLabel(channel, userID, name string) string {
	sum := sha256.Sum256([]byte(channel + "\x00" + userID))
	return cleanSpeakerName(name) + " (#" + hex.EncodeToString(sum[:])[:speakerIDLen] + ")"
}

func cleanSpeakerName(name string) string {
	var b strings.Builder
	n, space := 0, false
	for _, r := range name {
		switch {
		case unicode.IsSpace(r) || unicode.IsControl(r):
			space = b.Len() > 0
			continue
		case unicode.Is(unicode.Cf, r) || strings.ContainsRune("[]():#", r) || r == '\uFFFD':
			continue
		}
		if n == speakerNameMax {
			break
		}
		if space {
			b.WriteByte(' ')
			space = false
		}
		b.WriteRune(r)
		n++
	}
	if b.Len() == 0 {
		return speakerNoName
	}
	return b.String()
}

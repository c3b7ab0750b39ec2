package workspace

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
)

// InboxDir is the workspace folder chat adapters save received files in,
// one folder per chat: inbox/<channel>/<chat>/ ([InboxFolder]). A chat's
// folder is private to that chat ([InboxVisible]).
const InboxDir = "inbox"

// maxComponent is the longest encoded id [Component] uses as is.
const maxComponent = 128

// Component turns an id into one safe path component: every byte outside
// [A-Za-z0-9_-] is written as %XX with upper-case hex (so "." and "/"
// cannot climb or nest: "a.b" is "a%2Eb", "user@host" is "user%40host",
// "é" is "%C3%A9"), and an encoding longer than 128 bytes is cut to its
// first 80 bytes plus "~" and 32 hex digits of the id's SHA-256. Distinct
// ids give distinct components. It is the file-name codec of the inbox
// folders and of the memory folders (memory/notes.Component), and it is
// the workspace's own: the names are on disk, so they must not change when
// the bus's subject token encoding (which happens to escape the same
// bytes today) does. An empty id is an error.
func Component(id string) (string, error) {
	if id == "" {
		return "", errors.New("workspace: empty id")
	}
	enc := escapeName(id)
	if len(enc) <= maxComponent {
		return enc, nil
	}
	cut := 80
	// Do not split a %XX escape.
	if i := strings.LastIndexByte(enc[:cut], '%'); i >= cut-2 {
		cut = i
	}
	sum := sha256.Sum256([]byte(id))
	return enc[:cut] + "~" + hex.EncodeToString(sum[:16]), nil
}

// nameSafe reports whether c stands for itself in a [Component].
func nameSafe(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '_' || c == '-'
}

// escapeName writes every byte of id outside [A-Za-z0-9_-] as %XX.
func escapeName(id string) string {
	var b strings.Builder
	for i := range len(id) {
		if c := id[i]; nameSafe(c) {
			b.WriteByte(c)
		} else {
			fmt.Fprintf(&b, "%%%02X", c)
		}
	}
	return b.String()
}

// InboxFolder returns the inbox folder of a chat, relative to the
// workspace: inbox/<channel>/<chat> with both ids encoded by [Component]
// (a Telegram chat -100123 is inbox/telegram/-100123).
func InboxFolder(channel, chatID string) (string, error) {
	c, err := Component(channel)
	if err != nil {
		return "", err
	}
	k, err := Component(chatID)
	if err != nil {
		return "", err
	}
	return InboxDir + "/" + c + "/" + k, nil
}

// InboxVisible reports whether a session of the given channel and chat
// may reach rel (clean, slash-separated, relative to the workspace): any
// path outside inbox/; inbox/ itself and inbox/<its channel>/ (so their
// listings must be filtered with InboxVisible and show only its own
// entries); and its own chat folder inbox/<channel>/<chat>/ with
// everything below. Other channels' and chats' folders, and files lying
// directly in inbox/ or inbox/<channel>/ (they belong to no known chat),
// are refused. A session without a channel or chat sees no inbox folder.
func InboxVisible(channel, chatID, rel string) bool {
	if rel != InboxDir && !strings.HasPrefix(rel, InboxDir+"/") {
		return true
	}
	rest := strings.TrimPrefix(strings.TrimPrefix(rel, InboxDir), "/")
	if rest == "" {
		return true
	}
	c, err := Component(channel)
	if err != nil {
		return false
	}
	ch, rest, _ := strings.Cut(rest, "/")
	if ch != c {
		return false
	}
	if rest == "" {
		return true
	}
	k, err := Component(chatID)
	if err != nil {
		return false
	}
	chat, _, _ := strings.Cut(rest, "/")
	return chat == k
}

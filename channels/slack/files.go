package slack

import (
	"bytes"
	"cmp"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"strings"

	slackapi "github.com/slack-go/slack"

	"github.com/switchboard-chat/switchboard/bus"
	"github.com/switchboard-chat/switchboard/workspace"
)

// fileRef is a file shared in a message, as the event describes it.
// Slack Connect events carry only the id (file_access
// "check_file_info"); files.info fills in the rest.
type fileRef struct {
	ID                 string `json:"id"`
	Name               string `json:"name"`
	Title              string `json:"title"`
	Mimetype           string `json:"mimetype"`
	Size               int64  `json:"size"`
	URLPrivate         string `json:"url_private"`
	URLPrivateDownload string `json:"url_private_download"`
	Mode               string `json:"mode"`
	FileAccess         string `json:"file_access"`
}

// errTooLarge is returned by capWriter past its limit.
var errTooLarge = errors.New("file is larger than the limit")

// capWriter passes writes on until max bytes, then fails.
type capWriter struct {
	w      io.Writer
	n, max int64
}

func (c *capWriter) Write(p []byte) (int, error) {
	if c.n+int64(len(p)) > c.max {
		return 0, errTooLarge
	}
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

// fetchFiles downloads the files shared in ev with the bot token: images
// (up to maxImageBytes together) become image attachments for the model,
// other files (and larger images) are saved to the workspace inbox and
// described in a note for the text. A file that cannot be fetched is
// described too, so the model knows it was there.
func (a *Adapter) fetchFiles(ctx context.Context, ev *event) (atts []bus.Attachment, notes []string) {
	imageBudget := int64(maxImageBytes)
	for i, f := range ev.Files {
		if i == maxFilesPerMessage {
			notes = append(notes, fmt.Sprintf("[%d more files were shared but not fetched]", len(ev.Files)-i))
			break
		}
		if f.Mode == "tombstone" || f.Mode == "hidden_by_limit" {
			notes = append(notes, fmt.Sprintf("[file %q is not available]", cmp.Or(f.Name, f.Title, f.ID, "file")))
			continue
		}
		if f.FileAccess == "check_file_info" || (f.URLPrivateDownload == "" && f.URLPrivate == "") {
			info, _, _, err := a.api.GetFileInfoContext(ctx, f.ID, 0, 0)
			if err != nil {
				a.log.Warn("files.info failed", "file_id", f.ID, "err", err)
				notes = append(notes, fmt.Sprintf("[a file (%s) was shared but could not be read: %v]", f.ID, err))
				continue
			}
			f = fromAPIFile(info)
		}
		name := cmp.Or(f.Name, f.Title, f.ID, "file")
		if f.Mode == "tombstone" || f.Mode == "hidden_by_limit" {
			notes = append(notes, fmt.Sprintf("[file %q is not available]", name))
			continue
		}
		url := cmp.Or(f.URLPrivateDownload, f.URLPrivate)
		if strings.HasPrefix(f.Mimetype, "image/") && f.Size <= imageBudget {
			var buf bytes.Buffer
			err := a.api.GetFileContext(ctx, url, &capWriter{w: &buf, max: imageBudget})
			if err == nil {
				imageBudget -= int64(buf.Len())
				atts = append(atts, bus.Attachment{Kind: bus.AttachImage, MIME: f.Mimetype, Name: name,
					Size: int64(buf.Len()), Data: base64.StdEncoding.EncodeToString(buf.Bytes())})
				continue
			}
			if !errors.Is(err, errTooLarge) {
				a.log.Warn("image download failed", "file_id", f.ID, "err", err)
				notes = append(notes, fmt.Sprintf("[image %q was shared but could not be downloaded]", name))
				continue
			}
			// Too large to send inline: save it like any file.
		}
		notes = append(notes, a.saveFile(ctx, ev.Channel, f, name, url))
	}
	return atts, notes
}

// fromAPIFile converts a files.info answer.
func fromAPIFile(f *slackapi.File) fileRef {
	return fileRef{ID: f.ID, Name: f.Name, Title: f.Title, Mimetype: f.Mimetype, Size: int64(f.Size),
		URLPrivate: f.URLPrivate, URLPrivateDownload: f.URLPrivateDownload, Mode: f.Mode}
}

// saveFile downloads a file shared in chat into the chat's inbox folder,
// inbox/slack/<chat>/ (workspace.InboxFolder: private to that chat), and
// returns the note describing where it is (or why it is not).
func (a *Adapter) saveFile(ctx context.Context, chat string, f fileRef, name, url string) string {
	desc := fmt.Sprintf("%s, %d bytes", cmp.Or(f.Mimetype, "unknown type"), f.Size)
	if a.opts.Inbox == nil {
		return fmt.Sprintf("[file %q (%s) was shared but not saved: no workspace]", name, desc)
	}
	if f.Size > maxFileBytes {
		return fmt.Sprintf("[file %q (%s) was shared but not saved: larger than %d MiB]", name, desc, maxFileBytes>>20)
	}
	root := a.opts.Inbox
	dir, err := workspace.InboxFolder(ChannelName, chat)
	if err == nil {
		err = root.MkdirAll(dir, 0o700)
	}
	if err != nil {
		a.log.Warn("cannot create the inbox folder", "chat_id", chat, "err", err)
		return fmt.Sprintf("[file %q (%s) was shared but could not be saved]", name, desc)
	}
	base := safeName(f.ID, name)
	var (
		rel  string
		file *os.File
	)
	for i := 0; i < 100; i++ {
		rel = path.Join(dir, numbered(base, i))
		file, err = root.OpenFile(rel, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
		if !errors.Is(err, fs.ErrExist) {
			break
		}
	}
	if err != nil {
		a.log.Warn("cannot create a file in the inbox", "file", rel, "err", err)
		return fmt.Sprintf("[file %q (%s) was shared but could not be saved]", name, desc)
	}
	w := &capWriter{w: file, max: maxFileBytes}
	err = a.api.GetFileContext(ctx, url, w)
	if cerr := file.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		_ = root.Remove(rel)
		a.log.Warn("file download failed", "file_id", f.ID, "err", err)
		if errors.Is(err, errTooLarge) {
			return fmt.Sprintf("[file %q (%s) was shared but not saved: larger than %d MiB]", name, desc, maxFileBytes>>20)
		}
		return fmt.Sprintf("[file %q (%s) was shared but could not be downloaded]", name, desc)
	}
	return fmt.Sprintf("[file %q saved in the workspace as %s (%s, %d bytes)]", name, rel, cmp.Or(f.Mimetype, "unknown type"), w.n)
}

// safeName makes a file name for the inbox: the Slack file id, a dash,
// and the name with anything but letters, digits, '.', '-' and '_'
// replaced by '_', at most 120 bytes, never starting with a dot.
func safeName(id, name string) string {
	var b strings.Builder
	for _, r := range name {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '.', r == '-', r == '_':
			b.WriteRune(r)
		default:
			b.WriteByte('_')
		}
	}
	n := strings.TrimLeft(b.String(), ".")
	if len(n) > 120 {
		ext := path.Ext(n)
		if len(ext) > 16 {
			ext = ""
		}
		n = n[:120-len(ext)] + ext
	}
	if n == "" {
		n = "file"
	}
	if id = safeID(id); id != "" {
		return id + "-" + n
	}
	return n
}

// safeID keeps the letters and digits of a Slack id.
func safeID(id string) string {
	var b strings.Builder
	for _, r := range id {
		if r >= 'A' && r <= 'Z' || r >= 'a' && r <= 'z' || r >= '0' && r <= '9' {
			b.WriteRune(r)
		}
	}
	return b.String()
}

// numbered returns name for i == 0, else name with "-<i>" before its
// extension.
func numbered(name string, i int) string {
	if i == 0 {
		return name
	}
	ext := path.Ext(name)
	return fmt.Sprintf("%s-%d%s", strings.TrimSuffix(name, ext), i, ext)
}

package telegram

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io/fs"
	"mime"
	"path"
	"strconv"
	"strings"
	"time"

	tgbotapi "github.com/go-telegram-bot-api/telegram-bot-api/v5"

	"github.com/switchboard-chat/switchboard/bus"
	"github.com/switchboard-chat/switchboard/workspace"
)

// Bounds on media work done before an update is published.
const (
	downloadTimeout   = 2 * time.Minute
	transcribeTimeout = 2 * time.Minute
)

// file is one downloadable file of a message.
type file struct {
	id   string
	msg  string // id of the message carrying it: prefixes the saved name
	size int64  // 0: unknown
	name string // the file's name
	mime string
	what string // how to call it in a note: "file", "voice message", ...
}

// attachMedia downloads what a message carries and adds it to in: a photo
// as an image attachment, a voice note as its transcript (or a saved
// file), documents and other files saved in the workspace inbox and named
// in the text. A file that cannot be fetched for good (too large, gone) is
// described in the text instead. The error is non-nil only for failures
// worth retrying (network, 5xx), or when ctx ends.
func (a *Adapter) attachMedia(ctx context.Context, m *tgbotapi.Message, in *bus.Inbound) error {
	var notes []string
	note := func(s string) { notes = append(notes, s) }
	msgID := strconv.Itoa(m.MessageID)
	chat := m.Chat.ID

	switch {
	case len(m.Photo) > 0:
		att, err := a.photo(ctx, m.Photo, "photo-"+msgID+".jpg")
		switch {
		case err == nil:
			in.Attachments = append(in.Attachments, att)
		case transient(err) || ctx.Err() != nil:
			return err
		default:
			a.log.Info("photo not attached", "chat_id", chat, "err", err)
			note(fmt.Sprintf("[The user sent a photo that could not be attached: %s]", reason(err)))
		}
	case m.Voice != nil:
		f := file{id: m.Voice.FileID, msg: msgID, size: int64(m.Voice.FileSize), name: "voice.ogg",
			mime: orDefault(m.Voice.MimeType, "audio/ogg"), what: "voice message"}
		text, err := a.voice(ctx, chat, f)
		if err != nil {
			return err
		}
		note(text)
	case m.Document != nil:
		d := m.Document
		f := file{id: d.FileID, msg: msgID, size: int64(d.FileSize), name: orDefault(d.FileName, "document"), mime: d.MimeType, what: "file"}
		data, text, err := a.saveFile(ctx, chat, f)
		if err != nil {
			return err
		}
		note(text)
		if strings.HasPrefix(f.mime, "image/") && data != nil && int64(len(data)) <= a.tune.maxImage {
			in.Attachments = append(in.Attachments, bus.Attachment{Kind: bus.AttachImage, MIME: f.mime, Name: f.name,
				Size: int64(len(data)), Data: base64.StdEncoding.EncodeToString(data)})
		}
	case m.Audio != nil, m.Video != nil, m.VideoNote != nil, m.Animation != nil:
		f := otherFile(m)
		f.msg = msgID
		_, text, err := a.saveFile(ctx, chat, f)
		if err != nil {
			return err
		}
		note(text)
	case m.Sticker != nil:
		note(strings.TrimSpace("[sticker " + m.Sticker.Emoji + "]"))
	case m.Location != nil:
		note(fmt.Sprintf("[location: %.6f, %.6f]", m.Location.Latitude, m.Location.Longitude))
	case m.Contact != nil:
		note(strings.TrimSpace(fmt.Sprintf("[contact: %s %s %s]", m.Contact.FirstName, m.Contact.LastName, m.Contact.PhoneNumber)))
	}
	if len(notes) > 0 {
		in.Text = strings.TrimSpace(in.Text + "\n" + strings.Join(notes, "\n"))
	}
	return nil
}

// otherFile describes an audio file, video, video note or animation.
func otherFile(m *tgbotapi.Message) file {
	switch {
	case m.Audio != nil:
		return file{id: m.Audio.FileID, size: int64(m.Audio.FileSize), name: orDefault(m.Audio.FileName, "audio.mp3"),
			mime: m.Audio.MimeType, what: "audio file"}
	case m.Video != nil:
		return file{id: m.Video.FileID, size: int64(m.Video.FileSize), name: orDefault(m.Video.FileName, "video.mp4"),
			mime: m.Video.MimeType, what: "video"}
	case m.VideoNote != nil:
		return file{id: m.VideoNote.FileID, size: int64(m.VideoNote.FileSize), name: "video-note.mp4",
			mime: "video/mp4", what: "video message"}
	default:
		return file{id: m.Animation.FileID, size: int64(m.Animation.FileSize), name: orDefault(m.Animation.FileName, "animation.mp4"),
			mime: m.Animation.MimeType, what: "animation"}
	}
}

// photo downloads the largest size of a photo that fits the image cap.
// Sizes whose file_size is known to be too large are skipped; a download
// that turns out too large falls back to the next smaller size.
func (a *Adapter) photo(ctx context.Context, sizes []tgbotapi.PhotoSize, name string) (bus.Attachment, error) {
	limit := a.tune.maxImage
	lastErr := error(fmt.Errorf("every size is over %d bytes: %w", limit, errTooLarge))
	for i := len(sizes) - 1; i >= 0; i-- {
		s := sizes[i]
		if s.FileSize > 0 && int64(s.FileSize) > limit {
			continue
		}
		data, err := a.fetch(ctx, s.FileID, limit)
		if errors.Is(err, errTooLarge) {
			lastErr = err
			continue
		}
		if err != nil {
			return bus.Attachment{}, err
		}
		return bus.Attachment{Kind: bus.AttachImage, MIME: "image/jpeg", Name: name, Size: int64(len(data)),
			Data: base64.StdEncoding.EncodeToString(data)}, nil
	}
	return bus.Attachment{}, lastErr
}

// fetch resolves a file id and downloads the file, at most limit bytes.
func (a *Adapter) fetch(ctx context.Context, fileID string, limit int64) ([]byte, error) {
	dctx, cancel := context.WithTimeout(ctx, downloadTimeout)
	defer cancel()
	f, err := a.api.getFile(dctx, fileID)
	if err != nil {
		if ae, ok := asAPI(err); ok && ae.has("too big") {
			return nil, fmt.Errorf("%w: %w", errTooLarge, err)
		}
		return nil, err
	}
	if f.FileSize > 0 && int64(f.FileSize) > limit {
		return nil, fmt.Errorf("telegram: %d bytes, more than %d: %w", f.FileSize, limit, errTooLarge)
	}
	if f.FilePath == "" {
		return nil, &apiError{Method: "getFile", Code: 400, Description: "no file_path in the answer"}
	}
	return a.api.download(dctx, f.FilePath, limit)
}

// voice turns a voice note into text: its transcript when a transcriber
// is configured (and works), else a note naming the saved file.
func (a *Adapter) voice(ctx context.Context, chat int64, f file) (string, error) {
	if a.deps.Transcriber == nil {
		_, text, err := a.saveFile(ctx, chat, f)
		if err != nil {
			return "", err
		}
		return text, nil
	}
	data, err := a.fetch(ctx, f.id, a.cfg.MaxFileBytes)
	if err != nil {
		if transient(err) || ctx.Err() != nil {
			return "", err
		}
		return fmt.Sprintf("[The user sent a %s that could not be downloaded: %s]", f.what, reason(err)), nil
	}
	tctx, cancel := context.WithTimeout(ctx, transcribeTimeout)
	text, err := a.deps.Transcriber.Transcribe(tctx, f.name, data)
	cancel()
	if err == nil && strings.TrimSpace(text) != "" {
		return "[voice message, transcribed] " + strings.TrimSpace(text), nil
	}
	if ctx.Err() != nil {
		return "", ctx.Err()
	}
	a.log.Warn("voice message not transcribed; saving it as a file", "chat_id", chat, "err", err)
	saved, serr := a.store(chat, f, data)
	if serr != nil {
		return "", serr
	}
	return saved + " (it could not be transcribed)", nil
}

// saveFile downloads a file into the workspace inbox and returns its
// content and a note for the text. A file too large or gone is described
// without content (nil data, nil error).
func (a *Adapter) saveFile(ctx context.Context, chat int64, f file) ([]byte, string, error) {
	if f.size > a.cfg.MaxFileBytes {
		return nil, a.skipped(f, fmt.Errorf("%d bytes, more than %s: %w", f.size, key("max_file_bytes"), errTooLarge)), nil
	}
	data, err := a.fetch(ctx, f.id, a.cfg.MaxFileBytes)
	if err != nil {
		if transient(err) || ctx.Err() != nil {
			return nil, "", err
		}
		return nil, a.skipped(f, err), nil
	}
	text, err := a.store(chat, f, data)
	return data, text, err
}

// skipped describes a file that was not downloaded.
func (a *Adapter) skipped(f file, err error) string {
	a.log.Info("file not downloaded", "name", f.name, "err", err)
	return fmt.Sprintf("[The user sent a %s %q (%s) that was not downloaded: %s]", f.what, f.name, orDefault(f.mime, "unknown type"), reason(err))
}

// store writes data into the chat's inbox folder as
// inbox/telegram/<chat>/<message id>-<name> (workspace.InboxFolder: private
// to that chat; atomically: a temporary file
// renamed into place, so a repeat of the same update overwrites it whole)
// and returns a note for the text naming it. Without a workspace it only
// describes the file.
func (a *Adapter) store(chat int64, f file, data []byte) (string, error) {
	typ := f.mime
	if typ == "" {
		typ = orDefault(mime.TypeByExtension(path.Ext(f.name)), "unknown type")
	}
	if a.deps.Files == nil {
		return fmt.Sprintf("[The user sent a %s %q (%s, %d bytes); it was not saved: no workspace]", f.what, f.name, typ, len(data)), nil
	}
	dir, err := workspace.InboxFolder(Name, chatKey(chat))
	if err != nil {
		return "", fmt.Errorf("telegram: save %s: %w", f.name, err)
	}
	base := safeName(f.name)
	if f.msg != "" {
		base = f.msg + "-" + base
	}
	name := path.Join(dir, base)
	root := a.deps.Files
	if err := root.MkdirAll(dir, 0o750); err != nil {
		return "", fmt.Errorf("telegram: save %s: %w", name, err)
	}
	tmp := name + ".part"
	if err := root.WriteFile(tmp, data, 0o640); err != nil {
		return "", fmt.Errorf("telegram: save %s: %w", name, err)
	}
	if err := root.Rename(tmp, name); err != nil {
		_ = root.Remove(tmp)
		return "", fmt.Errorf("telegram: save %s: %w", name, err)
	}
	return fmt.Sprintf("[The user sent a %s, saved in the workspace as %s (%s, %d bytes)]", f.what, name, typ, len(data)), nil
}

// safeName reduces a user-supplied file name to a safe base name: letters,
// digits, '.', '-' and '_' (others become '_'), no leading dot, at most
// 120 bytes keeping the extension. File names keep the message id the
// caller put in them, so two files of a chat do not collide.
func safeName(name string) string {
	name = path.Base(strings.ReplaceAll(name, "\\", "/"))
	var b strings.Builder
	for _, r := range name {
		switch {
		case r < 128 && (r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '.' || r == '-' || r == '_'):
			b.WriteRune(r)
		default:
			b.WriteByte('_')
		}
	}
	s := strings.TrimLeft(b.String(), ".")
	if s == "" || !fs.ValidPath(s) {
		s = "file"
	}
	if len(s) > 120 {
		ext := path.Ext(s)
		if len(ext) > 20 {
			ext = ""
		}
		s = s[:120-len(ext)] + ext
	}
	return s
}

// reason is a short explanation of a media failure for the model.
func reason(err error) string {
	if errors.Is(err, errTooLarge) {
		return "it is too large"
	}
	if ae, ok := asAPI(err); ok {
		return ae.Description
	}
	return "download failed"
}

func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

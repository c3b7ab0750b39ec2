package telegram

import (
	"container/list"
	"context"
	"encoding/base64"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/switchboard-chat/switchboard/bus"
	"github.com/switchboard-chat/switchboard/bus/bridge"
	"github.com/switchboard-chat/switchboard/channels/markdown"
)

// Outbound bounds.
const (
	// maxTurns bounds the remembered per-turn states (streamed message,
	// progress of a reply, whether the final was shown); the least
	// recently used is forgotten first.
	maxTurns = 4096
	// maxPhotoBytes is the largest upload sendPhoto accepts; larger
	// images go out as documents.
	maxPhotoBytes = 10 << 20
	// actionTimeout bounds one typing indicator request.
	actionTimeout = 5 * time.Second
)

// permanentErr marks a send failure that retrying cannot fix.
func permanentErr(err error) error { return bridge.Permanent(err) }

// turnKey identifies a turn: its conversation and the inbound message it
// answers (for a proactive message, the message itself).
type turnKey struct {
	chat, thread, inReplyTo string
}

// turnState is what the adapter remembers about one turn. Only the
// conversation's worker touches it (the bridge kit handles a conversation
// serially).
type turnState struct {
	msgID    int    // message created by the first delta (0: none)
	shown    string // text that message shows now
	lastSeq  int    // seq of the last delta handled
	seenSeq  bool   // lastSeq is set
	answered bool   // a message was sent for this turn (only the first quotes the user's)
	done     bool   // the final was handled: later typing and deltas are ignored

	delivering string // id of the message being delivered in steps
	steps      int    // steps of it already delivered (a retry resumes there)
	delivered  string // id of the last message delivered completely
}

// turns is a bounded map of turn states. Safe for concurrent use.
type turns struct {
	mu  sync.Mutex
	max int
	m   map[turnKey]*list.Element // of *turnEntry
	lru list.List
}

type turnEntry struct {
	key turnKey
	st  *turnState
}

func newTurns(n int) *turns { return &turns{max: n, m: make(map[turnKey]*list.Element)} }

// get returns k's state, creating it.
func (t *turns) get(k turnKey) *turnState {
	t.mu.Lock()
	defer t.mu.Unlock()
	if e, ok := t.m[k]; ok {
		t.lru.MoveToFront(e)
		return e.Value.(*turnEntry).st
	}
	st := &turnState{}
	t.m[k] = t.lru.PushFront(&turnEntry{key: k, st: st})
	if t.lru.Len() > t.max {
		old := t.lru.Back()
		t.lru.Remove(old)
		delete(t.m, old.Value.(*turnEntry).key)
	}
	return st
}

// handleOutbound shows one outbound envelope in Telegram; it is the bridge
// kit's Handler. Transient failures are returned (the kit retries the same
// envelope before anything later in the conversation); permanent ones are
// wrapped with bridge.Permanent.
func (a *Adapter) handleOutbound(ctx context.Context, out bus.Outbound) error {
	t, err := parseTarget(out.ChatID, out.ThreadID)
	if err != nil {
		return permanentErr(err)
	}
	k := turnKey{chat: out.ChatID, thread: out.ThreadID, inReplyTo: out.InReplyTo}
	if out.InReplyTo == "" {
		k.inReplyTo = "\x00" + out.ID
	}
	st := a.turns.get(k)
	if st.done {
		return nil // anything after the final (a catch-up, a redelivery)
	}
	if t.chat < 0 && !st.answered {
		t.replyTo = metaMessageID(out.Meta)
	}
	err = a.show(ctx, k, t, st, out)
	if out.Final && (err == nil || permanent(err)) {
		st.done = true
		a.typing.stop(k)
	}
	return classify(err)
}

// show renders out by kind.
func (a *Adapter) show(ctx context.Context, k turnKey, t target, st *turnState, out bus.Outbound) error {
	switch out.Kind {
	case bus.KindTyping:
		if !out.Final {
			a.startTyping(ctx, k, t)
		}
		return nil
	case bus.KindDelta:
		if !out.Final {
			return a.stream(ctx, t, st, out)
		}
		out.Kind = bus.KindReply // a final delta is the whole reply
	case bus.KindReply, bus.KindNotice, bus.KindError:
	default:
		return nil // unknown kinds are ignored; a final one still ends the turn
	}
	return a.deliver(ctx, t, st, out)
}

// metaMessageID is the Telegram message an answer refers to (the inbound
// envelope's meta.message_id, echoed back), or 0.
func metaMessageID(meta map[string]string) int {
	id, err := strconv.Atoi(meta["message_id"])
	if err != nil || id <= 0 {
		return 0
	}
	return id
}

// startTyping shows the typing indicator now and keeps it alive until the
// turn's final.
func (a *Adapter) startTyping(ctx context.Context, k turnKey, t target) {
	if !a.typing.start(k, t, a.tune.now()) {
		return // shown recently for this chat
	}
	actx, cancel := context.WithTimeout(ctx, actionTimeout)
	defer cancel()
	if err := a.chatAction(actx, t, "typing"); err != nil && ctx.Err() == nil {
		a.log.Debug("typing indicator failed", "chat_id", t.chat, "err", err)
	}
}

// stream shows a delta: the first one as a new message, later ones by
// editing it (the rate limits pace the edits to one per second per chat,
// slower in groups), as plain text. Deltas not newer than the last one,
// and edits that would not change the text, are skipped.
func (a *Adapter) stream(ctx context.Context, t target, st *turnState, out bus.Outbound) error {
	if st.seenSeq && out.Seq <= st.lastSeq {
		return nil
	}
	st.lastSeq, st.seenSeq = out.Seq, true
	text := preview(out.Text)
	if text == "" || text == st.shown {
		return nil
	}
	if st.msgID != 0 {
		err := a.editText(ctx, t, st.msgID, text, "")
		if !editGone(err) {
			if err == nil {
				st.shown = text
			}
			return err
		}
		st.msgID = 0 // deleted by the user: start a new message
	}
	id, err := a.sendText(ctx, t, text, "")
	if err != nil {
		return err
	}
	st.msgID, st.shown, st.answered = id, text, true
	return nil
}

// preview renders a partial Markdown reply as plain text that fits one
// message, cut at a word with "…" when it is longer.
func preview(md string) string {
	p := strings.TrimSpace(markdown.Plain(md))
	if markdown.UTF16Len(p) <= MaxMessageLen {
		return p
	}
	units, cut, lastSpace := 0, 0, -1
	for i, r := range p {
		n := 1
		if r >= 0x10000 {
			n = 2
		}
		if units+n > MaxMessageLen-1 {
			break
		}
		units += n
		cut = i + utf8.RuneLen(r)
		if unicode.IsSpace(r) {
			lastSpace = i
		}
	}
	if lastSpace > cut-400 && lastSpace > 0 {
		cut = lastSpace
	}
	return strings.TrimRightFunc(p[:cut], unicode.IsSpace) + "…"
}

// step is one request of a delivery: a text piece or an attachment.
type step struct {
	text string // a Markdown piece (html) or a raw text piece
	html bool   // render as Telegram HTML, falling back to plain text
	att  *bus.Attachment
}

// plan cuts a reply, notice or error into the requests that show it: text
// pieces within Telegram's limit, then the attachments.
func plan(out bus.Outbound) []step {
	var steps []step
	switch out.Kind {
	case bus.KindReply:
		measure := func(s string) int { return markdown.UTF16Len(markdown.Plain(s)) }
		for _, p := range markdown.Split(out.Text, MaxMessageLen, measure) {
			steps = append(steps, step{text: p, html: true})
		}
	default:
		text := strings.TrimSpace(out.Text)
		if text != "" && out.Kind == bus.KindError {
			text = "⚠️ " + text
		}
		for _, p := range markdown.Split(text, MaxMessageLen, markdown.UTF16Len) {
			steps = append(steps, step{text: p})
		}
	}
	for i := range out.Attachments {
		steps = append(steps, step{att: &out.Attachments[i]})
	}
	return steps
}

// deliver shows a reply, notice or error. A reply's first piece replaces
// the streamed message, if any; the other pieces and attachments follow
// as new messages. Progress is kept in st, so a retry after a failure
// resumes at the step that failed instead of repeating what was shown.
func (a *Adapter) deliver(ctx context.Context, t target, st *turnState, out bus.Outbound) error {
	if out.ID == st.delivered {
		return nil // redelivered after it was shown
	}
	if st.delivering != out.ID {
		st.delivering, st.steps = out.ID, 0
	}
	steps := plan(out)
	for i := st.steps; i < len(steps); i++ {
		if st.answered {
			t.replyTo = 0
		}
		edit := i == 0 && out.Kind == bus.KindReply
		if err := a.runStep(ctx, t, st, steps[i], edit); err != nil {
			return err
		}
		st.steps, st.answered = i+1, true
	}
	st.delivered, st.delivering, st.steps = out.ID, "", 0
	st.msgID, st.shown = 0, "" // a later delta starts a new message
	return nil
}

// runStep performs one step.
func (a *Adapter) runStep(ctx context.Context, t target, st *turnState, s step, edit bool) error {
	if s.att != nil {
		return a.sendAttachment(ctx, t, *s.att)
	}
	if !s.html {
		return a.put(ctx, t, st, s.text, "", edit)
	}
	err := a.put(ctx, t, st, markdown.TelegramHTML(s.text), "HTML", edit)
	if ae, ok := asAPI(err); ok && ae.Code == 400 && ae.has("can't parse entities") {
		a.log.Warn("Telegram rejected the HTML rendering; sending plain text", "chat_id", t.chat, "err", err)
		err = a.put(ctx, t, st, markdown.Plain(s.text), "", edit)
	}
	return err
}

// put shows text: by editing the streamed message when edit is set and
// there is one (a new message if it is gone), else as a new message.
func (a *Adapter) put(ctx context.Context, t target, st *turnState, text, mode string, edit bool) error {
	if strings.TrimSpace(text) == "" {
		return nil
	}
	if edit && st.msgID != 0 {
		err := a.editText(ctx, t, st.msgID, text, mode)
		if !editGone(err) {
			return err
		}
		st.msgID = 0
	}
	_, err := a.sendText(ctx, t, text, mode)
	return err
}

// editGone reports an edit that failed because the message cannot be
// edited any more (deleted, too old).
func editGone(err error) bool {
	ae, ok := asAPI(err)
	return ok && ae.Code == 400 && (ae.has("message to edit not found") || ae.has("message can't be edited"))
}

// sendAttachment sends a file the agent attached: images as photos (as a
// document when Telegram refuses the photo or it is too large), anything
// else as a document. Inline data is uploaded; a URL is passed for
// Telegram to fetch. An attachment that is neither is skipped.
func (a *Adapter) sendAttachment(ctx context.Context, t target, att bus.Attachment) error {
	var data []byte
	if att.Data != "" {
		d, err := base64.StdEncoding.DecodeString(att.Data)
		if err != nil {
			a.log.Error("skipping an outbound attachment with invalid data", "chat_id", t.chat, "name", att.Name, "err", err)
			return nil
		}
		data = d
	} else if att.URL == "" {
		a.log.Warn("skipping an outbound attachment with neither data nor url", "chat_id", t.chat, "name", att.Name)
		return nil
	}
	name := safeName(orDefault(att.Name, "file"))
	if att.Kind == bus.AttachImage && len(data) <= maxPhotoBytes {
		err := a.sendFile(ctx, t, "sendPhoto", "photo", name, data, att.URL)
		if !permanent(err) {
			return err
		}
		a.log.Info("Telegram refused the image as a photo; sending it as a file", "chat_id", t.chat, "err", err)
	}
	return a.sendFile(ctx, t, "sendDocument", "document", name, data, att.URL)
}

// typer keeps typing indicators alive while turns run: each active turn's
// chat gets a chat action every typingEvery until the turn's final, or
// typingMax at the latest. Safe for concurrent use.
type typer struct {
	a      *Adapter
	mu     sync.Mutex
	active map[turnKey]*typingEntry
}

type typingEntry struct {
	t     target
	since time.Time
}

// maxTyping bounds the turns kept typing.
const maxTyping = 10000

func newTyper(a *Adapter) *typer {
	return &typer{a: a, active: make(map[turnKey]*typingEntry)}
}

// start marks k as running in t and reports whether no other active turn
// of the same chat already keeps the indicator alive (so the caller shows
// it now).
func (ty *typer) start(k turnKey, t target, now time.Time) bool {
	ty.mu.Lock()
	defer ty.mu.Unlock()
	if _, ok := ty.active[k]; ok {
		return false
	}
	for _, e := range ty.active {
		if e.t.chat == t.chat && e.t.thread == t.thread {
			ty.active[k] = &typingEntry{t: target{chat: t.chat, thread: t.thread}, since: now}
			return false
		}
	}
	if len(ty.active) >= maxTyping {
		return true
	}
	ty.active[k] = &typingEntry{t: target{chat: t.chat, thread: t.thread}, since: now}
	return true
}

// stop ends k's indicator.
func (ty *typer) stop(k turnKey) {
	ty.mu.Lock()
	defer ty.mu.Unlock()
	delete(ty.active, k)
}

func (ty *typer) len() int {
	ty.mu.Lock()
	defer ty.mu.Unlock()
	return len(ty.active)
}

// run refreshes the indicators every typingEvery until ctx ends.
func (ty *typer) run(ctx context.Context) {
	tick := time.NewTicker(ty.a.tune.typingEvery)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		for _, t := range ty.due(ty.a.tune.now()) {
			actx, cancel := context.WithTimeout(ctx, actionTimeout)
			err := ty.a.chatAction(actx, t, "typing")
			cancel()
			if err != nil && ctx.Err() == nil {
				ty.a.log.Debug("typing indicator failed", "chat_id", t.chat, "err", err)
			}
		}
	}
}

// due drops turns past typingMax and returns the chats to refresh, each
// once.
func (ty *typer) due(now time.Time) []target {
	ty.mu.Lock()
	defer ty.mu.Unlock()
	seen := make(map[target]bool)
	var out []target
	for k, e := range ty.active {
		if now.Sub(e.since) > ty.a.tune.typingMax {
			delete(ty.active, k)
			continue
		}
		if !seen[e.t] {
			seen[e.t] = true
			out = append(out, e.t)
		}
	}
	return out
}

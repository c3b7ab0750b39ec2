package telegram

import (
	"container/list"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode"
	"unicode/utf16"

	tgbotapi "github.com/go-telegram-bot-api/telegram-bot-api/v5"

	"github.com/switchboard-chat/switchboard/bus"
)

// update is one decoded update with the fields v5.5.1 of the library does
// not know (forum topics).
type update struct {
	tgbotapi.Update
	threadID int  // message.message_thread_id
	topic    bool // message.is_topic_message: the message is in a forum topic
}

// updateExtra holds the fields decoded beside tgbotapi.Update.
type updateExtra struct {
	Message *struct {
		MessageThreadID int  `json:"message_thread_id"`
		IsTopicMessage  bool `json:"is_topic_message"`
	} `json:"message"`
}

// decodeUpdate decodes one update of getUpdates or a webhook call. When
// the update is JSON with an update_id but does not fit the library's
// types, the error comes with that id (u.UpdateID), so the caller can skip
// it instead of receiving it forever.
func decodeUpdate(raw []byte) (update, error) {
	var u update
	if err := json.Unmarshal(raw, &u.Update); err != nil {
		var id struct {
			UpdateID int `json:"update_id"`
		}
		if json.Unmarshal(raw, &id) == nil {
			u = update{}
			u.UpdateID = id.UpdateID
		}
		return u, fmt.Errorf("telegram: decode update: %w", err)
	}
	var x updateExtra
	if err := json.Unmarshal(raw, &x); err != nil {
		return u, fmt.Errorf("telegram: decode update: %w", err)
	}
	if u.UpdateID <= 0 {
		return u, errors.New("telegram: decode update: update_id missing")
	}
	if x.Message != nil && u.Message != nil {
		u.threadID, u.topic = x.Message.MessageThreadID, x.Message.IsTopicMessage
	}
	return u, nil
}

// knownCommands are the commands the adapter or the runtime answer; a bare
// one ("/new" without @bot) addresses the bot in a group.
var knownCommands = map[string]bool{"start": true, "new": true, "stop": true, "steer": true, "compact": true, "help": true, "status": true, "pair": true}

// handleUpdate turns one update into an inbound envelope and publishes it
// (waiting for the stream's acknowledgement), or answers it directly
// (/start, a denied user), or skips it (not for the bot). It returns an
// error only when retrying the same update later can succeed (the bus is
// unreachable, a download failed on the network); then nothing was
// published for it.
func (a *Adapter) handleUpdate(ctx context.Context, u update) error {
	m := u.Message
	if m == nil || m.Chat == nil || m.From == nil {
		a.log.Debug("skipping update without a message", "update_id", u.UpdateID)
		return nil
	}
	if (m.From.IsBot && m.From.ID != groupAnonymousBot) || m.IsAutomaticForward {
		return nil // bots talking to bots loop; channel posts copied into a discussion group
	}
	group := m.Chat.Type == "group" || m.Chat.Type == "supergroup"
	if !group && m.Chat.Type != "private" {
		return nil // channel posts
	}
	thread := 0
	if group && u.topic {
		thread = u.threadID
	}
	text, entities := m.Text, m.Entities
	if text == "" {
		text, entities = m.Caption, m.CaptionEntities
	}
	ad := a.address(text, entities)
	ad.reply = m.ReplyToMessage != nil && m.ReplyToMessage.From != nil && m.ReplyToMessage.From.ID == a.self.ID &&
		!(u.topic && m.ReplyToMessage.MessageID == u.threadID) // a topic's messages "reply" to its first message
	if group && !a.triggered(ad) {
		a.log.Debug("group message not addressed to the bot", "chat_id", m.Chat.ID, "update_id", u.UpdateID)
		return nil
	}
	dest := target{chat: m.Chat.ID, thread: thread}
	if group {
		dest.replyTo = m.MessageID
	}
	if !a.allowList().allowed(m.From) && !a.admit(ctx, m, dest, group, ad) {
		return ctx.Err()
	}
	if ad.command == "start" {
		a.welcome(ctx, m, dest)
		return ctx.Err()
	}
	in := bus.Inbound{
		V:        bus.Version,
		ID:       strconv.FormatInt(a.self.ID, 10) + ":" + strconv.Itoa(u.UpdateID),
		Channel:  Name,
		ChatID:   chatKey(m.Chat.ID),
		UserID:   strconv.FormatInt(m.From.ID, 10),
		UserName: displayName(m),
		Text:     ad.text,
		IsGroup:  group,
		TS:       time.Unix(int64(m.Date), 0).UTC().Format(time.RFC3339),
		Meta:     map[string]string{"message_id": strconv.Itoa(m.MessageID)},
	}
	if group {
		in.Mentioned = ad.mentioned || ad.reply || ad.command != ""
	}
	if thread != 0 {
		in.ThreadID = strconv.Itoa(thread)
	}
	if err := a.attachMedia(ctx, m, &in); err != nil {
		return err
	}
	if in.Text == "" && len(in.Attachments) == 0 {
		a.log.Debug("skipping a message with nothing the agent can use", "chat_id", m.Chat.ID, "update_id", u.UpdateID)
		return nil
	}
	in.Text = clampText(in.Text, a.maxText())
	err := a.client.PublishInbound(ctx, in)
	if errors.Is(err, bus.ErrInvalid) || errors.Is(err, bus.ErrTooLarge) {
		// The runtime would reject it too; publishing it again cannot help.
		a.log.Error("dropping an update the bus rejects", "update_id", u.UpdateID, "chat_id", in.ChatID, "err", err)
		return nil
	}
	if err != nil {
		return err
	}
	a.log.Debug("published inbound message", "id", in.ID, "chat_id", in.ChatID, "thread_id", in.ThreadID)
	return nil
}

// groupAnonymousBot is the user Telegram shows as the sender of an
// anonymous group admin's messages.
const groupAnonymousBot = 1087968824

// displayName is the sender's name as users see it; for an anonymous admin
// the group's (or channel's) title.
func displayName(m *tgbotapi.Message) string {
	if m.SenderChat != nil && m.SenderChat.Title != "" {
		return m.SenderChat.Title
	}
	name := strings.TrimSpace(strings.TrimSpace(m.From.FirstName) + " " + strings.TrimSpace(m.From.LastName))
	if name == "" && m.From.UserName != "" {
		name = "@" + m.From.UserName
	}
	return name
}

// maxText is the inbound text limit.
func (a *Adapter) maxText() int {
	if a.deps.MaxTextBytes > 0 {
		return a.deps.MaxTextBytes
	}
	return bus.DefaultMaxTextBytes
}

// clampText cuts s to at most n bytes on a character boundary, marking the
// cut.
func clampText(s string, n int) string {
	if len(s) <= n {
		return s
	}
	const mark = "\n[… cut: too long]"
	cut := max(n-len(mark), 0)
	for cut > 0 && !utf8RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + mark
}

func utf8RuneStart(b byte) bool { return b&0xC0 != 0x80 }

// addressing is how a message addresses the bot.
type addressing struct {
	mentioned bool   // an @mention or text mention of the bot
	reply     bool   // a reply to one of the bot's messages
	command   string // the bot's command (lower case) the text starts with
	otherBot  bool   // the text starts with a command for another bot
	text      string // the text without the bot's mentions, "/cmd@bot" as "/cmd"
}

// address finds the bot's mentions and command in text from its entities,
// whose offsets count UTF-16 code units, and removes them from the text.
// Entities that do not fit the text are ignored.
func (a *Adapter) address(text string, entities []tgbotapi.MessageEntity) addressing {
	ad := addressing{text: text}
	if len(entities) == 0 {
		return ad
	}
	units := utf16.Encode([]rune(text))
	type cut struct {
		from, to int
		with     string
	}
	var cuts []cut
	for _, e := range entities {
		if e.Offset < 0 || e.Length <= 0 || e.Offset+e.Length > len(units) {
			continue
		}
		part := string(utf16.Decode(units[e.Offset : e.Offset+e.Length]))
		switch e.Type {
		case "mention":
			if lower(part) == a.selfName {
				ad.mentioned = true
				cuts = append(cuts, cut{e.Offset, e.Offset + e.Length, ""})
			}
		case "text_mention":
			if e.User != nil && e.User.ID == a.self.ID {
				ad.mentioned = true
				cuts = append(cuts, cut{e.Offset, e.Offset + e.Length, ""})
			}
		case "bot_command":
			if e.Offset != 0 {
				continue
			}
			name, at, hasAt := strings.Cut(part[1:], "@")
			name = lower(name)
			switch {
			case hasAt && "@"+lower(at) != a.selfName:
				ad.otherBot = true
			case hasAt:
				ad.command = name
				cuts = append(cuts, cut{e.Offset, e.Offset + e.Length, "/" + name})
			case knownCommands[name]:
				ad.command = name
			}
		}
	}
	if len(cuts) == 0 {
		return ad
	}
	slices.SortFunc(cuts, func(x, y cut) int { return x.from - y.from })
	var b []uint16
	last := 0
	for _, c := range cuts {
		if c.from < last {
			continue // overlapping entities
		}
		b = append(b, units[last:c.from]...)
		b = append(b, utf16.Encode([]rune(c.with))...)
		last = c.to
	}
	b = append(b, units[last:]...)
	stripped := tidy(string(utf16.Decode(b)))
	if stripped != "" {
		ad.text = stripped
	}
	return ad
}

// tidy cleans up a text after mentions were cut out of it: no leading
// punctuation such as "@bot, hi" leaves, single spaces where the mention
// was, no surrounding white space.
func tidy(s string) string {
	s = strings.TrimLeftFunc(s, func(r rune) bool { return unicode.IsSpace(r) || r == ',' || r == ':' })
	var b strings.Builder
	prevSpace := false
	for _, r := range s {
		if r == ' ' {
			if prevSpace {
				continue
			}
			prevSpace = true
		} else {
			prevSpace = false
		}
		b.WriteRune(r)
	}
	return strings.TrimSpace(b.String())
}

// triggered reports whether a group message is for the bot under
// group_trigger.
func (a *Adapter) triggered(ad addressing) bool {
	switch {
	case ad.otherBot:
		return false
	case ad.command != "":
		return true
	}
	switch a.cfg.GroupTrigger {
	case TriggerAll:
		return true
	case TriggerMention:
		return ad.mentioned
	default:
		return ad.mentioned || ad.reply
	}
}

// allowList is the allow list in force: the gate's, which a configuration
// reload changes (channels.telegram.allow_users applies from the next
// message), or the one the adapter started with.
func (a *Adapter) allowList() access {
	if a.deps.Gate != nil {
		if l, ok := a.deps.Gate.AllowUsers(Name); ok {
			return newAccess(l)
		}
	}
	return a.access
}

// admit decides for a user not on allow_users: the gate (access.dm_policy
// and the approved pairings) lets them in, or answers with a pairing code,
// or stays silent, or leaves the refusal to deny. Nothing of a refused
// message is published.
func (a *Adapter) admit(ctx context.Context, m *tgbotapi.Message, dest target, group bool, ad addressing) bool {
	if a.deps.Gate != nil {
		d := a.deps.Gate.Check(Name, strconv.FormatInt(m.From.ID, 10), displayName(m), !group)
		switch {
		case d.Admit:
			return true
		case d.Pairing:
			if d.Reply != "" {
				a.sendBestEffort(ctx, dest, d.Reply)
			}
			return false
		}
	}
	if group && !ad.mentioned && !ad.reply && ad.command == "" {
		// group_trigger all: not addressed to the bot, so no answer.
		a.log.Debug("group message from a user not on the allow list", "user_id", m.From.ID, "chat_id", m.Chat.ID)
		return false
	}
	a.deny(ctx, m, dest)
	return false
}

// deny answers a user who is not on the allow list, once per
// deniedEvery, and logs it.
func (a *Adapter) deny(ctx context.Context, m *tgbotapi.Message, dest target) {
	first := a.denied.add(m.From.ID, a.tune.now(), a.tune.deniedEvery)
	a.log.Info("message from a user not on channels.telegram.allow_users", "user_id", m.From.ID,
		"username", m.From.UserName, "chat_id", m.Chat.ID, "told", first)
	if !first {
		return
	}
	text := fmt.Sprintf("Sorry, I only talk to people on my allow list.\n\n"+
		"Your Telegram user id is %d. To let you in, the operator of this bot adds it to %s "+
		"in the Switchboard configuration (or to the TELEGRAM_ALLOW_USERS environment variable).",
		m.From.ID, key("allow_users"))
	a.sendBestEffort(ctx, dest, text)
}

// welcome answers /start.
func (a *Adapter) welcome(ctx context.Context, m *tgbotapi.Message, dest target) {
	name := strings.TrimSpace(m.From.FirstName)
	if name == "" {
		name = "there"
	}
	var b strings.Builder
	fmt.Fprintf(&b, "Hello %s! I'm %s, an AI assistant. Just write to me", name, a.self.FirstName)
	if dest.chat < 0 {
		fmt.Fprintf(&b, " (in this group, mention %s or reply to my messages)", "@"+a.self.UserName)
	}
	b.WriteString(".\n\nCommands:\n")
	for _, c := range commands[1:] {
		fmt.Fprintf(&b, "/%s — %s\n", c.Command, c.Description)
	}
	a.sendBestEffort(ctx, dest, strings.TrimSpace(b.String()))
}

// sendBestEffort sends a plain text the adapter writes itself, within
// sendTimeout; a failure is logged.
func (a *Adapter) sendBestEffort(ctx context.Context, dest target, text string) {
	sctx, cancel := context.WithTimeout(ctx, a.tune.sendTimeout)
	defer cancel()
	if _, err := a.sendText(sctx, dest, text, ""); err != nil && ctx.Err() == nil {
		a.log.Warn("could not answer a Telegram message", "chat_id", dest.chat, "err", err)
	}
}

// memo remembers, for a bounded number of keys, when something was last
// done for each, so that it is done at most once per interval. Safe for
// concurrent use.
type memo struct {
	mu  sync.Mutex
	max int
	m   map[int64]*list.Element // of memoEntry
	lru list.List               // front: most recent
}

type memoEntry struct {
	key int64
	at  time.Time
}

const maxDenied = 10000

func newMemo(n int) *memo { return &memo{max: n, m: make(map[int64]*list.Element)} }

// add records k at now and reports whether it was not recorded within
// every before (so the caller acts).
func (c *memo) add(k int64, now time.Time, every time.Duration) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if e, ok := c.m[k]; ok {
		me := e.Value.(*memoEntry)
		if now.Sub(me.at) < every {
			return false
		}
		me.at = now
		c.lru.MoveToFront(e)
		return true
	}
	c.m[k] = c.lru.PushFront(&memoEntry{key: k, at: now})
	if c.lru.Len() > c.max {
		old := c.lru.Back()
		c.lru.Remove(old)
		delete(c.m, old.Value.(*memoEntry).key)
	}
	return true
}

// lower is strings.ToLower.
func lower(s string) string { return strings.ToLower(s) }

// jsonString encodes v as a JSON string for a form field.
func jsonString(v any) (string, error) {
	b, err := json.Marshal(v)
	return string(b), err
}

package telegram

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"sync"

	tgbotapi "github.com/go-telegram-bot-api/telegram-bot-api/v5"
)

// MaxMessageLen is Telegram's limit on a message's text, in UTF-16 code
// units of the visible text (after entity parsing).
const MaxMessageLen = 4096

// target is where a message goes: a chat, a forum topic in it (0: none)
// and, for the first message answering a group message, the message to
// reply to (0: none).
type target struct {
	chat    int64
	thread  int
	replyTo int
}

// params returns the chat, topic and reply parameters of a send.
func (t target) params() tgbotapi.Params {
	p := tgbotapi.Params{"chat_id": chatKey(t.chat)}
	p.AddNonZero("message_thread_id", t.thread)
	if t.replyTo != 0 {
		p.AddNonZero("reply_to_message_id", t.replyTo)
		p.AddBool("allow_sending_without_reply", true)
	}
	return p
}

// sendText sends text as a new message (parseMode "" for plain text) and
// returns its message id. It waits for the chat's rate limits, honours
// 429s, and follows a group's migration to a supergroup.
func (a *Adapter) sendText(ctx context.Context, t target, text, parseMode string) (int, error) {
	var msg tgbotapi.Message
	err := a.send(ctx, &t, func(ctx context.Context, t target) error {
		p := t.params()
		p["text"] = text
		p.AddNonEmpty("parse_mode", parseMode)
		p.AddBool("disable_web_page_preview", parseMode == "")
		return a.api.call(ctx, "sendMessage", p, &msg)
	})
	return msg.MessageID, err
}

// editText replaces the text of message id.
func (a *Adapter) editText(ctx context.Context, t target, id int, text, parseMode string) error {
	return a.send(ctx, &t, func(ctx context.Context, t target) error {
		p := tgbotapi.Params{"chat_id": chatKey(t.chat)}
		p.AddNonZero("message_id", id)
		p["text"] = text
		p.AddNonEmpty("parse_mode", parseMode)
		p.AddBool("disable_web_page_preview", parseMode == "")
		err := a.api.call(ctx, "editMessageText", p, nil)
		if ae, ok := asAPI(err); ok && ae.has("message is not modified") {
			return nil // the message already shows this text
		}
		return err
	})
}

// sendFile uploads data as a photo (sendPhoto) or a document
// (sendDocument), or passes a URL for Telegram to fetch.
func (a *Adapter) sendFile(ctx context.Context, t target, method, field, name string, data []byte, url string) error {
	return a.send(ctx, &t, func(ctx context.Context, t target) error {
		p := t.params()
		if data == nil {
			p[field] = url
			return a.api.call(ctx, method, p, nil)
		}
		return a.api.upload(ctx, method, p, tgbotapi.RequestFile{Name: field, Data: tgbotapi.FileBytes{Name: name, Bytes: data}}, nil)
	})
}

// chatAction shows a chat action (typing) in t. It does not wait for the
// per-chat limit (actions are not messages) but for the global one.
func (a *Adapter) chatAction(ctx context.Context, t target, action string) error {
	if err := a.lim.global.Wait(ctx); err != nil {
		return ctxErr(ctx, err)
	}
	p := tgbotapi.Params{"chat_id": chatKey(t.chat), "action": action}
	p.AddNonZero("message_thread_id", t.thread)
	return a.api.call(ctx, "sendChatAction", p, nil)
}

// send runs one sending request for t under the rate limits until it
// succeeds, fails for another reason than a 429, or ctx ends. A 429 pauses
// the chat for retry_after and tries again; nothing is dropped. When a
// group turned into a supergroup (migrate_to_chat_id), t is moved there
// and the request is tried again.
func (a *Adapter) send(ctx context.Context, t *target, req func(context.Context, target) error) error {
	t.chat = a.migrations.get(t.chat)
	for {
		if err := a.lim.wait(ctx, t.chat); err != nil {
			return err
		}
		err := req(ctx, *t)
		if ra, ok := retryAfter(err); ok {
			a.mx.PlatformSend(Name, "retry")
			a.mx.RateLimitWait(Name)
			ra = max(ra, a.api.unit)
			a.log.Warn("Telegram rate limit hit; waiting", "chat_id", t.chat, "retry_after", ra)
			a.lim.pause(t.chat, ra)
			continue
		}
		if ae, ok := asAPI(err); ok && ae.MigrateTo != 0 && ae.MigrateTo != t.chat {
			a.log.Info("group was upgraded to a supergroup; sending there", "chat_id", t.chat, "new_chat_id", ae.MigrateTo)
			a.migrations.set(t.chat, ae.MigrateTo)
			t.chat = ae.MigrateTo
			continue
		}
		if err != nil {
			a.mx.PlatformSend(Name, "failed")
		} else {
			a.mx.PlatformSend(Name, "ok")
		}
		return err
	}
}

// permanent reports whether a failed send cannot succeed by retrying: the
// chat is gone, the bot was blocked or removed, it lacks the right to
// write, or Telegram rejects the request itself (other 400s).
func permanent(err error) bool {
	ae, ok := asAPI(err)
	if !ok {
		return false
	}
	switch ae.Code {
	case http.StatusBadRequest, http.StatusForbidden, http.StatusNotFound:
		return true
	}
	return false
}

// classify prepares a send error for the bridge kit: permanent ones are
// marked so the message is acknowledged and the conversation moves on;
// others are returned for a retry with backoff.
func classify(err error) error {
	if err == nil {
		return nil
	}
	if permanent(err) {
		return permanentErr(err)
	}
	return err
}

// migrations remembers groups that became supergroups (old id → new id).
// Safe for concurrent use; bounded.
type migrations struct {
	mu sync.Mutex
	m  map[int64]int64
}

const maxMigrations = 1024

func (m *migrations) get(id int64) int64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	if to, ok := m.m[id]; ok {
		return to
	}
	return id
}

func (m *migrations) set(from, to int64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.m == nil {
		m.m = make(map[int64]int64)
	}
	if len(m.m) >= maxMigrations {
		clear(m.m)
	}
	m.m[from] = to
}

// parseTarget reads the chat and topic of an outbound envelope.
func parseTarget(chatID, threadID string) (target, error) {
	chat, err := strconv.ParseInt(chatID, 10, 64)
	if err != nil || chat == 0 {
		return target{}, fmt.Errorf("telegram: chat_id %q is not a Telegram chat id", chatID)
	}
	t := target{chat: chat}
	if threadID != "" {
		th, err := strconv.Atoi(threadID)
		if err != nil || th <= 0 {
			return target{}, fmt.Errorf("telegram: thread_id %q is not a Telegram topic id", threadID)
		}
		t.thread = th
	}
	return t, nil
}

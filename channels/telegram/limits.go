package telegram

import (
	"container/list"
	"context"
	"sync"
	"time"

	"golang.org/x/time/rate"

	"github.com/switchboard-chat/switchboard/channels"
)

// Telegram's sending limits (Bot FAQ): about one message per second in a
// chat, 20 per minute in a group, 30 per second overall. Edits count too.
const (
	privateRate = rate.Limit(1)
	groupRate   = rate.Limit(20.0 / 60)
	globalRate  = rate.Limit(30)
	globalBurst = 30
	// maxChatLimiters bounds the per-chat state; the least recently used
	// chat's state is dropped first (a fresh limiter is harmless).
	maxChatLimiters = 4096
)

// limits paces requests that send or edit messages: a token bucket per chat
// (groups slower), a global one, and the pauses 429 answers ask for. Safe
// for concurrent use.
type limits struct {
	private, group rate.Limit
	global         *rate.Limiter

	mu    sync.Mutex
	chats map[int64]*list.Element // of *chatLimit
	lru   list.List               // front: most recently used
}

type chatLimit struct {
	chat  int64
	lim   *rate.Limiter
	until time.Time // paused by a 429 until then
}

func newLimits(private, group, global rate.Limit, burst int) *limits {
	return &limits{private: private, group: group, global: rate.NewLimiter(global, burst), chats: make(map[int64]*list.Element)}
}

// chat returns the chat's state, creating it (and evicting the least
// recently used one beyond the bound). Called with l.mu held.
func (l *limits) chat(id int64) *chatLimit {
	if e, ok := l.chats[id]; ok {
		l.lru.MoveToFront(e)
		return e.Value.(*chatLimit)
	}
	r := l.private
	if id < 0 {
		r = l.group
	}
	cl := &chatLimit{chat: id, lim: rate.NewLimiter(r, 1)}
	l.chats[id] = l.lru.PushFront(cl)
	if l.lru.Len() > maxChatLimiters {
		old := l.lru.Back()
		l.lru.Remove(old)
		delete(l.chats, old.Value.(*chatLimit).chat)
	}
	return cl
}

// wait blocks until a message may be sent to chat id, or ctx ends.
func (l *limits) wait(ctx context.Context, id int64) error {
	l.mu.Lock()
	cl := l.chat(id)
	pause := time.Until(cl.until)
	l.mu.Unlock()
	if pause > 0 {
		if err := channels.Sleep(ctx, pause); err != nil {
			return err
		}
	}
	if err := cl.lim.Wait(ctx); err != nil {
		return ctxErr(ctx, err)
	}
	if err := l.global.Wait(ctx); err != nil {
		return ctxErr(ctx, err)
	}
	return nil
}

// pause holds every send to chat id for d (a 429's retry_after).
func (l *limits) pause(id int64, d time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	cl := l.chat(id)
	if until := time.Now().Add(d); until.After(cl.until) {
		cl.until = until
	}
}

// ctxErr prefers ctx's own error: rate.Limiter.Wait also fails early when
// the deadline is too close, with an error of its own.
func ctxErr(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return err
}

package telegram

import (
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"time"

	tgbotapi "github.com/go-telegram-bot-api/telegram-bot-api/v5"
	bolt "go.etcd.io/bbolt"

	"github.com/switchboard-chat/switchboard/internal/httpserve"
	"github.com/switchboard-chat/switchboard/internal/retry"
)

// Receiving bounds.
const (
	// pollSlack is added to the long-poll time to bound a getUpdates call.
	pollSlack = 15 * time.Second
	// maxWebhookBody bounds one webhook request (an update is a few KiB;
	// files are never inline).
	maxWebhookBody = 1 << 20
	// webhookShutdown bounds the webhook server's graceful shutdown.
	webhookShutdown = 5 * time.Second
)

// poll receives updates with getUpdates until ctx ends. It deletes any
// webhook first (getUpdates fails while one is set), reports the channel
// ready, resumes from the offset stored in state, publishes each batch in order and stores the new offset
// once every update before it was published and acknowledged. The offset
// sent to Telegram (which confirms, and so deletes, the updates below it)
// is only ever one that was stored or whose updates were all published.
func (a *Adapter) poll(ctx context.Context, state *bolt.DB) error {
	store, err := newOffsets(state, a.deps.State, a.self.ID, a.tune.now)
	if err != nil {
		return err
	}
	offset, stale, err := store.load(ctx)
	if err != nil {
		return err
	}
	if stale {
		a.log.Warn("stored getUpdates offset is older than 6 days and was dropped; the bus's de-duplication absorbs any repeat")
	}
	if err := a.retry(ctx, func(ctx context.Context) error {
		return a.api.call(ctx, "deleteWebhook", tgbotapi.Params{"drop_pending_updates": "false"}, nil)
	}); err != nil {
		return err
	}
	if ctx.Err() != nil {
		return nil
	}
	// Ready: getMe and deleteWebhook succeeded and the poll loop runs. A
	// quiet bot's first long poll may not return for poll_timeout; a
	// failing poll makes the channel not ready (report), a successful one
	// ready again.
	a.status.set(nil)
	a.log.Info("receiving Telegram updates by long polling", "offset", offset)

	b := retry.New(a.policy(nil))
	var conflictSince time.Time
	for {
		if ctx.Err() != nil {
			return nil
		}
		cctx, cancel := context.WithTimeout(ctx, a.cfg.PollTimeout+pollSlack)
		raw, err := a.api.getUpdates(cctx, offset, a.cfg.PollTimeout)
		cancel()
		if ctx.Err() != nil {
			return nil
		}
		if err == nil {
			b.Reset()
			conflictSince = time.Time{}
			a.status.set(nil)
			offset, err = a.batch(ctx, store, offset, raw)
			if err == nil {
				continue
			}
			if ctx.Err() != nil {
				return nil
			}
		}
		switch {
		case errors.Is(err, ErrUnauthorized):
			return fmt.Errorf("%w: %w", ErrUnauthorized, err)
		case errors.Is(err, ErrConflict):
			now := a.tune.now()
			if conflictSince.IsZero() {
				conflictSince = now
			}
			if now.Sub(conflictSince) >= a.tune.conflictGrace {
				return fmt.Errorf("%w (getUpdates has answered 409 Conflict for %s)", ErrConflict, now.Sub(conflictSince).Round(time.Second))
			}
			a.log.Error("another process is polling Telegram with this bot token (409 Conflict); only one instance may run per token",
				"err", err)
		}
		_, wait, _ := b.Next(err)
		a.report(err, wait)
		if b.Sleep(ctx, wait) != nil {
			return nil
		}
	}
}

// batch handles the updates of one getUpdates answer in order and returns
// the next offset: one past the last update handled. It stops at the first
// update that fails (it is fetched again next time) and stores the offset
// reached so far either way.
func (a *Adapter) batch(ctx context.Context, store *offsets, offset int, raw []json.RawMessage) (int, error) {
	next := offset
	var failed error
	for _, r := range raw {
		u, err := decodeUpdate(r)
		if err != nil {
			a.log.Error("skipping an update that does not decode", "update_id", u.UpdateID, "err", err)
			if u.UpdateID >= next {
				next = u.UpdateID + 1
			}
			continue
		}
		if u.UpdateID < offset {
			continue // confirmed before; Telegram should not send it again
		}
		if err := a.handleUpdate(ctx, u); err != nil {
			failed = err
			break
		}
		next = u.UpdateID + 1
	}
	if next != offset {
		if err := store.save(ctx, next); err != nil {
			// The updates are on the bus; a restart without this offset
			// fetches them again and de-duplication drops them.
			a.log.Error("could not store the getUpdates offset", "offset", next, "err", err)
		}
	}
	return next, failed
}

// retry calls f until it succeeds, retrying transient failures with
// backoff; other failures and a rejected token are returned. It returns
// nil when ctx ends.
func (a *Adapter) retry(ctx context.Context, f func(context.Context) error) error {
	retryable := func(err error) bool { return !errors.Is(err, ErrUnauthorized) && transient(err) }
	err := retry.Do(ctx, a.policy(retryable), func(ctx context.Context, _ int) error {
		cctx, cancel := context.WithTimeout(ctx, a.tune.sendTimeout)
		defer cancel()
		return f(cctx)
	})
	switch {
	case err == nil, ctx.Err() != nil:
		return nil
	case errors.Is(err, ErrUnauthorized):
		return fmt.Errorf("%w: %w", ErrUnauthorized, err)
	}
	return err // names the method already
}

// serveWebhook registers the webhook (setWebhook with the secret token)
// and serves it on webhook_listen (listener and server bounded by
// Deps.HTTP, counted as "telegram") until ctx ends. Telegram sends one
// update at a time (max_connections 1), so updates are handled in order;
// each is answered 200 only after it was published and acknowledged (or
// skipped), and 500 when publishing failed, so that Telegram sends it
// again.
func (a *Adapter) serveWebhook(ctx context.Context) error {
	hook, _ := url.Parse(a.cfg.WebhookURL) // checked by Validate
	path := hook.EscapedPath()
	if path == "" {
		path = "/"
	}
	ln, err := a.deps.HTTP.Listen(ctx, "telegram", a.cfg.WebhookListen)
	if err != nil {
		return fmt.Errorf("telegram: %s: %w", key("webhook_listen"), err)
	}
	sctx, stopServer := context.WithCancel(ctx)
	defer stopServer()
	served := make(chan error, 1)
	go func() {
		served <- a.deps.HTTP.Serve(sctx, ln, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { a.webhook(w, r, path) }),
			httpserve.Options{Log: a.log, ShutdownTimeout: webhookShutdown})
	}()
	stop := func() {
		stopServer()
		<-served
	}
	if a.tune.webhookReady != nil {
		a.tune.webhookReady(ln.Addr())
	}
	err = a.retry(ctx, func(ctx context.Context) error {
		return a.api.call(ctx, "setWebhook", tgbotapi.Params{
			"url":             a.cfg.WebhookURL,
			"secret_token":    a.cfg.WebhookSecret,
			"max_connections": "1",
			"allowed_updates": `["message"]`,
		}, nil)
	})
	if err != nil || ctx.Err() != nil {
		stop()
		return err
	}
	a.status.set(nil)
	a.log.Info("receiving Telegram updates by webhook", "listen", ln.Addr().String(), "path", path)
	select {
	case <-ctx.Done():
		stop()
		return nil
	case err := <-served:
		if err == nil { // ctx ended first
			return nil
		}
		return fmt.Errorf("telegram: webhook server: %w", err)
	}
}

// webhook handles one call from Telegram.
func (a *Adapter) webhook(w http.ResponseWriter, r *http.Request, path string) {
	if r.URL.EscapedPath() != path {
		http.NotFound(w, r)
		return
	}
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return
	}
	got := r.Header.Get("X-Telegram-Bot-Api-Secret-Token")
	if subtle.ConstantTimeCompare([]byte(got), []byte(a.cfg.WebhookSecret)) != 1 {
		a.log.Warn("webhook call with a wrong secret token", "remote", r.RemoteAddr)
		http.Error(w, "unauthorized", http.StatusUnauthorized)
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxWebhookBody))
	if err != nil {
		http.Error(w, "request body too large or unreadable", http.StatusRequestEntityTooLarge)
		return
	}
	u, err := decodeUpdate(body)
	if err != nil {
		a.log.Error("webhook call with an update that does not decode", "update_id", u.UpdateID, "err", err)
		if u.UpdateID > 0 {
			w.WriteHeader(http.StatusOK) // skipped: sending it again cannot help
			return
		}
		http.Error(w, "bad update", http.StatusBadRequest)
		return
	}
	a.webhooks.Lock()
	err = a.handleUpdate(r.Context(), u)
	a.webhooks.Unlock()
	if err != nil {
		a.log.Warn("webhook update not published; Telegram will send it again", "update_id", u.UpdateID, "err", err)
		a.status.set(fmt.Errorf("telegram: webhook update %d not published: %w", u.UpdateID, err))
		http.Error(w, "not published, retry", http.StatusInternalServerError)
		return
	}
	a.status.set(nil)
	w.Header().Set("Content-Type", "text/plain")
	w.WriteHeader(http.StatusOK)
	_, _ = io.WriteString(w, strconv.Itoa(u.UpdateID))
}

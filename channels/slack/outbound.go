package slack

import (
	"bytes"
	"cmp"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	slackapi "github.com/slack-go/slack"

	"github.com/switchboard-chat/switchboard/bus"
	"github.com/switchboard-chat/switchboard/bus/bridge"
	"github.com/switchboard-chat/switchboard/channels"
	"github.com/switchboard-chat/switchboard/internal/retry"
)

// Outbound bookkeeping bounds.
const (
	// maxTurns bounds the turns with streaming state; past it, turns idle
	// for turnIdle are forgotten.
	maxTurns = 1000
	turnIdle = time.Hour
	// statusRefresh is how often a typing signal renews the assistant
	// status (Slack clears it after two minutes).
	statusRefresh = time.Minute
)

// errThrottled reports a call skipped because the channel's post limiter
// had no room (streaming updates are skipped, never queued).
var errThrottled = errors.New("slack: throttled")

// permanentErrors are Slack error codes that retrying the same message
// cannot fix.
var permanentErrors = []string{
	"channel_not_found", "not_in_channel", "is_archived", "restricted_action",
	"msg_too_long", "no_text", "invalid_blocks", "cannot_reply_to_message",
	"user_not_in_channel", "team_access_not_granted", "invalid_thread_ts",
}

// editFallbackErrors are chat.update errors after which the text is
// posted as a new message instead.
var editFallbackErrors = []string{"message_not_found", "cant_update_message", "edit_window_closed"}

// outbound renders outbound envelopes into Slack. handle is the bridge
// kit's handler: it is never called concurrently for one conversation,
// and a turn belongs to one conversation, so a turn's state is only used
// by one goroutine at a time; mu guards the maps.
type outbound struct {
	a *Adapter

	mu    sync.Mutex
	turns map[string]*turn
	done  *lru[bool] // turns whose final was shown
}

// turn is the Slack side of one turn (or of one proactive message).
type turn struct {
	channel, thread string
	statusTS        string // thread for assistant.threads.setStatus

	msgs        []shownMsg // messages showing the turn's text, in order
	placeholder bool       // msgs[0] is the thinking placeholder
	status      bool       // an assistant status is shown
	statusAt    time.Time
	lastSeq     int
	lastEdit    time.Time
	blocked     time.Time // no streaming edit before (rate limited)
	uploaded    map[string]bool
	touched     time.Time
}

type shownMsg struct{ ts, text string }

func newOutbound(a *Adapter) *outbound {
	return &outbound{a: a, turns: make(map[string]*turn), done: newLRU[bool](4096)}
}

// turnKey identifies the turn of an outbound message: its in_reply_to,
// or for a proactive message the message itself.
func turnKey(out *bus.Outbound) string {
	if out.InReplyTo != "" {
		return "r:" + out.InReplyTo
	}
	return "o:" + out.ID
}

// replyThread is where an outbound message goes: the thread the inbound
// message asked for (meta thread_ts; absent for a top-level DM), else the
// session's thread.
func replyThread(out *bus.Outbound) string {
	if t, ok := out.Meta["thread_ts"]; ok {
		return t
	}
	return out.ThreadID
}

// turn returns the state of out's turn, creating it.
func (o *outbound) turn(out *bus.Outbound) *turn {
	o.mu.Lock()
	defer o.mu.Unlock()
	key := turnKey(out)
	t := o.turns[key]
	if t == nil {
		if len(o.turns) >= maxTurns {
			cutoff := o.a.now().Add(-turnIdle)
			for k, old := range o.turns {
				if old.touched.Before(cutoff) {
					delete(o.turns, k)
				}
			}
		}
		t = &turn{channel: out.ChatID, thread: replyThread(out), statusTS: cmp.Or(replyThread(out), out.Meta["ts"])}
		o.turns[key] = t
	}
	t.touched = o.a.now()
	return t
}

// end forgets a finished turn.
func (o *outbound) end(out *bus.Outbound) {
	key := turnKey(out)
	o.mu.Lock()
	delete(o.turns, key)
	o.mu.Unlock()
	o.done.put(key, true)
}

// handle shows one outbound envelope in Slack. It returns nil when the
// message is shown (or deliberately skipped: a stale or throttled delta;
// a repeated final never gets here, the bridge kit drops it), a [bridge.Permanent] error when Slack refuses the
// message for good, and another error for a failure worth retrying.
func (o *outbound) handle(ctx context.Context, out bus.Outbound) error {
	key := turnKey(&out)
	if _, finished := o.done.get(key); finished && !out.Final {
		return nil // a delta or typing after the final
	}
	t := o.turn(&out)
	if !out.Final && out.Seq <= t.lastSeq {
		return nil // older than what was shown
	}
	var err error
	switch out.Kind {
	case bus.KindTyping:
		err = o.typing(ctx, t)
	case bus.KindDelta:
		err = o.delta(ctx, t, &out)
	case bus.KindReply, bus.KindNotice, bus.KindError:
		err = o.complete(ctx, t, &out)
	default:
		if out.Final {
			err = o.complete(ctx, t, &bus.Outbound{Kind: bus.KindReply})
		}
	}
	if err != nil {
		return fmt.Errorf("slack: %s %s to %s: %w", out.Kind, out.ID, out.ChatID, classify(err))
	}
	t.lastSeq = max(t.lastSeq, out.Seq)
	if out.Final {
		o.end(&out) // the kit remembers its id (a re-published final is not shown again)
	}
	return nil
}

// typing shows that the agent works: an assistant thread status where
// Slack supports it, else a placeholder message that the reply replaces.
func (o *outbound) typing(ctx context.Context, t *turn) error {
	a := o.a
	if len(t.msgs) > 0 {
		return nil // a message (placeholder or text) is already there
	}
	now := a.now()
	if t.status && now.Sub(t.statusAt) < statusRefresh {
		return nil
	}
	if a.statusOK.Load() && t.statusTS != "" {
		err := a.api.SetAssistantThreadsStatusContext(ctx, slackapi.AssistantThreadsSetStatusParameters{
			ChannelID: t.channel, ThreadTS: t.statusTS, Status: statusText,
		})
		if err == nil {
			t.status, t.statusAt = true, now
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if _, ok := errors.AsType[*slackapi.RateLimitedError](err); ok {
			return nil // a status is not worth waiting for
		}
		if !unavailable(err) {
			a.log.Debug("assistant.threads.setStatus failed", "err", err)
			return nil
		}
		a.statusOK.Store(false)
		a.log.Info("assistant.threads.setStatus is not available to this app; showing a placeholder message instead", "err", err)
	}
	ts, err := a.post(ctx, t.channel, t.thread, placeholderText)
	if err != nil {
		return err
	}
	t.msgs = []shownMsg{{ts: ts, text: placeholderText}}
	t.placeholder = true
	return nil
}

// unavailable reports whether a setStatus error means the method cannot
// be used by this app (rather than a passing failure).
func unavailable(err error) bool {
	if _, ok := errors.AsType[slackapi.SlackErrorResponse](err); ok {
		return true
	}
	if sc, ok := errors.AsType[slackapi.StatusCodeError](err); ok {
		return sc.Code < 500
	}
	return false
}

// delta shows the text streamed so far: the first one is posted at once
// (or replaces the placeholder), later ones edit the message at most once
// per editInterval. A delta that comes too soon, finds the channel's post
// limiter empty or is rate limited is skipped: the next one, or the
// final, carries the whole text.
func (o *outbound) delta(ctx context.Context, t *turn, out *bus.Outbound) error {
	a := o.a
	now := a.now()
	if strings.TrimSpace(out.Text) == "" || now.Before(t.blocked) {
		return nil
	}
	if len(t.msgs) > 0 && !t.placeholder && now.Sub(t.lastEdit) < editInterval {
		return nil
	}
	err := o.show(ctx, t, renderPieces(out.Kind, out.Text), false)
	if errors.Is(err, errThrottled) {
		return nil
	}
	if rl, ok := errors.AsType[*slackapi.RateLimitedError](err); ok {
		t.blocked = now.Add(rl.RetryAfter)
		return nil
	}
	return err
}

// complete shows a whole message (reply, notice or error): it replaces
// what the turn streamed, posts what does not fit in the messages already
// there, removes the placeholder of a turn that ends without text, and
// uploads the attachments.
func (o *outbound) complete(ctx context.Context, t *turn, out *bus.Outbound) error {
	a := o.a
	text := out.Text
	for _, att := range out.Attachments {
		if att.URL != "" && att.Data == "" {
			text = strings.TrimSpace(text + "\n\n[" + cmp.Or(att.Name, att.URL) + "](" + att.URL + ")")
		}
	}
	pieces := renderPieces(out.Kind, text)
	if err := o.show(ctx, t, pieces, true); err != nil {
		return err
	}
	if len(pieces) == 0 && t.status && len(t.msgs) == 0 {
		// Nothing posted clears the status; clear it ourselves.
		err := a.api.SetAssistantThreadsStatusContext(ctx, slackapi.AssistantThreadsSetStatusParameters{ChannelID: t.channel, ThreadTS: t.statusTS})
		if err != nil && ctx.Err() == nil {
			a.log.Debug("clearing the assistant status failed", "err", err)
		}
		t.status = false
	}
	if err := o.upload(ctx, t, out); err != nil {
		return err
	}
	if !out.Final {
		// A complete message within a turn: later deltas start a new one.
		t.msgs, t.placeholder, t.lastEdit = nil, false, time.Time{}
	}
	return nil
}

// show makes the turn's messages display pieces: it edits the messages
// already posted where their text differs, posts the rest, and for a
// complete message (final) deletes messages beyond the pieces. Streaming
// (final false) never waits for the post limiter: it returns errThrottled
// or the *RateLimitedError instead. show is idempotent: after a failure,
// calling it again with the same pieces finishes the job.
func (o *outbound) show(ctx context.Context, t *turn, pieces []string, final bool) error {
	a := o.a
	for i, p := range pieces {
		if i < len(t.msgs) {
			if t.msgs[i].text == p {
				continue
			}
			err := a.update(ctx, t.channel, t.msgs[i].ts, p, final)
			if err == nil {
				t.msgs[i].text = p
				continue
			}
			if se, ok := errors.AsType[slackapi.SlackErrorResponse](err); !ok || !oneOf(se.Err, editFallbackErrors) {
				return err
			}
			ts, err := a.postWait(ctx, t.channel, t.thread, p, final)
			if err != nil {
				return err
			}
			t.msgs[i] = shownMsg{ts: ts, text: p}
			continue
		}
		ts, err := a.postWait(ctx, t.channel, t.thread, p, final)
		if err != nil {
			return err
		}
		t.msgs = append(t.msgs, shownMsg{ts: ts, text: p})
	}
	if len(pieces) > 0 {
		t.placeholder = false
		t.lastEdit = a.now()
	}
	if final {
		for len(t.msgs) > len(pieces) {
			last := t.msgs[len(t.msgs)-1]
			err := a.call(ctx, t.channel, true, func() error {
				_, _, err := a.api.DeleteMessageContext(ctx, t.channel, last.ts)
				return err
			})
			if se, ok := errors.AsType[slackapi.SlackErrorResponse](err); ok && se.Err == "message_not_found" {
				err = nil
			}
			if err != nil {
				return err
			}
			t.msgs = t.msgs[:len(t.msgs)-1]
		}
		if len(t.msgs) == 0 {
			t.placeholder = false
		}
	}
	return nil
}

// upload shares the outbound message's inline attachments in its thread,
// each once even when the message is retried.
func (o *outbound) upload(ctx context.Context, t *turn, out *bus.Outbound) error {
	a := o.a
	for i, att := range out.Attachments {
		if att.Data == "" {
			continue
		}
		key := fmt.Sprintf("%s/%d", out.ID, i)
		if t.uploaded[key] {
			continue
		}
		data, err := base64.StdEncoding.DecodeString(att.Data)
		if err != nil || len(data) == 0 {
			a.log.Warn("outbound attachment is not valid base64 data; skipped", "id", out.ID, "name", att.Name)
			continue
		}
		name := cmp.Or(att.Name, "file")
		err = a.call(ctx, t.channel, true, func() error {
			_, err := a.api.UploadFileContext(ctx, slackapi.UploadFileParameters{
				Reader: bytes.NewReader(data), FileSize: len(data), Filename: name, Title: name,
				Channel: t.channel, ThreadTimestamp: t.thread,
			})
			return err
		})
		if err != nil {
			return fmt.Errorf("upload %s: %w", name, err)
		}
		if t.uploaded == nil {
			t.uploaded = make(map[string]bool)
		}
		t.uploaded[key] = true
	}
	return nil
}

// post posts text as a new message (in thread when set), waiting for the
// channel's post limiter and out Slack's rate limits.
func (a *Adapter) post(ctx context.Context, channel, thread, text string) (string, error) {
	return a.postWait(ctx, channel, thread, text, true)
}

// postWait posts text; without wait it skips (errThrottled, or the
// *RateLimitedError) instead of waiting.
func (a *Adapter) postWait(ctx context.Context, channel, thread, text string, wait bool) (string, error) {
	opts := []slackapi.MsgOption{slackapi.MsgOptionText(text, false)}
	if thread != "" {
		opts = append(opts, slackapi.MsgOptionTS(thread))
	}
	var ts string
	err := a.call(ctx, channel, wait, func() error {
		var err error
		_, ts, err = a.api.PostMessageContext(ctx, channel, opts...)
		return err
	})
	if err != nil {
		return "", err
	}
	if thread != "" && !strings.HasPrefix(channel, "D") {
		a.rememberThread(channel, thread)
	}
	return ts, nil
}

// update edits a posted message.
func (a *Adapter) update(ctx context.Context, channel, ts, text string, wait bool) error {
	return a.call(ctx, channel, wait, func() error {
		_, _, _, err := a.api.UpdateMessageContext(ctx, channel, ts, slackapi.MsgOptionText(text, false))
		return err
	})
}

// call runs one Web API call that posts to a Slack channel, under the
// channel's limiter (about one message a second). With wait it waits for
// the limiter and waits out up to maxRateLimitWaits 429 answers
// (Retry-After); without, it returns errThrottled when the limiter is
// empty and a 429 as its *RateLimitedError.
func (a *Adapter) call(ctx context.Context, channel string, wait bool, fn func() error) error {
	lim := a.limiter(channel)
	mx := a.metrics()
	waitOut := func(err error) bool {
		_, ok := errors.AsType[*slackapi.RateLimitedError](err)
		return ok && wait
	}
	err := retry.Do(ctx, retry.Policy{
		Attempts:  maxRateLimitWaits + 1,
		Retryable: waitOut,
		Delay: func(_ int, err error, _ time.Duration) time.Duration {
			rl, _ := errors.AsType[*slackapi.RateLimitedError](err)
			return rl.RetryAfter
		},
		OnRetry: func(_ int, d time.Duration, _ error) {
			mx.PlatformSend(ChannelName, "retry")
			mx.RateLimitWait(ChannelName)
			a.log.Warn("Slack rate limit; waiting", "channel_id", channel, "retry_after", d)
		},
		Sleep: a.sleep,
	}, func(ctx context.Context, attempt int) error {
		if !wait {
			if !lim.Allow() {
				return errThrottled
			}
		} else if err := lim.Wait(ctx); err != nil {
			return err
		}
		err := fn()
		switch {
		case waitOut(err) && attempt <= maxRateLimitWaits:
			// waited out and tried again (counted as "retry")
		case err != nil:
			mx.PlatformSend(ChannelName, "failed")
		default:
			mx.PlatformSend(ChannelName, "ok")
		}
		return err
	})
	if waitOut(err) && ctx.Err() != nil {
		return ctx.Err() // cut short while waiting out a 429
	}
	return err
}

// metrics returns the configured measurements sink, or a discarding one.
func (a *Adapter) metrics() channels.Metrics {
	if a.opts.Metrics == nil {
		return channels.NopMetrics{}
	}
	return a.opts.Metrics
}

// classify marks errors that retrying cannot fix as permanent for the
// bridge kit.
func classify(err error) error {
	if se, ok := errors.AsType[slackapi.SlackErrorResponse](err); ok && oneOf(se.Err, permanentErrors) {
		return bridge.Permanent(err)
	}
	return err
}

func oneOf(s string, set []string) bool {
	for _, v := range set {
		if s == v {
			return true
		}
	}
	return false
}

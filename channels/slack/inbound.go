package slack

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	slackapi "github.com/slack-go/slack"

	"github.com/switchboard-chat/switchboard/bus"
	"github.com/switchboard-chat/switchboard/internal/retry"
)

// Inbound context limits.
const (
	// threadContextMessages and threadContextBytes bound the earlier
	// thread messages included when the bot is first addressed inside an
	// existing thread.
	threadContextMessages = 20
	threadContextBytes    = 4000
	// userNameTTL is how long a looked-up display name is reused.
	userNameTTL = time.Hour
	// maxFilesPerMessage bounds the files fetched for one message.
	maxFilesPerMessage = 10
)

// errQueueFull is reported when the inbound queue cannot take an event.
var errQueueFull = errors.New("slack: inbound queue is full")

// envelope is the outer Events API payload (also the Socket Mode
// payload).
type envelope struct {
	Type      string          `json:"type"`
	Challenge string          `json:"challenge"`
	TeamID    string          `json:"team_id"`
	EventID   string          `json:"event_id"`
	Event     json.RawMessage `json:"event"`
}

// event is the inner event of a message or app_mention callback, with
// the fields the adapter uses.
type event struct {
	Type        string    `json:"type"`
	SubType     string    `json:"subtype"`
	User        string    `json:"user"`
	BotID       string    `json:"bot_id"`
	Text        string    `json:"text"`
	TS          string    `json:"ts"`
	ThreadTS    string    `json:"thread_ts"`
	Channel     string    `json:"channel"`
	ChannelType string    `json:"channel_type"`
	Team        string    `json:"team"`
	Files       []fileRef `json:"files"`
}

// humanSubtypes are the message subtypes that are still a person's new
// message: sharing a file, and a thread reply also sent to the channel.
var humanSubtypes = []string{"file_share", "thread_broadcast"}

// receive takes one Events API payload, already acknowledged to Slack (or
// about to be, for HTTP), and queues its processing. Retries of an event
// already seen (same event_id) are dropped here. When done is not nil it
// receives exactly one value (it must have room for it): the result of
// processing, nil also when the event is ignored.
func (a *Adapter) receive(ctx context.Context, payload json.RawMessage, retry int, done chan<- error) {
	finish := func(err error) {
		if done != nil {
			done <- err
		}
	}
	var env envelope
	if err := json.Unmarshal(payload, &env); err != nil {
		a.log.Warn("ignoring an unreadable event payload", "err", err)
		finish(nil)
		return
	}
	if env.Type != "event_callback" {
		if env.Type == "app_rate_limited" {
			a.log.Warn("Slack is rate limiting the events sent to this app (more than 30,000 an hour)")
		}
		finish(nil)
		return
	}
	if env.EventID != "" && !a.events.add(env.EventID, true) {
		a.log.Debug("duplicate event ignored", "event_id", env.EventID, "retry", retry)
		finish(nil)
		return
	}
	var ev event
	if err := json.Unmarshal(env.Event, &ev); err != nil || ev.Channel == "" {
		finish(nil)
		return
	}
	ok := a.inbound.submit(ctx, ev.Channel, func(ctx context.Context) {
		err := a.process(ctx, &env, &ev)
		if err != nil {
			a.log.Error("inbound message not published", "event_id", env.EventID, "channel_id", ev.Channel, "ts", ev.TS, "err", err)
			if env.EventID != "" {
				a.events.remove(env.EventID) // let a retry through
			}
		}
		finish(err)
	})
	if !ok {
		if env.EventID != "" {
			a.events.remove(env.EventID)
		}
		finish(errQueueFull)
	}
}

// process decides whether the bot answers ev and publishes it. It returns
// an error only when a message to answer could not be published.
func (a *Adapter) process(ctx context.Context, env *envelope, ev *event) error {
	if ev.Type != "message" && ev.Type != "app_mention" {
		return nil
	}
	// No loops: bots (this one included), edits, joins, deletions, and the
	// message_changed events the bot's own streaming edits cause.
	if ev.BotID != "" || ev.User == "" || ev.User == a.self.UserID || ev.TS == "" {
		return nil
	}
	if ev.SubType != "" && !slices.Contains(humanSubtypes, ev.SubType) {
		return nil
	}
	msgKey := ev.Channel + ":" + ev.TS
	if _, ok := a.published.get(msgKey); ok {
		a.log.Debug("message already published", "channel_id", ev.Channel, "ts", ev.TS, "event", ev.Type)
		return nil
	}
	dm := ev.ChannelType == "im" || (ev.ChannelType == "" && strings.HasPrefix(ev.Channel, "D"))
	mentioned := ev.Type == "app_mention" || mentions(ev.Text, a.self.UserID)
	var sessionThread, replyThread string
	knownThread := false
	if dm {
		replyThread = ev.ThreadTS
	} else {
		if len(a.cfg.AllowChannels) > 0 && !slices.Contains(a.cfg.AllowChannels, ev.Channel) {
			return nil
		}
		sessionThread = cmp.Or(ev.ThreadTS, ev.TS)
		replyThread = sessionThread
		knownThread = ev.ThreadTS != "" && a.store.has(bucketThreads, threadKey(ev.Channel, ev.ThreadTS))
		switch a.cfg.GroupTrigger {
		case TriggerAll:
		case TriggerMention:
			if !mentioned {
				return nil
			}
		default:
			if !mentioned && !knownThread {
				return nil
			}
		}
	}
	if !a.allowed(ev.User) && !a.admit(ctx, ev, replyThread, dm) {
		return nil
	}

	team := cmp.Or(env.TeamID, ev.Team, a.self.TeamID)
	text := a.plainText(ctx, ev.Text)
	if !dm && ev.ThreadTS != "" && ev.ThreadTS != ev.TS && !knownThread {
		if earlier := a.threadContext(ctx, ev); earlier != "" {
			text = earlier + "\n\n" + text
		}
	}
	atts, notes := a.fetchFiles(ctx, ev)
	if len(notes) > 0 {
		text = strings.TrimSpace(text + "\n\n" + strings.Join(notes, "\n"))
	}
	if text == "" && len(atts) == 0 {
		text = "(empty message)"
	}
	in := bus.Inbound{
		V:           bus.Version,
		ID:          team + ":" + ev.Channel + ":" + ev.TS,
		Channel:     ChannelName,
		ChatID:      ev.Channel,
		ThreadID:    sessionThread,
		UserID:      ev.User,
		UserName:    a.userName(ctx, ev.User),
		Text:        truncate(text, a.opts.MaxTextBytes),
		Attachments: atts,
		IsGroup:     !dm,
		Mentioned:   !dm && (mentioned || knownThread),
		Meta:        map[string]string{"team": team, "ts": ev.TS},
	}
	if replyThread != "" {
		in.Meta["thread_ts"] = replyThread
	}
	if ev.ThreadTS != "" && ev.ThreadTS != ev.TS {
		in.ReplyTo = team + ":" + ev.Channel + ":" + ev.ThreadTS
	}
	if t, ok := parseTS(ev.TS); ok {
		in.TS = t.UTC().Format(time.RFC3339Nano)
	}
	if err := a.publish(ctx, in); err != nil {
		return err
	}
	a.published.put(msgKey, true)
	if !dm {
		a.rememberThread(ev.Channel, sessionThread)
	}
	return nil
}

// publish publishes in, retrying transient bus failures with backoff for
// up to publishTimeout. An envelope the bus would reject is logged and
// dropped.
func (a *Adapter) publish(ctx context.Context, in bus.Inbound) error {
	ctx, cancel := context.WithTimeout(ctx, publishTimeout)
	defer cancel()
	rejected := func(err error) bool { return errors.Is(err, bus.ErrInvalid) || errors.Is(err, bus.ErrTooLarge) }
	var last error
	err := retry.Do(ctx, retry.Policy{
		Schedule:  a.backoff,
		Retryable: func(err error) bool { return !rejected(err) },
		OnRetry: func(_ int, wait time.Duration, err error) {
			a.setStatus(fmt.Errorf("slack: publishing to the bus: %w (retrying in %s)", err, wait))
			a.log.Warn("publish inbound failed; retrying", "id", in.ID, "err", err, "retry_in", wait)
		},
		Sleep: a.sleep,
	}, func(ctx context.Context, attempt int) error {
		// An attempt in flight finishes even when the adapter stops, so
		// that a message the stream stored is known to be published.
		actx, acancel := context.WithTimeout(context.WithoutCancel(ctx), publishAttemptTimeout)
		defer acancel()
		last = a.bridge.PublishInbound(actx, in)
		if last == nil && attempt > 1 {
			a.setStatus(nil)
		}
		return last
	})
	switch {
	case err == nil:
		a.log.Debug("published inbound message", "id", in.ID, "thread_id", in.ThreadID, "user_id", in.UserID)
		return nil
	case rejected(err):
		a.log.Error("dropping a message the bus would reject", "id", in.ID, "err", err)
		return nil
	}
	return last // the publish error, also when the wait was cut short
}

// rememberThread records that the bot answers in a thread, so that
// replies in it trigger the bot under mention_or_thread.
func (a *Adapter) rememberThread(channel, threadTS string) {
	if threadTS == "" || a.store.has(bucketThreads, threadKey(channel, threadTS)) {
		return
	}
	if _, err := a.store.add(bucketThreads, threadKey(channel, threadTS)); err != nil {
		a.log.Warn("could not remember a thread", "channel_id", channel, "thread_ts", threadTS, "err", err)
	}
}

// allowed reports whether channels.slack.allow_users lets user in: the
// list in force at the gate, which a configuration reload changes, or the
// one the adapter started with.
func (a *Adapter) allowed(user string) bool {
	list := []string(a.cfg.AllowUsers)
	if a.opts.Gate != nil {
		if l, ok := a.opts.Gate.AllowUsers(ChannelName); ok {
			list = l
		}
	}
	for _, u := range list {
		if u == "*" || u == user {
			return true
		}
	}
	return false
}

// admit decides for a user not on allow_users: the gate (access.dm_policy
// and the approved pairings) lets them in, or answers privately with a
// pairing code, or stays silent, or leaves the refusal to deny. Nothing of
// a refused message is published.
func (a *Adapter) admit(ctx context.Context, ev *event, thread string, dm bool) bool {
	if a.opts.Gate != nil {
		d := a.opts.Gate.Check(ChannelName, ev.User, a.userName(ctx, ev.User), dm)
		switch {
		case d.Admit:
			return true
		case d.Pairing:
			if d.Reply != "" {
				if err := a.ephemeral(ctx, ev, thread, d.Reply); err != nil {
					a.log.Warn("could not send a pairing code", "user_id", ev.User, "channel_id", ev.Channel, "err", err)
				}
			}
			return false
		}
	}
	a.deny(ctx, ev, thread)
	return false
}

// ephemeral posts text that only ev's user sees, in thread when set.
func (a *Adapter) ephemeral(ctx context.Context, ev *event, thread, text string) error {
	opts := []slackapi.MsgOption{slackapi.MsgOptionText(text, false)}
	if thread != "" {
		opts = append(opts, slackapi.MsgOptionTS(thread))
	}
	return a.call(ctx, ev.Channel, true, func() error {
		_, err := a.api.PostEphemeralContext(ctx, ev.Channel, ev.User, opts...)
		return err
	})
}

// deny tells a user who is not allowed, once, why the bot stays silent:
// an ephemeral message naming their id and the configuration key.
func (a *Adapter) deny(ctx context.Context, ev *event, thread string) {
	a.log.Info("message from a user not in channels.slack.allow_users ignored", "user_id", ev.User, "channel_id", ev.Channel)
	if a.store.has(bucketDenied, ev.User) {
		return
	}
	if _, told := a.denied.LoadOrStore(ev.User, struct{}{}); told {
		return // told, or being told by another channel's worker
	}
	text := fmt.Sprintf("Sorry, I am not allowed to answer you. To let me, the operator of this Switchboard adds your Slack user id `%s` to `channels.slack.allow_users` in its configuration.", ev.User)
	if err := a.ephemeral(ctx, ev, thread, text); err != nil {
		a.denied.Delete(ev.User) // try again with their next message
		a.log.Warn("could not tell a user they are not allowed", "user_id", ev.User, "channel_id", ev.Channel, "err", err)
		return
	}
	if _, err := a.store.add(bucketDenied, ev.User); err != nil {
		a.log.Warn("could not remember a denied user", "user_id", ev.User, "err", err)
	}
}

// userRec is a cached display name.
type userRec struct {
	name string
	at   time.Time
}

// userName returns a user's display name (users.info, cached), or "" when
// it cannot be looked up.
func (a *Adapter) userName(ctx context.Context, id string) string {
	rec, ok := a.users.get(id)
	if ok && a.now().Sub(rec.at) < userNameTTL {
		return rec.name
	}
	u, err := a.api.GetUserInfoContext(ctx, id)
	if err != nil {
		a.log.Debug("users.info failed", "user_id", id, "err", err)
		return rec.name // the stale name, or ""
	}
	name := cmp.Or(u.Profile.DisplayName, u.RealName, u.Profile.RealName, u.Name)
	a.users.put(id, userRec{name: name, at: a.now()})
	return name
}

// threadContext returns the earlier messages of the thread ev replies in,
// as "[name]: text" lines under a heading, for a bot addressed in a
// thread it has not been part of; "" when there are none or they cannot
// be read.
func (a *Adapter) threadContext(ctx context.Context, ev *event) string {
	msgs, _, _, err := a.api.GetConversationRepliesContext(ctx, &slackapi.GetConversationRepliesParameters{
		ChannelID: ev.Channel, Timestamp: ev.ThreadTS, Limit: 100,
	})
	if err != nil {
		a.log.Debug("conversations.replies failed", "channel_id", ev.Channel, "thread_ts", ev.ThreadTS, "err", err)
		return ""
	}
	cur, _ := parseTS(ev.TS)
	var lines []string
	for _, m := range msgs {
		if t, ok := parseTS(m.Timestamp); !ok || !t.Before(cur) {
			continue
		}
		if m.SubType != "" && !slices.Contains(humanSubtypes, m.SubType) && m.SubType != "bot_message" {
			continue
		}
		name := ""
		switch {
		case m.User == a.self.UserID:
			name = "you"
		case m.BotID != "" || m.User == "":
			name = cmp.Or(m.Username, "a bot")
		default:
			name = cmp.Or(a.userName(ctx, m.User), m.User)
		}
		text := a.plainText(ctx, m.Text)
		if text == "" {
			continue
		}
		lines = append(lines, "["+name+"]: "+text)
	}
	if len(lines) > threadContextMessages {
		lines = lines[len(lines)-threadContextMessages:]
	}
	size := 0
	for i := len(lines) - 1; i >= 0; i-- {
		size += len(lines[i]) + 1
		if size > threadContextBytes {
			lines = lines[i+1:]
			break
		}
	}
	if len(lines) == 0 {
		return ""
	}
	return "(Earlier messages in this thread:)\n" + strings.Join(lines, "\n") + "\n(End of earlier messages.)"
}

// plainText turns Slack message text into plain text, resolving user
// mentions to names and dropping the bot's own mention.
func (a *Adapter) plainText(ctx context.Context, s string) string {
	return slackToText(s, a.self.UserID, func(id string) string { return a.userName(ctx, id) })
}

// mentions reports whether Slack text mentions the user id.
func mentions(text, user string) bool {
	return user != "" && (strings.Contains(text, "<@"+user+">") || strings.Contains(text, "<@"+user+"|"))
}

// parseTS converts a Slack ts ("1700000000.000100") to a time.
func parseTS(ts string) (time.Time, bool) {
	sec, frac, _ := strings.Cut(ts, ".")
	s, err := strconv.ParseInt(sec, 10, 64)
	if err != nil || s < 0 {
		return time.Time{}, false
	}
	var us int64
	if frac != "" {
		frac = (frac + "000000")[:6]
		if us, err = strconv.ParseInt(frac, 10, 64); err != nil {
			return time.Time{}, false
		}
	}
	return time.Unix(s, us*1000), true
}

// truncate cuts s to at most n bytes on a character boundary, marking the
// cut.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	mark := "\n[…message cut: too long]"
	if n < 2*len(mark) {
		mark = ""
	}
	cut := n - len(mark)
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + mark
}

// Package slack is Switchboard's Slack channel adapter: it turns Slack
// events into inbound envelopes on "<p>.in.slack.<channel id>" and renders
// the outbound envelopes of "<p>.out.slack.>" back into Slack messages,
// through the bridge kit ([github.com/switchboard-chat/switchboard/bus/bridge]) like any bridge.
//
// Events arrive over Socket Mode (the default: a websocket the adapter
// opens with the app-level token) or over the Events API (an HTTP server
// on channels.slack.http_listen, POST /slack/events, with every request's
// v0 signature checked). Every envelope is acknowledged at once; events
// are then processed in order per Slack channel.
//
// What the bot answers:
//
//   - direct messages (one session per DM);
//   - in channels, per channels.slack.group_trigger: mentions, replies in
//     a thread the bot already answered in, or everything. Each thread is
//     a session (thread_id = the thread's ts; a top-level message starts
//     a thread of its own) and every reply goes to its thread;
//   - only users in channels.slack.allow_users (read from the Gate at each
//     message, so that a configuration reload changes it; a denied user
//     gets one ephemeral note naming their id and the key), only in
//     channels.slack.allow_channels when set.
//
// Messages from bots, from the bot itself and with a subtype (edits,
// joins, the message_changed events its own updates cause) are ignored,
// except the subtypes of human messages (file_share, thread_broadcast).
// Retries and the double delivery of a mention that is also a channel
// message are de-duplicated: the inbound id is "<team>:<channel>:<ts>", so
// the bus drops the copy (Nats-Msg-Id "slack:<team>:<channel>:<ts>"), and
// an in-memory record of recent event ids and messages spares the work.
//
// Replies are rendered as mrkdwn and split at about 3,500 characters.
// Streaming posts on the first delta and edits the message at most once a
// second; a status ("is thinking…" via assistant.threads.setStatus, or a
// placeholder message where that is unavailable) shows while the agent
// works. Posting is rate limited per channel, Slack's 429s are waited out.
//
// [Check] asks the Web API whether the configured bot token is accepted,
// for `switchboard check`.
package slack

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	slackapi "github.com/slack-go/slack"
	"golang.org/x/sync/errgroup"
	"golang.org/x/time/rate"

	"github.com/switchboard-chat/switchboard/access"
	"github.com/switchboard-chat/switchboard/bus"
	"github.com/switchboard-chat/switchboard/bus/bridge"
	"github.com/switchboard-chat/switchboard/bus/bridge/boltseen"
	"github.com/switchboard-chat/switchboard/channels"
	"github.com/switchboard-chat/switchboard/internal/httpserve"
	"github.com/switchboard-chat/switchboard/internal/retry"
)

// ChannelName is the adapter's channel name, the <channel> token of its
// subjects.
const ChannelName = "slack"

// Limits and pacing.
const (
	// pieceLimit is the largest rendered message, in characters, before a
	// reply is split over several messages.
	pieceLimit = 3500
	// editInterval is the least time between two edits of a streamed
	// message.
	editInterval = time.Second
	// postRate and postBurst pace the messages posted to one Slack
	// channel (Slack allows about one a second, with short bursts).
	postRate  = rate.Limit(1)
	postBurst = 3
	// maxRateLimitWaits bounds how often one call waits out a 429 before
	// the error goes back to the bridge kit (which retries with backoff).
	maxRateLimitWaits = 5
	// maxImageBytes bounds the images sent inline to the model, together
	// per message: inline data travels in the NATS payload (1 MiB by
	// default). Larger images are saved to the inbox like other files.
	maxImageBytes = 512 << 10
	// maxFileBytes bounds a file saved to the workspace inbox.
	maxFileBytes = 25 << 20
	// httpBodyLimit bounds an Events API request body.
	httpBodyLimit = 1 << 20
	// httpBudget is how long an Events API request waits for its event to
	// be published before answering 200 anyway (Slack allows 3 s).
	httpBudget = 2500 * time.Millisecond
	// signatureMaxAge is the oldest Events API request timestamp accepted.
	signatureMaxAge = 5 * time.Minute
	// inboundWorkers and inboundQueue bound the inbound processing.
	inboundWorkers = 16
	inboundQueue   = 10000
	// publishTimeout bounds the retries of publishing one inbound
	// message, publishAttemptTimeout one attempt.
	publishTimeout        = 5 * time.Minute
	publishAttemptTimeout = 10 * time.Second
)

// Options holds what the adapter needs besides its Config.
type Options struct {
	// Conn is the NATS connection the adapter publishes and consumes on;
	// the caller owns it and keeps it open while Run runs. Required.
	Conn *nats.Conn
	// SubjectPrefix is bus.subject_prefix (default "chat").
	SubjectPrefix string
	// MaxTextBytes is bus.max_text_bytes (default 65536); longer texts
	// are cut.
	MaxTextBytes int
	// Inbox is the workspace root: files users share with the bot (other
	// than images sent to the model) are saved under inbox/slack/<chat>/
	// in it (workspace.InboxFolder). Nil
	// means files are not saved (the message says so).
	Inbox *os.Root
	// StorePath is the bbolt file remembering answered threads, denied
	// users and shown replies across restarts (data_dir/slack.db). Empty
	// keeps them in memory only.
	StorePath string
	// State, when not nil, keeps the answered threads and denied users
	// instead of StorePath (memory.store jetstream: shared by the
	// instances that may take the channel over; the shown replies stay in
	// StorePath unless Seen is set).
	State State
	// Seen, when not nil, remembers the replies shown instead of
	// StorePath (memory.store jetstream: an instance taking the channel
	// over does not post a reply another instance already posted).
	Seen bridge.SeenStore
	// OutRetention is the daemon's bus.out_retention (0: 24 h): shown
	// outbound ids are remembered for twice it, so a final the daemon
	// re-publishes after a crash is not posted again.
	OutRetention time.Duration
	// Log receives the adapter's log lines; nil discards them.
	Log *slog.Logger
	// Status receives health changes (see [channels.StatusFunc]); nil
	// means nobody listens.
	Status channels.StatusFunc
	// Metrics counts sends and rate-limit waits; nil discards.
	Metrics channels.Metrics
	// Gate decides for users not on allow_users (access.dm_policy,
	// approved pairings); nil refuses them as allow_users alone does.
	Gate Gate
	// HTTP bounds the http mode's listener and server and counts its
	// connections as "slack" (the daemon's, httpserve; nil: its defaults).
	HTTP *httpserve.Servers
}

// Gate is the access check for a user not on allow_users (package
// access's Store): direct reports a direct message. Safe for concurrent
// use.
type Gate interface {
	Check(channel, user, name string, direct bool) access.Decision
	// AllowUsers is the channel's allow_users list in force (a reload
	// changes it); ok false: the adapter keeps Config.AllowUsers.
	AllowUsers(channel string) (list []string, ok bool)
}

// Adapter connects one Slack app to the bus. Build it with [New]; it
// implements [channels.Channel]. Name is safe for concurrent use; Run is
// called once.
type Adapter struct {
	cfg  Config
	opts Options
	log  *slog.Logger
	api  *slackapi.Client

	// Set by Run before any event or outbound message is handled.
	self     identity
	bridge   *bridge.Client
	store    *store
	inbound  *serial
	running  atomic.Bool
	statusOK atomic.Bool // assistant.threads.setStatus has not failed

	events    *lru[bool]    // event ids being or already handled
	published *lru[bool]    // "<channel>:<ts>" already published
	users     *lru[userRec] // user id → display name
	denied    sync.Map      // user id → struct{}: ephemeral sent this run
	out       *outbound     // streaming state of outbound turns

	limMu    sync.Mutex
	limiters map[string]*rate.Limiter // per Slack channel

	// Hooks, replaced by tests.
	now          func() time.Time
	sleep        func(ctx context.Context, d time.Duration) error
	rate         rate.Limit
	burst        int
	backoff      retry.Schedule      // auth.test and inbound publish retries
	kitBackoff   bridge.Backoff      // outbound handler retries (nil: the kit's)
	pingInterval time.Duration       // socket mode; 0 keeps slack-go's
	onListen     func(addr net.Addr) // http mode: the server is listening
}

// identity is the bot as auth.test describes it.
type identity struct {
	UserID string // the bot's user (U...)
	BotID  string // the bot (B...)
	TeamID string
}

// New validates cfg and opts and returns an adapter. It does no I/O. A
// configuration that is not [Config.Enabled] is an error.
func New(cfg Config, opts Options) (*Adapter, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if !cfg.Enabled() {
		return nil, errors.New("slack: new: channels.slack.bot_token: required (no token is set, so the channel is off)")
	}
	if opts.Conn == nil {
		return nil, errors.New("slack: new: Options.Conn is nil")
	}
	if opts.Log == nil {
		opts.Log = slog.New(slog.DiscardHandler)
	}
	if opts.MaxTextBytes == 0 {
		opts.MaxTextBytes = bus.DefaultMaxTextBytes
	}
	cfg = cfg.withDefaults()
	a := &Adapter{
		cfg:       cfg,
		opts:      opts,
		log:       opts.Log.With("channel", ChannelName),
		events:    newLRU[bool](4096),
		published: newLRU[bool](4096),
		users:     newLRU[userRec](2048),
		limiters:  make(map[string]*rate.Limiter),
		now:       time.Now,
		sleep:     channels.Sleep,
		rate:      postRate,
		burst:     postBurst,
		backoff:   retry.Exponential(time.Second, 30*time.Second),
	}
	a.out = newOutbound(a)
	a.statusOK.Store(true)
	return a, nil
}

// Name returns "slack".
func (a *Adapter) Name() string { return ChannelName }

// Run connects to Slack (auth.test, then Socket Mode or the HTTP server)
// and to the bus, and serves both directions until ctx is cancelled; then
// it stops every goroutine it started and returns nil. It returns an
// error for what waiting cannot fix: a token Slack rejects, an address it
// cannot listen on, a bus without the outbound stream, a store file it
// cannot open. Other failures are retried and reported through
// Options.Status.
func (a *Adapter) Run(ctx context.Context) error {
	if !a.running.CompareAndSwap(false, true) {
		return errors.New("slack: run: already started")
	}
	st, err := openStore(ctx, a.opts.StorePath, a.opts.State, a.now)
	if err != nil {
		return err
	}
	a.store = st
	defer func() {
		if err := st.close(); err != nil {
			a.log.Warn("close store", "err", err)
		}
	}()

	a.api = slackapi.New(a.cfg.BotToken,
		slackapi.OptionAPIURL(a.cfg.APIURL),
		slackapi.OptionAppLevelToken(a.cfg.AppToken),
		slackapi.OptionHTTPClient(&http.Client{Timeout: 30 * time.Second}),
	)
	self, err := a.authTest(ctx)
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		a.setStatus(err)
		return err
	}
	a.self = self
	a.log.Info("slack connected", "mode", a.cfg.Mode, "bot_user", self.UserID, "team", self.TeamID)

	bopts := bridge.Options{
		Channel:       ChannelName,
		SubjectPrefix: a.opts.SubjectPrefix,
		MaxTextBytes:  a.opts.MaxTextBytes,
		Backoff:       a.kitBackoff,
		Log:           a.opts.Log,
		SeenTTL:       seenTTL(a.opts.OutRetention),
		OnDuplicate:   func(bus.Outbound) { a.metrics().OutboundDuplicate(ChannelName) },
	}
	if a.opts.Seen != nil {
		bopts.SeenStore = a.opts.Seen
	} else if st.db != nil {
		seen, err := boltseen.Open(st.db, sentBucket, bopts.SeenTTL, a.now)
		if err != nil {
			return fmt.Errorf("slack: %s: %w", a.opts.StorePath, err)
		}
		bopts.SeenStore = seen
	}
	a.bridge, err = bridge.New(a.opts.Conn, bopts)
	if err != nil {
		return fmt.Errorf("slack: %w", err)
	}
	defer a.bridge.Close()

	a.inbound = newSerial(inboundWorkers, inboundQueue)
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error { return a.bridge.ConsumeOutbound(gctx, a.out.handle) })
	switch a.cfg.Mode {
	case ModeHTTP:
		g.Go(func() error { return a.serveHTTP(gctx) })
	default:
		g.Go(func() error { return a.runSocket(gctx) })
	}
	err = g.Wait()
	a.inbound.wait()
	if err != nil && ctx.Err() == nil {
		a.setStatus(err)
		return err
	}
	return nil
}

// seenTTL is how long a shown outbound id is remembered: twice
// bus.out_retention.
func seenTTL(outRetention time.Duration) time.Duration {
	if outRetention <= 0 {
		return bridge.DefaultSeenTTL
	}
	return 2 * outRetention
}

// authTest identifies the bot, retrying transient failures. A rejected
// token is returned as an error.
func (a *Adapter) authTest(ctx context.Context) (identity, error) {
	var res *slackapi.AuthTestResponse
	err := retry.Do(ctx, retry.Policy{
		Schedule:  a.backoff,
		Retryable: func(err error) bool { return !fatalAuth(err) },
		Delay: func(_ int, err error, scheduled time.Duration) time.Duration {
			if rl, ok := errors.AsType[*slackapi.RateLimitedError](err); ok {
				return max(scheduled, rl.RetryAfter)
			}
			return scheduled
		},
		OnRetry: func(_ int, wait time.Duration, err error) {
			a.setStatus(fmt.Errorf("slack: auth.test: %w (retrying in %s)", err, wait))
			a.log.Warn("auth.test failed; retrying", "err", err, "retry_in", wait)
		},
		Sleep: a.sleep,
	}, func(ctx context.Context, _ int) (err error) {
		res, err = a.api.AuthTestContext(ctx)
		return err
	})
	switch {
	case err == nil:
	case ctx.Err() != nil:
		return identity{}, ctx.Err()
	default: // only a rejected token is not retried
		return identity{}, fmt.Errorf("slack: auth.test: channels.slack.bot_token rejected: %w", err)
	}
	if res.UserID == "" {
		return identity{}, errors.New("slack: auth.test: the token has no bot user (use the bot user OAuth token, xoxb-...)")
	}
	return identity{UserID: res.UserID, BotID: res.BotID, TeamID: res.TeamID}, nil
}

// fatalAuth reports whether err says the token itself is bad.
func fatalAuth(err error) bool {
	if se, ok := errors.AsType[slackapi.SlackErrorResponse](err); ok {
		switch se.Err {
		case "invalid_auth", "not_authed", "account_inactive", "token_revoked", "token_expired", "not_allowed_token_type":
			return true
		}
	}
	return false
}

// setStatus reports health to Options.Status.
func (a *Adapter) setStatus(err error) {
	if a.opts.Status != nil {
		a.opts.Status(err)
	}
}

// limiter returns the post limiter of a Slack channel.
func (a *Adapter) limiter(channel string) *rate.Limiter {
	a.limMu.Lock()
	defer a.limMu.Unlock()
	l := a.limiters[channel]
	if l == nil {
		if len(a.limiters) >= 10000 {
			clear(a.limiters) // bound memory; limits restart fresh
		}
		l = rate.NewLimiter(a.rate, a.burst)
		a.limiters[channel] = l
	}
	return l
}

var _ channels.Channel = (*Adapter)(nil)

// Package telegram is Switchboard's Telegram channel: it turns Telegram
// Bot API updates into inbound envelopes on "<p>.in.telegram.<chat>" and
// renders the outbound envelopes of "<p>.out.telegram.>" back into
// Telegram messages (docs/telegram.md, docs/bus-protocol.md).
//
// It is built on github.com/go-telegram-bot-api/telegram-bot-api/v5 (the
// types, the request encoding and error decoding) and on the bridge kit
// [github.com/switchboard-chat/switchboard/bus/bridge] (publishing and consuming on the bus), with its
// own receive loop:
//
//   - Receiving without loss or duplicates: getUpdates is polled by a loop
//     of its own (never the library's update channel, which confirms updates
//     before they are handled). Each update is published through JetStream
//     with the id "<bot id>:<update_id>", so its Nats-Msg-Id is
//     "telegram:<bot id>:<update_id>", the same on every redelivery, and
//     the offset is stored in bbolt only after the stream acknowledged every
//     update before it. A crash at any point loses nothing; what is
//     published again is dropped by the stream's and the runtime's
//     de-duplication. Webhook mode answers Telegram only after the publish
//     is acknowledged.
//   - Access: deny by default (Config.AllowUsers, read from the Gate at
//     each message so that a configuration reload changes it); a denied
//     user gets one reply with their numeric id, then silence.
//   - Groups: the bot is addressed by a mention entity (UTF-16 offsets), a
//     text mention, a reply to its message, or its commands; the mention is
//     stripped. One session per group, one per forum topic.
//   - Rendering: streamed deltas as plain text edits (at most one edit per
//     second per chat), the final reply as Telegram HTML split at 4096
//     UTF-16 units, with a plain-text fallback; typing kept alive while a
//     turn runs; per-chat, group and global rate limits; 429 waits.
//   - Media: photos become image attachments, documents and other files
//     are saved in the chat's inbox folder inbox/telegram/<chat>/ (private
//     to that chat) and referenced in the text, voice
//     notes are transcribed when a [Transcriber] is given.
//
// [Check] asks the Bot API whether the configured token is accepted, for
// `switchboard check`.
package telegram

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	tgbotapi "github.com/go-telegram-bot-api/telegram-bot-api/v5"
	"github.com/nats-io/nats.go"
	bolt "go.etcd.io/bbolt"
	"golang.org/x/sync/errgroup"

	pairing "github.com/switchboard-chat/switchboard/access"
	"github.com/switchboard-chat/switchboard/bus"
	"github.com/switchboard-chat/switchboard/bus/bridge"
	"github.com/switchboard-chat/switchboard/bus/bridge/boltseen"
	"github.com/switchboard-chat/switchboard/channels"
	"github.com/switchboard-chat/switchboard/internal/httpserve"
	"github.com/switchboard-chat/switchboard/internal/retry"
)

// Name is the channel instance name, the <channel> token of its subjects.
const Name = "telegram"

// Transcriber turns a voice note into text (an OpenAI-compatible
// /audio/transcriptions endpoint, see llm.Transcriber). It must be safe for
// concurrent use and return promptly when ctx ends.
type Transcriber interface {
	Transcribe(ctx context.Context, fileName string, audio []byte) (string, error)
}

// Deps are the adapter's collaborators. Conn and StatePath are required.
type Deps struct {
	// Conn is the daemon's NATS connection; the caller owns it and keeps
	// it open while Run runs.
	Conn *nats.Conn
	// Subjects is the subject scheme (bus.subject_prefix).
	Subjects bus.Subjects
	// MaxTextBytes is bus.max_text_bytes (0: the default).
	MaxTextBytes int
	// StatePath is the bbolt file holding the getUpdates offset and the
	// outbound ids already shown (data_dir/telegram.db); required in
	// polling mode. Empty (webhook mode only) remembers shown ids in memory
	// only.
	StatePath string
	// State, when not nil, keeps the getUpdates offset instead of the
	// state file (memory.store jetstream: shared by the instances that may
	// take the channel over; the outbound ids shown stay in StatePath
	// unless Seen is set).
	State State
	// Seen, when not nil, remembers the outbound ids shown instead of the
	// state file (memory.store jetstream: an instance taking the channel
	// over drops a final another instance already sent).
	Seen bridge.SeenStore
	// OutRetention is the daemon's bus.out_retention (0: 24 h): shown
	// outbound ids are remembered for twice it, so a final the daemon
	// re-publishes after a crash is not sent to Telegram again.
	OutRetention time.Duration
	// Files is the workspace root; documents and voice notes are saved
	// under inbox/telegram/<chat>/ in it. Nil: files are only described in the
	// text, not saved.
	Files *os.Root
	// Transcriber, when not nil, turns voice notes into text.
	Transcriber Transcriber
	// HTTPClient sends the Bot API requests (nil: a client of its own).
	// It must not have a Timeout shorter than the long poll; the adapter
	// bounds every request with a context.
	HTTPClient *http.Client
	// Log receives the adapter's log lines; nil discards them.
	Log *slog.Logger
	// Status receives health changes for the daemon's readiness check.
	Status channels.StatusFunc
	// Metrics counts sends and rate-limit waits; nil discards.
	Metrics channels.Metrics
	// Gate decides for users not on allow_users (access.dm_policy,
	// approved pairings); nil refuses them as allow_users alone does.
	Gate Gate
	// HTTP bounds the webhook's listener and server and counts its
	// connections as "telegram" (the daemon's, httpserve; nil: its
	// defaults).
	HTTP *httpserve.Servers
}

// Gate is the access check for a user not on allow_users (package
// access's Store): direct reports a private chat. Safe for concurrent use.
type Gate interface {
	Check(channel, user, name string, direct bool) pairing.Decision
	// AllowUsers is the channel's allow_users list in force (a reload
	// changes it); ok false: the adapter keeps Config.AllowUsers.
	AllowUsers(channel string) (list []string, ok bool)
}

// Adapter is the Telegram channel. Build it with [New], run it once with
// [Adapter.Run]. Name is safe for concurrent use.
type Adapter struct {
	cfg        Config
	deps       Deps
	log        *slog.Logger
	client     *bridge.Client
	bopts      bridge.Options
	api        *api
	access     access
	lim        *limits
	turns      *turns
	typing     *typer
	denied     *memo
	migrations migrations
	status     statusReporter
	mx         channels.Metrics
	tune       tuning

	// Set by Run before any goroutine starts, read-only afterwards.
	self     tgbotapi.User
	selfName string // "@username", lower-case

	running  atomic.Bool
	webhooks sync.Mutex // webhook updates are handled one at a time, in order
}

// tuning holds the adapter's clocks and bounds; tests shorten them.
type tuning struct {
	now           func() time.Time
	retryBackoff  retry.Schedule // network and 5xx retries
	conflictGrace time.Duration  // 409s tolerated before Run fails
	typingEvery   time.Duration  // typing refresh
	typingMax     time.Duration  // a turn's typing ends after this at the latest
	sendTimeout   time.Duration  // bound on one best-effort send (welcome, denial)
	deniedEvery   time.Duration  // a denied user is told again after this
	webhookReady  func(net.Addr) // called once the webhook listens
	maxImage      int64          // effective image cap (config, bus payload)
}

func defaultTuning() tuning {
	return tuning{
		now:           time.Now,
		retryBackoff:  retry.Exponential(time.Second, time.Minute),
		conflictGrace: 2 * time.Minute,
		typingEvery:   4 * time.Second,
		typingMax:     10 * time.Minute,
		sendTimeout:   30 * time.Second,
		deniedEvery:   24 * time.Hour,
	}
}

// New validates cfg and deps and returns the adapter. It does no I/O. cfg
// must be enabled (a token set): the caller decides what an empty token
// means.
func New(cfg Config, deps Deps) (*Adapter, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("telegram: config: %w", err)
	}
	if !cfg.Enabled() {
		return nil, fmt.Errorf("telegram: config: %s: required", key("token"))
	}
	if deps.Conn == nil {
		return nil, errors.New("telegram: deps: Conn is nil")
	}
	if cfg.Mode == ModePolling && deps.StatePath == "" {
		return nil, errors.New("telegram: deps: StatePath is empty")
	}
	if deps.Subjects.Prefix == "" {
		deps.Subjects.Prefix = bus.DefaultPrefix
	}
	if deps.Log == nil {
		deps.Log = slog.New(slog.DiscardHandler)
	}
	if deps.HTTPClient == nil {
		tr := http.DefaultTransport.(*http.Transport).Clone()
		deps.HTTPClient = &http.Client{Transport: tr}
	}
	log := deps.Log.With("component", "telegram", "channel", Name)
	if deps.OutRetention < 0 {
		return nil, errors.New("telegram: deps: OutRetention is negative")
	}
	mx := cmp.Or[channels.Metrics](deps.Metrics, channels.NopMetrics{})
	bopts := bridge.Options{
		Channel:       Name,
		SubjectPrefix: deps.Subjects.Prefix,
		MaxTextBytes:  deps.MaxTextBytes,
		Log:           deps.Log,
		SeenTTL:       seenTTL(deps.OutRetention),
		OnDuplicate:   func(bus.Outbound) { mx.OutboundDuplicate(Name) },
	}
	client, err := bridge.New(deps.Conn, bopts) // validates; Run adds the state file
	if err != nil {
		return nil, fmt.Errorf("telegram: %w", err)
	}
	files, _ := fileEndpoint(cfg.APIEndpoint) // checked by Validate
	a := &Adapter{
		cfg:    cfg,
		deps:   deps,
		log:    log,
		client: client,
		bopts:  bopts,
		api:    &api{token: cfg.Token, endpoint: cfg.APIEndpoint, files: files, hc: deps.HTTPClient, unit: time.Second},
		access: newAccess(cfg.AllowUsers),
		lim:    newLimits(privateRate, groupRate, globalRate, globalBurst),
		turns:  newTurns(maxTurns),
		denied: newMemo(maxDenied),
		status: statusReporter{f: deps.Status},
		mx:     mx,
		tune:   defaultTuning(),
	}
	a.typing = newTyper(a)
	return a, nil
}

// Name returns "telegram".
func (a *Adapter) Name() string { return Name }

var _ channels.Channel = (*Adapter)(nil)

// Run connects to Telegram (getMe), registers the bot's commands, and then
// receives updates (polling or webhook) and delivers outbound envelopes
// until ctx is cancelled; it then stops every goroutine it started and
// returns nil. It returns an error when the token is rejected
// ([ErrUnauthorized]), when another instance keeps polling with the same
// token for longer than a grace period ([ErrConflict]), when the offset
// file or the webhook listener cannot be opened, or when the bus refuses
// the outbound consumer. Transient failures are retried with capped
// exponential backoff and reported through Deps.Status. Run may be called
// once.
func (a *Adapter) Run(ctx context.Context) error {
	if !a.running.CompareAndSwap(false, true) {
		return errors.New("telegram: Run called twice")
	}
	state, err := a.openState()
	if err != nil {
		a.status.set(err)
		return err
	}
	if state != nil {
		defer func() {
			if err := state.Close(); err != nil {
				a.log.Warn("close state file", "err", err)
			}
		}()
	}
	defer a.client.Close()
	a.tune.maxImage = a.imageCap()
	if err := a.connect(ctx); err != nil {
		if ctx.Err() != nil {
			return nil
		}
		a.status.set(err)
		return err
	}
	a.registerCommands(ctx)

	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error { return a.client.ConsumeOutbound(gctx, a.handleOutbound) })
	g.Go(func() error { a.typing.run(gctx); return nil })
	g.Go(func() error {
		if a.cfg.Mode == ModeWebhook {
			return a.serveWebhook(gctx)
		}
		return a.poll(gctx, state)
	})
	err = g.Wait()
	if ctx.Err() != nil && (err == nil || errors.Is(err, context.Canceled)) {
		a.log.Info("telegram channel stopped")
		return nil
	}
	if err != nil {
		a.status.set(err)
	}
	return err
}

// seenBucket is the state file's bucket of outbound ids already shown.
const seenBucket = "outbound_shown"

// seenTTL is how long a shown outbound id is remembered: twice
// bus.out_retention.
func seenTTL(outRetention time.Duration) time.Duration {
	if outRetention == 0 {
		return bridge.DefaultSeenTTL
	}
	return 2 * outRetention
}

// openState opens the state file (nil without Deps.StatePath) and
// rebuilds the bridge client so that it remembers the outbound ids it has
// shown in it.
func (a *Adapter) openState() (*bolt.DB, error) {
	if a.deps.StatePath == "" {
		return nil, nil
	}
	db, err := openState(a.deps.StatePath)
	if err != nil {
		return nil, err
	}
	var seen bridge.SeenStore = a.deps.Seen
	if seen == nil {
		seen, err = boltseen.Open(db, seenBucket, a.bopts.SeenTTL, a.tune.now)
	}
	if err == nil {
		opts := a.bopts
		opts.SeenStore = seen
		a.client, err = bridge.New(a.deps.Conn, opts)
	}
	if err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("telegram: %s: %w", a.deps.StatePath, err)
	}
	return db, nil
}

// imageCap is the largest photo passed inline: the configured cap, lowered
// so that its base64 form fits the connection's payload limit with room
// for the rest of the envelope.
func (a *Adapter) imageCap() int64 {
	c := a.cfg.MaxImageBytes
	if mp := a.deps.Conn.MaxPayload(); mp > 0 {
		room := (mp - 128<<10) / 4 * 3
		if room > 0 && room < c {
			c = room
		}
	}
	return c
}

// connect calls getMe until it succeeds, retrying transient failures with
// backoff; a rejected token is returned at once.
func (a *Adapter) connect(ctx context.Context) error {
	retryable := func(err error) bool {
		if errors.Is(err, ErrUnauthorized) {
			return false
		}
		_, api := asAPI(err)
		return !api || transient(err)
	}
	err := retry.Do(ctx, a.policy(retryable), func(ctx context.Context, _ int) error {
		cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		me, err := a.api.getMe(cctx)
		cancel()
		if err != nil {
			return err
		}
		a.self = me
		a.selfName = "@" + lower(me.UserName)
		a.log.Info("connected to Telegram", "bot", "@"+me.UserName, "bot_id", me.ID, "mode", a.cfg.Mode,
			"privacy_mode", !me.CanReadAllGroupMessages)
		return nil
	})
	switch {
	case err == nil:
		return nil
	case ctx.Err() != nil:
		return ctx.Err()
	case errors.Is(err, ErrUnauthorized):
		return fmt.Errorf("%w: %w", ErrUnauthorized, err)
	}
	return err // names getMe already
}

// policy is how the adapter retries a Bot API request: the capped
// exponential backoff, or a 429's retry_after (at least one unit) when
// Telegram sent one; each retry is reported. retryable (nil: every error)
// tells the failures worth another attempt.
func (a *Adapter) policy(retryable func(error) bool) retry.Policy {
	return retry.Policy{
		Schedule:  a.tune.retryBackoff,
		Retryable: retryable,
		Delay: func(_ int, err error, scheduled time.Duration) time.Duration {
			if ra, ok := retryAfter(err); ok {
				return max(ra, a.api.unit)
			}
			return scheduled
		},
		OnRetry: func(_ int, wait time.Duration, err error) { a.report(err, wait) },
	}
}

// report logs a retried failure and marks the channel unhealthy.
func (a *Adapter) report(err error, wait time.Duration) {
	a.log.Warn("Telegram request failed; retrying", "err", err, "retry_in", wait)
	a.status.set(fmt.Errorf("%w (retrying in %s)", err, wait.Round(time.Millisecond)))
}

// commands are the commands shown in Telegram's command menu.
var commands = []tgbotapi.BotCommand{
	{Command: "start", Description: "Say hello"},
	{Command: "new", Description: "Start a fresh conversation"},
	{Command: "stop", Description: "Stop the request that is running"},
	{Command: "steer", Description: "Redirect the running request: /steer <text>"},
	{Command: "compact", Description: "Fold older turns into a summary"},
	{Command: "help", Description: "List the commands"},
	{Command: "status", Description: "Show this chat's session state"},
}

// registerCommands sets the command menu (setMyCommands). A failure only
// costs the menu, so it is logged, not fatal.
func (a *Adapter) registerCommands(ctx context.Context) {
	data, err := jsonString(commands)
	if err != nil {
		a.log.Warn("encode bot commands", "err", err)
		return
	}
	cctx, cancel := context.WithTimeout(ctx, a.tune.sendTimeout)
	defer cancel()
	if err := a.api.call(cctx, "setMyCommands", tgbotapi.Params{"commands": data}, nil); err != nil && ctx.Err() == nil {
		a.log.Warn("could not register the bot's commands (setMyCommands); the command menu may be out of date", "err", err)
	}
}

// statusReporter forwards health changes to a StatusFunc, dropping repeats
// of the healthy state. Safe for concurrent use.
type statusReporter struct {
	f       channels.StatusFunc
	mu      sync.Mutex
	healthy bool
}

func (s *statusReporter) set(err error) {
	if s.f == nil {
		return
	}
	s.mu.Lock()
	if err == nil && s.healthy {
		s.mu.Unlock()
		return
	}
	s.healthy = err == nil
	s.mu.Unlock()
	s.f(err)
}

// chatKey renders a Telegram chat id as the envelope's chat_id.
func chatKey(id int64) string { return strconv.FormatInt(id, 10) }

// Package web is Switchboard's web console (docs/web.md): a chat page and
// an operator's dashboard served by the daemon over HTTP. The chat is a bus
// channel named "web" like Telegram or Slack: the server publishes the
// page's messages as inbound envelopes through the bridge kit
// ([github.com/switchboard-chat/switchboard/bus/bridge]) and streams the
// outbound envelopes of "<p>.out.web.>" and the agent events of
// "<p>.event.web.>" to the browser as server-sent events. It never calls
// the agent.
//
// The contract:
//
//   - Login. Nothing but the login page (and its script and style sheet)
//     is served to a browser without a session: pages redirect to /login,
//     API calls get 401. A one-time pairing code, printed in the daemon's
//     log at start and by "switchboard web pair", is exchanged with a user
//     name of Config.AllowUsers (as in force: Deps.Allow, which a
//     configuration reload changes; a session of a user removed from it
//     ends at its next request) for a session cookie (HttpOnly,
//     SameSite=Strict, Secure when the browser uses https, directly or
//     through a reverse proxy that keeps the Host header), kept in the
//     state file (data_dir/web.db) for 30 days. Codes are files in
//     data_dir/web-pair named by their sha256; using one removes it.
//     Logins are rate limited per client address and per user name.
//   - CSRF. Every state-changing request (POST) must carry the session's
//     token in X-CSRF-Token (403 otherwise) and, when the browser sends
//     one, an Origin equal to the request's host.
//   - Chat. A user's conversation c is the bus chat "<user>:<c>". A
//     message is POSTed (multipart: id, text, files) with an id the page
//     makes; the envelope id is derived from user, conversation and that
//     id, so a retry is stored once. Files are attachments (data, base64),
//     at most maxUploadBytes in all (413 with a message saying so). Finals
//     are stored in the state file (the last 500 per chat) before they are
//     acknowledged, and every browser showing the conversation gets them,
//     the deltas, typing, and tool calls live over GET /api/events.
//   - Dashboard (Config.Dashboard), for Config.Operators only (anyone else
//     gets 403 saying so, and the chat page does not link it): the agent's
//     sessions, the last agent events of every channel, /readyz
//     components, dead letters, key metrics, model requests and the
//     effective configuration with secrets redacted, as JSON under
//     /api/dash/ for the page /dashboard.
//
// Model output is rendered on the page by the console's own Markdown
// renderer (assets/md.js), which builds DOM nodes from text and never
// assigns HTML: model text can never run script.
package web

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/switchboard-chat/switchboard/bus"
	"github.com/switchboard-chat/switchboard/bus/bridge"
	"github.com/switchboard-chat/switchboard/bus/bridge/boltseen"
	"github.com/switchboard-chat/switchboard/channels"
	"github.com/switchboard-chat/switchboard/internal/httpserve"
	"github.com/switchboard-chat/switchboard/internal/observe"
	"github.com/switchboard-chat/switchboard/internal/reqlog"
)

// Name is the channel instance name, the <channel> token of its subjects.
const Name = "web"

// Dashboard are the dashboard's sources; any may be nil (the page says
// it is not available).
type Dashboard struct {
	Sessions func() []observe.Session             // the agent's sessions (agent.Manager.Sessions)
	Health   func() map[string]string             // /readyz components not ready (admin.Server.NotReady)
	Gather   Gatherer                             // the daemon's prometheus registry
	Requests func(session string) []reqlog.Record // a session's last model requests, redacted
	Config   any                                  // the effective configuration, secrets redacted (RedactConfig)
}

// Deps are the console's collaborators. Conn, StatePath and PairDir are
// required; the dashboard's sources may be nil (the page says so).
type Deps struct {
	Conn         *nats.Conn
	Subjects     bus.Subjects
	MaxTextBytes int           // bus.max_text_bytes (0: the default)
	StatePath    string        // data_dir/web.db
	PairDir      string        // PairDir(data_dir)
	OutRetention time.Duration // bus.out_retention (0: 24 h)
	// NoModel: no language model is configured; the page says so and
	// messages are refused with that reason.
	NoModel bool
	Log     *slog.Logger
	Status  channels.StatusFunc
	Metrics channels.Metrics
	// Ready, when set, is called with the listener's address.
	Ready func(net.Addr)
	// HTTP bounds the listener and its server and counts its connections
	// as "web" (the daemon's, httpserve; nil: its defaults).
	HTTP *httpserve.Servers
	// Files is the workspace: uploaded files other than images are saved
	// in its inbox/web/<chat>/ and named in the message text. Nil: they
	// travel in the envelope as attachments (the agent sees only a note).
	Files *os.Root

	// Dash are the dashboard's sources (Config.Dashboard).
	Dash Dashboard
	// Allow, when set, holds channels.web.allow_users as in force (the
	// access gate, which a configuration reload updates); nil, or a list
	// it does not carry: Config.AllowUsers as started.
	Allow Allow
}

// Allow is the source of the allow_users list in force (package access's
// Store). Safe for concurrent use.
type Allow interface {
	AllowUsers(channel string) (list []string, ok bool)
}

// allowed reports whether user is on channels.web.allow_users as in force.
func (c *Channel) allowed(user string) bool {
	list := []string(c.cfg.AllowUsers)
	if c.deps.Allow != nil {
		if l, ok := c.deps.Allow.AllowUsers(Name); ok {
			list = l
		}
	}
	return slices.Contains(list, user)
}

// operator reports whether user may see the dashboard
// (channels.web.operators).
func (c *Channel) operator(user string) bool { return slices.Contains(c.cfg.Operators, user) }

// Channel is the web console. Build it with [New], run it once with
// [Channel.Run].
type Channel struct {
	cfg   Config
	deps  Deps
	log   *slog.Logger
	bopts bridge.Options
	hub   *hub
	trace *ring
	login *loginLimits
	ttl   time.Duration

	client  *bridge.Client // set by Run
	store   *store
	running atomic.Bool

	now     func() time.Time
	onStore func(*store) // tests
	// keepAlive is the interval of SSE comments on idle streams.
	keepAlive time.Duration
}

// New validates cfg and deps and returns the console. It does no I/O.
func New(cfg Config, deps Deps) (*Channel, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("web: config: %w", err)
	}
	if !cfg.Enabled() {
		return nil, fmt.Errorf("web: config: %s: at least one user is required", key("allow_users"))
	}
	switch {
	case deps.Conn == nil:
		return nil, errors.New("web: deps: Conn is nil")
	case deps.StatePath == "" || deps.PairDir == "":
		return nil, errors.New("web: deps: StatePath and PairDir are required")
	}
	if deps.Subjects.Prefix == "" {
		deps.Subjects.Prefix = bus.DefaultPrefix
	}
	if deps.MaxTextBytes <= 0 {
		deps.MaxTextBytes = bus.DefaultMaxTextBytes
	}
	if deps.Log == nil {
		deps.Log = slog.New(slog.DiscardHandler)
	}
	mx := cmp.Or[channels.Metrics](deps.Metrics, channels.NopMetrics{})
	ttl := 2 * cmp.Or(deps.OutRetention, 24*time.Hour)
	c := &Channel{
		cfg:  cfg,
		deps: deps,
		log:  deps.Log.With("component", "web", "channel", Name),
		bopts: bridge.Options{Channel: Name, SubjectPrefix: deps.Subjects.Prefix, MaxTextBytes: deps.MaxTextBytes,
			Log: deps.Log, SeenTTL: ttl, OnDuplicate: func(bus.Outbound) { mx.OutboundDuplicate(Name) }},
		hub:       newHub(),
		trace:     newRing(traceSize),
		login:     newLoginLimits(),
		ttl:       ttl,
		now:       time.Now,
		keepAlive: 15 * time.Second,
	}
	if _, err := bridge.New(deps.Conn, c.bopts); err != nil {
		return nil, fmt.Errorf("web: %w", err)
	}
	if cfg.Dashboard && len(cfg.Operators) == 0 {
		c.log.Info("the dashboard is on, but nobody may open it: list its users in " + key("operators"))
	}
	return c, nil
}

// Name returns "web".
func (c *Channel) Name() string { return Name }

var _ channels.Channel = (*Channel)(nil)

// Run opens the state file, prints a pairing code, listens, and serves
// browsers and outbound envelopes until ctx is cancelled; then it stops
// the server, waits for every goroutine and returns nil. It returns an
// error when the state file or the listener cannot be opened, or the bus
// refuses the outbound consumer.
func (c *Channel) Run(ctx context.Context) error {
	if !c.running.CompareAndSwap(false, true) {
		return errors.New("web: Run called twice")
	}
	st, err := openStore(c.deps.StatePath, c.now)
	if err != nil {
		c.status(err)
		return err
	}
	defer func() {
		if err := st.close(); err != nil {
			c.log.Warn("close state file", "err", err)
		}
	}()
	if c.onStore != nil {
		c.onStore(st)
	}
	seen, err := boltseen.Open(st.db, seenBucket, c.ttl, c.now)
	if err != nil {
		return fmt.Errorf("web: %s: %w", c.deps.StatePath, err)
	}
	opts := c.bopts
	opts.SeenStore = seen
	client, err := bridge.New(c.deps.Conn, opts)
	if err != nil {
		return fmt.Errorf("web: %w", err)
	}
	defer client.Close()
	c.client, c.store = client, st
	addr, _ := bindAddr(c.cfg.Listen) // checked by Validate
	return channels.RunHTTP(ctx, channels.HTTPChannel{Name: "web", Addr: addr, Handler: c.Handler(), Log: c.log, HTTP: c.deps.HTTP, Status: c.deps.Status,
		// Closing the browsers' event streams first lets the shutdown
		// finish without waiting for them.
		BeforeShutdown: c.hub.closeAll,
		Workers: []func(context.Context) error{
			func(ctx context.Context) error { return client.ConsumeOutbound(ctx, c.handleOutbound) },
			c.watchEvents,
		},
		Started: func(_ context.Context, addr net.Addr) {
			code, err := newCode(c.deps.PairDir, "", c.now())
			if err != nil {
				c.log.Error("no pairing code; use `switchboard web pair`", "err", err)
			} else {
				c.log.Info("web console listening; log in with this one-time pairing code (or mint one with `switchboard web pair`)",
					"url", "http://"+addr.String()+"/login", "pairing_code", code, "valid", PairTTL.String(), "users", []string(c.cfg.AllowUsers))
			}
			if c.deps.Ready != nil {
				c.deps.Ready(addr)
			}
		},
		Stopped: "web console stopped"})
}

func (c *Channel) status(err error) {
	if c.deps.Status != nil {
		c.deps.Status(err)
	}
}

// handleOutbound applies one outbound envelope: a final is stored (then
// acknowledged) and sent to the browsers of its chat; deltas and typing
// only go to them.
func (c *Channel) handleOutbound(_ context.Context, out bus.Outbound) error {
	if out.Final {
		m := message{ID: out.ID, Role: "agent", Kind: out.Kind, Text: out.Text, InReplyTo: out.InReplyTo, At: c.now().Unix()}
		for _, a := range out.Attachments {
			m.Files = append(m.Files, cmp.Or(a.Name, a.Kind))
		}
		if err := c.store.putMessage(out.ChatID, m); err != nil {
			c.log.Warn("final not stored; the bus redelivers it", "chat_id", out.ChatID, "err", err)
			return err
		}
		// A message the user did not ask for (a scheduled task's report)
		// may open a conversation: list it.
		if user, conv, ok := strings.Cut(out.ChatID, ":"); ok && convRE.MatchString(conv) && c.allowed(user) {
			if err := c.store.touchConv(user, conv, ""); err != nil {
				c.log.Warn("conversation list not updated", "chat_id", out.ChatID, "err", err)
			}
		}
	}
	c.hub.send(out.ChatID, frame{Event: "out", Data: out})
	return nil
}

// watchEvents follows the agent events of every channel: the web chats'
// go to their browsers, all go to the dashboard's trace ring.
func (c *Channel) watchEvents(ctx context.Context) error {
	events := make(chan *nats.Msg, 256)
	sub, err := c.deps.Conn.ChanSubscribe(c.deps.Subjects.Prefix+".event.>", events)
	if err != nil {
		return fmt.Errorf("web: subscribe to agent events: %w", err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	for {
		select {
		case <-ctx.Done():
			return nil
		case m := <-events:
			ev, err := decodeEvent(m.Data)
			if err != nil {
				continue // observers ignore what they cannot read
			}
			if c.cfg.Dashboard {
				c.trace.add(ev)
			}
			if ev.Channel == Name && slices.Contains(liveEvents, ev.Type) {
				c.hub.send(ev.ChatID, frame{Event: "ev", Data: ev})
			}
		}
	}
}

// liveEvents are the agent event types the chat page shows.
var liveEvents = []string{bus.EventToolCall, bus.EventToolResult, bus.EventTurnStart, bus.EventTurnEnd}

// Package openai is Switchboard's OpenAI-compatible API: an HTTP server
// speaking OpenAI's Chat Completions (docs/openai-api.md) that is a
// channel on the bus, named "openai", like Telegram and Slack. Any OpenAI
// client (the official SDKs, Open WebUI, LibreChat, editors, curl) talks to
// the agent, with its workspace, tools, skills, memory and sub-agents, as
// if it were a model. It never calls the agent: a request becomes an
// inbound envelope published through the bridge kit
// ([github.com/switchboard-chat/switchboard/bus/bridge]), and the answer
// is read from the outbound envelopes of "<p>.out.openai.>".
//
// The contract:
//
//   - POST /v1/chat/completions answers with the agent's final reply: a
//     chat.completion, or with "stream": true server-sent events exactly
//     as OpenAI sends them (chat.completion.chunk objects, the role on the
//     first, the finish_reason on the last, a usage chunk when
//     stream_options.include_usage is set, then "data: [DONE]"). Tools run
//     in the daemon and are never returned as tool_calls; progress (typing,
//     the tool that runs) is sent as SSE comments (": tool read_file"),
//     never as content. GET /v1/models and GET /v1/models/{id} list
//     Config.Models.
//   - Sessions. The last user message is the turn's input. The session is
//     the API key's user plus the X-Switchboard-Session header, else the
//     request's "user" field: its chat id on the bus is
//     "<user>:s-<first 32 hex digits of sha256(session)>", and the agent's
//     stored history is the context (the request's earlier messages are
//     ignored). Without either, the request is stateless: a fresh chat id
//     "<user>:once-<random>" and the request's earlier messages are sent
//     as context text in front of the last user message, so no stored
//     history is shared between requests or sessions.
//   - Idempotency. An Idempotency-Key header, scoped to the API key, maps
//     to the inbound id (stored in the state file, kept twice
//     bus.out_retention, at least 48 h): a retry gets the stored final, or
//     waits for the running turn's, and never starts a second turn.
//   - Errors are OpenAI's: {"error": {"message", "type", "param", "code"}}
//     with 401 (bad or missing key), 400 (invalid body), 404 (unknown model
//     or path), 413 (body over max_body_bytes), 429 (rate_limit per key, or
//     the daemon's queue for the session is full), 500 (the agent answered
//     with an error), 503 (no model configured, or the bus unavailable),
//     504 (no answer within request_timeout).
//   - A client that disconnects before the answer (and sent no
//     Idempotency-Key, so cannot come back for it) stops its turn: the
//     channel publishes "/stop" in the session.
//   - Security: keys compared in constant time (crypto/subtle) and never
//     logged, a token bucket per key, a body limit, loopback unless
//     listen names another host, CORS only for Config.CORSOrigins; the
//     listener and server bounded by package httpserve (connections per
//     client and in all, header, body and idle timeouts).
//
// Delivery: outbound envelopes come through the kit's durable consumer
// "bridge_openai"; a final is stored in the state file (data_dir/openai.db)
// before it is acknowledged, so one the agent published while the
// channel was down, or before its request timed out, is there for a retry.
package openai

import (
	"cmp"
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"golang.org/x/time/rate"

	"github.com/switchboard-chat/switchboard/bus"
	"github.com/switchboard-chat/switchboard/bus/bridge"
	"github.com/switchboard-chat/switchboard/bus/bridge/boltseen"
	"github.com/switchboard-chat/switchboard/channels"
	"github.com/switchboard-chat/switchboard/internal/httpserve"
)

// Name is the channel instance name, the <channel> token of its subjects.
const Name = "openai"

// Deps are the channel's collaborators. Conn and StatePath are required.
type Deps struct {
	// Conn is the daemon's NATS connection; the caller owns it.
	Conn *nats.Conn
	// Subjects is the subject scheme (bus.subject_prefix).
	Subjects bus.Subjects
	// MaxTextBytes is bus.max_text_bytes (0: the default): the turn's
	// input, context included, must fit it.
	MaxTextBytes int
	// StatePath is the bbolt file of idempotency keys, finals and shown
	// outbound ids (data_dir/openai.db).
	StatePath string
	// OutRetention is bus.out_retention (0: 24 h); records are kept twice
	// it.
	OutRetention time.Duration
	// Records, when not nil, keeps the idempotency records and the finals
	// instead of StatePath, and Seen the outbound ids shown
	// (memory.store jetstream: shared by the instances that may take the
	// listener over, so a client's retry through another instance joins
	// its first request instead of starting a second turn).
	Records Records
	Seen    bridge.SeenStore
	// NoModel, when true, answers every chat completion with 503: no
	// language model is configured (llm section).
	NoModel bool
	// Log receives the channel's log lines (never an API key); nil
	// discards.
	Log *slog.Logger
	// Status receives health changes for /readyz.
	Status channels.StatusFunc
	// Metrics counts dropped duplicate outbound envelopes; nil discards.
	Metrics channels.Metrics
	// Ready, when set, is called with the listener's address once the
	// server accepts connections.
	Ready func(net.Addr)
	// HTTP bounds the listener and its server and counts its connections
	// as "openai" (the daemon's, httpserve; nil: its defaults).
	HTTP *httpserve.Servers
}

// Channel is the OpenAI-compatible API. Build it with [New], run it once
// with [Channel.Run].
type Channel struct {
	cfg   Config
	deps  Deps
	log   *slog.Logger
	bopts bridge.Options
	keys  []apiKey
	turns *turns
	ttl   time.Duration

	// Set by Run before the server starts.
	client   *bridge.Client
	store    *store
	stopping <-chan struct{} // closed when Run's context ends
	running  atomic.Bool

	// Test hooks.
	now       func() time.Time
	onStore   func(*store) // called once the store is open
	keepAlive time.Duration
}

// apiKey is one configured key: its digest (compared in constant time),
// its scope for idempotency keys, its user and its rate limiter.
type apiKey struct {
	digest [32]byte
	scope  string
	user   string
	lim    *rate.Limiter
}

// New validates cfg and deps and returns the channel. It does no I/O. cfg
// must be enabled (keys set).
func New(cfg Config, deps Deps) (*Channel, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("openai: config: %w", err)
	}
	if !cfg.Enabled() {
		return nil, fmt.Errorf("openai: config: %s: at least one key is required", key("keys"))
	}
	if deps.Conn == nil {
		return nil, errors.New("openai: deps: Conn is nil")
	}
	if deps.StatePath == "" {
		return nil, errors.New("openai: deps: StatePath is empty")
	}
	if deps.OutRetention < 0 {
		return nil, errors.New("openai: deps: OutRetention is negative")
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
		log:  deps.Log.With("component", "openai", "channel", Name),
		bopts: bridge.Options{Channel: Name, SubjectPrefix: deps.Subjects.Prefix, MaxTextBytes: deps.MaxTextBytes,
			Log: deps.Log, SeenTTL: ttl, OnDuplicate: func(bus.Outbound) { mx.OutboundDuplicate(Name) }},
		turns:     newTurns(),
		ttl:       ttl,
		now:       time.Now,
		keepAlive: 15 * time.Second,
	}
	if _, err := bridge.New(deps.Conn, c.bopts); err != nil { // validates the options
		return nil, fmt.Errorf("openai: %w", err)
	}
	perMinute := rate.Every(time.Minute / time.Duration(cfg.RateLimit))
	for _, k := range cfg.Keys {
		d := sha256.Sum256([]byte(k.Key))
		c.keys = append(c.keys, apiKey{digest: d, scope: fmt.Sprintf("%x", d[:16]), user: k.User,
			lim: rate.NewLimiter(perMinute, cfg.RateLimit)})
	}
	return c, nil
}

// Name returns "openai".
func (c *Channel) Name() string { return Name }

var _ channels.Channel = (*Channel)(nil)

// Run opens the state file, listens, and serves requests and outbound
// envelopes until ctx is cancelled; then it stops the server (requests
// still waiting get 503), waits for every goroutine and returns nil. It
// returns an error when the state file or the listener cannot be opened,
// or the bus refuses the outbound consumer. Run may be called once.
func (c *Channel) Run(ctx context.Context) error {
	if !c.running.CompareAndSwap(false, true) {
		return errors.New("openai: Run called twice")
	}
	st, err := openStore(c.deps.StatePath, c.ttl, c.now)
	if err != nil {
		c.status(err)
		return err
	}
	defer func() {
		if err := st.close(); err != nil {
			c.log.Warn("close state file", "err", err)
		}
	}()
	st.shared = c.deps.Records
	if c.onStore != nil {
		c.onStore(st)
	}
	var seen bridge.SeenStore = c.deps.Seen
	if seen == nil {
		if seen, err = boltseen.Open(st.db, seenBucket, c.ttl, c.now); err != nil {
			return fmt.Errorf("openai: %s: %w", c.deps.StatePath, err)
		}
	}
	opts := c.bopts
	opts.SeenStore = seen
	client, err := bridge.New(c.deps.Conn, opts)
	if err != nil {
		return fmt.Errorf("openai: %w", err)
	}
	defer client.Close()
	c.client, c.store = client, st
	addr, _ := bindAddr(c.cfg.Listen) // checked by Validate
	return channels.RunHTTP(ctx, channels.HTTPChannel{Name: "openai", Addr: addr, Handler: c.Handler(), Log: c.log, HTTP: c.deps.HTTP, Status: c.deps.Status,
		Workers: []func(context.Context) error{
			func(ctx context.Context) error { return client.ConsumeOutbound(ctx, c.handleOutbound) },
			func(ctx context.Context) error {
				return client.Subscribe(ctx, bridge.Subscription{Events: func(_ context.Context, ev bus.Event) { c.turns.event(ev) }})
			},
		},
		Started: func(ctx context.Context, addr net.Addr) {
			c.stopping = ctx.Done()
			c.log.Info("OpenAI-compatible API listening", "addr", addr.String(), "keys", len(c.keys), "models", c.cfg.Models)
			if c.deps.Ready != nil {
				c.deps.Ready(addr)
			}
		},
		Stopped: "OpenAI-compatible API stopped"})
}

func (c *Channel) status(err error) {
	if c.deps.Status != nil {
		c.deps.Status(err)
	}
}

// handleOutbound applies one outbound envelope: a final is stored (then
// acknowledged) and handed to the requests waiting for it; deltas and
// typing go to them only.
func (c *Channel) handleOutbound(_ context.Context, out bus.Outbound) error {
	if !out.Final {
		c.turns.outbound(out)
		return nil
	}
	a := answer{Kind: out.Kind, Text: out.Text, AnsweredBy: out.Meta[metaAnsweredBy], Chat: out.ChatID, At: c.now().Unix()}
	k := out.InReplyTo
	if k == "" {
		// A proactive message (a scheduled task's report): the API has no
		// way to push it; it is kept with the session's finals.
		k = "out:" + out.ID
		c.log.Info("proactive message kept; the OpenAI API cannot deliver it", "chat_id", out.ChatID, "id", out.ID)
	}
	if err := c.store.putAnswer(k, a); err != nil {
		return err // retried; not acknowledged
	}
	c.turns.finish(out.InReplyTo, a)
	return nil
}

// authenticate returns the configured key the request's bearer token
// matches, comparing the digests of every key in constant time.
func (c *Channel) authenticate(token string) (*apiKey, bool) {
	d := sha256.Sum256([]byte(token))
	found := -1
	for i := range c.keys {
		if subtle.ConstantTimeCompare(d[:], c.keys[i].digest[:]) == 1 {
			found = i
		}
	}
	if found < 0 || token == "" {
		return nil, false
	}
	return &c.keys[found], true
}

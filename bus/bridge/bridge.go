// Package bridge is the Go bridge kit: a small client that speaks bus
// protocol v1 (docs/bus-protocol.md) for one channel. The built-in Telegram
// and Slack adapters and external Go bridge processes use it alike, so every
// channel publishes and consumes through one code path.
//
// A [Client] does these things:
//
//   - [Client.PublishInbound] validates an inbound envelope exactly as the
//     agent runtime will, then publishes it through JetStream on
//     "<p>.in.<channel>.<chat>" with the de-duplication header
//     "Nats-Msg-Id: <channel>:<id>" and waits for the stream's
//     acknowledgement.
//   - [Client.ConsumeOutbound] reads "<p>.out.<channel>.>" through a durable
//     pull consumer on the outbound stream and calls a [Handler] for every
//     outbound envelope, in order within each conversation, concurrently
//     across conversations, acknowledging each message only after the
//     handler succeeded. [Client.SubscribeOutbound] does the same over a
//     plain core subscription (no catch-up, no acknowledgements), and
//     [Client.Subscribe] extends it for a client that shows one chat live
//     (the terminal console): only that chat's subjects, its agent events
//     (docs/bus-protocol.md §10) in the same ordered queue, and a Ready
//     callback once the server has the subscriptions.
//   - Either way an outbound envelope whose id was already shown (a final
//     the daemon published again after a crash, docs/bus-protocol.md §5) is
//     dropped (and acknowledged) without calling the handler: the ids are
//     remembered in a bounded in-memory set ([Options.SeenTTL],
//     [Options.SeenMax]) and, with [Options.SeenStore], across restarts.
//     So is a typing or delta message of a turn whose final the handler
//     was given: nothing follows a final (docs/bus-protocol.md §4.2).
//
// Build a Client with [New] over a connection the caller owns (an adapter
// inside the daemon) or with [Dial] for an external process (the Client owns
// that connection and [Client.Close] releases it).
//
// NATS permissions. A bridge restricted to its channel (bus.bridges.<name>)
// needs: publish on "<p>.in.<channel>.>"; publish on the JetStream API
// subjects "$JS.API.CONSUMER.INFO.<stream>.<durable>",
// "$JS.API.CONSUMER.CREATE.<stream>.<durable>.<p>.out.<channel>.>" and
// "$JS.API.CONSUMER.MSG.NEXT.<stream>.<durable>"; publish on
// "$JS.ACK.<stream>.<durable>.>" (acks, naks, in-progress); subscribe to its
// inbox ("_INBOX.>") for API replies, pull deliveries and publish
// acknowledgements. <stream> is the outbound stream ([StreamOut]). On the
// daemon's embedded server the bridge also lives in a NATS account of its
// own, and its inbound messages pass the daemon's ingress, which answers a
// refused message with a JetStream API error (400 invalid, 429 rate-limited,
// 503 stream full; see [Client.PublishInbound]) and answers an invalid one
// whose subject names a chat with an error final on that chat, which
// [Client.ConsumeOutbound] hands to the Handler like any outbound envelope
// (docs/bus-protocol.md §9.1); nothing changes in how the client publishes
// or consumes.
package bridge

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nkeys"

	"github.com/switchboard-chat/switchboard/bus"
	"github.com/switchboard-chat/switchboard/internal/retry"
)

// Consumer settings of [Client.ConsumeOutbound].
const (
	// AckWait is how long a delivered outbound message may stay
	// unacknowledged before the server redelivers it. The client resets the
	// timer (InProgress) of every message it holds at a third of this
	// interval, so a slow handler or a long retry does not cause
	// redelivery.
	AckWait = 60 * time.Second
	// MaxAckPending bounds the delivered-but-unacknowledged messages, and so
	// the messages a client holds in memory.
	MaxAckPending = 1000
	// DefaultMaxWorkers is the default bound on conversations handled
	// concurrently (Options.MaxWorkers).
	DefaultMaxWorkers = 64
	// DefaultRetryMin and DefaultRetryMax bound the default retry backoff
	// of a failing handler: DefaultRetryMin doubling up to DefaultRetryMax.
	DefaultRetryMin = time.Second
	DefaultRetryMax = 60 * time.Second
	// maxMaxTextBytes mirrors the runtime's upper bound on bus.max_text_bytes.
	maxMaxTextBytes = 4 << 20
	// maxDurableBytes bounds a consumer name.
	maxDurableBytes = 255
	// drainTimeout bounds Close's drain of a dialled connection.
	drainTimeout = 5 * time.Second
	// defaultDialTimeout bounds Dial when ctx has no deadline.
	defaultDialTimeout = 10 * time.Second
)

// Sentinel errors. Use errors.Is.
var (
	// ErrClosed is returned (wrapped) by the methods of a Client after Close.
	ErrClosed = errors.New("bridge: client closed")
	// ErrPermanent marks a handler error that retrying cannot fix (the chat
	// no longer exists, the bot was removed from it, the message is
	// rejected by the platform for good). A [Handler] returns an error
	// wrapping it (see [Permanent]); the message is then logged and
	// acknowledged without retry, so the conversation moves on.
	ErrPermanent = errors.New("bridge: permanent failure")
)

// Permanent wraps err so that errors.Is(result, [ErrPermanent]) holds and
// the message still reads as err. Permanent(nil) is nil.
func Permanent(err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("%w: %w", ErrPermanent, err)
}

// Backoff returns how long to wait before retry number attempt of a failing
// handler (attempt is 1 for the first retry). It must be safe for concurrent
// use.
type Backoff func(attempt int) time.Duration

// ExponentialBackoff returns a [Backoff] that waits first before the first
// retry and doubles the wait on every further retry, up to limit. Both
// should be positive; a limit below first is raised to first. It is the
// project's one exponential schedule ([retry.Exponential]).
func ExponentialBackoff(first, limit time.Duration) Backoff {
	return Backoff(retry.Exponential(first, limit))
}

// Options configures a [Client]. Only Channel is required.
type Options struct {
	// Channel is the channel instance name this client speaks for, the
	// <channel> token of its subjects: ^[a-z0-9_-]{1,32}$.
	Channel string
	// SubjectPrefix is the first subject token(s), as the daemon's
	// bus.subject_prefix (default "chat").
	SubjectPrefix string
	// Bridge is the bridge's name in the daemon's bus.bridges.<name>
	// (default: Channel). Under isolation its permissions allow the durable
	// consumer "bridge_<name>" and the reply inbox "_INBOX_<name>", which
	// Dial uses.
	Bridge string
	// Durable names the durable consumer on the outbound stream (default
	// "bridge_" + Bridge): letters, digits, '_' and '-'.
	Durable string
	// MaxTextBytes is the inbound text limit PublishInbound enforces; set it
	// to the daemon's bus.max_text_bytes (default 65536).
	MaxTextBytes int
	// MaxWorkers bounds the conversations handled concurrently by
	// ConsumeOutbound (default [DefaultMaxWorkers]).
	MaxWorkers int
	// Backoff paces the retries of a failing handler (default
	// ExponentialBackoff([DefaultRetryMin], [DefaultRetryMax])).
	Backoff Backoff
	// Log receives the client's log lines; nil discards them.
	Log *slog.Logger

	// SeenStore, when set, persists the ids of the outbound envelopes
	// shown, so that one the daemon publishes again with the same id is
	// dropped across restarts of the bridge too (see [SeenStore]); nil
	// remembers them in memory only.
	SeenStore SeenStore
	// SeenTTL is how long the in-memory set remembers a shown outbound id
	// (default [DefaultSeenTTL]); keep it at least the daemon's
	// bus.out_retention.
	SeenTTL time.Duration
	// SeenMax bounds the ids the in-memory set remembers (default
	// [DefaultSeenMax]); the oldest is forgotten first. The turns whose
	// final was handed over (whose typing and deltas are dropped) are
	// remembered with the same bounds, SeenTTL and SeenMax.
	SeenMax int
	// OnDuplicate, when set, is called for every outbound envelope dropped
	// because its id was already shown (a metric). It must be cheap and
	// safe for concurrent use.
	OnDuplicate func(out bus.Outbound)
}

// withDefaults validates o and fills in the defaults.
func (o Options) withDefaults() (Options, error) {
	var errs []error
	if !bus.ValidChannel(o.Channel) {
		errs = append(errs, fmt.Errorf("Options.Channel: must match ^[a-z0-9_-]{1,32}$, got %q", o.Channel))
	}
	if o.SubjectPrefix == "" {
		o.SubjectPrefix = bus.DefaultPrefix
	} else if !validPrefix(o.SubjectPrefix) {
		errs = append(errs, fmt.Errorf("Options.SubjectPrefix: must be dot-separated tokens of [A-Za-z0-9_-], got %q", o.SubjectPrefix))
	}
	if o.Bridge == "" {
		o.Bridge = o.Channel
	} else if !validName(o.Bridge) {
		errs = append(errs, fmt.Errorf("Options.Bridge: must be letters, digits, '_' or '-', got %q", o.Bridge))
	}
	if o.Durable == "" {
		o.Durable = "bridge_" + o.Bridge
	} else if !validName(o.Durable) || len(o.Durable) > maxDurableBytes {
		errs = append(errs, fmt.Errorf("Options.Durable: must be 1 to %d letters, digits, '_' or '-', got %q", maxDurableBytes, o.Durable))
	}
	switch {
	case o.MaxTextBytes == 0:
		o.MaxTextBytes = bus.DefaultMaxTextBytes
	case o.MaxTextBytes < 0 || o.MaxTextBytes > maxMaxTextBytes:
		errs = append(errs, fmt.Errorf("Options.MaxTextBytes: must be between 1 and %d (0 for the default), got %d", maxMaxTextBytes, o.MaxTextBytes))
	}
	switch {
	case o.MaxWorkers == 0:
		o.MaxWorkers = DefaultMaxWorkers
	case o.MaxWorkers < 0:
		errs = append(errs, fmt.Errorf("Options.MaxWorkers: must not be negative, got %d", o.MaxWorkers))
	}
	if o.SeenTTL < 0 {
		errs = append(errs, fmt.Errorf("Options.SeenTTL: must not be negative, got %s", o.SeenTTL))
	}
	if o.SeenMax < 0 {
		errs = append(errs, fmt.Errorf("Options.SeenMax: must not be negative, got %d", o.SeenMax))
	}
	if o.Backoff == nil {
		o.Backoff = ExponentialBackoff(DefaultRetryMin, DefaultRetryMax)
	}
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	if err := errors.Join(errs...); err != nil {
		return o, fmt.Errorf("bridge: options: %w", err)
	}
	return o, nil
}

// validName reports whether s is non-empty and only [A-Za-z0-9_-].
func validName(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

// validPrefix reports whether p is dot-separated [validName] tokens.
func validPrefix(p string) bool {
	for tok := range strings.SplitSeq(p, ".") {
		if !validName(tok) {
			return false
		}
	}
	return true
}

// StreamOut returns the name of the outbound stream for a subject prefix:
// the prefix upper-cased with dots replaced by underscores, then "_OUT"
// ("chat" gives "CHAT_OUT"), the rule the daemon uses (natsbus.StreamsFor).
func StreamOut(prefix string) string {
	return strings.ToUpper(strings.ReplaceAll(prefix, ".", "_")) + "_OUT"
}

// Credentials authenticate a dialled connection. Set at most one method:
// Token; or User and Password; or NKeySeed (a user NKey seed, "SU...", whose
// public key the server knows). All empty means no authentication, or the
// credentials carried by the URL given to [Dial].
type Credentials struct {
	Token    string
	User     string
	Password string
	NKeySeed string
}

// String hides the secrets, so Credentials can be logged.
func (c Credentials) String() string {
	switch {
	case c.Token != "":
		return "token(redacted)"
	case c.User != "":
		return "user(" + c.User + ", password redacted)"
	case c.NKeySeed != "":
		return "nkey(redacted)"
	}
	return "none"
}

// GoString hides the secrets from %#v too.
func (c Credentials) GoString() string { return "bridge.Credentials{" + c.String() + "}" }

// options turns the credentials into connect options, validating them.
func (c Credentials) options() ([]nats.Option, error) {
	methods := 0
	for _, set := range []bool{c.Token != "", c.User != "" || c.Password != "", c.NKeySeed != ""} {
		if set {
			methods++
		}
	}
	if methods > 1 {
		return nil, errors.New("Credentials: set only one of Token, User/Password and NKeySeed")
	}
	switch {
	case c.Token != "":
		return []nats.Option{nats.Token(c.Token)}, nil
	case c.User != "" || c.Password != "":
		if c.User == "" {
			return nil, errors.New("Credentials.User: required with Password")
		}
		return []nats.Option{nats.UserInfo(c.User, c.Password)}, nil
	case c.NKeySeed != "":
		kp, err := nkeys.FromSeed([]byte(c.NKeySeed))
		if err != nil {
			return nil, fmt.Errorf("Credentials.NKeySeed: not a valid NKey seed: %w", err)
		}
		pub, err := kp.PublicKey()
		if err != nil {
			return nil, fmt.Errorf("Credentials.NKeySeed: %w", err)
		}
		if !nkeys.IsValidPublicUserKey(pub) {
			return nil, errors.New("Credentials.NKeySeed: must be a user seed (starting with \"SU\")")
		}
		return []nats.Option{nats.Nkey(pub, kp.Sign)}, nil
	}
	return nil, nil
}

// Client publishes inbound envelopes and consumes outbound envelopes for
// one channel. All its methods are safe for concurrent use.
type Client struct {
	opts Options
	subj bus.Subjects
	log  *slog.Logger
	nc   *nats.Conn
	js   jetstream.JetStream
	seen *dedup // outbound ids already shown

	owned      bool          // the client dialled nc and closes it
	connClosed chan struct{} // closed by nc's ClosedHandler (owned only)
	closeOnce  sync.Once
	closed     atomic.Bool
	consuming  atomic.Bool

	// Test hooks (nil in production).
	afterDispatch func()        // after every message ConsumeOutbound receives
	heartbeat     time.Duration // InProgress interval; 0 means AckWait/3
	ackWait       time.Duration // consumer AckWait; 0 means AckWait
	holdMax       time.Duration // redelivery hold bound; 0 means redeliveryGate
}

// New returns a Client over nc, a connection the caller owns and keeps
// open for the life of the Client ([Client.Close] does not close it). It
// validates opts and does no I/O.
func New(nc *nats.Conn, opts Options) (*Client, error) {
	if nc == nil {
		return nil, errors.New("bridge: new: connection is nil")
	}
	o, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	c := newClient(o)
	if err := c.attach(nc); err != nil {
		return nil, err
	}
	return c, nil
}

// newClient returns a client with validated options and no connection.
func newClient(o Options) *Client {
	return &Client{
		opts: o,
		subj: bus.Subjects{Prefix: o.SubjectPrefix},
		log:  o.Log.With("component", "bridge", "channel", o.Channel),
		seen: newDedup(o),
	}
}

// attach sets the connection.
func (c *Client) attach(nc *nats.Conn) error {
	js, err := jetstream.New(nc)
	if err != nil {
		return fmt.Errorf("bridge: jetstream: %w", err)
	}
	c.nc, c.js = nc, js
	return nil
}

// InboxPrefix is the reply inbox prefix of a dialled bridge: the one the
// daemon's isolation permissions allow a bridge named name (the same rule as
// natsbus.BridgeInboxPrefix, repeated so a bridge does not link the server).
func InboxPrefix(name string) string { return "_INBOX_" + name }

// Dial connects to the NATS server at serverURL (a comma-separated list is
// accepted) with creds and returns a Client that owns the connection:
// [Client.Close] drains and closes it. The credentials may instead be in the
// URL, as nats.go reads them: "nats://TOKEN@host:4222" for a token,
// "nats://user:password@host:4222" for a user and password (then creds must
// be empty); they are never logged. Once connected, the connection
// reconnects forever; the first connection attempt fails at once on a wrong
// address or rejected credentials. ctx bounds the connection attempt (10 s
// when it has no deadline), not the life of the Client.
func Dial(ctx context.Context, serverURL string, creds Credentials, opts Options) (*Client, error) {
	o, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	if strings.TrimSpace(serverURL) == "" {
		return nil, errors.New("bridge: dial: server URL is empty")
	}
	copts, err := creds.options()
	if err != nil {
		return nil, fmt.Errorf("bridge: dial: %w", err)
	}
	if len(copts) > 0 && urlHasCredentials(serverURL) {
		return nil, fmt.Errorf("bridge: dial %s: credentials both in the URL and in Credentials: use one", bus.RedactURL(serverURL))
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("bridge: dial %s: %w", bus.RedactURL(serverURL), err)
	}
	timeout := defaultDialTimeout
	if dl, ok := ctx.Deadline(); ok {
		timeout = time.Until(dl)
	}
	// The handlers may run before Dial returns; they only touch c's
	// atomics and its immutable logger.
	c := newClient(o)
	c.owned, c.connClosed = true, make(chan struct{})
	var closedOnce sync.Once
	copts = append(copts,
		nats.Name("switchboard-bridge-"+o.Channel),
		nats.CustomInboxPrefix(InboxPrefix(o.Bridge)),
		nats.Timeout(timeout),
		nats.MaxReconnects(-1),
		nats.DrainTimeout(drainTimeout),
		nats.ClosedHandler(func(*nats.Conn) { closedOnce.Do(func() { close(c.connClosed) }) }),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			if !c.closed.Load() {
				c.log.Warn("nats disconnected", "err", err)
			}
		}),
		nats.ReconnectHandler(func(nc *nats.Conn) { c.log.Info("nats reconnected", "url", bus.RedactURL(nc.ConnectedUrl())) }),
	)
	nc, err := nats.Connect(serverURL, copts...)
	if err != nil {
		return nil, fmt.Errorf("bridge: dial %s: %w", bus.RedactURL(serverURL), err)
	}
	if err := c.attach(nc); err != nil {
		nc.Close()
		return nil, err
	}
	c.log.Info("bridge connected", "url", bus.RedactURL(nc.ConnectedUrl()))
	return c, nil
}

// urlHasCredentials reports whether any URL of a comma-separated list
// carries user information (nats://TOKEN@host, nats://user:password@host).
func urlHasCredentials(serverURL string) bool {
	for p := range strings.SplitSeq(serverURL, ",") {
		if u, err := url.Parse(strings.TrimSpace(p)); err == nil && u.User != nil {
			return true
		}
	}
	return false
}

// Close marks the Client closed: later calls of its methods fail with
// [ErrClosed]. A Client from [Dial] also drains its connection (waiting a
// few seconds at most for pending publishes and acknowledgements) and closes
// it; a Client from [New] leaves the caller's connection open. Call Close
// after ConsumeOutbound has returned. It is idempotent and returns nil.
func (c *Client) Close() error {
	c.closeOnce.Do(func() {
		c.closed.Store(true)
		if !c.owned {
			return
		}
		if err := c.nc.Drain(); err != nil {
			c.nc.Close()
		}
		timer := time.NewTimer(drainTimeout + time.Second)
		defer timer.Stop()
		select {
		case <-c.connClosed:
		case <-timer.C:
			c.log.Warn("nats drain did not finish; closing")
			c.nc.Close()
			<-c.connClosed
		}
	})
	return nil
}

// Channel returns the channel this client speaks for.
func (c *Client) Channel() string { return c.opts.Channel }

// Subjects returns the subject scheme the client uses.
func (c *Client) Subjects() bus.Subjects { return c.subj }

// Conn returns the client's connection. A dialled client owns it: do not
// close or drain it.
func (c *Client) Conn() *nats.Conn { return c.nc }

// PublishInbound publishes one inbound envelope and waits (bounded by ctx)
// until the inbound stream has stored it.
//
// It sets in.V to [bus.Version] when zero and in.Channel to the client's
// channel when empty; a different channel is an error. It then validates the
// envelope exactly as the runtime will ([bus.ParseInbound] on the JSON and
// the subject it publishes on, with Options.MaxTextBytes), so a bridge gets
// the runtime's error before sending: such errors wrap [bus.ErrInvalid] or
// [bus.ErrTooLarge], and publishing the same envelope again cannot succeed.
// Other errors (timeouts, no stream, a closed connection, the daemon's
// refusal as rate-limited or of a full stream: a *jetstream.APIError with
// Code 429 or 503) are transient: the caller may retry with the same
// envelope.
//
// The message is published on "<p>.in.<channel>.<chat>" with the header
// "Nats-Msg-Id: <channel>:<id>"; a publish the stream recognises as a
// duplicate is a success. Platform adapters must therefore use ids that
// are stable across their own retries (e.g. Telegram update ids), so that a
// retried publish is de-duplicated.
func (c *Client) PublishInbound(ctx context.Context, in bus.Inbound) error {
	if c.closed.Load() {
		return fmt.Errorf("bridge: publish inbound: %w", ErrClosed)
	}
	if in.V == 0 {
		in.V = bus.Version
	}
	if in.Channel == "" {
		in.Channel = c.opts.Channel
	}
	if in.Channel != c.opts.Channel {
		return fmt.Errorf("bridge: publish inbound %q: %w", in.ID,
			&bus.FieldError{Field: "channel", Rule: fmt.Sprintf("must be this client's channel %q, got %q", c.opts.Channel, in.Channel), Err: bus.ErrInvalid})
	}
	if in.ChatID == "" {
		return fmt.Errorf("bridge: publish inbound %q: %w", in.ID, &bus.FieldError{Field: "chat_id", Rule: "required", Err: bus.ErrInvalid})
	}
	data, err := json.Marshal(&in)
	if err != nil {
		return fmt.Errorf("bridge: publish inbound %q: encode: %w", in.ID, err)
	}
	subject := c.subj.In(in.Channel, in.ChatID)
	if _, err := bus.ParseInbound(c.subj, subject, data, c.opts.MaxTextBytes); err != nil {
		return fmt.Errorf("bridge: publish inbound %q: %w", in.ID, err)
	}
	msgID := in.DedupKey()
	ack, err := c.js.Publish(ctx, subject, data, jetstream.WithMsgID(msgID))
	if err != nil {
		if c.closed.Load() {
			err = errors.Join(err, ErrClosed)
		}
		return fmt.Errorf("bridge: publish inbound %q on %s: %w", in.ID, subject, err)
	}
	if ack.Duplicate {
		c.log.DebugContext(ctx, "duplicate inbound ignored by stream", "msg_id", msgID, "stream", ack.Stream)
	}
	return nil
}

// Package natsbus is the NATS side of Switchboard's bus (DESIGN.md §3–4): it
// starts the embedded nats-server (or connects to an external one), ensures
// the JetStream streams CHAT_IN, CHAT_OUT and CHAT_DLQ, publishes envelopes
// and runs the agent runtime's durable consumer on the inbound subjects —
// with agent.partitions above 1 ([Config.Partitions]) one pinned consumer
// per partition, so that each session is consumed by one instance at a
// time ([PartitionConsumerConfig], docs/scale-out.md), and an instance
// registry for `switchboard status` ([Bus.Announce], [Status]).
//
// The embedded server authenticates every client. Bridges declared in
// [Config.Bridges] are isolated from each other: each logs into its own NATS
// account ([BridgeAccount]) holding only its channels' subjects, imported
// from the daemon's account (the global account, which holds JetStream),
// and is granted only those subjects ([BridgePermissions]). Every reply to
// a bridge is routed back into its own account. A bridge's inbound messages
// reach the daemon's ingress ([IngressSubject]), which validates them,
// applies the channel's rate limit ([RateLimitReason]) and stores them with
// a de-duplication key of their own channel, answering a refused message
// with an error and a dead letter on its channel; one bridge's flood waits
// in a bounded buffer of its own and its excess is dropped
// ([Bus.IngressDropped]). The daemon creates each bridge's durable
// outbound consumer ([BridgeConsumerConfig]), which stays the daemon's: the
// ingress refuses a bridge's request for other settings, and a changed or
// deleted consumer is put back. A bridge's JetStream account info is its
// own view, not the daemon account's. With an
// external server the server authenticates, and [Bus.Consume] applies the
// rate limits.
//
// A [Bus] is opened with [Open] and released with [Bus.Close]; all its
// methods are safe for concurrent use.
//
// For operators, [Config.Check] and [Config.CheckAuth] tell `switchboard
// check` whether the bus can be had and who may connect, and
// [Config.WriteContext] writes a nats CLI context with the operator
// credential (`switchboard bus context`).
package natsbus

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/switchboard-chat/switchboard/bus"
)

// ErrClosed is returned (wrapped) by the methods of a [Bus] after Close.
var ErrClosed = errors.New("natsbus: bus closed")

const (
	// clientName is the connection name shown in the server's monitoring.
	clientName = "switchboard"
	// drainTimeout bounds Close's drain of the connection.
	drainTimeout = 5 * time.Second
	// readyTimeout bounds the wait for the embedded server.
	readyTimeout = 10 * time.Second
)

// Bus is an open connection to NATS with the bus streams in place. It owns
// the connection and, in embedded mode, the server; Close releases both. A
// Bus is safe for concurrent use.
type Bus struct {
	subj        bus.Subjects
	streams     Streams
	log         *slog.Logger
	ns          *server.Server // nil with an external URL
	nc          *nats.Conn
	js          jetstream.JetStream
	clientURL   string
	limits      map[string]*channelLimit // inbound rate limits by channel; read-only after Open
	maxText     int                      // bus.max_text_bytes
	ingress     *ingress                 // nil without bridges
	bridges     map[string]BridgeConfig  // declared bridges; read-only after Open
	bridgeWatch *consumerWatch           // puts the bridges' consumers back; nil without bridges
	repairMu    sync.Mutex               // one repair of the bridges' consumers at a time

	// down records when and why the connection was lost; nil while
	// connected. Set by the connection's handlers, read by Ready.
	down atomic.Pointer[outage]

	connClosed chan struct{} // closed by the connection's ClosedHandler

	closeOnce sync.Once // guards Close
	closed    atomic.Bool
	consuming atomic.Bool
	recreated atomic.Bool // the embedded consumer was recreated by Consume

	partitions int                     // agent.partitions ([Config.Partitions])
	parts      atomic.Pointer[[]*part] // the consumers Consume reads; nil before

	outRetention time.Duration // bus.out_retention: CHAT_OUT's MaxAge and Duplicates
	replicas     int           // bus.replicas: every stream's Replicas
}

// Open validates cfg and connects the bus. With cfg.URL empty it starts the
// embedded nats-server with JetStream storing under storeDir (required then),
// listening on cfg.Listen or in-process only when Listen is empty, and
// connects to it in-process; otherwise it connects to cfg.URL (reconnecting
// forever once connected) and ignores storeDir. It then creates or updates
// the streams (see [StreamConfigs]) and each declared bridge's durable
// consumer ([BridgeConsumerConfig]), putting back one someone changed; a
// consumer that cannot be put back is logged, never fatal, and until Close
// a watch puts the consumers back when the server reports one deleted and
// every [BridgeConsumerCheckInterval]. ctx bounds the set-up, not the life
// of the Bus. On error nothing is left running. A nil log discards; short
// secrets ([Config.WeakSecrets]) are logged as warnings.
//
// The embedded server authenticates every client: bridges with their
// credentials, into their own accounts ([BridgeAccount]) with
// [BridgePermissions]; operators with cfg.Admin (full access); and this
// Bus's own in-process connections with a random token made here (full
// access). It accepts no anonymous client, with or without bridges, and
// throttles the failed logins of each remote address ([LoginFailureBurst],
// [LoginFailureRate]), logging them without what the client sent. When
// bridges are declared Open also starts the ingress (on a connection of its
// own, stopped by Close) that stores their inbound messages.
func Open(ctx context.Context, cfg Config, storeDir string, log *slog.Logger) (*Bus, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("natsbus: config: %w", err)
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	for _, w := range cfg.WeakSecrets() {
		log.Warn("bus: weak secret", "warning", w)
	}
	b := &Bus{
		subj:       bus.Subjects{Prefix: cfg.SubjectPrefix},
		streams:    StreamsFor(cfg.SubjectPrefix),
		log:        log,
		limits:     newLimits(cfg.Bridges),
		maxText:    cfg.MaxTextBytes,
		bridges:    cfg.Bridges,
		connClosed: make(chan struct{}),
	}
	b.outRetention = cfg.OutRetentionOrDefault()
	b.replicas = cfg.Replicas
	b.partitions = cfg.Partitions
	opts := []nats.Option{
		nats.DrainTimeout(drainTimeout),
		nats.DisconnectErrHandler(func(nc *nats.Conn, err error) {
			if nc.Opts.Name == clientName {
				b.down.CompareAndSwap(nil, &outage{since: time.Now(), err: err})
			}
			if !b.closed.Load() {
				log.Warn("nats disconnected", "conn", nc.Opts.Name, "err", err)
			}
		}),
		nats.ReconnectHandler(func(nc *nats.Conn) {
			if nc.Opts.Name == clientName {
				if o := b.down.Swap(nil); o != nil {
					log.Info("nats reconnected", "conn", nc.Opts.Name, "url", redactURL(nc.ConnectedUrl()), "down_for", time.Since(o.since).Round(time.Millisecond))
					return
				}
			}
			log.Info("nats reconnected", "conn", nc.Opts.Name, "url", redactURL(nc.ConnectedUrl()))
		}),
	}
	// connect opens a connection named name; closed is closed when it is.
	var connect func(name string, closed chan struct{}) (*nats.Conn, error)
	if cfg.URL == "" {
		if storeDir == "" {
			return nil, errors.New("natsbus: embedded server: store directory is required")
		}
		token, err := newInternalToken()
		if err != nil {
			return nil, err
		}
		auth := newAuthenticator(cfg, token, log)
		b.ns, err = startEmbedded(cfg, storeDir, auth, log)
		if err != nil {
			return nil, err
		}
		accs, err := setupAccounts(b.ns, cfg)
		if err != nil {
			b.ns.Shutdown()
			b.ns.WaitForShutdown()
			return nil, fmt.Errorf("natsbus: embedded server: %w", err)
		}
		auth.setAccounts(accs)
		if cfg.Listen != "" {
			b.clientURL = listenerURL(cfg.Listen, b.ns.Addr())
		}
		connect = func(name string, closed chan struct{}) (*nats.Conn, error) {
			nc, err := nats.Connect("", append(opts, nats.Name(name), nats.Token(token), nats.InProcessServer(b.ns), closeHandler(closed))...)
			if err != nil {
				return nil, fmt.Errorf("natsbus: connect in-process: %w", err)
			}
			return nc, nil
		}
	} else {
		b.clientURL = cfg.URL
		connect = func(name string, closed chan struct{}) (*nats.Conn, error) {
			nc, err := nats.Connect(cfg.URL, append(opts, nats.Name(name), nats.MaxReconnects(-1), closeHandler(closed))...)
			if err != nil {
				return nil, fmt.Errorf("natsbus: connect %s: %w", redactURL(cfg.URL), err)
			}
			return nc, nil
		}
	}
	var err error
	b.nc, err = connect(clientName, b.connClosed)
	if err != nil {
		if b.ns != nil {
			b.ns.Shutdown()
			b.ns.WaitForShutdown()
		}
		return nil, err
	}
	b.js, err = jetstream.New(b.nc)
	if err == nil {
		err = b.ensureStreams(ctx)
	}
	if err == nil && len(cfg.Bridges) > 0 {
		// A consumer that cannot be put back now never stops the start:
		// the watch retries, and the other channels serve meanwhile.
		if rerr := b.repairBridgeConsumers(ctx); rerr != nil {
			log.Error("bridge consumers could not be set up; retrying", "err", rerr, "retry_in", BridgeConsumerCheckInterval)
		}
		err = b.startIngress(cfg, connect)
		if err == nil {
			err = b.watchBridgeConsumers(BridgeConsumerCheckInterval)
		}
	}
	if err != nil {
		_ = b.Close()
		return nil, fmt.Errorf("natsbus: %w", err)
	}
	log.Info("bus ready", "embedded", b.ns != nil, "client_url", redactURL(b.clientURL), "prefix", cfg.SubjectPrefix,
		"bridges", len(cfg.Bridges), "auth", b.ns != nil)
	return b, nil
}

// closeHandler closes closed when the connection is closed.
func closeHandler(closed chan struct{}) nats.Option {
	var once sync.Once
	return nats.ClosedHandler(func(*nats.Conn) { once.Do(func() { close(closed) }) })
}

// startIngress opens the ingress connection and subscribes the ingress
// (see [ingress]). In embedded mode the ingress applies the bridges' rate
// limits; with an external server Consume does.
func (b *Bus) startIngress(cfg Config, connect func(string, chan struct{}) (*nats.Conn, error)) error {
	closed := make(chan struct{})
	nc, err := connect(clientName+"-ingress", closed)
	if err != nil {
		return err
	}
	b.ingress = &ingress{nc: nc, closed: closed, subj: b.subj, maxText: cfg.MaxTextBytes, log: b.log.With("component", "ingress"),
		pendingBytes: ingressPendingPayloads * int(nc.MaxPayload())}
	if b.ns != nil {
		b.ingress.limits = b.limits
	}
	if err := b.ingress.start(cfg.Bridges); err != nil {
		return err
	}
	nc.SetErrorHandler(b.ingress.asyncError) // after start: it reads what start set
	return nil
}

// startEmbedded starts nats-server with JetStream and waits until it accepts
// connections. A non-nil auth authenticates every client.
func startEmbedded(cfg Config, storeDir string, auth *authenticator, log *slog.Logger) (*server.Server, error) {
	opts := &server.Options{
		ServerName: "switchboard",
		JetStream:  true,
		StoreDir:   storeDir,
		NoSigs:     true,
		MaxPayload: maxPayload(cfg.MaxTextBytes),
	}
	if auth != nil {
		opts.CustomClientAuthentication = auth
		opts.AlwaysEnableNonce = true // NKey clients sign it
	}
	if cfg.Listen == "" {
		opts.DontListen = true
	} else {
		host, port, _ := net.SplitHostPort(cfg.Listen) // checked by Validate
		opts.Host = host
		opts.Port, _ = strconv.Atoi(port)
		if opts.Port == 0 {
			opts.Port = server.RANDOM_PORT
		}
	}
	ns, err := server.NewServer(opts)
	if err != nil {
		return nil, fmt.Errorf("natsbus: embedded server: %w", err)
	}
	ns.SetLogger(serverLog{log: log.With("component", "nats-server")}, false, false)
	// Start returns once the listener is bound (or failed to bind) and
	// JetStream is enabled; it leaves the accept loop in a goroutine.
	ns.Start()
	if !opts.DontListen && ns.Addr() == nil {
		ns.Shutdown()
		ns.WaitForShutdown()
		return nil, fmt.Errorf("natsbus: embedded server: cannot listen on %s", cfg.Listen)
	}
	if !ns.ReadyForConnections(readyTimeout) {
		ns.Shutdown()
		ns.WaitForShutdown()
		return nil, fmt.Errorf("natsbus: embedded server: not ready for connections after %s", readyTimeout)
	}
	if !ns.JetStreamEnabled() {
		ns.Shutdown()
		ns.WaitForShutdown()
		return nil, fmt.Errorf("natsbus: embedded server: JetStream failed to start in %s", storeDir)
	}
	return ns, nil
}

// maxPayload sizes the embedded server's max_payload so that an inbound
// envelope with the largest allowed text fits, even with JSON escapes:
// at least the NATS default of 1 MiB, at most 8 MiB.
func maxPayload(maxTextBytes int) int32 {
	const lo, hi = 1 << 20, 8 << 20
	return int32(min(max(2*maxTextBytes+256<<10, lo), hi))
}

// listenerURL returns the URL an outside client uses to reach the embedded
// listener: its real port, and a loopback host when it listens on all
// interfaces.
func listenerURL(listen string, addr net.Addr) string {
	host, _, _ := net.SplitHostPort(listen)
	switch host {
	case "", "0.0.0.0":
		host = "127.0.0.1"
	case "::":
		host = "::1"
	}
	port := 0
	if ta, ok := addr.(*net.TCPAddr); ok {
		port = ta.Port
	}
	return "nats://" + net.JoinHostPort(host, strconv.Itoa(port))
}

// IngressDropped returns, by bridge, how many messages the ingress has
// dropped because the bridge sent them faster than they were taken (more
// than 16,384 messages, or four of the largest, waiting at
// once), since Open. It is empty without bridges.
func (b *Bus) IngressDropped() map[string]int {
	if b.ingress == nil {
		return map[string]int{}
	}
	return b.ingress.dropped()
}

// Subjects returns the subject scheme under the configured prefix.
func (b *Bus) Subjects() bus.Subjects { return b.subj }

// Streams returns the names of the bus streams.
func (b *Bus) Streams() Streams { return b.streams }

// Conn returns the NATS connection. It is owned by the Bus: do not close or
// drain it.
func (b *Bus) Conn() *nats.Conn { return b.nc }

// JetStream returns the JetStream handle over [Bus.Conn].
func (b *Bus) JetStream() jetstream.JetStream { return b.js }

// ClientURL returns the URL an outside client (switchboard chat, a bridge)
// uses to reach this bus: the external URL as configured (it may carry
// credentials), "nats://host:port" of the embedded listener (the real port
// when bus.listen asked for port 0), or "" when the embedded server is
// in-process only.
func (b *Bus) ClientURL() string { return b.clientURL }

// Embedded reports whether the bus runs its own nats-server in-process.
func (b *Bus) Embedded() bool { return b.ns != nil }

// Describe says what the bus is, for the daemon's start-up line: "embedded,
// listening on nats://host:port", "embedded, in-process only", or the
// external URL with its credentials redacted.
func (b *Bus) Describe() string {
	switch {
	case b.clientURL == "":
		return "embedded, in-process only"
	case b.Embedded():
		return "embedded, listening on " + b.clientURL
	}
	return bus.RedactURL(b.clientURL)
}

// Publish publishes data on subject through JetStream and waits for the
// stream's acknowledgement (bounded by ctx). A non-empty msgID is sent as the
// Nats-Msg-Id header; a publish the stream recognises as a duplicate within
// its de-duplication window is a success. The subject must be captured by a
// stream (in, out or dlq), else Publish fails.
func (b *Bus) Publish(ctx context.Context, subject string, data []byte, msgID string) error {
	if b.closed.Load() {
		return fmt.Errorf("natsbus: publish %s: %w", subject, ErrClosed)
	}
	var opts []jetstream.PublishOpt
	if msgID != "" {
		opts = append(opts, jetstream.WithMsgID(msgID))
	}
	ack, err := b.js.Publish(ctx, subject, data, opts...)
	if err != nil {
		return fmt.Errorf("natsbus: publish %s: %w", subject, err)
	}
	if ack.Duplicate {
		b.log.DebugContext(ctx, "duplicate publish ignored by stream", "subject", subject, "msg_id", msgID, "stream", ack.Stream)
	}
	return nil
}

// PublishCore publishes data on subject with core NATS: no acknowledgement,
// no de-duplication, at most once (used for deltas, typing and events). It
// does not block on the network. On the embedded server, a subject that
// nothing receives at the moment — no subscription of any client, bridge
// (through its account's import) or stream — is not sent at all: a turn's
// events cost nothing while no console, bridge or tail follows them.
func (b *Bus) PublishCore(subject string, data []byte) error {
	if b.closed.Load() {
		return fmt.Errorf("natsbus: publish %s: %w", subject, ErrClosed)
	}
	if b.ns != nil && !b.ns.GlobalAccount().SubscriptionInterest(subject) {
		return nil
	}
	if err := b.nc.Publish(subject, data); err != nil {
		return fmt.Errorf("natsbus: publish %s: %w", subject, err)
	}
	return nil
}

// outage is a lost connection: since when and the error that ended it.
type outage struct {
	since time.Time
	err   error
}

// Ready reports whether the bus can serve: it is open, connected, and the
// three streams exist. The error says which check failed; while the
// connection is down it names the server, how long it has been down and
// why ("natsbus: not ready: disconnected from nats://10.0.0.5:4222 for 3s,
// reconnecting: EOF; last error: connection refused").
func (b *Bus) Ready(ctx context.Context) error {
	if b.closed.Load() {
		return fmt.Errorf("natsbus: not ready: %w", ErrClosed)
	}
	if st := b.nc.Status(); st != nats.CONNECTED {
		return fmt.Errorf("natsbus: not ready: %s", b.downReason(st))
	}
	var errs []error
	for _, name := range []string{b.streams.In, b.streams.Out, b.streams.DLQ} {
		if _, err := b.js.Stream(ctx, name); err != nil {
			errs = append(errs, fmt.Errorf("natsbus: not ready: stream %s: %w", name, err))
		}
	}
	return errors.Join(errs...)
}

// downReason describes a connection in state st (not CONNECTED).
func (b *Bus) downReason(st nats.Status) string {
	server := "the embedded server"
	if b.ns == nil {
		server = redactURL(b.clientURL)
	}
	var r strings.Builder
	fmt.Fprintf(&r, "disconnected from %s", server)
	b.down.CompareAndSwap(nil, &outage{since: time.Now()}) // before the handler ran
	o := b.down.Load()
	if o != nil {
		fmt.Fprintf(&r, " for %s", time.Since(o.since).Round(time.Second))
	}
	switch st {
	case nats.RECONNECTING, nats.DISCONNECTED:
		r.WriteString(", reconnecting")
	default:
		fmt.Fprintf(&r, ", connection %s", st)
	}
	if o != nil && o.err != nil {
		fmt.Fprintf(&r, ": %v", o.err)
	}
	if err := b.nc.LastError(); err != nil && (o == nil || o.err == nil || err.Error() != o.err.Error()) {
		fmt.Fprintf(&r, "; last error: %v", err)
	}
	return r.String()
}

// WatchReady reports the bus's readiness ([Bus.Ready]) to report at once,
// whenever the connection is lost or comes back, and every interval in
// between (streams may go missing without a disconnect), until ctx ends.
// It returns when ctx ends. A non-positive interval means 5 s.
func (b *Bus) WatchReady(ctx context.Context, interval time.Duration, report func(error)) {
	if interval <= 0 {
		interval = 5 * time.Second
	}
	status := b.nc.StatusChanged(nats.CONNECTED, nats.RECONNECTING, nats.DISCONNECTED, nats.CLOSED)
	defer b.nc.RemoveStatusListener(status)
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		report(b.Ready(rctx))
		cancel()
		select {
		case <-ctx.Done():
			return
		case <-status:
		case <-t.C:
		}
	}
}

// Close drains the connection (waiting at most a few seconds for pending
// publishes and subscriptions), then, in embedded mode, shuts the server down
// and waits for it. It is idempotent and safe to call concurrently; later
// calls return nil. Call it after [Bus.Consume] has returned.
func (b *Bus) Close() error {
	b.closeOnce.Do(func() {
		b.closed.Store(true)
		if b.bridgeWatch != nil {
			b.bridgeWatch.close()
		}
		if b.ingress != nil {
			drain(b.ingress.nc, b.ingress.closed, b.log)
		}
		drain(b.nc, b.connClosed, b.log)
		if b.ns != nil {
			b.ns.Shutdown()
			b.ns.WaitForShutdown()
		}
	})
	return nil
}

// drain drains nc (its subscriptions' handlers finish, pending publishes
// are flushed) and waits until it is closed, closing it after a few
// seconds at most.
func drain(nc *nats.Conn, closed <-chan struct{}, log *slog.Logger) {
	if err := nc.Drain(); err != nil {
		nc.Close()
	}
	timer := time.NewTimer(drainTimeout + time.Second)
	defer timer.Stop()
	select {
	case <-closed:
	case <-timer.C:
		log.Warn("nats drain did not finish; closing", "conn", nc.Opts.Name)
		nc.Close()
		<-closed
	}
}

// redactURL hides the credentials of a URL (or comma-separated URL list)
// for logs and errors ([bus.RedactURL]).
func redactURL(u string) string { return bus.RedactURL(u) }

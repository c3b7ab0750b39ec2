package channels

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"golang.org/x/sync/errgroup"
)

// ShutdownTimeout bounds how long [ServeHTTP] waits for requests still
// running when its context ends; what is left then is closed.
const ShutdownTimeout = 10 * time.Second

// ServeHTTP is the HTTP server of a built-in channel that people or
// programs reach directly (the OpenAI-compatible API, the web console): it
// serves h on ln, with ctx as every request's base context, until ctx
// ends; then it calls beforeShutdown (nil: none; it ends long-lived
// streams such as server-sent events, so that the shutdown need not wait
// for them), shuts the server down gracefully within ShutdownTimeout and
// returns nil. It returns the error of a server that stopped on its own.
// The server's own error log goes to log at warning level.
func ServeHTTP(ctx context.Context, ln net.Listener, h http.Handler, log *slog.Logger, beforeShutdown func()) error {
	srv := &http.Server{
		Handler:           h,
		ReadHeaderTimeout: 30 * time.Second,
		BaseContext:       func(net.Listener) context.Context { return ctx },
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	select {
	case err := <-served:
		return err // the listener failed: ErrServerClosed is not possible here
	case <-ctx.Done():
	}
	if beforeShutdown != nil {
		beforeShutdown()
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), ShutdownTimeout)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		_ = srv.Close()
	}
	if err := <-served; err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// HTTPChannel is the running part of a built-in channel served over HTTP
// ([RunHTTP]).
type HTTPChannel struct {
	// Name prefixes errors ("openai: listen ...") and names the channel in
	// logs.
	Name string
	// Addr is the address to listen on (host:port, checked by the
	// channel's Validate).
	Addr    string
	Handler http.Handler
	Log     *slog.Logger
	// BeforeShutdown is ServeHTTP's; nil: none.
	BeforeShutdown func()
	// Workers run beside the server until ctx ends (the outbound consumer,
	// event subscriptions); the first error stops everything.
	Workers []func(context.Context) error
	// Started is called once the listener is open, before the workers and
	// the server start, with the context they run under (it ends when any
	// of them fails) and the address bound.
	Started func(ctx context.Context, addr net.Addr)
	// Status reports the channel's health (nil: healthy); nil: not
	// reported.
	Status func(error)
	// Stopped is logged at info level when ctx ended and everything
	// stopped cleanly.
	Stopped string
}

// RunHTTP listens on h.Addr and runs the server and the workers until ctx
// ends, then returns nil; it returns the error of a listener that cannot
// be opened, or of a worker or the server that failed (reported to Status
// as well).
func RunHTTP(ctx context.Context, h HTTPChannel) error {
	status := func(err error) {
		if h.Status != nil {
			h.Status(err)
		}
	}
	ln, err := (&net.ListenConfig{}).Listen(ctx, "tcp", h.Addr)
	if err != nil {
		err = fmt.Errorf("%s: listen %s: %w", h.Name, h.Addr, err)
		status(err)
		return err
	}
	g, gctx := errgroup.WithContext(ctx)
	if h.Started != nil {
		h.Started(gctx, ln.Addr()) // before anything runs that may read what it sets
	}
	for _, w := range h.Workers {
		g.Go(func() error { return w(gctx) })
	}
	g.Go(func() error {
		if err := ServeHTTP(gctx, ln, h.Handler, h.Log, h.BeforeShutdown); err != nil {
			return fmt.Errorf("%s: serve: %w", h.Name, err)
		}
		return nil
	})
	status(nil)
	err = g.Wait()
	if ctx.Err() != nil && (err == nil || errors.Is(err, context.Canceled)) {
		if h.Stopped != "" {
			h.Log.Info(h.Stopped)
		}
		return nil
	}
	if err != nil {
		status(err)
	}
	return err
}

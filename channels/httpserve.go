package channels

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"

	"golang.org/x/sync/errgroup"

	"github.com/switchboard-chat/switchboard/internal/httpserve"
)

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
	// HTTP bounds the listener and the server and counts the listener's
	// connections under Name (the daemon's; nil: httpserve's defaults).
	HTTP *httpserve.Servers
	// BeforeShutdown ends long-lived streams such as server-sent events
	// when ctx ends, so that the shutdown need not wait for them; nil:
	// none.
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

// RunHTTP listens on h.Addr (a listener bounded by h.HTTP) and runs the
// server and the workers until ctx ends, then shuts the server down
// (within httpserve.DefaultShutdownTimeout) and returns nil; it returns
// the error of a listener that cannot be opened, or of a worker or the
// server that failed (reported to Status as well).
func RunHTTP(ctx context.Context, h HTTPChannel) error {
	status := func(err error) {
		if h.Status != nil {
			h.Status(err)
		}
	}
	ln, err := h.HTTP.Listen(ctx, h.Name, h.Addr)
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
		// No write timeout: the channels stream answers as server-sent
		// events; requests see gctx end.
		o := httpserve.Options{Log: h.Log, CancelRequests: true, BeforeShutdown: h.BeforeShutdown}
		if err := h.HTTP.Serve(gctx, ln, h.Handler, o); err != nil {
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

package channels

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"time"
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

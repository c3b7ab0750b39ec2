package httpserve

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"time"
)

// DefaultShutdownTimeout is how long Serve waits for requests still
// running when its context ends, unless Options say otherwise.
const DefaultShutdownTimeout = 10 * time.Second

// Options are what a server chooses beyond the Config.
type Options struct {
	// Log receives the HTTP server's own error lines at warning level;
	// nil discards.
	Log *slog.Logger
	// WriteTimeout bounds writing a response; 0: none (a listener with
	// server-sent events must leave it 0).
	WriteTimeout time.Duration
	// CancelRequests makes ctx every request's base context, so that the
	// requests still running (long-lived streams) see it end.
	CancelRequests bool
	// BeforeShutdown runs when ctx ends, before the graceful shutdown (it
	// ends long-lived streams so that the shutdown need not wait for
	// them); nil: none.
	BeforeShutdown func()
	// ShutdownTimeout bounds the graceful shutdown, after which what is
	// left is closed; 0: DefaultShutdownTimeout.
	ShutdownTimeout time.Duration
}

// Server returns the http.Server Serve runs h with: the Config's
// timeouts and header bound, o's write timeout and error log, and (for a
// listener from Listen, named ln) keep-alive off while ln holds three
// quarters of its cap.
func (s *Servers) Server(ln net.Listener, h http.Handler, o Options) *http.Server {
	s = s.orDefault()
	if bl, ok := ln.(*listener); ok {
		h = keepAliveUnderPressure(bl.c, bl.maxConns, h)
	}
	log := o.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &http.Server{
		Handler:           h,
		ReadHeaderTimeout: s.cfg.ReadHeaderTimeout,
		ReadTimeout:       s.cfg.ReadTimeout,
		WriteTimeout:      o.WriteTimeout,
		IdleTimeout:       s.cfg.IdleTimeout,
		MaxHeaderBytes:    s.cfg.MaxHeaderBytes,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
}

// keepAliveUnderPressure closes each connection after its response while
// c holds three quarters of maxConns, so idle kept-alive connections give
// their places back.
func keepAliveUnderPressure(c *counts, maxConns int, h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if c.busy(maxConns) {
			w.Header().Set("Connection", "close")
		}
		h.ServeHTTP(w, r)
	})
}

// Serve serves h on ln (from [Servers.Listen]) with [Servers.Server]
// until ctx ends; then it runs o.BeforeShutdown, shuts the server down
// gracefully within o.ShutdownTimeout, closes what is left and returns
// nil. It returns the error of a listener that failed on its own. Every
// goroutine it starts has ended when it returns.
func (s *Servers) Serve(ctx context.Context, ln net.Listener, h http.Handler, o Options) error {
	srv := s.Server(ln, h, o)
	if o.CancelRequests {
		srv.BaseContext = func(net.Listener) context.Context { return ctx }
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	select {
	case err := <-served:
		return err // the listener failed: ErrServerClosed is not possible here
	case <-ctx.Done():
	}
	if o.BeforeShutdown != nil {
		o.BeforeShutdown()
	}
	timeout := o.ShutdownTimeout
	if timeout <= 0 {
		timeout = DefaultShutdownTimeout
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), timeout)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		_ = srv.Close()
	}
	if err := <-served; err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

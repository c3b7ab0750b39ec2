// Command fakellm serves a scripted, OpenAI-compatible chat completion
// endpoint for trying Switchboard without a real model: "echo" mode answers
// "echo: <your text>", "demo" mode is the model of `switchboard demo`
// (scripted.DemoResponder): it lists the workspace with the list_dir tool
// only when asked about files, and answers a greeting with text. Point
// llm.base_url at the printed URL.
//
// Usage:
//
//	fakellm [--listen 127.0.0.1:8088] [--mode echo|demo] [--latency 0s] [--chunk 0]
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/switchboard-chat/switchboard/internal/scripted"
	"github.com/switchboard-chat/switchboard/llm/llmtest"
)

// shutdownGrace bounds how long in-flight replies may finish on shutdown.
const shutdownGrace = 5 * time.Second

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout)
	stop()
	switch {
	case errors.Is(err, flag.ErrHelp):
	case err != nil:
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

// run parses args, serves until ctx ends, then shuts down gracefully. It
// writes the address banner (and usage on a flag error) to stdout.
func run(ctx context.Context, args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("fakellm", flag.ContinueOnError)
	fs.SetOutput(stdout)
	listen := fs.String("listen", "127.0.0.1:8088", "address to listen on (host:port; port 0 picks a free one)")
	mode := fs.String("mode", "demo", "reply rules: echo (echo the user's text) or demo (the demo's model: list_dir only when asked about files, a greeting answered, echo otherwise)")
	latency := fs.Duration("latency", 0, "delay before each reply's first byte")
	chunk := fs.Int("chunk", 0, "stream text in chunks of this many bytes (0: one chunk)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("fakellm: unexpected arguments %q", fs.Args())
	}
	var responder llmtest.Responder
	switch *mode {
	case "echo":
		responder = llmtest.EchoResponder
	case "demo":
		responder = scripted.DemoResponder
	default:
		return fmt.Errorf("fakellm: --mode: must be echo or demo, got %q", *mode)
	}
	if *latency < 0 {
		return fmt.Errorf("fakellm: --latency: must not be negative, got %s", *latency)
	}
	if *chunk < 0 {
		return fmt.Errorf("fakellm: --chunk: must not be negative, got %d", *chunk)
	}

	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", *listen)
	if err != nil {
		return fmt.Errorf("fakellm: --listen: %w", err)
	}
	h := llmtest.NewHandler(
		llmtest.WithResponder(responder),
		llmtest.WithLatency(*latency),
		llmtest.WithChunkSize(*chunk),
		llmtest.WithRecordLimit(0), // a long-running server must not keep every request
	)
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	fmt.Fprintf(stdout, "fakellm: OpenAI-compatible scripted model on http://%s/v1 (mode %s)\n", ln.Addr(), *mode)

	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return fmt.Errorf("fakellm: serve: %w", err)
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), shutdownGrace)
	defer cancel()
	shutErr := srv.Shutdown(sctx)
	if shutErr != nil {
		h.Close() // release replies still waiting, then drop the connections
		_ = srv.Close()
	}
	if err := <-errc; !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("fakellm: serve: %w", err)
	}
	if shutErr != nil {
		return fmt.Errorf("fakellm: shutdown: %w", shutErr)
	}
	return nil
}

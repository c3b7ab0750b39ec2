package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"

	"github.com/switchboard-chat/switchboard/internal/loadgen"
)

// runBench implements `switchboard bench`: package loadgen runs this
// daemon (serve, on a temporary folder with the scripted model) and drives
// it; docs/operations.md explains the figures.
func runBench(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var b loadgen.Bench
	b.Flags(fs)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if err := b.Validate(); err != nil {
		return fmt.Errorf("%w: %w", errUsage, err)
	}
	return b.Run(ctx, stdout, func(ctx context.Context, s loadgen.Setup, ready func(loadgen.Target)) error {
		cfg := scriptedConfig(s.Env)
		cfg.Bus.Listen, cfg.Tools.Disabled = "127.0.0.1:0", s.DisabledTools
		return serve(ctx, cfg, slog.New(slog.DiscardHandler), func(st started) {
			ready(loadgen.Target{URL: st.Bus.ClientURL(), Subjects: st.Bus.Subjects(), Metrics: st.Metrics.Gatherer()})
		})
	})
}

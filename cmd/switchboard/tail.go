package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/switchboard-chat/switchboard/bus"
	"github.com/switchboard-chat/switchboard/bus/natsbus"
	"github.com/switchboard-chat/switchboard/channels/console/tail"
	"github.com/switchboard-chat/switchboard/internal/cli"
)

// runBus dispatches `switchboard bus <subcommand>`.
func runBus(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		cli.Help(stdout, nil, "bus")
		if len(args) == 0 {
			return fmt.Errorf("%w: bus: want a subcommand: tail or context", errUsage)
		}
		return nil
	}
	switch args[0] {
	case "tail":
		return runTail(ctx, args[1:], stdout, stderr)
	case "context":
		return runBusContext(args[1:], os.LookupEnv, stdout, stderr)
	default:
		return fmt.Errorf("%w: bus: unknown subcommand %q (want tail or context)", errUsage, args[0])
	}
}

// runTail implements `switchboard bus tail [--config FILE] [--channel
// NAME] [--url URL]` (package channels/console/tail), as the operator like
// `switchboard chat`, until ctx ends.
func runTail(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("bus tail", flag.ContinueOnError)
	fs.SetOutput(stderr)
	path := configFlag(fs)
	channel := fs.String("channel", "", "show only this channel (default: all)")
	busURL := natsbus.URLFlag(fs)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *channel != "" && !bus.ValidChannel(*channel) {
		return fmt.Errorf("%w: --channel: must match ^[a-z0-9_-]{1,32}$, got %q", errUsage, *channel)
	}
	cfg, _, err := LoadConfig(*path)
	if err != nil {
		return err
	}
	op, err := cfg.Bus.OperatorAt(*busURL, cfg.DataDir)
	if err != nil {
		return fmt.Errorf("bus tail: %w", err)
	}
	nc, err := tail.Dial(op.URL, op.Options(), stderr)
	if err != nil {
		return err
	}
	defer nc.Close()
	p := tail.Printer{Subjects: bus.Subjects{Prefix: cfg.Bus.SubjectPrefix}, MaxTextBytes: cfg.Bus.MaxTextBytes}
	return tail.Run(ctx, nc, p, *channel, bus.RedactURL(op.URL), stdout)
}

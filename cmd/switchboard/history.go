package main

import (
	"context"
	"flag"
	"fmt"
	"io"

	"github.com/switchboard-chat/switchboard/internal/cli"
	"github.com/switchboard-chat/switchboard/memory"
	"github.com/switchboard-chat/switchboard/memory/boltstore"
)

// runHistory implements `switchboard history list|export|reset|compact`:
// it parses the flags and lets boltstore.History do the verb.
func runHistory(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		cli.Help(stdout, nil, "history")
		if len(args) == 0 {
			return fmt.Errorf("%w: history: want a subcommand: list, export, reset or compact", errUsage)
		}
		return nil
	}
	sub, args := args[0], args[1:]
	flags := flag.NewFlagSet("history "+sub, flag.ContinueOnError)
	flags.SetOutput(stderr)
	path := configFlag(flags)
	var session, out *string
	switch sub {
	case "list", "compact":
	case "export":
		session = flags.String("session", "", "session key (required)")
		out = flags.String("out", "", "output file (default: standard output)")
	case "reset":
		session = flags.String("session", "", "session key (required)")
	default:
		return fmt.Errorf("%w: history: unknown subcommand %q (want list, export, reset or compact)", errUsage, sub)
	}
	if err := parseFlags(flags, args); err != nil {
		return err
	}
	if session != nil {
		if *session == "" {
			return fmt.Errorf("%w: history %s: --session is required (see: switchboard history list)", errUsage, sub)
		}
		if err := memory.ValidateSession(*session); err != nil {
			return fmt.Errorf("%w: history %s: --session: %v", errUsage, sub, err)
		}
	}
	cfg, _, err := LoadConfig(*path)
	if err != nil {
		return err
	}
	req := boltstore.HistoryRequest{Verb: sub}
	if session != nil {
		req.Session = *session
	}
	if out != nil {
		req.Out = *out
	}
	return boltstore.History(ctx, cfg.DataDir, req, stdout)
}

package main

import (
	"context"
	"flag"
	"fmt"
	"io"

	"github.com/switchboard-chat/switchboard/memory"
	"github.com/switchboard-chat/switchboard/memory/boltstore"
)

// historyUsage describes the history verbs.
const historyUsage = `Usage: switchboard history <subcommand> [--config FILE] [flags]

Work on the conversation history (data_dir/history.db). The daemon must be
stopped: it holds the file's lock while it runs.

  list                            list the stored sessions
  export --session KEY [--out FILE]
                                  write a session's whole history as JSON Lines
                                  (one message per line, oldest first; default stdout)
  reset --session KEY             delete a session's history, summary and stored answers
                                  (receipts; run it while the daemon is stopped)
  compact                         rewrite history.db without its free space
                                  (bbolt files never shrink by themselves)

Session keys look like telegram/123456 or slack/C0123/1700000000.000100;
see "history list".
`

// runHistory implements `switchboard history list|export|reset|compact`:
// it parses the flags and lets boltstore.History do the verb.
func runHistory(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		fmt.Fprint(stdout, historyUsage)
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

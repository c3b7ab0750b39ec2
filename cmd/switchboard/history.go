package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"text/tabwriter"
	"time"

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

// runHistory implements `switchboard history list|export|reset|compact`.
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
	cfg, err := LoadConfig(*path)
	if err != nil {
		return err
	}
	file := filepath.Join(cfg.DataDir, "history.db")
	if _, err := os.Stat(file); errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("history %s: %s does not exist: no history has been stored under data_dir %s yet", sub, file, cfg.DataDir)
	} else if err != nil {
		return fmt.Errorf("history %s: %w", sub, err)
	}
	if sub == "compact" {
		res, err := boltstore.CompactFile(file, time.Second)
		if err != nil {
			return historyError(sub, err)
		}
		fmt.Fprintf(stdout, "compacted %s: %s -> %s\n", file, byteSize(res.Before), byteSize(res.After))
		return nil
	}
	store, err := boltstore.Open(file, boltstore.Options{})
	if err != nil {
		return historyError(sub, err)
	}
	defer store.Close()
	switch sub {
	case "list":
		return historyList(ctx, store, stdout)
	case "export":
		return historyExport(ctx, store, *session, *out, stdout)
	default:
		return historyReset(ctx, store, *session, stdout)
	}
}

// historyError explains the common failures: the daemon holds the file, or
// the session does not exist.
func historyError(sub string, err error) error {
	switch {
	case errors.Is(err, boltstore.ErrLocked):
		return fmt.Errorf("history %s: history.db is in use: is the daemon running? Stop it first (%w)", sub, err)
	case errors.Is(err, memory.ErrNotFound):
		return fmt.Errorf("history %s: no such session (see: switchboard history list): %w", sub, err)
	}
	return fmt.Errorf("history %s: %w", sub, err)
}

func historyList(ctx context.Context, store *boltstore.Store, stdout io.Writer) error {
	infos, err := store.Sessions(ctx)
	if err != nil {
		return historyError("list", err)
	}
	if len(infos) == 0 {
		fmt.Fprintln(stdout, "no sessions stored")
		return nil
	}
	tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "SESSION\tMESSAGES\tIN CONTEXT\tTURNS\tSUMMARY\tLAST ACTIVE")
	for _, s := range infos {
		summary := "-"
		if s.SummaryBytes > 0 {
			summary = byteSize(int64(s.SummaryBytes))
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%s\t%s\n", s.Key, s.Messages, s.Context, s.Turns, summary, s.LastActive.Local().Format("2006-01-02 15:04"))
	}
	return tw.Flush()
}

func historyExport(ctx context.Context, store *boltstore.Store, session, out string, stdout io.Writer) error {
	if out == "" {
		if err := store.Export(ctx, session, stdout); err != nil {
			return historyError("export", err)
		}
		return nil
	}
	// Write next to the target and rename, so a failed export never
	// leaves a truncated file under the requested name.
	if err := replaceFile(out, func(w io.Writer) error { return store.Export(ctx, session, w) }); err != nil {
		return historyError("export", err)
	}
	fmt.Fprintf(stdout, "exported session %s to %s\n", session, out)
	return nil
}

func historyReset(ctx context.Context, store *boltstore.Store, session string, stdout io.Writer) error {
	var msgs uint64
	infos, err := store.Sessions(ctx)
	if err != nil {
		return historyError("reset", err)
	}
	for _, s := range infos {
		if s.Key == session {
			msgs = s.Messages
		}
	}
	if err := store.Reset(ctx, session); err != nil {
		return historyError("reset", err)
	}
	fmt.Fprintf(stdout, "reset session %s: deleted %d messages, its summary and its stored answers\n", session, msgs)
	return nil
}

// byteSize formats n bytes for people: 812 B, 3.4 KB, 12.0 MB.
func byteSize(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %cB", float64(n)/float64(div), "KMGTPE"[exp])
}

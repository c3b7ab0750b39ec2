package boltstore

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"text/tabwriter"
	"time"

	"github.com/switchboard-chat/switchboard/internal/atomicfile"
	"github.com/switchboard-chat/switchboard/memory"
)

// HistoryRequest is one `switchboard history` verb.
type HistoryRequest struct {
	Verb    string // list, export, reset or compact
	Session string // export, reset: a valid session key
	Out     string // export: the file to write; empty writes to stdout
}

// History runs req on [FileName] in dataDir and reports to stdout:
//
//   - list: a table of the stored sessions (key, messages, messages in
//     context, turns, summary size, last active in local time);
//   - export: the session's whole history as JSON Lines ([Store.Export]),
//     to stdout or, replaced whole, to req.Out;
//   - reset: deletes the session's history, summary and stored answers
//     ([Store.Reset]) and says how many messages went;
//   - compact: rewrites the file without its free space ([CompactFile]).
//
// The daemon must be stopped: an error then says the file is in use. Every
// error starts with "history VERB: " and says what to do (an unknown
// session points to history list).
func History(ctx context.Context, dataDir string, req HistoryRequest, stdout io.Writer) error {
	sub := req.Verb
	file := filepath.Join(dataDir, FileName)
	if _, err := os.Stat(file); errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("history %s: %s does not exist: no history has been stored under data_dir %s yet", sub, file, dataDir)
	} else if err != nil {
		return fmt.Errorf("history %s: %w", sub, err)
	}
	if sub == "compact" {
		res, err := CompactFile(file, time.Second)
		if err != nil {
			return historyError(sub, err)
		}
		fmt.Fprintf(stdout, "compacted %s: %s -> %s\n", file, ByteSize(res.Before), ByteSize(res.After))
		return nil
	}
	store, err := Open(file, Options{})
	if err != nil {
		return historyError(sub, err)
	}
	defer store.Close()
	switch sub {
	case "list":
		return historyList(ctx, store, stdout)
	case "export":
		return historyExport(ctx, store, req.Session, req.Out, stdout)
	case "reset":
		return historyReset(ctx, store, req.Session, stdout)
	}
	return fmt.Errorf("history: unknown subcommand %q (want list, export, reset or compact)", sub)
}

// historyError explains the common failures: the daemon holds the file, or
// the session does not exist.
func historyError(sub string, err error) error {
	switch {
	case errors.Is(err, ErrLocked):
		return fmt.Errorf("history %s: %s is in use: is the daemon running? Stop it first (%w)", sub, FileName, err)
	case errors.Is(err, memory.ErrNotFound):
		return fmt.Errorf("history %s: no such session (see: switchboard history list): %w", sub, err)
	}
	return fmt.Errorf("history %s: %w", sub, err)
}

func historyList(ctx context.Context, store *Store, stdout io.Writer) error {
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
			summary = ByteSize(int64(s.SummaryBytes))
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%s\t%s\n", s.Key, s.Messages, s.Context, s.Turns, summary, s.LastActive.Local().Format("2006-01-02 15:04"))
	}
	return tw.Flush()
}

func historyExport(ctx context.Context, store *Store, session, out string, stdout io.Writer) error {
	if out == "" {
		if err := store.Export(ctx, session, stdout); err != nil {
			return historyError("export", err)
		}
		return nil
	}
	// Write next to the target and rename, so a failed export never
	// leaves a truncated file under the requested name.
	if err := atomicfile.Replace(out, func(w io.Writer) error { return store.Export(ctx, session, w) }); err != nil {
		return historyError("export", err)
	}
	fmt.Fprintf(stdout, "exported session %s to %s\n", session, out)
	return nil
}

func historyReset(ctx context.Context, store *Store, session string, stdout io.Writer) error {
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

// ByteSize formats n bytes for people: 812 B, 3.4 KB, 12.0 MB.
func ByteSize(n int64) string {
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

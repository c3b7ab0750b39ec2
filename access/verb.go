package access

import (
	"context"
	"flag"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/switchboard-chat/switchboard/bus/natsbus"
	"github.com/switchboard-chat/switchboard/internal/cli"
	"github.com/switchboard-chat/switchboard/internal/kvstate"
	"github.com/switchboard-chat/switchboard/memory/memcfg"
)

// Site is what `switchboard pairing` needs of the configuration.
type Site struct {
	Config  Config
	DataDir string
	// Store is memory.store: with jetstream the state is the cluster's
	// access bucket, reached on the bus as the operator; otherwise
	// data_dir/access.db.
	Store string
	// Bus is the bus section: with jetstream the verb reaches the bus as
	// its operator (natsbus.Config.OperatorAt, with URL or the credential
	// in DataDir), as `switchboard status` does.
	Bus natsbus.Config
	// URL is --url (RunVerb sets it): the bus, credentials in it; ""
	// for the configuration's.
	URL string
}

// Load returns the Site of the configuration file at path (the daemon's
// LoadConfig).
type Load func(path string) (Site, error)

// RunVerb is `switchboard pairing approve CODE | list | revoke
// <channel>:<user_id>`. With memory.store bolt it works on
// data_dir/access.db, with the daemon running (which reads the file at
// each decision) or stopped. With memory.store jetstream it works on the
// cluster's access bucket, through the bus as the operator (--url or the
// credential in data_dir, as `switchboard status`), so that an approval or
// a revocation applies on every instance at the user's next message.
// configFlag registers the --config flag; flags may come before or after
// the positional argument.
func RunVerb(ctx context.Context, args []string, stdout, stderr io.Writer, configFlag func(*flag.FlagSet) *string, load Load) error {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		cli.Help(stdout, nil, "pairing")
		if len(args) == 0 {
			return fmt.Errorf("%w: pairing: want a subcommand: approve, list or revoke", cli.ErrUsage)
		}
		return nil
	}
	if args[0] != "approve" && args[0] != "list" && args[0] != "revoke" {
		return fmt.Errorf("%w: pairing: unknown subcommand %q (want approve, list or revoke)", cli.ErrUsage, args[0])
	}
	sub := args[0]
	fs := flag.NewFlagSet("pairing "+sub, flag.ContinueOnError)
	fs.SetOutput(stderr)
	path, busURL := configFlag(fs), natsbus.URLFlag(fs)
	words, flags := positional(args[1:])
	if err := cli.Parse(fs, flags); err != nil {
		return err
	}
	want := map[string]int{"approve": 1, "list": 0, "revoke": 1}[sub]
	if len(words) != want {
		arg := map[string]string{"approve": "a pairing code", "revoke": "a user as <channel>:<user_id>"}[sub]
		if want == 0 {
			return fmt.Errorf("%w: pairing list: unexpected argument %q", cli.ErrUsage, words[0])
		}
		return fmt.Errorf("%w: pairing %s: want %s", cli.ErrUsage, sub, arg)
	}
	site, err := load(*path)
	if err != nil {
		return err
	}
	site.URL = *busURL
	s, done, err := site.open(ctx)
	if err != nil {
		return fmt.Errorf("pairing %s: %w", sub, err)
	}
	defer done()
	switch sub {
	case "approve":
		who, err := s.Approve(words[0], "switchboard pairing approve")
		if err != nil {
			return fmt.Errorf("pairing approve: %w", err)
		}
		fmt.Fprintf(stdout, "Approved %s: their next message goes through.\n", who)
	case "revoke":
		if err := s.Revoke(words[0]); err != nil {
			return fmt.Errorf("pairing revoke: %w", err)
		}
		fmt.Fprintf(stdout, "Revoked %s: their next message in a direct chat gets a new pairing code (under dm_policy pairing).\n", words[0])
	default:
		pending, approved, err := s.List()
		if err != nil {
			return fmt.Errorf("pairing list: %w", err)
		}
		writeList(stdout, pending, approved)
	}
	return nil
}

// open returns the Store of site and what closes its connection.
func (site Site) open(ctx context.Context) (*Store, func(), error) {
	if site.Store != memcfg.StoreJetStream {
		return New(site.Config, site.DataDir, Options{}), func() {}, nil
	}
	op, err := site.Bus.OperatorAt(site.URL, site.DataDir)
	if err != nil {
		return nil, nil, fmt.Errorf("memory.store is jetstream, so the pairing state is on the bus: %w", err)
	}
	nc, err := nats.Connect(op.URL, append(op.Options(), nats.Name("switchboard-pairing"))...)
	if err != nil {
		return nil, nil, fmt.Errorf("memory.store is jetstream, so the pairing state is on the bus: connect (%s): %w", op.Source, err)
	}
	kv, err := kvstate.OpenAccess(ctx, nc, kvstate.Config{Prefix: strings.ReplaceAll(site.Bus.SubjectPrefix, ".", "_"), Replicas: site.Bus.Replicas})
	if err != nil {
		nc.Close()
		return nil, nil, err
	}
	return New(site.Config, site.DataDir, Options{Shared: kv}), nc.Close, nil
}

// positional splits args into the positional words and the flags (with
// their values: --config FILE), so flags may follow the argument.
func positional(args []string) (words, flags []string) {
	for i := 0; i < len(args); i++ {
		a := args[i]
		switch {
		case a == "--":
			return append(words, args[i+1:]...), flags
		case strings.HasPrefix(a, "-") && len(a) > 1:
			flags = append(flags, a)
			if name := strings.TrimLeft(a, "-"); (name == "config" || name == "url") && i+1 < len(args) {
				i++
				flags = append(flags, args[i])
			}
		default:
			words = append(words, a)
		}
	}
	return words, flags
}

// writeList prints the pending requests and the approved users.
func writeList(w io.Writer, pending, approved []Entry) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "Pending (%d; the code is with the user, only its hash is stored):\n", len(pending))
	for _, e := range pending {
		fmt.Fprintf(tw, "  %s\t%s\tasked %s\texpires %s\n", e.Who, name(e.Name), e.At.UTC().Format(time.RFC3339), e.Expires.UTC().Format(time.RFC3339))
	}
	fmt.Fprintf(tw, "Approved (%d; allow_users and access.owners come on top):\n", len(approved))
	for _, e := range approved {
		fmt.Fprintf(tw, "  %s\t%s\tapproved %s\tby %s\n", e.Who, name(e.Name), e.At.UTC().Format(time.RFC3339), e.By)
	}
	_ = tw.Flush()
}

func name(n string) string {
	if n == "" {
		return "-"
	}
	return n
}

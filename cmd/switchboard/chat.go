package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/switchboard-chat/switchboard/bus"
	"github.com/switchboard-chat/switchboard/bus/bridge"
	"github.com/switchboard-chat/switchboard/bus/natsbus"
	"github.com/switchboard-chat/switchboard/channels/console"
)

// runChat implements `switchboard chat [--config FILE] [--chat ID] [--url
// URL]`: the terminal client (package channels/console) as the operator.
func runChat(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("chat", flag.ContinueOnError)
	fs.SetOutput(stderr)
	path := configFlag(fs)
	chatID := fs.String("chat", "", "chat id (default: console-<your user name>)")
	busURL := urlFlag(fs)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	cfg, err := LoadConfig(*path)
	if err != nil {
		return err
	}
	op, err := operator(cfg, *busURL)
	if err != nil {
		return fmt.Errorf("chat: %w", err)
	}
	br, err := console.Dial(ctx, op.URL, bridge.Credentials{Token: op.Token, User: op.User, Password: op.Password},
		bridge.Options{SubjectPrefix: cfg.Bus.SubjectPrefix, MaxTextBytes: cfg.Bus.MaxTextBytes})
	if err != nil {
		return err
	}
	defer br.Close()
	c, err := console.New(br, console.Options{ChatID: *chatID, UserID: os.Getenv("USER")}, stdout)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "Connected to %s as chat %q. Type a message, /help for commands, Ctrl-D to quit.\n", bus.RedactURL(op.URL), c.ChatID())
	return c.Run(ctx, stdin)
}

// urlFlag registers --url on fs: the bus of `chat` and `bus tail` when it is
// not the configuration's.
func urlFlag(fs *flag.FlagSet) *string {
	return fs.String("url", "", "NATS URL of the bus, credentials in it (nats://TOKEN@host:4222, nats://user:password@host:4222); default: the configuration's bus, as an operator")
}

// operator returns how `chat` and `bus tail` connect: to busURL as given
// (its credentials in it) when it is set, else as the operator of the
// configuration's bus (natsbus.Config.Operator).
func operator(cfg Config, busURL string) (natsbus.Operator, error) {
	if busURL != "" {
		return natsbus.Operator{URL: busURL, Source: "--url"}, nil
	}
	return cfg.Bus.Operator(cfg.DataDir)
}

// statusTarget is how `switchboard status` reaches the bus of a
// configuration file: as `chat` does, and under which subject prefix.
func statusTarget(path, busURL string) (natsbus.Operator, string, error) {
	cfg, err := LoadConfig(path)
	if err != nil {
		return natsbus.Operator{}, "", err
	}
	op, err := operator(cfg, busURL)
	return op, cfg.Bus.SubjectPrefix, err
}

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

// runChat is `switchboard chat`: the terminal client (channels/console) as the operator.
func runChat(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("chat", flag.ContinueOnError)
	fs.SetOutput(stderr)
	path := configFlag(fs)
	chatID := fs.String("chat", "", "chat id (default: console-<your user name>)")
	busURL := urlFlag(fs)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	cfg, _, err := LoadConfig(*path)
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
	return c.RunStdio(ctx, stdin, stdout)
}

// urlFlag registers --url on fs: the bus of `chat` and `bus tail` when not the configuration's.
func urlFlag(fs *flag.FlagSet) *string {
	return fs.String("url", "", "NATS URL of the bus, credentials in it (nats://TOKEN@host:4222, nats://user:password@host:4222); default: the configuration's bus, as an operator")
}

// operator returns how `chat` and `bus tail` connect: to busURL as given (its credentials in
// it) when it is set, else as the operator of the configuration's bus (natsbus.Config.Operator).
func operator(cfg Config, busURL string) (natsbus.Operator, error) {
	if busURL != "" {
		return natsbus.Operator{URL: busURL, Source: "--url"}, nil
	}
	return cfg.Bus.Operator(cfg.DataDir)
}

// runStatus implements `switchboard status`: the instances registered on
// the configuration's bus (or --url's) and the partitions each owns.
func runStatus(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("status", flag.ContinueOnError)
	fs.SetOutput(stderr)
	path, busURL := configFlag(fs), urlFlag(fs)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	cfg, _, err := LoadConfig(*path)
	if err != nil {
		return err
	}
	op, err := operator(cfg, *busURL)
	if err != nil {
		return fmt.Errorf("status: %w", err)
	}
	return natsbus.Status(ctx, op, cfg.Bus.SubjectPrefix, stdout)
}

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
	busURL := natsbus.URLFlag(fs)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	cfg, _, err := LoadConfig(*path)
	if err != nil {
		return err
	}
	op, err := cfg.Bus.OperatorAt(*busURL, cfg.DataDir)
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

// runStatus implements `switchboard status`: the instances registered on
// the configuration's bus (or --url's) and the partitions each owns.
func runStatus(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("status", flag.ContinueOnError)
	fs.SetOutput(stderr)
	path, busURL := configFlag(fs), natsbus.URLFlag(fs)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	cfg, _, err := LoadConfig(*path)
	if err != nil {
		return err
	}
	op, err := cfg.Bus.OperatorAt(*busURL, cfg.DataDir)
	if err != nil {
		return fmt.Errorf("status: %w", err)
	}
	return natsbus.Status(ctx, op, cfg.Bus.SubjectPrefix, stdout)
}

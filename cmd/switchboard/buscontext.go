package main

import (
	"flag"
	"fmt"
	"io"

	"github.com/switchboard-chat/switchboard/bus/natsbus"
)

// runBusContext implements `switchboard bus context [--config FILE] [--name
// NAME]`: natsbus.Config.WriteContext writes a nats CLI context that
// reaches the configuration's bus as an operator to
// $XDG_CONFIG_HOME/nats/context/NAME.json (default ~/.config/nats/context),
// mode 0600, and prints how to use it, never the credential.
func runBusContext(args []string, lookupEnv func(string) (string, bool), stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("bus context", flag.ContinueOnError)
	fs.SetOutput(stderr)
	path := configFlag(fs)
	name := fs.String("name", natsbus.DefaultContextName, "name of the nats CLI context")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if err := natsbus.CheckContextName(*name); err != nil {
		return fmt.Errorf("%w: --name: %w", errUsage, err)
	}
	cfg, src, err := LoadConfig(*path)
	if err != nil {
		return err
	}
	if err := cfg.Bus.WriteContext(cfg.DataDir, *name, src.String(), lookupEnv, stdout); err != nil {
		return fmt.Errorf("bus context: %w", err)
	}
	return nil
}

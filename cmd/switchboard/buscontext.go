package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"

	"github.com/switchboard-chat/switchboard/bus"
)

// defaultContextName is the nats CLI context `switchboard bus context`
// writes by default.
const defaultContextName = "switchboard"

var contextNameRE = regexp.MustCompile(`^[A-Za-z0-9_-][A-Za-z0-9_.-]{0,63}$`)

// natsContext is the part of a nats CLI context file
// ($XDG_CONFIG_HOME/nats/context/<name>.json, natscli v0.5 and jsm.go
// natscontext) that an operator of the bus needs.
type natsContext struct {
	Description string `json:"description"`
	URL         string `json:"url"`
	Token       string `json:"token,omitempty"`
	User        string `json:"user,omitempty"`
	Password    string `json:"password,omitempty"`
}

// runBusContext implements `switchboard bus context [--config FILE] [--name
// NAME]`: it writes a nats CLI context that reaches the configuration's bus
// as an operator (natsbus.Config.Operator: bus.url, or the embedded
// listener with bus.admin or the daemon's credential file in data_dir) to
// $XDG_CONFIG_HOME/nats/context/NAME.json (default ~/.config/nats/context),
// mode 0600, replacing a context of that name, and prints how to use it. It
// never prints the credential.
func runBusContext(args []string, lookupEnv func(string) (string, bool), stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("bus context", flag.ContinueOnError)
	fs.SetOutput(stderr)
	path := configFlag(fs)
	name := fs.String("name", defaultContextName, "name of the nats CLI context")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if !contextNameRE.MatchString(*name) || strings.Contains(*name, "..") {
		return fmt.Errorf("%w: --name: must be 1 to 64 of [A-Za-z0-9_.-], not starting with \".\" nor holding \"..\", got %q", errUsage, *name)
	}
	cfg, err := LoadConfig(*path)
	if err != nil {
		return err
	}
	op, err := cfg.Bus.Operator(cfg.DataDir)
	if err != nil {
		return fmt.Errorf("bus context: %w", err)
	}
	dir, err := natsContextDir(lookupEnv)
	if err != nil {
		return fmt.Errorf("bus context: %w", err)
	}
	data, err := json.MarshalIndent(natsContext{
		Description: "Switchboard bus operator (written by switchboard bus context from " + *path + ")",
		URL:         op.URL, Token: op.Token, User: op.User, Password: op.Password,
	}, "", "  ")
	if err != nil {
		return fmt.Errorf("bus context: %w", err)
	}
	file := filepath.Join(dir, *name+".json")
	if err := writePrivateFile(file, append(data, '\n')); err != nil {
		return fmt.Errorf("bus context: %w", err)
	}
	fmt.Fprintf(stdout, "Wrote the nats CLI context %q to %s (mode 0600): %s as an operator, credentials from %s.\n",
		*name, file, bus.RedactURL(op.URL), op.Source)
	fmt.Fprintf(stdout, "Use it with:   nats --context %s sub 'chat.>'\n", *name)
	fmt.Fprintf(stdout, "or select it:  nats context select %s\n", *name)
	return nil
}

// natsContextDir is where the nats CLI reads its contexts:
// $XDG_CONFIG_HOME/nats/context, else ~/.config/nats/context.
func natsContextDir(lookupEnv func(string) (string, bool)) (string, error) {
	if x, ok := lookupEnv("XDG_CONFIG_HOME"); ok && x != "" {
		return filepath.Join(x, "nats", "context"), nil
	}
	home, ok := lookupEnv("HOME")
	if !ok || home == "" {
		return "", errors.New("cannot find the nats CLI's configuration folder: set HOME or XDG_CONFIG_HOME")
	}
	return filepath.Join(home, ".config", "nats", "context"), nil
}

// writePrivateFile replaces file with data, mode 0600, creating its folder
// (mode 0700) when needed; readers see the old or the new file, whole.
func writePrivateFile(file string, data []byte) error {
	if err := os.MkdirAll(filepath.Dir(file), 0o700); err != nil {
		return err
	}
	err := replaceFile(file, func(w io.Writer) error {
		_, err := w.Write(data)
		return err
	})
	if err != nil {
		return fmt.Errorf("write %s: %w", file, err)
	}
	return nil
}

// replaceFile writes file through write into a temporary file (mode 0600)
// next to it, syncs it and renames it into place: readers see the old or
// the new file, whole, and a failed write leaves no partial file under the
// name.
func replaceFile(file string, write func(io.Writer) error) error {
	f, err := os.CreateTemp(filepath.Dir(file), "."+filepath.Base(file)+".*.tmp")
	if err != nil {
		return err
	}
	err = write(f)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(f.Name(), file)
	}
	if err != nil {
		_ = os.Remove(f.Name())
	}
	return err
}

package natsbus

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"

	"github.com/switchboard-chat/switchboard/bus"
	"github.com/switchboard-chat/switchboard/internal/atomicfile"
)

// DefaultContextName is the nats CLI context `switchboard bus context`
// writes by default.
const DefaultContextName = "switchboard"

var contextNameRE = regexp.MustCompile(`^[A-Za-z0-9_-][A-Za-z0-9_.-]{0,63}$`)

// CLIContext is the part of a nats CLI context file
// ($XDG_CONFIG_HOME/nats/context/<name>.json, natscli v0.5 and jsm.go
// natscontext) that an operator of the bus needs.
type CLIContext struct {
	Description string `json:"description"`
	URL         string `json:"url"`
	Token       string `json:"token,omitempty"`
	User        string `json:"user,omitempty"`
	Password    string `json:"password,omitempty"`
}

// CheckContextName refuses a context name that is not a plain file name
// of the nats CLI's context folder.
func CheckContextName(name string) error {
	if !contextNameRE.MatchString(name) || strings.Contains(name, "..") {
		return fmt.Errorf("must be 1 to 64 of [A-Za-z0-9_.-], not starting with \".\" nor holding \"..\", got %q", name)
	}
	return nil
}

// WriteContext writes a nats CLI context named name that reaches this
// configuration's bus as an operator ([Config.Operator] of dataDir) to
// [ContextDir]/NAME.json, mode 0600 (its folder created with mode 0700),
// replacing a context of that name whole, and tells stdout how to use it.
// configFile names the configuration in the context's description. It
// never prints the credential. name must pass [CheckContextName].
func (c Config) WriteContext(dataDir, name, configFile string, lookupEnv func(string) (string, bool), stdout io.Writer) error {
	if err := CheckContextName(name); err != nil {
		return err
	}
	op, err := c.Operator(dataDir)
	if err != nil {
		return err
	}
	dir, err := ContextDir(lookupEnv)
	if err != nil {
		return err
	}
	data, err := json.MarshalIndent(CLIContext{
		Description: "Switchboard bus operator (written by switchboard bus context from " + configFile + ")",
		URL:         op.URL, Token: op.Token, User: op.User, Password: op.Password,
	}, "", "  ")
	if err != nil {
		return err
	}
	file := filepath.Join(dir, name+".json")
	if err := writePrivateFile(file, append(data, '\n')); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "Wrote the nats CLI context %q to %s (mode 0600): %s as an operator, credentials from %s.\n",
		name, file, bus.RedactURL(op.URL), op.Source)
	fmt.Fprintf(stdout, "Use it with:   nats --context %s sub 'chat.>'\n", name)
	fmt.Fprintf(stdout, "or select it:  nats context select %s\n", name)
	return nil
}

// ContextDir is where the nats CLI reads its contexts:
// $XDG_CONFIG_HOME/nats/context, else ~/.config/nats/context.
func ContextDir(lookupEnv func(string) (string, bool)) (string, error) {
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
	err := atomicfile.Replace(file, func(w io.Writer) error {
		_, err := w.Write(data)
		return err
	})
	if err != nil {
		return fmt.Errorf("write %s: %w", file, err)
	}
	return nil
}

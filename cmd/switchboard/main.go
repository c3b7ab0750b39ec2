// Command switchboard is the Switchboard chatbot daemon and its tools:
// the daemon itself (serve, the default verb), the terminal chat, the
// doctor (check), the bus's tail and nats CLI context, stored history, a
// self-contained demo and benchmark, the container health check, shell
// completion and the version. The verbs, their flags and examples are
// described once, in package internal/cli (help, -h, completion).
//
// This folder is wiring only: it parses flags, loads the configuration
// (package config), builds the parts from their packages and runs them.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/switchboard-chat/switchboard/access"
	"github.com/switchboard-chat/switchboard/agent/heartbeat"
	"github.com/switchboard-chat/switchboard/agent/profiles"
	webch "github.com/switchboard-chat/switchboard/channels/web"
	"github.com/switchboard-chat/switchboard/internal/buildinfo"
	"github.com/switchboard-chat/switchboard/internal/cli"
	"github.com/switchboard-chat/switchboard/internal/reload"
	"github.com/switchboard-chat/switchboard/internal/setup"
)

const defaultConfigPath = "./config.yaml"

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	go func() {
		// After the first signal, restore the default handling: a second
		// SIGTERM or SIGINT ends the process at once.
		<-ctx.Done()
		stop()
	}()
	code := run(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// errUsage marks a command-line mistake (exit code 2).
var errUsage = cli.ErrUsage

// run dispatches the verb and returns the process exit code.
func run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	verb := "serve"
	if len(args) > 0 && cli.IsVerb(args[0]) {
		verb, args = args[0], args[1:]
	}
	if cli.HelpWithoutFlags(stdout, verb, args) {
		return 0
	} else if cli.WantsHelp(args) {
		stderr = stdout // asked for: the help goes to standard output
	}
	var err error
	switch verb {
	case "serve":
		err = runServe(ctx, args, stderr)
	case "chat":
		err = runChat(ctx, args, stdin, stdout, stderr)
	case "init":
		err = setup.Run(ctx, args, stdin, stdout, stderr)
	case "doctor", "check":
		return runCheck(ctx, args, stdout)
	case "demo":
		err = runDemo(ctx, args, stdin, stdout, stderr)
	case "bench":
		err = runBench(ctx, args, stdout, stderr)
	case "bus":
		err = runBus(ctx, args, stdout, stderr)
	case "history":
		err = runHistory(ctx, args, stdout, stderr)
	case "status":
		err = runStatus(ctx, args, stdout, stderr)
	case "web":
		err = webch.RunVerb(args, stdout, stderr, configFlag, func(p string) (string, *webch.Config, string, error) {
			c, src, err := LoadConfig(p)
			return c.DataDir, c.Channels.Web, src.String(), err
		})
	case "pairing":
		err = access.RunVerb(ctx, args, stdout, stderr, configFlag, func(p string) (access.Site, error) {
			c, _, err := LoadConfig(p)
			return access.Site{Config: c.Access, DataDir: c.DataDir, Store: c.Memory.Store, Bus: c.Bus}, err
		})
	case "agents":
		err = profiles.RunVerb(args, stdout, stderr, LoadConfig)
	case "heartbeat":
		err = heartbeat.RunVerb(ctx, args, stdout, stderr, func(p, url string) (heartbeat.Daemon, error) {
			c, _, err := LoadConfig(p) // a loaded configuration's agents are valid
			set, _ := c.Profiles()
			op, oerr := c.Bus.OperatorAt(url, c.DataDir)
			return heartbeat.Daemon{Agents: set.Heartbeats(), Operator: op, Bus: c.Bus}, errors.Join(err, oerr)
		})
	case "reload":
		err = reload.RunVerb(ctx, args, stdout, stderr, func(p string) (string, error) { c, _, err := LoadConfig(p); return c.Admin.Listen, err })
	case "version", "--version":
		fmt.Fprintln(stdout, buildinfo.String("switchboard", version))
		return 0
	case "healthcheck":
		return runHealthcheck(ctx, args, stdout, stderr)
	case "completion":
		err = cli.RunCompletion(args, stdout)
	case "help", "-h", "--help":
		if len(args) > 0 {
			return run(ctx, append(args, "-h"), stdin, stdout, stderr)
		}
		cli.Usage(stdout)
		return 0
	default:
		fmt.Fprintf(stderr, "switchboard: unknown verb %q\n\n", verb)
		cli.Usage(stderr)
		return 2
	}
	return cli.ExitCode(err, stderr)
}

// configFlag registers --config on fs.
func configFlag(fs *flag.FlagSet) *string {
	return fs.String("config", "", "configuration file (default "+defaultConfigPath+" when it exists, else the built-in defaults)")
}

// parseFlags parses a verb's flags (cli.Parse).
func parseFlags(fs *flag.FlagSet, args []string) error { return cli.Parse(fs, args) }

// Command switchboard is the Switchboard chatbot daemon and its tools:
// the daemon itself (serve, the default verb), the terminal chat, the
// configuration check, the bus's tail and nats CLI context, stored
// history, a self-contained demo and benchmark, the container health
// check and the version. `switchboard help` lists them with their flags
// (usage below).
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

	"github.com/switchboard-chat/switchboard/internal/buildinfo"
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
var errUsage = errors.New("usage")

// run dispatches the verb and returns the process exit code.
func run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	verb := "serve"
	if len(args) > 0 && len(args[0]) > 0 && args[0][0] != '-' {
		verb, args = args[0], args[1:]
	}
	var err error
	switch verb {
	case "serve":
		err = runServe(ctx, args, stderr)
	case "chat":
		err = runChat(ctx, args, stdin, stdout, stderr)
	case "check":
		return runCheck(ctx, args, stdout)
	case "demo":
		err = runDemo(ctx, args, stdin, stdout, stderr)
	case "bench":
		err = runBench(ctx, args, stdout, stderr)
	case "bus":
		err = runBus(ctx, args, stdout, stderr)
	case "history":
		err = runHistory(ctx, args, stdout, stderr)
	case "web":
		err = runWeb(ctx, args, stdout, stderr)
	case "version", "--version":
		fmt.Fprintln(stdout, buildinfo.String("switchboard", version))
		return 0
	case "healthcheck":
		return runHealthcheck(ctx, args, stdout, stderr)
	case "help", "-h", "--help":
		usage(stdout)
		return 0
	default:
		fmt.Fprintf(stderr, "switchboard: unknown verb %q\n\n", verb)
		usage(stderr)
		return 2
	}
	switch {
	case err == nil:
		return 0
	case errors.Is(err, flag.ErrHelp):
		return 0
	case errors.Is(err, errUsage):
		fmt.Fprintln(stderr, "switchboard:", err)
		return 2
	default:
		fmt.Fprintln(stderr, "switchboard:", err)
		return 1
	}
}

func usage(w io.Writer) {
	fmt.Fprint(w, `Switchboard — a chatbot daemon driven by a message queue.

Usage:
  switchboard [serve] [--config FILE]              run the daemon (default: ./config.yaml)
  switchboard chat [--config FILE] [--chat ID] [--url URL]
                                                   chat with a running daemon over the bus
  switchboard check [--config FILE]                validate the config and reach its dependencies
  switchboard bus tail [--config FILE] [--channel NAME] [--url URL]
                                                   print inbound, outbound, event and dead-letter traffic live
  switchboard bus context [--config FILE] [--name NAME]
                                                   write a nats CLI context that reaches the bus as an operator
  switchboard history list|export|reset|compact [--config FILE] [--session KEY] [--out FILE]
                                                   list, export (JSON Lines), reset or compact stored history (daemon stopped)
  switchboard web pair [--config FILE] [--user NAME] print a one-time login code for the web console (channels.web)
  switchboard demo                                 a self-contained demo with a scripted model
  switchboard bench [--chats N] [--messages M] [--rate R] [--json FILE] [--compare FILE]
                                                   load a throw-away daemon (scripted model) and print turns/s, latency, memory
  switchboard healthcheck [--config FILE | --url URL]
                                                   exit 0 when GET /healthz answers 200 (for containers)
  switchboard version                              print the version

chat, bus tail and bus context log in as the bus operator: with bus.admin, or
with the token the daemon generates at its first start in
data_dir/bus-operator.token. --url connects elsewhere, credentials in the URL
(nats://TOKEN@host:4222, nats://user:password@host:4222).
`)
}

// configFlag registers --config on fs.
func configFlag(fs *flag.FlagSet) *string {
	return fs.String("config", defaultConfigPath, "configuration file")
}

func parseFlags(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return fmt.Errorf("%w: %w", errUsage, err)
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("%w: unexpected argument %q", errUsage, fs.Arg(0))
	}
	return nil
}

package profiles

import (
	"flag"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/switchboard-chat/switchboard/bus"
	"github.com/switchboard-chat/switchboard/config"
	"github.com/switchboard-chat/switchboard/internal/cli"
)

// Config is a configuration that holds agents and bindings.
type Config interface {
	Profiles() (Set, error)
}

// valueFlags are the flags of the verb that take a value.
var valueFlags = []string{"config", "channel", "chat", "user", "thread"}

// RunVerb is `switchboard agents [list|which] [flags]`: list (the default)
// prints the agents and bindings, which the agent a new session would get.
// --config may come before or after the subcommand.
// load reads the configuration at path ("" for the default) and says
// which file it read.
func RunVerb[C Config](args []string, stdout, stderr io.Writer, load func(path string) (C, config.Source, error)) error {
	sub, rest := subcommand(args)
	if len(rest) == len(args) && cli.WantsHelp(args) { // no subcommand: the verb's own help
		cli.Help(stderr, nil, "agents")
		return nil
	}
	fs := flag.NewFlagSet("agents "+sub, flag.ContinueOnError)
	fs.SetOutput(stderr)
	path := fs.String("config", "", "configuration file (default ./config.yaml when it exists, else the built-in defaults)")
	var sp bus.Speaker
	switch sub {
	case "list":
	case "which":
		fs.StringVar(&sp.Channel, "channel", "", "the channel, e.g. telegram (required)")
		fs.StringVar(&sp.ChatID, "chat", "", "the chat id")
		fs.StringVar(&sp.UserID, "user", "", "the user id")
		fs.StringVar(&sp.ThreadID, "thread", "", "the thread id (none: the chat itself)")
		fs.BoolVar(&sp.IsGroup, "group", false, "the chat is a group")
	default:
		return fmt.Errorf("%w: agents: unknown subcommand %q (want list or which)", cli.ErrUsage, sub)
	}
	if err := cli.Parse(fs, rest); err != nil {
		return err
	}
	if sub == "which" && sp.Channel == "" {
		return fmt.Errorf("%w: agents which: --channel is required", cli.ErrUsage)
	}
	cfg, source, err := load(*path)
	if err != nil {
		return err
	}
	set, err := cfg.Profiles()
	if err != nil {
		return err
	}
	if sub == "which" {
		return Which(stdout, set, sp)
	}
	return List(stdout, set, source.String())
}

// subcommand finds the subcommand among args (the first word that is not
// a flag's value; default list) and returns the other arguments.
func subcommand(args []string) (string, []string) {
	for i, a := range args {
		if a == "--" {
			break
		}
		if strings.HasPrefix(a, "-") {
			continue
		}
		if i > 0 && takesValue(args[i-1]) {
			continue
		}
		return a, append(args[:i:i], args[i+1:]...)
	}
	return "list", args
}

func takesValue(arg string) bool {
	if strings.Contains(arg, "=") {
		return false
	}
	name := strings.TrimLeft(arg, "-")
	for _, f := range valueFlags {
		if name == f {
			return true
		}
	}
	return false
}

// List writes the agents (name, workspace, model, tools) and the bindings.
func List(w io.Writer, set Set, source string) error {
	fmt.Fprintf(w, "Agents (%s):\n", source)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "  NAME\tMODEL\tWORKSPACE\tTOOLS")
	for _, a := range set.Agents {
		fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\n", a.Name, a.LLM.Model, a.Workspace, toolsLine(a))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(w, "\nBindings (the first that matches a new session wins; none: main):")
	if len(set.Bindings) == 0 {
		fmt.Fprintln(w, "  none: main answers every chat")
	}
	for i, b := range set.Bindings {
		fmt.Fprintf(w, "  %d. %s\n", i+1, b)
	}
	return nil
}

// toolsLine describes an agent's tools as configured: the built-in set
// less the disabled patterns, bash and the MCP servers (shared).
func toolsLine(a Spec) string {
	parts := []string{"built-in"}
	if len(a.Tools.Disabled) > 0 {
		parts = append(parts, "without "+strings.Join(a.Tools.Disabled, " "))
	}
	if a.Tools.Bash.Enabled {
		parts = append(parts, "bash on")
	} else {
		parts = append(parts, "bash off")
	}
	return strings.Join(parts, ", ")
}

// Which writes the agent that answers a new session of sp and why.
func Which(w io.Writer, set Set, sp bus.Speaker) error {
	name, i := set.Which(sp)
	fmt.Fprintf(w, "agent: %s\n", name)
	if i < 0 {
		fmt.Fprintln(w, "binding: none matched (main answers)")
		return nil
	}
	fmt.Fprintf(w, "binding: %d. %s\n", i+1, set.Bindings[i])
	return nil
}

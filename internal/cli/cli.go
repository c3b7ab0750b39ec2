// Package cli is the one description of switchboard's command line: the
// verbs, their subverbs, flags and examples, as data ([Verbs]). From it
// come `switchboard help` ([Usage]), each verb's `-h` ([Help]) and the
// shell completion scripts ([Completion]); cmd/switchboard dispatches
// the verbs and a test there checks that its switch and this table name
// the same verbs.
//
// Adding a verb is one entry in [Verbs] (and its `case` line in
// cmd/switchboard). A flag's help text is the flag.FlagSet's own: [Help]
// prints the FlagSet's defaults; the table lists the flag's name and
// placeholder for the synopsis and the completion scripts.
package cli

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"slices"
	"strings"
)

// Flag is one flag of a verb, for the synopsis and completion.
type Flag struct {
	Name string // without dashes: "config"
	// Arg is the value's placeholder ("FILE", "ID"); "" for a boolean
	// flag. A placeholder of FILE or DIR completes file names.
	Arg string
	// Required shows the flag without brackets in the synopsis.
	Required bool
}

// Verb is one verb (or subverb) of switchboard.
type Verb struct {
	Name     string
	Aliases  []string // other names dispatched the same ("--version")
	Summary  string   // one line for `switchboard help`
	About    string   // the paragraph(s) of `switchboard VERB -h`
	Flags    []Flag
	Subs     []Verb // subverbs (`bus tail`); a verb with subverbs takes one
	Examples []string
	// Args is the synopsis after the flags ("bash|zsh|fish"), for a verb
	// that takes positional words other than subverbs.
	Args string
	// Words are the positional words completion offers (the shells of
	// `completion`).
	Words []string
	// Synopsis, when set, replaces the synopsis built from Flags and Args
	// in `switchboard help` (a verb with many flags).
	Synopsis string
}

// Common flags.
var (
	configFlag = Flag{Name: "config", Arg: "FILE"}
	urlFlag    = Flag{Name: "url", Arg: "URL"}
	jsonFlag   = Flag{Name: "json"}
)

// Verbs is the command line of switchboard, in the order of `switchboard
// help`.
var Verbs = []Verb{
	{
		Name: "serve", Summary: "run the daemon (the default verb; ./config.yaml when it exists, else the built-in defaults)",
		About: "Runs the daemon: the bus (embedded NATS unless bus.url is set), the agent, the\n" +
			"enabled channels and the admin listener, until SIGTERM or SIGINT.",
		Flags:    []Flag{configFlag},
		Examples: []string{"switchboard", "switchboard serve --config /etc/switchboard/config.yaml"},
	},
	{
		Name: "chat", Summary: "chat with a running daemon over the bus",
		About: "The terminal client: talks to a running daemon over the bus, as the bus\n" +
			"operator (bus.admin, or data_dir/bus-operator.token).",
		Flags: []Flag{configFlag, {Name: "chat", Arg: "ID"}, urlFlag},
		Examples: []string{"switchboard chat", "switchboard chat --chat team-notes",
			"switchboard chat --url nats://TOKEN@host:4222"},
	},
	{
		Name: "init", Summary: "write a minimal config.yaml: asks, and checks each answer",
		About: "The setup wizard: asks for the model endpoint (tested with a real tool-call\n" +
			"request; the models listed when the server can), its key, which channels to\n" +
			"enable (tokens tested with getMe / auth.test), who may talk to the bot and the\n" +
			"owner (the first user id allowed is offered), then writes a config.yaml with\n" +
			"only the chosen keys, and the workspace files.\n" +
			"--yes asks nothing: the flags (and their defaults) are the answers.",
		Flags: []Flag{configFlag, {Name: "yes"}, {Name: "force"}, {Name: "data-dir", Arg: "DIR"},
			{Name: "base-url", Arg: "URL"}, {Name: "api-key", Arg: "KEY"}, {Name: "model", Arg: "NAME"},
			{Name: "telegram-token", Arg: "TOKEN"}, {Name: "telegram-api-endpoint", Arg: "URL"}, {Name: "telegram-allow", Arg: "USERS"},
			{Name: "slack-bot-token", Arg: "TOKEN"}, {Name: "slack-app-token", Arg: "TOKEN"}, {Name: "slack-api-url", Arg: "URL"}, {Name: "slack-allow", Arg: "USERS"},
			{Name: "owner", Arg: "USER"}},
		Examples: []string{"switchboard init",
			"switchboard init --yes --base-url http://localhost:11434/v1 --model llama3.1",
			"switchboard init --yes --telegram-token $TELEGRAM_BOT_TOKEN --telegram-allow @ann"},
	},
	{
		Name: "doctor", Aliases: []string{"check"}, Summary: "diagnose: the running daemon's health, or the offline checks when none runs",
		About: "With a daemon running (its admin listener answers, or its embedded bus takes the\n" +
			"operator), asks it: readiness per component (channels included), the agent\n" +
			"consumer's lag, dead letters per channel, the streams, the MCP servers and their\n" +
			"tools, plus one real request to the model endpoint. With none running, validates\n" +
			"the configuration and reaches every dependency (ports free, data folder, model,\n" +
			"tokens, MCP servers started and listed, bash sandbox). `check` is the same verb.\n" +
			"One line per check: ✓ passed, ! warning, ✗ failed, - skipped. Exit code 0 when\n" +
			"nothing failed (warnings allowed), 1 when something failed, 2 on a bad config.",
		Flags:    []Flag{configFlag, jsonFlag},
		Examples: []string{"switchboard doctor", "switchboard check --config /etc/switchboard/config.yaml", "switchboard doctor --json | jq '.checks[] | select(.status != \"ok\")'"},
	},
	{
		Name: "bus", Summary: "the bus: live traffic, nats CLI context",
		Subs: []Verb{
			{
				Name: "tail", Summary: "print inbound, outbound, event and dead-letter traffic live",
				About: "Prints the bus's traffic live, one line per message, as the bus operator,\n" +
					"until Ctrl-C.",
				Flags:    []Flag{configFlag, {Name: "channel", Arg: "NAME"}, urlFlag},
				Examples: []string{"switchboard bus tail", "switchboard bus tail --channel telegram"},
			},
			{
				Name: "context", Summary: "write a nats CLI context that reaches the bus as an operator",
				About:    "Writes a nats CLI context (default name \"switchboard\") that reaches the bus as\nits operator, for `nats stream ls`, `nats consumer info` and the like.",
				Flags:    []Flag{configFlag, {Name: "name", Arg: "NAME"}},
				Examples: []string{"switchboard bus context && nats --context switchboard stream ls"},
			},
		},
	},
	{
		Name: "history", Summary: "list, export (JSON Lines), reset or compact stored history (daemon stopped)",
		About: "Works on the conversation history (data_dir/history.db). The daemon must be\n" +
			"stopped: it holds the file's lock while it runs. Session keys look like\n" +
			"telegram/123456 or slack/C0123/1700000000.000100; see \"history list\".",
		Subs: []Verb{
			{Name: "list", Summary: "list the stored sessions", Flags: []Flag{configFlag},
				About: "Lists the stored sessions.", Examples: []string{"switchboard history list"}},
			{Name: "export", Summary: "write a session's whole history as JSON Lines (oldest first; default stdout)",
				About:    "Writes a session's whole history as JSON Lines: one message per line, oldest\nfirst, to --out or standard output.",
				Flags:    []Flag{configFlag, {Name: "session", Arg: "KEY", Required: true}, {Name: "out", Arg: "FILE"}},
				Examples: []string{"switchboard history export --session telegram/123456 --out chat.jsonl"}},
			{Name: "reset", Summary: "delete a session's history, summary and stored answers (receipts)",
				About:    "Deletes a session's history, summary and stored answers (receipts).",
				Flags:    []Flag{configFlag, {Name: "session", Arg: "KEY", Required: true}},
				Examples: []string{"switchboard history reset --session telegram/123456"}},
			{Name: "compact", Summary: "rewrite history.db without its free space (bbolt files never shrink by themselves)",
				About: "Rewrites history.db without its free space: bbolt files never shrink by\nthemselves.", Flags: []Flag{configFlag},
				Examples: []string{"switchboard history compact"}},
		},
	},
	{
		Name: "status", Summary: "list the instances on the bus and the partitions each owns",
		About: "Lists the daemon instances registered on the bus (a key-value bucket each\n" +
			"instance renews every few seconds: name, version, admin address, start time) and\n" +
			"the partitions each owns, as the bus operator. One instance on bolt shows itself\n" +
			"with its one partition.",
		Flags:    []Flag{configFlag, urlFlag},
		Examples: []string{"switchboard status", "switchboard status --url nats://user:password@nats-1:4222"},
	},
	{
		Name: "agents", Summary: "list the agents and bindings, or show which agent answers a chat (offline)",
		About: "Reads the configuration's agents and bindings (docs/agents.md); no daemon is\n" +
			"needed. Without a subcommand it lists them. --config may come before or after\n" +
			"the subcommand.",
		Subs: []Verb{
			{Name: "list", Summary: "list each agent (workspace, model, tools) and the bindings in order (the default)",
				About: "Lists each agent (workspace, model, tools) and the bindings, in the order they\nare tried.", Flags: []Flag{configFlag},
				Examples: []string{"switchboard agents", "switchboard agents list --config /etc/switchboard/config.yaml"}},
			{Name: "which", Summary: "print the agent that would answer a new session, and the binding that matched",
				About: "Prints the agent that would answer a new session whose first message comes\n" +
					"from this channel, chat, user and thread, and the binding that matched (none:\nmain answers).",
				Flags: []Flag{configFlag, {Name: "channel", Arg: "NAME", Required: true}, {Name: "chat", Arg: "ID"}, {Name: "user", Arg: "ID"},
					{Name: "thread", Arg: "ID"}, {Name: "group"}},
				Examples: []string{"switchboard agents which --channel telegram --chat 42 --user 7",
					"switchboard agents --config /etc/switchboard/config.yaml which --channel slack --chat C0123 --group"}},
		},
	},
	{
		Name: "heartbeat", Summary: "run an agent's heartbeat turn now, on the running daemon",
		Subs: []Verb{
			{
				Name: "now", Args: "AGENT", Summary: "run one heartbeat turn of AGENT at once and print what came of it",
				About: "Publishes a heartbeat trigger of AGENT on the running daemon's bus, as the\n" +
					"operator (as switchboard chat connects): the daemon runs one heartbeat turn in\n" +
					"the agent's heartbeat session, which reads HEARTBEAT.md and either sends a\n" +
					"message to agents.AGENT.heartbeat.to or answers HEARTBEAT_OK (nothing sent).\n" +
					"It waits up to --wait for the outcome and prints it. Works whether or not\n" +
					"heartbeat.every is set; heartbeat.to must be. Flags may come before or after\n" +
					"AGENT.",
				Flags:    []Flag{configFlag, urlFlag, {Name: "wait", Arg: "DURATION"}},
				Examples: []string{"switchboard heartbeat now main", "switchboard heartbeat now family --config /etc/switchboard/config.yaml"},
			},
		},
	},
	{
		Name: "reload", Summary: "make the running daemon re-read its configuration (as SIGHUP does)",
		About: "Asks the running daemon to re-read its configuration file, with POST /reload on\n" +
			"its admin listener (admin.listen, loopback by default; SIGHUP does the same).\n" +
			"Bindings, agents' heartbeats and access (dm_policy, owners) change at once;\n" +
			"an agent whose model, limits, workspace or tools changed is rebuilt for its\n" +
			"next turn (a workspace or tools change first lets its running turns finish,\n" +
			"for at most shutdown_timeout); agents added are bindable at once, agents\n" +
			"removed hand their sessions to main. What cannot change live (listeners,\n" +
			"data_dir, bus, memory, channels, agent.max_concurrent_turns) is listed as\n" +
			"kept until restart. A configuration with a problem is refused whole, every\n" +
			"problem is printed, and the running one stays.",
		Flags:    []Flag{configFlag, {Name: "admin", Arg: "URL"}},
		Examples: []string{"switchboard reload", "switchboard reload --admin http://127.0.0.1:9090", "kill -HUP $(pidof switchboard)"},
	},
	{
		Name: "web", Summary: "the web console (channels.web)",
		Subs: []Verb{
			{
				Name: "pair", Summary: "print a one-time login code for the web console",
				About: "Mints a one-time pairing code in data_dir (the running daemon reads it at\n" +
					"login; run it on the daemon's machine, as the user it runs as) and prints it:\n" +
					"open the console's /login page and enter it within 15 minutes; it works once.",
				Flags:    []Flag{configFlag, {Name: "user", Arg: "NAME"}},
				Examples: []string{"switchboard web pair", "switchboard web pair --user ann"},
			},
		},
	},
	{
		Name: "pairing", Summary: "approve, list or revoke users let in by a pairing code (access.dm_policy)",
		Subs: []Verb{
			{
				Name: "approve", Args: "CODE", Summary: "let in the user who got CODE",
				About: "Approves the pairing code an unknown user got from the bot in a direct chat\n" +
					"(access.dm_policy pairing): the user is added to the approved list in\n" +
					"data_dir/access.db and their next message goes through. Works with the daemon\n" +
					"running (it reads the file at each message) or stopped. With memory.store\n" +
					"jetstream the list is the cluster's access bucket, reached on the bus as the\n" +
					"operator (--url, or the credential in data_dir): every instance admits the\n" +
					"user. A code works once, for 1 hour.",
				Flags:    []Flag{configFlag, urlFlag},
				Examples: []string{"switchboard pairing approve K7PQ2MXA", "switchboard pairing approve K7PQ2MXA --config /etc/switchboard/config.yaml"},
			},
			{
				Name: "list", Summary: "show the pending requests and the approved users",
				About: "Lists the users waiting for approval (their codes are not stored, only the\n" +
					"codes' hashes) and the approved users of data_dir/access.db (with\n" +
					"memory.store jetstream: of the cluster's access bucket, on the bus).",
				Flags:    []Flag{configFlag, urlFlag},
				Examples: []string{"switchboard pairing list"},
			},
			{
				Name: "revoke", Args: "CHANNEL:USER_ID", Summary: "remove an approved user",
				About: "Removes a user from the approved list; their next message in a direct chat\n" +
					"gets a new pairing code (allow_users and access.owners are set in the\n" +
					"configuration instead). With memory.store jetstream it applies on every\n" +
					"instance.",
				Flags:    []Flag{configFlag, urlFlag},
				Examples: []string{"switchboard pairing revoke telegram:123456789"},
			},
		},
	},
	{
		Name: "demo", Summary: "a self-contained demo with a scripted model",
		About: "Runs the daemon, a scripted model and the terminal chat in one process, on a\n" +
			"throw-away folder. The model is a rule-based script, not a language model.",
		Flags:    []Flag{{Name: "keep"}, {Name: "v"}},
		Examples: []string{"switchboard demo", "switchboard demo --keep -v"},
	},
	{
		Name: "bench", Synopsis: "[--chats N] [--messages M] [--rate R] [--json FILE] [--compare FILE] [...]", Summary: "load a throw-away daemon (scripted model) and print turns/s, latency, memory",
		About: "Runs a throw-away daemon with the scripted model, drives it with chats and\n" +
			"prints turns per second, latency and memory (docs/operations.md explains them).",
		Flags: []Flag{{Name: "chats", Arg: "N"}, {Name: "messages", Arg: "M"}, {Name: "rate", Arg: "R"}, {Name: "timeout", Arg: "DURATION"},
			{Name: "tools", Arg: "SET"}, {Name: "model-latency", Arg: "DURATION"}, {Name: "model-url", Arg: "URL"},
			{Name: "json", Arg: "FILE"}, {Name: "compare", Arg: "FILE"}, {Name: "keep"}},
		Examples: []string{"switchboard bench", "switchboard bench --chats 20 --messages 5 --json before.json",
			"switchboard bench --compare before.json"},
	},
	{
		Name: "healthcheck", Summary: "exit 0 when GET /healthz answers 200 (for containers)",
		About:    "Asks the daemon's /healthz (admin.listen from the config, or --url) and exits 0\non 200, 1 otherwise. The container image runs it: it has no shell or curl.",
		Flags:    []Flag{configFlag, urlFlag},
		Examples: []string{"switchboard healthcheck", "switchboard healthcheck --url http://127.0.0.1:9090/healthz"},
	},
	{
		Name: "completion", Summary: "print a shell completion script",
		About: "Prints a completion script for bash, zsh or fish on standard output.",
		Args:  "bash|zsh|fish", Words: []string{"bash", "zsh", "fish"},
		Examples: []string{"source <(switchboard completion bash)",
			"switchboard completion zsh > \"${fpath[1]}/_switchboard\"",
			"switchboard completion fish > ~/.config/fish/completions/switchboard.fish"},
	},
	{Name: "version", Aliases: []string{"--version"}, Summary: "print the version", About: "Prints the version.", Examples: []string{"switchboard version"}},
	{Name: "help", Aliases: []string{"-h", "--help"}, Summary: "list the verbs, or show one verb's help",
		About: "Lists the verbs; `switchboard help VERB` is `switchboard VERB -h`.", Args: "[VERB]",
		Examples: []string{"switchboard help", "switchboard help history"}},
}

// usageFooter closes `switchboard help`.
const usageFooter = `
chat, bus tail, bus context and doctor log in as the bus operator: with
bus.admin, or with the token the daemon generates at its first start in
data_dir/bus-operator.token. --url connects elsewhere, credentials in the URL
(nats://TOKEN@host:4222, nats://user:password@host:4222).

switchboard VERB -h shows a verb's flags and examples.
`

// Lookup returns the verb named by path ("history", "export"), aliases
// included.
func Lookup(path ...string) (Verb, bool) {
	list := Verbs
	var v Verb
	for _, name := range path {
		i := slices.IndexFunc(list, func(v Verb) bool { return v.Name == name || slices.Contains(v.Aliases, name) })
		if i < 0 {
			return Verb{}, false
		}
		v, list = list[i], list[i].Subs
	}
	return v, len(path) > 0
}

// Names returns every name that dispatches a top-level verb, aliases
// included.
func Names() []string {
	var out []string
	for _, v := range Verbs {
		out = append(out, v.Name)
		out = append(out, v.Aliases...)
	}
	return out
}

// synopsis is the part after "switchboard PATH".
func (v Verb) synopsis() string {
	if v.Synopsis != "" {
		return v.Synopsis
	}
	var parts []string
	if len(v.Subs) > 0 {
		names := make([]string, len(v.Subs))
		for i, s := range v.Subs {
			names[i] = s.Name
		}
		parts = append(parts, strings.Join(names, "|"))
	}
	for _, f := range v.Flags {
		p := dashed(f)
		if f.Arg != "" {
			p += " " + f.Arg
		}
		if !f.Required {
			p = "[" + p + "]"
		}
		parts = append(parts, p)
	}
	if v.Args != "" {
		parts = append(parts, v.Args)
	}
	return strings.Join(parts, " ")
}

// Usage writes `switchboard help`: one entry per verb and subverb.
func Usage(w io.Writer) {
	fmt.Fprint(w, "Switchboard — a chatbot daemon driven by a message queue.\n\nUsage:\n")
	for _, v := range Verbs {
		if len(v.Subs) == 0 {
			usageLine(w, v.Name, v)
			continue
		}
		for _, s := range v.Subs {
			usageLine(w, v.Name+" "+s.Name, s)
		}
	}
	fmt.Fprint(w, usageFooter)
}

// usageLine writes one verb: its synopsis, then its summary at column 51,
// or on the next line when the synopsis is longer.
func usageLine(w io.Writer, path string, v Verb) {
	head := "  switchboard " + strings.TrimSpace(path+" "+v.synopsis())
	if len(head) < 50 {
		fmt.Fprintf(w, "%-51s%s\n", head, v.Summary)
		return
	}
	fmt.Fprintf(w, "%s\n%51s%s\n", head, "", v.Summary)
}

// Help writes the help of the verb at path (["history"], ["bus",
// "tail"]): its synopsis, what it does, its flags as fs defines them (nil:
// none, or a verb with subverbs, whose subverbs are listed instead) and
// its examples. An unknown path writes the usage of every verb.
func Help(w io.Writer, fs *flag.FlagSet, path ...string) {
	v, ok := Lookup(path...)
	if !ok {
		Usage(w)
		return
	}
	canon, _ := Lookup(path[0])
	name := strings.Join(append([]string{canon.Name}, path[1:]...), " ")
	fmt.Fprintf(w, "Usage: switchboard %s\n", strings.TrimSpace(name+" "+v.synopsis()))
	if v.About != "" {
		fmt.Fprintf(w, "\n%s\n", v.About)
	}
	if len(v.Aliases) > 0 {
		fmt.Fprintf(w, "\nAlso: %s\n", strings.Join(v.Aliases, ", "))
	}
	if len(v.Subs) > 0 {
		fmt.Fprint(w, "\nSubcommands:\n")
		for _, s := range v.Subs {
			fmt.Fprintf(w, "  %s\n        %s\n", strings.TrimSpace(s.Name+" "+s.synopsis()), s.Summary)
		}
		fmt.Fprintf(w, "\nswitchboard %s SUBCOMMAND -h shows a subcommand's flags and examples.\n", name)
	}
	if fs != nil {
		n := 0
		fs.VisitAll(func(*flag.Flag) { n++ })
		if n > 0 {
			fmt.Fprint(w, "\nFlags:\n")
			out := fs.Output()
			fs.SetOutput(w)
			fs.PrintDefaults()
			fs.SetOutput(out)
		}
	}
	if len(v.Examples) > 0 {
		fmt.Fprint(w, "\nExamples:\n")
		for _, e := range v.Examples {
			fmt.Fprintf(w, "  %s\n", e)
		}
	}
}

// SetUsage makes fs's -h print [Help] of the verb named by fs's name
// ("history export"), flags included.
func SetUsage(fs *flag.FlagSet) {
	fs.Usage = func() { Help(fs.Output(), fs, strings.Fields(fs.Name())...) }
}

// WantsHelp reports whether args (after the verb) ask for help: -h,
// -help or --help before a "--".
func WantsHelp(args []string) bool {
	for _, a := range args {
		switch a {
		case "--":
			return false
		case "-h", "-help", "--help":
			return true
		}
	}
	return false
}

// ErrUsage marks a command-line mistake (exit code 2).
var ErrUsage = errors.New("usage")

// HelpWithoutFlags writes the help of verb to w and returns true when args
// ask for help and verb has no flags of its own (version, help,
// completion), whose -h therefore no flag.FlagSet answers.
func HelpWithoutFlags(w io.Writer, verb string, args []string) bool {
	v, ok := Lookup(verb)
	if !ok || !WantsHelp(args) || len(v.Flags) > 0 || len(v.Subs) > 0 {
		return false
	}
	Help(w, nil, verb)
	return true
}

// IsVerb reports whether arg names a verb rather than a flag of serve,
// the default verb: a word, or an alias such as --version or -h.
func IsVerb(arg string) bool {
	return arg != "" && (arg[0] != '-' || slices.Contains(Names(), arg))
}

// RunCompletion is `switchboard completion SHELL`.
func RunCompletion(args []string, stdout io.Writer) error {
	if len(args) != 1 {
		return fmt.Errorf("%w: completion: want one shell: bash, zsh or fish", ErrUsage)
	}
	if err := Completion(stdout, args[0]); err != nil {
		return fmt.Errorf("%w: %w", ErrUsage, err)
	}
	return nil
}

// Parse parses a verb's flags with the table's help (SetUsage): -h is
// [flag.ErrHelp]; a flag mistake or a positional argument wraps
// [ErrUsage].
func Parse(fs *flag.FlagSet, args []string) error {
	SetUsage(fs)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return fmt.Errorf("%w: %w", ErrUsage, err)
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("%w: unexpected argument %q", ErrUsage, fs.Arg(0))
	}
	return nil
}

// ExitCode reports a verb's err on stderr and returns the process's exit
// code: 0 for none or -h, 2 for a usage mistake ([ErrUsage]), 1 otherwise.
func ExitCode(err error, stderr io.Writer) int {
	switch {
	case err == nil, errors.Is(err, flag.ErrHelp):
		return 0
	case errors.Is(err, ErrUsage):
		fmt.Fprintln(stderr, "switchboard:", err)
		return 2
	default:
		fmt.Fprintln(stderr, "switchboard:", err)
		return 1
	}
}

// Package setup is `switchboard init`: it asks a new user for what the
// daemon needs, checks each answer against the real service, and writes a
// minimal config.yaml holding only the keys chosen, plus the workspace
// files.
//
// The questions, in order (each flag is the answer's default, and with
// --yes the answer itself; nothing is asked):
//
//   - the model endpoint, an OpenAI-compatible base URL (--base-url), and
//     its API key (--api-key, default $OPENAI_API_KEY; none for local
//     servers). The models the endpoint lists (GET /models) are shown and
//     one is chosen (--model: default the one listed first, or the
//     built-in default when the endpoint lists none). Then llm.Probe
//     sends one real streaming request offering a tool: a failure (a key
//     refused, an endpoint unreachable) is an error and nothing is
//     written; a model that answers without calling the tool is a
//     warning.
//   - which channels to enable: Telegram (--telegram-token, checked with
//     getMe by telegram.Check) and Slack (--slack-bot-token and
//     --slack-app-token, checked with auth.test by slack.Check). A token
//     refused is an error and nothing is written.
//   - who may talk to the bot on each channel enabled (--telegram-allow,
//     --slack-allow: user ids, "*" for everyone, empty for nobody yet):
//     the channels' allow_users; anyone else gets a pairing code for an
//     owner to approve (docs/access.md).
//   - the owner (--owner, access.owners): the first user id allowed on a
//     channel is offered (a Telegram @username is no id), as
//     <channel>:<user_id>; "none" declines. An owner may change the bot's
//     shared files (AGENT.md, USER.md, RULE.md, MEMORY.md, HEARTBEAT.md,
//     skills/, the shared memory) from a chat and approve pairing codes;
//     without one only the operator's console may. With no user id
//     allowed and no --owner, nothing is asked and a note says so.
//
// Interactively, a failed check asks again (with the previous answers as
// defaults); with --yes it is the error. The file is written last (mode
// 0600: it may hold keys; a key that came from the environment is written
// as ${NAME} instead), only when every check passed, and never over an
// existing file unless --force is given. The workspace files (AGENT.md,
// USER.md, RULE.md, MEMORY.md) are created by workspace.Open, as the
// daemon creates them, where the written configuration puts them.
package setup

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"strings"
	"time"

	openai "github.com/sashabaranov/go-openai"
	"golang.org/x/term"

	"github.com/switchboard-chat/switchboard/access"
	"github.com/switchboard-chat/switchboard/bus"
	slackch "github.com/switchboard-chat/switchboard/channels/slack"
	"github.com/switchboard-chat/switchboard/channels/telegram"
	"github.com/switchboard-chat/switchboard/internal/cli"
	"github.com/switchboard-chat/switchboard/internal/health"
	"github.com/switchboard-chat/switchboard/llm"
)

const (
	// defaultDataDir is the daemon's default data_dir, not written when kept.
	defaultDataDir = "./data"
	// listTimeout bounds the model list shown (GET /models).
	listTimeout = 10 * time.Second
)

// answers are the flags of `switchboard init`, then the answers.
type answers struct {
	path, dataDir                string
	yes, force                   bool
	baseURL, apiKey, model       string
	telegramToken, telegramAPI   string
	telegramAllow                string
	slackBot, slackApp, slackAPI string
	slackAllow                   string
	useTelegram, useSlack        bool
	owner                        string            // --owner, then the answer: "none" or <channel>:<user_id>
	fromEnv                      map[string]string // value -> variable it came from
}

// Run is `switchboard init [flags]`: see the package doc. stdin is read
// for the answers unless --yes; stdout gets the questions and the
// results; stderr the flag errors.
func Run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	a, err := parse(args, stderr)
	if err != nil {
		return err
	}
	if _, err := os.Lstat(a.path); err == nil && !a.force {
		return fmt.Errorf("init: %s exists; pass --force to overwrite it (or --config FILE to write another)", a.path)
	} else if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("init: %w", err)
	}
	q := &asker{in: bufio.NewReader(stdin), out: stdout, yes: a.yes, fd: -1}
	if f, ok := stdin.(*os.File); ok && term.IsTerminal(int(f.Fd())) {
		q.fd = int(f.Fd())
	}
	if !a.yes {
		fmt.Fprintf(stdout, "Switchboard setup: a few questions, then %s is written. Enter keeps the [default].\n\n", a.path)
	}
	steps := []func(context.Context, *answers, *asker) error{askModel, askTelegram, askSlack, askOwner}
	for _, step := range steps {
		if err := step(ctx, a, q); err != nil {
			return err
		}
	}
	data, err := render(a)
	if err != nil {
		return err
	}
	if err := writeFiles(a, data); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "\nWrote %s and the workspace in %s.\nStart the daemon with `switchboard serve --config %s`, then talk to it with `switchboard chat --config %s`.\n",
		a.path, workspaceDir(a), a.path, a.path)
	return nil
}

func parse(args []string, stderr io.Writer) (*answers, error) {
	fs := flag.NewFlagSet("init", flag.ContinueOnError)
	fs.SetOutput(stderr)
	a := &answers{fromEnv: map[string]string{}}
	fs.StringVar(&a.path, "config", "config.yaml", "the configuration file to write")
	fs.BoolVar(&a.yes, "yes", false, "ask nothing: take the flags (and their defaults) as the answers")
	fs.BoolVar(&a.force, "force", false, "overwrite an existing configuration file")
	fs.StringVar(&a.dataDir, "data-dir", defaultDataDir, "data_dir: the daemon's state and the workspace (data-dir/workspace)")
	fs.StringVar(&a.baseURL, "base-url", envOr(a, "OPENAI_BASE_URL", llm.DefaultBaseURL), "model endpoint: an OpenAI-compatible base URL (default $OPENAI_BASE_URL or OpenAI's)")
	fs.StringVar(&a.apiKey, "api-key", "", "API key of the endpoint (default $OPENAI_API_KEY; none for local servers)")
	fs.StringVar(&a.model, "model", envOr(a, "OPENAI_MODEL", ""), "model (default $OPENAI_MODEL, else the first the endpoint lists)")
	fs.StringVar(&a.telegramToken, "telegram-token", "", "enable Telegram with this bot token (default $TELEGRAM_BOT_TOKEN)")
	fs.StringVar(&a.telegramAPI, "telegram-api-endpoint", "", "Telegram Bot API URL pattern <base>/bot%s/%s (default Telegram's)")
	fs.StringVar(&a.telegramAllow, "telegram-allow", "", "Telegram users allowed: ids or @usernames, comma separated; * for everyone")
	fs.StringVar(&a.slackBot, "slack-bot-token", "", "enable Slack with this bot token, xoxb-... (default $SLACK_BOT_TOKEN)")
	fs.StringVar(&a.slackApp, "slack-app-token", "", "Slack app-level token for socket mode, xapp-... (default $SLACK_APP_TOKEN)")
	fs.StringVar(&a.slackAPI, "slack-api-url", "", "Slack Web API base URL (default Slack's)")
	fs.StringVar(&a.slackAllow, "slack-allow", "", "Slack user ids allowed (U...), comma separated; * for everyone")
	fs.StringVar(&a.owner, "owner", "", "access.owners: <channel>:<user_id> of the user who may change the bot's shared files and approve pairing codes "+
		"(default the first user id allowed; none for nobody)")
	cli.SetUsage(fs)
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("init: unexpected argument %q (see switchboard init -h)", fs.Arg(0))
	}
	// secrets from the environment are taken after parsing, so that -h never shows them
	for _, s := range []struct {
		v    *string
		name string
	}{{&a.apiKey, "OPENAI_API_KEY"}, {&a.telegramToken, "TELEGRAM_BOT_TOKEN"}, {&a.slackBot, "SLACK_BOT_TOKEN"}, {&a.slackApp, "SLACK_APP_TOKEN"}} {
		if *s.v == "" {
			*s.v = envOr(a, s.name, "")
		}
	}
	a.useTelegram, a.useSlack = a.telegramToken != "", a.slackBot != "" || a.slackApp != ""
	return a, nil
}

// envOr returns $name, remembering that its value came from there, or def.
func envOr(a *answers, name, def string) string {
	if v := os.Getenv(name); v != "" {
		a.fromEnv[v] = name
		return v
	}
	return def
}

// askModel asks for the endpoint, the key and the model, and checks them.
func askModel(ctx context.Context, a *answers, q *asker) error {
	for {
		var err error
		if a.baseURL, err = q.ask(ctx, "Model endpoint (OpenAI-compatible base URL)", a.baseURL); err != nil {
			return err
		}
		if a.apiKey, err = q.secret(ctx, "API key (empty for none)", a.apiKey); err != nil {
			return err
		}
		ids, listErr := listModels(ctx, a.baseURL, a.apiKey)
		def := a.model
		switch {
		case listErr == nil && len(ids) > 0:
			q.say("The endpoint lists %d %s: %s", len(ids), health.Plural(len(ids), "model", "models"), shortList(ids))
			if def == "" {
				def = ids[0]
			}
		case def == "":
			def = llm.DefaultConfig().Model
		}
		if a.model, err = q.ask(ctx, "Model", def); err != nil {
			return err
		}
		cfg := llmConfig(a)
		failed := report(q, llm.Probe(ctx, cfg, a.path))
		if failed == "" {
			return nil
		}
		if a.yes {
			return fmt.Errorf("init: the model endpoint failed its check, nothing written: %s", failed)
		}
		q.say("Let's try again.")
	}
}

func llmConfig(a *answers) llm.Config {
	cfg := llm.DefaultConfig()
	cfg.BaseURL, cfg.APIKey, cfg.Model = a.baseURL, a.apiKey, a.model
	return cfg
}

// listModels returns the ids the endpoint lists (GET /models); an
// endpoint that lists none is not an error here (llm.Probe judges it).
func listModels(ctx context.Context, baseURL, key string) ([]string, error) {
	oc := openai.DefaultConfig(key)
	oc.BaseURL = strings.TrimRight(baseURL, "/")
	ctx, cancel := context.WithTimeout(ctx, listTimeout)
	defer cancel()
	list, err := openai.NewClientWithConfig(oc).ListModels(ctx)
	if err != nil {
		return nil, err
	}
	ids := make([]string, 0, len(list.Models))
	for _, m := range list.Models {
		ids = append(ids, m.ID)
	}
	return ids, nil
}

func shortList(ids []string) string {
	const most = 10
	if len(ids) <= most {
		return strings.Join(ids, ", ")
	}
	return strings.Join(ids[:most], ", ") + fmt.Sprintf(", ... (%d more)", len(ids)-most)
}

// report prints the results and returns the first failure's line ("" when
// none failed).
func report(q *asker, results []health.Result) string {
	failed := ""
	for _, r := range results {
		q.say("  %-8s %-4s %s", r.Name, r.Status, r.Detail)
		if r.Status == health.Fail && failed == "" {
			failed = r.Name + ": " + r.Detail
		}
	}
	return failed
}

// askTelegram asks whether to enable Telegram, for the token and who may
// talk to the bot, and checks the token.
func askTelegram(ctx context.Context, a *answers, q *asker) error {
	var err error
	if a.useTelegram, err = q.yesNo(ctx, "Enable Telegram?", a.useTelegram); err != nil || !a.useTelegram {
		return err
	}
	for {
		if a.telegramToken, err = q.secret(ctx, "Telegram bot token (from @BotFather)", a.telegramToken); err != nil {
			return err
		}
		cfg := telegramConfig(a)
		failed := ""
		if verr := cfg.Validate(); verr != nil {
			failed = verr.Error()
			q.say("  %s", failed)
		} else {
			failed = report(q, []health.Result{telegram.Check(ctx, &cfg, nil)})
		}
		if failed == "" {
			break
		}
		if a.yes {
			return fmt.Errorf("init: the Telegram token failed its check, nothing written: %s", bus.RedactURL(failed))
		}
		q.say("Let's try again.")
	}
	q.say("Who may talk to the bot? This sets channels.telegram.allow_users; anyone else gets a pairing code for an owner to approve.")
	a.telegramAllow, err = q.ask(ctx, "Telegram users allowed (ids or @usernames, comma separated; * for everyone; empty for nobody yet)", a.telegramAllow)
	return err
}

func telegramConfig(a *answers) telegram.Config {
	cfg := telegram.DefaultConfig()
	cfg.Token = a.telegramToken
	if a.telegramAPI != "" {
		cfg.APIEndpoint = a.telegramAPI
	}
	cfg.AllowUsers = telegram.UserList(splitList(a.telegramAllow))
	return cfg
}

// askSlack asks whether to enable Slack, for its tokens and who may talk
// to the bot, and checks the bot token.
func askSlack(ctx context.Context, a *answers, q *asker) error {
	var err error
	if a.useSlack, err = q.yesNo(ctx, "Enable Slack?", a.useSlack); err != nil || !a.useSlack {
		return err
	}
	for {
		if a.slackBot, err = q.secret(ctx, "Slack bot token (xoxb-...)", a.slackBot); err != nil {
			return err
		}
		if a.slackApp, err = q.secret(ctx, "Slack app-level token for socket mode (xapp-...)", a.slackApp); err != nil {
			return err
		}
		cfg := slackConfig(a)
		failed := ""
		if verr := cfg.Validate(); verr != nil {
			failed = verr.Error()
			q.say("  %s", failed)
		} else {
			failed = report(q, []health.Result{slackch.Check(ctx, &cfg, nil)})
		}
		if failed == "" {
			break
		}
		if a.yes {
			return fmt.Errorf("init: the Slack tokens failed their check, nothing written: %s", failed)
		}
		q.say("Let's try again.")
	}
	q.say("Who may talk to the bot? This sets channels.slack.allow_users; anyone else gets a pairing code for an owner to approve.")
	a.slackAllow, err = q.ask(ctx, "Slack user ids allowed (U..., comma separated; * for everyone; empty for nobody yet)", a.slackAllow)
	return err
}

func slackConfig(a *answers) slackch.Config {
	cfg := slackch.DefaultConfig()
	cfg.BotToken, cfg.AppToken = a.slackBot, a.slackApp
	if a.slackAPI != "" {
		cfg.APIURL = a.slackAPI
	}
	cfg.AllowUsers = slackch.IDList(splitList(a.slackAllow))
	return cfg
}

// noOwner is the answer that declines an owner.
const noOwner = "none"

// askOwner offers to make the first user allowed an owner (access.owners),
// and checks the answer.
func askOwner(ctx context.Context, a *answers, q *asker) error {
	def := a.owner
	if def == "" {
		def = firstUser(a)
	}
	if def == "" {
		if a.useTelegram || a.useSlack {
			q.say("No owner: the bot's shared files (AGENT.md, USER.md, RULE.md, MEMORY.md, HEARTBEAT.md, skills/) can be changed only from " +
				"`switchboard chat` until you add yourself to access.owners as <channel>:<your user id>, e.g. telegram:123456789.")
		}
		a.owner = noOwner
		return nil
	}
	for {
		q.say("An owner may change the bot's shared files (AGENT.md, USER.md, RULE.md, MEMORY.md, HEARTBEAT.md, skills/) from a chat and approve pairing codes.")
		answer, err := q.ask(ctx, "Owner (<channel>:<user_id>; none for nobody)", def)
		if err != nil {
			return err
		}
		if answer == noOwner {
			a.owner = noOwner
			return nil
		}
		verr := access.Config{Owners: []string{answer}}.Validate()
		if verr == nil {
			a.owner = answer
			return nil
		}
		if a.yes {
			return fmt.Errorf("init: --owner: nothing written: %w", verr)
		}
		q.say("  %v", verr)
		q.say("Let's try again.")
		def = answer
	}
}

// firstUser is the first user id allowed on an enabled channel, as
// <channel>:<user_id> (Telegram @usernames and "*" are no ids), or "".
func firstUser(a *answers) string {
	for _, ch := range []struct {
		on         bool
		name, list string
	}{{a.useTelegram, "telegram", a.telegramAllow}, {a.useSlack, "slack", a.slackAllow}} {
		if !ch.on {
			continue
		}
		for _, u := range splitList(ch.list) {
			if u != "*" && !strings.HasPrefix(u, "@") {
				return ch.name + ":" + u
			}
		}
	}
	return ""
}

// splitList splits a comma (or space) separated list.
func splitList(s string) []string {
	return strings.FieldsFunc(s, func(r rune) bool { return r == ',' || r == ' ' })
}

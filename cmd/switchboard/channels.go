package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"

	"github.com/nats-io/nats.go"
	"golang.org/x/sync/errgroup"

	"github.com/switchboard-chat/switchboard/admin"
	"github.com/switchboard-chat/switchboard/bus"
	"github.com/switchboard-chat/switchboard/bus/bridge"
	"github.com/switchboard-chat/switchboard/channels"
	openaich "github.com/switchboard-chat/switchboard/channels/openai"
	slackch "github.com/switchboard-chat/switchboard/channels/slack"
	"github.com/switchboard-chat/switchboard/channels/telegram"
	webch "github.com/switchboard-chat/switchboard/channels/web"
	"github.com/switchboard-chat/switchboard/internal/httpserve"
	"github.com/switchboard-chat/switchboard/internal/kvstate"
	"github.com/switchboard-chat/switchboard/llm"
	"github.com/switchboard-chat/switchboard/workspace"
)

// Readiness components of the built-in channels on /readyz.
const (
	compTelegram = "telegram"
	compSlack    = "slack"
)

// channelDeps is what the daemon gives a built-in channel adapter besides
// its configuration section.
type channelDeps struct {
	Conn      *nats.Conn // the daemon's connection (never closed by an adapter)
	Subjects  bus.Subjects
	Workspace *workspace.Workspace // shared files go to its inbox/<channel>/<chat>/; may be nil
	DataDir   string               // where adapters keep their state files
	Log       *slog.Logger
	Status    func(component string, err error) // admin.Server.SetReady; nil: nobody listens
	Metrics   channels.Metrics                  // platform sends and rate-limit waits; nil discards
	State     kvstate.Set                       // memory.store jetstream: each channel runs on one instance, Telegram's offset shared; zero: unwrapped
	Dash      webch.Dashboard                   // the web console dashboard's sources
	Gate      telegram.Gate                     // access: who Telegram and Slack let in beyond allow_users; nil: nobody
	HTTP      *httpserve.Servers                // every listener's bounds and connection counts
}

// startChannels starts the built-in channel adapters whose sections are
// configured (Telegram, Slack); each reports its readiness under its name.
// A channel that stops for good (a rejected token, say) is logged and shown
// on /readyz, and the rest of the daemon keeps serving.
func startChannels(ctx context.Context, g *errgroup.Group, cfg Config, d channelDeps, adm *admin.Server) error {
	for _, ch := range []struct {
		name string
		make func(Config, channelDeps) (channels.Channel, error)
	}{{compTelegram, newTelegram}, {compSlack, newSlack}, {openaich.Name, newOpenAI}, {webch.Name, newWeb}} {
		c, err := ch.make(cfg, d)
		if err != nil {
			return err
		}
		if c == nil {
			continue
		}
		adm.Expect(ch.name)
		g.Go(func() error {
			if err := c.Run(ctx); err != nil && ctx.Err() == nil {
				d.Log.Error("channel stopped; the rest of the daemon keeps running", "channel", ch.name, "err", err)
				adm.SetReady(ch.name, fmt.Errorf("stopped: %w", err))
			}
			return nil
		})
	}
	return nil
}

// newTelegram builds the Telegram channel from channels.telegram, or nil
// when the section is absent or sets no token (logged once: the shipped
// config.yaml carries the section with ${TELEGRAM_BOT_TOKEN}). State:
// data_dir/telegram.db (the offset: the channels bucket on jetstream);
// voice notes are transcribed with llm.transcription_model. No I/O here.
func newTelegram(cfg Config, d channelDeps) (channels.Channel, error) {
	tc := cfg.Channels.Telegram
	if tc == nil {
		return nil, nil
	}
	if !tc.Enabled() {
		if d.Log != nil {
			d.Log.Info("Telegram channel is off: channels.telegram.token is empty " +
				"(set TELEGRAM_BOT_TOKEN to turn it on; see docs/telegram.md)")
		}
		return nil, nil
	}
	deps := telegram.Deps{Conn: d.Conn, Subjects: d.Subjects, MaxTextBytes: cfg.Bus.MaxTextBytes,
		StatePath: filepath.Join(d.DataDir, "telegram.db"), OutRetention: cfg.Bus.OutRetentionOrDefault(),
		State: d.State.Channels, Seen: d.seen(compTelegram), Files: d.root(), Log: d.Log, Status: d.status(compTelegram), Metrics: d.Metrics, Gate: d.Gate, HTTP: d.HTTP}
	if cfg.LLM.TranscriptionModel != "" {
		tr, err := llm.NewTranscriber(cfg.LLM, nil)
		if err != nil {
			return nil, err
		}
		deps.Transcriber = tr
	}
	a, err := telegram.New(*tc, deps)
	if err != nil {
		return nil, err
	}
	return d.State.Leases.Channel(a, compTelegram, tc.Token, d.status(compTelegram)), nil
}

// newSlack builds the Slack channel from channels.slack, or nil when the
// section is absent or sets no token. Its state is data_dir/slack.db. It
// does no I/O; the caller runs it.
func newSlack(cfg Config, d channelDeps) (channels.Channel, error) {
	sc := cfg.Channels.Slack
	if sc == nil || !sc.Enabled() {
		return nil, nil
	}
	a, err := slackch.New(*sc, slackch.Options{Conn: d.Conn, SubjectPrefix: d.Subjects.Prefix,
		MaxTextBytes: cfg.Bus.MaxTextBytes, Inbox: d.root(), StorePath: filepath.Join(d.DataDir, "slack.db"), State: d.State.Channels, Seen: d.seen(compSlack),
		OutRetention: cfg.Bus.OutRetentionOrDefault(), Log: d.Log, Status: d.status(compSlack), Metrics: d.Metrics, Gate: d.Gate, HTTP: d.HTTP})
	if err != nil {
		return nil, err
	}
	return d.State.Leases.Channel(a, compSlack, sc.BotToken, d.status(compSlack)), nil
}

// newOpenAI builds the OpenAI-compatible API from channels.openai (state
// in data_dir/openai.db), or nil when the section is absent or has no key.
func newOpenAI(cfg Config, d channelDeps) (channels.Channel, error) {
	oc := cfg.Channels.OpenAI
	if oc == nil || !oc.Enabled() {
		return nil, nil
	}
	c, err := openaich.New(*oc, openaich.Deps{Conn: d.Conn, Subjects: d.Subjects, MaxTextBytes: cfg.Bus.MaxTextBytes, NoModel: !cfg.LLM.Configured(),
		StatePath: filepath.Join(d.DataDir, "openai.db"), Records: d.State.Delivered, Seen: d.seen(openaich.Name),
		OutRetention: cfg.Bus.OutRetentionOrDefault(), Log: d.Log, Status: d.status(openaich.Name), Metrics: d.Metrics, HTTP: d.HTTP})
	if err != nil {
		return nil, err
	}
	return d.State.Leases.Channel(c, openaich.Name, "", d.status(openaich.Name)), nil
}

// seen is where the channel remembers the outbound ids it showed when
// several instances may run it (the delivered bucket); nil: its own file.
func (d channelDeps) seen(channel string) bridge.SeenStore {
	if d.State.Delivered == nil {
		return nil
	}
	return kvstate.Seen{Store: d.State.Delivered, Channel: channel}
}

// newWeb builds the web console from channels.web (docs/web.md), or nil
// when it allows nobody.
func newWeb(cfg Config, d channelDeps) (channels.Channel, error) {
	if wc := cfg.Channels.Web; wc == nil || !wc.Enabled() {
		return nil, nil
	}
	c, err := webch.New(*cfg.Channels.Web, webch.Deps{Conn: d.Conn, Subjects: d.Subjects, MaxTextBytes: cfg.Bus.MaxTextBytes, StatePath: filepath.Join(d.DataDir, "web.db"),
		PairDir: webch.PairDir(d.DataDir), OutRetention: cfg.Bus.OutRetentionOrDefault(), NoModel: !cfg.LLM.Configured(), Log: d.Log,
		Files: d.root(), Status: d.status(webch.Name), Metrics: d.Metrics, Dash: d.Dash, Allow: d.Gate, HTTP: d.HTTP})
	if err != nil {
		return nil, err
	}
	return d.State.Leases.Channel(c, webch.Name, "", d.status(webch.Name)), nil
}

// root is the workspace's root, nil without a workspace.
func (d channelDeps) root() *os.Root {
	if d.Workspace == nil {
		return nil
	}
	return d.Workspace.Root()
}

// status reports component's readiness through d.Status, nil without one.
func (d channelDeps) status(component string) func(error) {
	if d.Status == nil {
		return nil
	}
	return func(err error) { d.Status(component, err) }
}

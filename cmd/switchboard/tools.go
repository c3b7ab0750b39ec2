package main

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	bolt "go.etcd.io/bbolt"
	"golang.org/x/sync/errgroup"

	"github.com/switchboard-chat/switchboard/bus"
	"github.com/switchboard-chat/switchboard/memory/longterm"
	"github.com/switchboard-chat/switchboard/tools"
	"github.com/switchboard-chat/switchboard/tools/bash"
	"github.com/switchboard-chat/switchboard/tools/files"
	"github.com/switchboard-chat/switchboard/tools/mcp"
	"github.com/switchboard-chat/switchboard/tools/message"
	"github.com/switchboard-chat/switchboard/tools/schedule"
	"github.com/switchboard-chat/switchboard/tools/web"
	"github.com/switchboard-chat/switchboard/workspace"
	"github.com/switchboard-chat/switchboard/workspace/skills"
)

// toolsDBFile is the tools' own bbolt file under data_dir (scheduled
// tasks, the chats send_message may reach); history.db belongs to the
// history store.
const toolsDBFile = "tools.db"

// toolsPublisher is what the tools need of the bus: a durable publish that
// waits for the stream's acknowledgement and de-duplicates on msgID.
// *natsbus.Bus implements it.
type toolsPublisher interface {
	Publish(ctx context.Context, subject string, data []byte, msgID string) error
}

// builtTools is the tool layer: what serve hands to the agent.
type builtTools struct {
	// Toolbox is the agent's tool set (agent.Deps.Tools): the built-in
	// tools, the extra ones given to buildTools, the MCP servers' tools as
	// they become ready, less tools.disabled; calls to a skill's name
	// return its SKILL.md. Its post-turn tool record_chat must run after
	// every turn (the executor does that for a Toolbox).
	Toolbox *tools.Toolbox
	// Skills gives the system prompt its skills section:
	// Skills.PromptSection().
	Skills *skills.Catalog
	// MCP reports the MCP servers' status.
	MCP *mcp.Manager
	// CallTimeout is the per-call tool timeout the agent must allow
	// (agent.Options.ToolTimeout): 120 s, or more when bash or an MCP
	// server may take longer.
	CallTimeout time.Duration
}

// buildTools builds the tool layer for ws: the file tools and
// search_files, web_fetch, send_message, schedule, bash (when
// tools.bash.enabled), the extra tools given (memory tools...), the skills
// catalog as fallback, and the MCP manager as a dynamic source. It opens
// data_dir/tools.db. Nothing runs in the background yet: run does that
// (the scheduler, MCP connections, bash's background jobs) until its ctx
// is cancelled, then closes tools.db and returns nil. p keeps one session
// out of another's files (another user's private memory, another chat's
// inbox): its guard for the file tools, search_files and send_message, its
// private folders for the bash sandbox. Call run exactly once, as soon as
// buildTools succeeded; the toolbox must not be used after run returned.
// On error nothing is left open.
func buildTools(cfg Config, ws *workspace.Workspace, pub toolsPublisher, log *slog.Logger, p privacy, extra ...tools.Tool) (*builtTools, func(context.Context) error, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if err := ws.Root().Mkdir(skills.Dir, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
		log.Warn("could not create the skills folder in the workspace", "err", err)
	}
	if err := os.MkdirAll(cfg.DataDir, 0o750); err != nil {
		return nil, nil, fmt.Errorf("data_dir: %w", err)
	}
	path := filepath.Join(cfg.DataDir, toolsDBFile)
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: 5 * time.Second})
	if err != nil {
		return nil, nil, fmt.Errorf("tools: open %s: %w", path, err)
	}
	built, run, err := assembleTools(cfg, ws, db, pub, log, p, extra)
	if err != nil {
		_ = db.Close()
		return nil, nil, err
	}
	return built, run, nil
}

func assembleTools(cfg Config, ws *workspace.Workspace, db *bolt.DB, pub toolsPublisher, log *slog.Logger, p privacy, extra []tools.Tool) (*builtTools, func(context.Context) error, error) {
	guard := p.guard
	subj := bus.Subjects{Prefix: cfg.Bus.SubjectPrefix}
	chats, err := message.NewChats(db)
	if err != nil {
		return nil, nil, err
	}
	sched, err := schedule.New(db, pub, subj, cfg.Tools.Schedule, log.With("component", "schedule"))
	if err != nil {
		return nil, nil, err
	}
	list := files.New(ws, files.WithGuard(guard))
	list = append(list,
		files.NewSearch(ws, cfg.Tools.SearchFiles, files.WithGuard(guard)),
		web.NewFetch(cfg.Tools.WebFetch),
		message.New(ws, chats, pub, subj, cfg.Tools.SendMessage, message.WithGuard(guard)),
		sched.Tool(),
		chats.Recorder(),
	)
	var shell *bash.Shell
	if cfg.Tools.Bash.Enabled {
		if shell, err = bash.New(ws, cfg.Tools.Bash, bash.Options{Log: log.With("component", "bash"),
			Hidden: []string{cfg.DataDir}, Private: p.private}); err != nil {
			return nil, nil, err
		}
		list = append(list, shell.Tool())
		if len(cfg.Tools.Bash.AllowUsers) == 0 {
			log.Warn("tools.bash.enabled is set but tools.bash.allow_users is empty: nobody may run commands")
		}
	}
	list = append(list, extra...)
	catalog := skills.New(ws, skills.Options{Allow: longterm.Public}, log.With("component", "skills"))
	reg, err := tools.NewRegistry(list...)
	if err != nil {
		return nil, nil, err
	}
	reg = reg.WithLogger(log).WithFallback(catalog.Fallback, catalog.Knows)
	mgr, err := mcp.New(cfg.MCP, version, log.With("component", "mcp"))
	if err != nil {
		return nil, nil, err
	}
	tb, err := tools.NewToolbox(reg, cfg.Tools.Disabled, mgr)
	if err != nil {
		return nil, nil, err
	}
	run := func(ctx context.Context) error {
		defer db.Close()
		g, gctx := errgroup.WithContext(ctx)
		g.Go(func() error { return sched.Run(gctx) })
		g.Go(func() error { return mgr.Run(gctx) })
		if shell != nil {
			g.Go(func() error { return shell.Run(gctx) })
		}
		return g.Wait()
	}
	return &builtTools{Toolbox: tb, Skills: catalog, MCP: mgr, CallTimeout: toolCallTimeout(cfg)}, run, nil
}

// privacy is how the tools keep one session out of another's files; the
// long-term memory provides it (longterm.System.Guard and Private).
type privacy struct {
	// guard is the path policy of the tools that open workspace paths
	// (nil: everything is visible).
	guard tools.PathGuard
	// private gives the bash sandbox the folders a session must not see,
	// and its own folders inside them.
	private bash.Private
}

// toolCallTimeout is the per-call timeout the agent must allow for the
// configured tools.
func toolCallTimeout(cfg Config) time.Duration {
	d := 120 * time.Second
	if cfg.Tools.Bash.Enabled {
		d = max(d, cfg.Tools.Bash.MaxTimeout+10*time.Second)
	}
	for _, s := range cfg.MCP.Servers {
		if !s.Disabled {
			t := s.Timeout
			if t <= 0 {
				t = mcp.DefaultTimeout
			}
			d = max(d, t+5*time.Second)
		}
	}
	return d
}

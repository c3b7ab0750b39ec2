// Package toolset assembles the agent's tool layer from configuration: the
// file tools and search_files, web_fetch, send_message, schedule, bash
// (when tools.bash.enabled), the extra tools the caller gives (the memory
// tools), the skills catalog as a fallback for names that are skills, and
// the MCP servers as a dynamic source, less tools.disabled.
//
// Open does no background work and starts no goroutine; [Set.Run] runs
// what the tools need in the background (the scheduler, the MCP
// connections, bash's background jobs) until its ctx is cancelled, then
// closes data_dir/tools.db. Call Run exactly once, as soon as Open
// succeeded; the toolbox must not be used after Run returned. A failed
// Open leaves nothing open.
//
// Every tool that opens a workspace path, and the bash sandbox, keep one
// session out of another's files through the [Privacy] given (the
// long-term memory provides it: another user's private memory, another
// chat's inbox).
package toolset

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

// DBFile is the tools' own bbolt file under data_dir (scheduled tasks, the
// chats send_message may reach); history.db belongs to the history store.
const DBFile = "tools.db"

// Config is what the tool layer is built from: sections of the daemon's
// configuration, each validated by its own package.
type Config struct {
	Tools tools.Config
	MCP   mcp.Config
	// SubjectPrefix is bus.subject_prefix: where send_message and the
	// scheduler publish.
	SubjectPrefix string
	// DataDir holds tools.db; the bash sandbox hides it.
	DataDir string
	// Version is the daemon's version, told to MCP servers.
	Version string
	// ScheduleStore and ScheduleLease, when set (memory.store jetstream:
	// the schedules bucket and the "scheduler" lease), keep the scheduled
	// tasks where every instance sees them and fire them on one instance
	// at a time (schedule.NewShared); nil: tools.db.
	ScheduleStore schedule.SharedStore
	ScheduleLease schedule.Exclusive
	// SchedulePace paces scheduled runs per channel, shared by every
	// agent's scheduler (nil: unpaced).
	SchedulePace *schedule.Pace
}

// Publisher is what the tools need of the bus: a durable publish that
// waits for the stream's acknowledgement and de-duplicates on msgID.
// *natsbus.Bus implements it.
type Publisher interface {
	Publish(ctx context.Context, subject string, data []byte, msgID string) error
}

// Privacy is how the tools keep one session out of another's files.
type Privacy struct {
	// Guard is the path policy of the tools that open workspace paths
	// (nil: everything is visible).
	Guard tools.PathGuard
	// Private gives the bash sandbox the folders a session must not see,
	// and its own folders inside them.
	Private bash.Private
	// Public reports whether a workspace path may be read by every
	// session (skills are served only from such paths); nil: all may.
	Public workspace.Allow
}

// Set is the tool layer: what the daemon hands to the agent.
type Set struct {
	// Toolbox is the agent's tool set (agent.Deps.Tools): calls to a
	// skill's name return its SKILL.md; its post-turn tool record_chat
	// must run after every turn (the executor does that for a Toolbox).
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

	db    *bolt.DB
	sched *schedule.Scheduler
	shell *bash.Shell // nil when bash is off
}

// Open builds the tool layer for ws and opens data_dir/tools.db.
func Open(cfg Config, ws *workspace.Workspace, pub Publisher, log *slog.Logger, p Privacy, extra ...tools.Tool) (*Set, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if err := ws.Root().Mkdir(skills.Dir, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
		log.Warn("could not create the skills folder in the workspace", "err", err)
	}
	if err := os.MkdirAll(cfg.DataDir, 0o750); err != nil {
		return nil, fmt.Errorf("data_dir: %w", err)
	}
	path := filepath.Join(cfg.DataDir, DBFile)
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: 5 * time.Second})
	if err != nil {
		return nil, fmt.Errorf("tools: open %s: %w", path, err)
	}
	// Concurrent writes (new chats recorded by many sessions at once)
	// share a transaction, waiting at most this long for each other; the
	// history's default, not bbolt's 10 ms.
	db.MaxBatchDelay = 2 * time.Millisecond
	s, err := assemble(cfg, ws, db, pub, log, p, extra)
	if err != nil {
		_ = db.Close()
		return nil, err
	}
	return s, nil
}

func assemble(cfg Config, ws *workspace.Workspace, db *bolt.DB, pub Publisher, log *slog.Logger, p Privacy, extra []tools.Tool) (*Set, error) {
	subj := bus.Subjects{Prefix: cfg.SubjectPrefix}
	chats, err := message.NewChats(db)
	if err != nil {
		return nil, err
	}
	s := &Set{db: db, CallTimeout: CallTimeout(cfg)}
	if cfg.ScheduleStore != nil {
		s.sched, err = schedule.NewShared(schedule.Shared{Store: cfg.ScheduleStore, Lease: cfg.ScheduleLease}, pub, subj,
			cfg.Tools.Schedule, log.With("component", "schedule"), schedule.WithPace(cfg.SchedulePace))
	} else {
		s.sched, err = schedule.New(db, pub, subj, cfg.Tools.Schedule, log.With("component", "schedule"), schedule.WithPace(cfg.SchedulePace))
	}
	if err != nil {
		return nil, err
	}
	list := files.New(ws, files.WithGuard(p.Guard))
	list = append(list,
		files.NewSearch(ws, cfg.Tools.SearchFiles, files.WithGuard(p.Guard)),
		web.NewFetch(cfg.Tools.WebFetch),
		message.New(ws, chats, pub, subj, cfg.Tools.SendMessage, message.WithGuard(p.Guard)),
		s.sched.Tool(),
		chats.Recorder(),
	)
	if cfg.Tools.Bash.Enabled {
		if s.shell, err = bash.New(ws, cfg.Tools.Bash, bash.Options{Log: log.With("component", "bash"),
			Hidden: []string{cfg.DataDir}, Private: p.Private}); err != nil {
			return nil, err
		}
		list = append(list, s.shell.Tool())
		if len(cfg.Tools.Bash.AllowUsers) == 0 {
			log.Warn("tools.bash.enabled is set but tools.bash.allow_users is empty: nobody may run commands")
		}
	}
	list = append(list, extra...)
	s.Skills = skills.New(ws, skills.Options{Allow: p.Public}, log.With("component", "skills"))
	reg, err := tools.NewRegistry(list...)
	if err != nil {
		return nil, err
	}
	reg = reg.WithLogger(log).WithFallback(s.Skills.Fallback, s.Skills.Knows)
	if s.MCP, err = mcp.New(cfg.MCP, cfg.Version, log.With("component", "mcp")); err != nil {
		return nil, err
	}
	if s.Toolbox, err = tools.NewToolbox(reg, cfg.Tools.Disabled, s.MCP); err != nil {
		return nil, err
	}
	return s, nil
}

// Run runs the tools' background work until ctx is cancelled, then closes
// tools.db. It returns the first error of that work, or nil.
func (s *Set) Run(ctx context.Context) error {
	defer s.db.Close()
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error { return s.sched.Run(gctx) })
	g.Go(func() error { return s.MCP.Run(gctx) })
	if s.shell != nil {
		g.Go(func() error { return s.shell.Run(gctx) })
	}
	return g.Wait()
}

// CallTimeout is the per-call timeout the agent must allow for the
// configured tools: 120 s, bash's longest command plus 10 s, an MCP
// server's timeout plus 5 s, whichever is longest.
func CallTimeout(cfg Config) time.Duration {
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

package main

import (
	"context"
	"io"
	"os"

	"github.com/switchboard-chat/switchboard"
	"github.com/switchboard-chat/switchboard/admin"
	"github.com/switchboard-chat/switchboard/channels/slack"
	"github.com/switchboard-chat/switchboard/channels/telegram"
	"github.com/switchboard-chat/switchboard/config"
	"github.com/switchboard-chat/switchboard/internal/doctor"
	"github.com/switchboard-chat/switchboard/internal/health"
	"github.com/switchboard-chat/switchboard/llm"
	"github.com/switchboard-chat/switchboard/memory/boltstore"
	"github.com/switchboard-chat/switchboard/memory/memcfg"
	"github.com/switchboard-chat/switchboard/tools/bash"
	"github.com/switchboard-chat/switchboard/tools/mcp"
	"github.com/switchboard-chat/switchboard/workspace"
)

// runCheck implements `switchboard doctor` and `switchboard check`
// (package internal/doctor): against the running daemon of the
// configuration, or, when none runs, the offline checks below, each in
// the package of what it checks.
func runCheck(ctx context.Context, args []string, stdout io.Writer) int {
	return doctor.Run(ctx, args, stdout, "", func(path string) (doctor.Setup, error) {
		data, src, err := config.Load(path, defaultConfigPath, switchboard.ShippedConfig)
		if err != nil {
			return doctor.Setup{}, err
		}
		cfg, err := ParseConfig(data, os.LookupEnv)
		if err != nil {
			return doctor.Setup{}, &doctor.InvalidConfig{Err: err, Source: src.String()}
		}
		return doctor.Setup{ConfigFile: src.String(), Offline: offlineChecks(cfg, src.Path),
			Live: doctor.Live{Admin: cfg.Admin, Bus: cfg.Bus, DataDir: cfg.DataDir, LLM: cfg.LLM}}, nil
	})
}

// offlineChecks are the checks of a stopped daemon: NATS and bus auth, the
// admin listener, the model endpoint and a call, the data folder, the
// workspace, Telegram, Slack, the MCP servers, the bash sandbox.
func offlineChecks(cfg Config, path string) []doctor.Check {
	one := func(r health.Result) []health.Result { return []health.Result{r} }
	dataDir := boltstore.CheckDataDir // history.db is in data_dir with memory.store: bolt only
	if cfg.Memory.Store != memcfg.StoreBolt {
		dataDir = func(dir string) health.Result { return health.CheckDir("data dir", dir) }
	}
	checks := []doctor.Check{
		func(ctx context.Context) []health.Result { return one(cfg.Bus.Check(ctx, cfg.DataDir)) },
		func(context.Context) []health.Result { return one(cfg.Bus.CheckAuth(cfg.DataDir)) },
		func(ctx context.Context) []health.Result { return one(admin.Check(ctx, cfg.Admin)) },
		func(ctx context.Context) []health.Result { return llm.Probe(ctx, cfg.LLM, path) },
		func(context.Context) []health.Result { return one(dataDir(cfg.DataDir)) },
		func(context.Context) []health.Result { return one(workspace.Check(cfg.Agent.Workspace)) },
		func(ctx context.Context) []health.Result { return one(telegram.Check(ctx, cfg.Channels.Telegram, nil)) },
		func(ctx context.Context) []health.Result { return one(slack.Check(ctx, cfg.Channels.Slack, nil)) },
		func(ctx context.Context) []health.Result { return mcp.Check(ctx, cfg.MCP, version) },
	}
	if cfg.Tools.Bash.Enabled {
		checks = append(checks, func(context.Context) []health.Result { return one(bash.Check(cfg.Tools.Bash, nil)) })
	}
	return checks
}

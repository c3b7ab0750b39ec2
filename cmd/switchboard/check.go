package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"sync"

	"github.com/switchboard-chat/switchboard"
	"github.com/switchboard-chat/switchboard/admin"
	"github.com/switchboard-chat/switchboard/channels/slack"
	"github.com/switchboard-chat/switchboard/channels/telegram"
	"github.com/switchboard-chat/switchboard/config"
	"github.com/switchboard-chat/switchboard/internal/health"
	"github.com/switchboard-chat/switchboard/llm"
	"github.com/switchboard-chat/switchboard/memory/boltstore"
	"github.com/switchboard-chat/switchboard/memory/memcfg"
	"github.com/switchboard-chat/switchboard/tools/bash"
	"github.com/switchboard-chat/switchboard/workspace"
)

// runCheck implements `switchboard check [--config FILE]`: it validates the
// configuration (exit code 2 with every problem listed when it is invalid),
// then runs each dependency's check, which lives in the package of what it
// checks — NATS and bus auth, the admin listener, the LLM endpoint and a
// call, the data folder, the workspace, Telegram, Slack, the bash sandbox —
// and prints one OK / WARN / FAIL / SKIP line per result. The exit code is
// 0 when nothing failed (warnings allowed) and 1 otherwise. The checks run
// concurrently and each is bounded in time.
func runCheck(ctx context.Context, args []string, stdout io.Writer) int {
	fset := flag.NewFlagSet("check", flag.ContinueOnError)
	fset.SetOutput(stdout)
	path := configFlag(fset)
	fset.Usage = func() {
		fmt.Fprintln(stdout, "Usage: switchboard check [--config FILE]")
		fmt.Fprintln(stdout, "Validates the configuration and reaches every dependency; exit code 0 when nothing fails.")
		fset.PrintDefaults()
	}
	if err := fset.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if fset.NArg() > 0 {
		fmt.Fprintf(stdout, "switchboard check: unexpected argument %q\n", fset.Arg(0))
		return 2
	}

	data, src, err := config.Load(*path, defaultConfigPath, switchboard.ShippedConfig)
	if err != nil {
		printResult(stdout, health.Result{Name: "config", Status: health.Fail, Detail: err.Error()})
		return 2
	}
	cfg, err := ParseConfig(data, os.LookupEnv)
	if err != nil {
		problems := config.Problems(err)
		printResult(stdout, health.Result{Name: "config", Status: health.Fail, Detail: fmt.Sprintf("%s: %d %s", src, len(problems), health.Plural(len(problems), "problem", "problems"))})
		for _, p := range problems {
			fmt.Fprintf(stdout, "      - %s\n", p)
		}
		return 2
	}
	printResult(stdout, health.Result{Name: "config", Status: health.OK, Detail: src.String() + " is valid"})

	one := func(r health.Result) []health.Result { return []health.Result{r} }
	dataDir := boltstore.CheckDataDir // history.db is in data_dir with memory.store: bolt only
	if cfg.Memory.Store != memcfg.StoreBolt {
		dataDir = func(dir string) health.Result { return health.CheckDir("data dir", dir) }
	}
	checks := []func(context.Context) []health.Result{
		func(ctx context.Context) []health.Result { return one(cfg.Bus.Check(ctx, cfg.DataDir)) },
		func(context.Context) []health.Result { return one(cfg.Bus.CheckAuth(cfg.DataDir)) },
		func(ctx context.Context) []health.Result { return one(admin.Check(ctx, cfg.Admin)) },
		func(ctx context.Context) []health.Result { return llm.Probe(ctx, cfg.LLM, src.Path) },
		func(context.Context) []health.Result { return one(dataDir(cfg.DataDir)) },
		func(context.Context) []health.Result { return one(workspace.Check(cfg.Agent.Workspace)) },
		func(ctx context.Context) []health.Result { return one(telegram.Check(ctx, cfg.Channels.Telegram, nil)) },
		func(ctx context.Context) []health.Result { return one(slack.Check(ctx, cfg.Channels.Slack, nil)) },
	}
	if cfg.Tools.Bash.Enabled {
		checks = append(checks, func(context.Context) []health.Result { return one(bash.Check(cfg.Tools.Bash, nil)) })
	}
	results := make([][]health.Result, len(checks))
	var wg sync.WaitGroup
	for i, check := range checks {
		wg.Go(func() { results[i] = check(ctx) })
	}
	wg.Wait()

	var warns, fails int
	for _, r := range slices.Concat(results...) {
		printResult(stdout, r)
		switch r.Status {
		case health.Warn:
			warns++
		case health.Fail:
			fails++
		}
	}
	fmt.Fprintf(stdout, "\n%d %s, %d %s\n", warns, health.Plural(warns, "warning", "warnings"), fails, health.Plural(fails, "failure", "failures"))
	if fails > 0 {
		return 1
	}
	return 0
}

func printResult(w io.Writer, r health.Result) {
	fmt.Fprintf(w, "%-4s  %-9s  %s\n", r.Status, r.Name, r.Detail)
}

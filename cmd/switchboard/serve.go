package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/switchboard-chat/switchboard/access"
	"github.com/switchboard-chat/switchboard/admin"
	"github.com/switchboard-chat/switchboard/agent"
	"github.com/switchboard-chat/switchboard/agent/heartbeat"
	"github.com/switchboard-chat/switchboard/agent/profiles"
	"github.com/switchboard-chat/switchboard/bus/natsbus"
	webch "github.com/switchboard-chat/switchboard/channels/web"
	"github.com/switchboard-chat/switchboard/internal/httpserve"
	"github.com/switchboard-chat/switchboard/internal/kvstate"
	"github.com/switchboard-chat/switchboard/internal/reload"
	"github.com/switchboard-chat/switchboard/internal/reqlog"
	"github.com/switchboard-chat/switchboard/memory"
	"github.com/switchboard-chat/switchboard/memory/boltstore"
	"github.com/switchboard-chat/switchboard/memory/jsstore"
	"github.com/switchboard-chat/switchboard/memory/memcfg"
	"github.com/switchboard-chat/switchboard/metrics"
	"github.com/switchboard-chat/switchboard/tools"
	"github.com/switchboard-chat/switchboard/tools/schedule"
	"github.com/switchboard-chat/switchboard/workspace"
)

// Readiness components reported on /readyz.
const (
	compBus       = "bus"
	compStore     = "store"
	compWorkspace = "workspace"
	compAgent     = "agent"
)

func runServe(ctx context.Context, args []string, stderr io.Writer) error {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.SetOutput(stderr)
	path := configFlag(fs)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	cfg, src, err := LoadConfig(*path)
	if err != nil {
		return err
	}
	log := cfg.Logger(stderr)
	if !src.Found {
		log.Info("no configuration file: running on the built-in defaults (pass --config FILE to use one)", "looked_for", src.Path, "data_dir", cfg.DataDir)
	}
	return serve(ctx, cfg, log, nil)
}

// started is told what serve built once the daemon is running (demo and
// tests use it to reach the bus).
type started struct {
	Bus     *natsbus.Bus
	Admin   *admin.Server
	Metrics *metrics.Metrics
}

// serve runs the daemon until ctx is cancelled: admin server, workspace,
// history store, bus, model client, tools, and the session manager. It
// closes everything it opened before returning.
func serve(ctx context.Context, cfg Config, log *slog.Logger, onStart func(started)) (err error) {
	t0 := time.Now()
	if err := tools.ProtectProcess(); err != nil {
		log.Warn("could not make the daemon non-dumpable: processes it starts (bash commands, MCP servers) could read its environment and memory", "err", err)
	}
	hs := httpserve.New(cfg.HTTP, log) // bounds and counts every HTTP listener
	adm := admin.New(cfg.Admin, log)
	adm.SetHTTP(hs)
	adm.Expect(compBus, compStore, compWorkspace, compAgent)
	mx := metrics.New()
	adm.Handle("/metrics", mx.Handler())
	mx.HTTP(hs)
	ctx, cancel := context.WithCancel(ctx)
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error { return adm.Run(gctx) })
	defer func() {
		if werr := g.Wait(); werr != nil && err == nil && !errors.Is(werr, context.Canceled) {
			err = werr
		}
	}()
	defer cancel() // runs first: an early return stops what was started

	set, err := cfg.Profiles() // main is the top-level sections with agents.main on top
	if err != nil {
		return err
	}
	cfg.LLM, cfg.Agent, cfg.Tools = set.Main().LLM, set.Main().Agent, set.Main().Tools
	ws, err := workspace.Open(cfg.Agent.Workspace, log)
	if err != nil {
		return fmt.Errorf("workspace: %w", err)
	}
	defer ws.Close()
	adm.SetReady(compWorkspace, nil)

	if err := os.MkdirAll(cfg.DataDir, 0o750); err != nil {
		return fmt.Errorf("data_dir: %w", err)
	}
	var hist metrics.History // memory.store: bolt here, jetstream once the bus is up
	if cfg.Memory.Store == memcfg.StoreBolt {
		bolt, err := boltstore.Open(filepath.Join(cfg.DataDir, boltstore.FileName), boltstore.Options{})
		if err != nil {
			return err
		}
		defer bolt.Close()
		hist = bolt
	}

	busCfg, tokenPath, created, err := cfg.Bus.WithBuiltinChannels(builtinChannels).WithOperatorToken(cfg.DataDir)
	if err != nil {
		return err
	}
	busCfg.Partitions = cfg.Agent.PartitionCount(cfg.Memory.Store == memcfg.StoreJetStream)
	if tokenPath != "" {
		log.Info("bus operator credential", "path", tokenPath, "created", created)
	}
	b, err := natsbus.Open(ctx, busCfg, filepath.Join(cfg.DataDir, "jetstream"), log)
	if err != nil {
		return err
	}
	defer b.Close()
	adm.SetReady(compBus, b.Ready(ctx))
	var state kvstate.Set // zero on bolt (one instance): nothing runs under a lease, state stays in data_dir
	if cfg.Memory.Store == memcfg.StoreJetStream {
		js, err := jsstore.Open(ctx, b.Conn(), jsstore.Options{Prefix: strings.ReplaceAll(cfg.Bus.SubjectPrefix, ".", "_"), Replicas: cfg.Bus.Replicas})
		if err != nil {
			return err
		}
		defer js.Close()
		hist = js
		if state, err = kvstate.Open(ctx, b.Conn(), kvstate.Config{Prefix: strings.ReplaceAll(cfg.Bus.SubjectPrefix, ".", "_"), Replicas: cfg.Bus.Replicas,
			DeliveredTTL: 2 * cfg.Bus.OutRetentionOrDefault()}, log); err != nil {
			return err
		}
	}
	store := metrics.Store{History: hist, M: mx, Fails: &memory.FailureLog{Log: log}, Fault: testStoreFault}
	adm.SetReady(compStore, nil)

	reqs := reqlog.New(cfg.LLM.APIKey) // the last requests of each session, for the web dashboard
	rt, err := profiles.Start(set, profiles.Shared{Memory: cfg.Memory, MCP: cfg.MCP, SubjectPrefix: cfg.Bus.SubjectPrefix, Version: version,
		Bus: b, SchedulePace: schedulePace(cfg.Bus.Bridges), Metrics: mx, Requests: reqs, State: state, Log: log}) // every agent, main's memory and schedules in state
	if err != nil {
		return err
	}
	adm.Handle("GET /mcp", rt) // main's MCP servers
	// data_dir/access.db or the cluster's bucket, read at each decision
	gate := access.New(cfg.Access.WithChannels(cfg.Channels), cfg.DataDir, access.Options{Log: log, Shared: state.Access})
	if len(cfg.Access.Owners) == 0 {
		log.Info("access.owners is empty: the shared prompt files (AGENT.md, USER.md, RULE.md, MEMORY.md, HEARTBEAT.md, skills/, " +
			"the shared memory) are read-only to every chat; only the operator's console (switchboard chat) may change them")
	}
	mgr, err := agent.NewManager(cfg.Agent, rt.Main.Settings.Apply(agent.Options{Subjects: b.Subjects(), MaxTextBytes: cfg.Bus.MaxTextBytes,
		ShutdownTimeout: cfg.ShutdownTimeout, Heartbeat: b.Heartbeat()}), // a third of the consumers' AckWait
		agent.Deps{Source: b, Publisher: b, Store: store, Log: log, Observer: mx, Pairing: gate, Main: rt.Main, Agents: rt.Agents()})
	if err != nil {
		return errors.Join(err, rt.Close())
	}
	g.Go(func() error { return mgr.Run(gctx) }) // closes every agent's tools and files after its last turns
	defer func() { cancel(); _ = g.Wait() }()   // on any return: joined before the closes above
	g.Go(func() error {
		return memory.Pruner{Store: hist, Retention: cfg.Memory.RetentionPeriod(), Log: log}.Run(gctx)
	})
	mx.Runtime(mgr, b)
	hb := heartbeat.New(heartbeat.Options{Subjects: b.Subjects(), Publisher: b, Conn: b.Conn(), DataDir: cfg.DataDir,
		Busy: heartbeat.Running(mgr.Sessions), Resolve: rt.Resolve, Observer: mx, Log: log}, set.Heartbeats())
	g.Go(func() error { return hb.Run(gctx) })
	rl := reload.New(cfg, func() (Config, error) { c, _, err := LoadConfig(cfg.File); return c, err }, func(next Config) []string {
		set, _ := next.Profiles() // valid once loaded
		return slices.Concat(rt.Reload(mgr, set), hb.Swap(rt.Heartbeats()), gate.SetConfig(next.Access.WithChannels(next.Channels)))
	}, log, slices.Concat([]string{"bindings", "agents", "llm", "agent", "tools", "access"}, access.ReloadKeys())...) // main's llm/agent/tools: rt.Reload applies them
	adm.Handle("POST /reload", rl)
	g.Go(func() error { return rl.Run(gctx) })
	g.Go(func() error {
		return b.Announce(gctx, natsbus.Instance{Version: version, Started: t0}, adm.Addr, adm.SetDetail)
	})
	if err := startChannels(gctx, g, cfg, channelDeps{Conn: b.Conn(), Subjects: b.Subjects(), Workspace: ws,
		DataDir: cfg.DataDir, Log: log, Status: adm.SetReady, Metrics: mx, State: state, Gate: gate, HTTP: hs,
		Dash: webch.Dashboard{Sessions: mgr.Sessions, Health: adm.NotReady, Gather: mx.Gatherer(), Requests: reqs.Requests, Config: webch.RedactConfig(cfg)}}, adm); err != nil {
		return err
	}
	g.Go(func() error {
		b.WatchHealth(gctx, 5*time.Second, func(err error) { adm.SetReady(compBus, err) }) // connected, streams there and storing
		return nil
	})
	adm.SetReady(compAgent, nil)
	log.Info("switchboard is running", "bus", b.Describe(), "admin", cfg.Admin.Listen,
		"model", cfg.LLM.Model, "workspace", ws.Dir(), "startup", time.Since(t0).Round(time.Microsecond))
	if onStart != nil {
		onStart(started{Bus: b, Admin: adm, Metrics: mx})
	}
	werr := g.Wait()
	log.Info("switchboard stopped")
	if werr != nil && !errors.Is(werr, context.Canceled) {
		return werr
	}
	return nil
}

// schedulePace paces the scheduled runs of each bridge's channels to the
// bridge's bus.bridges.<name>.max_msgs_per_sec, the rate the bus lets the
// bridge's own messages in at: scheduled runs skip the ingress, and the
// bridge chooses the user ids that the per-user quota counts.
func schedulePace(bridges map[string]natsbus.BridgeConfig) *schedule.Pace {
	rates := map[string]float64{}
	for _, br := range bridges {
		for _, ch := range br.Channels {
			rates[ch] = br.Rate()
		}
	}
	return schedule.NewPace(rates)
}

// testStoreFault is nil in the daemon. A test of package main sets it
// before serve to make history writes fail as a failing disk would (the
// write does not happen; metrics.Store.Fault).
var testStoreFault func(op string) error

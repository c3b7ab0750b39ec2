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
	"time"

	"golang.org/x/sync/errgroup"

	"switchboard/admin"
	"switchboard/agent"
	"switchboard/agent/llm"
	"switchboard/bus/natsbus"
	"switchboard/memory/boltstore"
	"switchboard/tools"
	"switchboard/tools/files"
	"switchboard/workspace"
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
	cfg, err := LoadConfig(*path)
	if err != nil {
		return err
	}
	return serve(ctx, cfg, cfg.Logger(stderr), nil)
}

// started is told what serve built once the daemon is running (demo and
// tests use it to reach the bus).
type started struct {
	Bus   *natsbus.Bus
	Admin *admin.Server
}

// serve runs the daemon until ctx is cancelled: admin server, workspace,
// history store, bus, model client, tools, and the session manager. It
// closes everything it opened before returning.
func serve(ctx context.Context, cfg Config, log *slog.Logger, onStart func(started)) (err error) {
	t0 := time.Now()
	adm := admin.New(cfg.Admin, log)
	adm.Expect(compBus, compStore, compWorkspace, compAgent)
	ctx, cancel := context.WithCancel(ctx)
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error { return adm.Run(gctx) })
	defer func() {
		if werr := g.Wait(); werr != nil && err == nil && !errors.Is(werr, context.Canceled) {
			err = werr
		}
	}()
	defer cancel() // runs first: an early return stops what was started

	ws, err := workspace.Open(cfg.Agent.Workspace, log)
	if err != nil {
		return fmt.Errorf("workspace: %w", err)
	}
	defer ws.Close()
	adm.SetReady(compWorkspace, nil)

	if err := os.MkdirAll(cfg.DataDir, 0o750); err != nil {
		return fmt.Errorf("data_dir: %w", err)
	}
	store, err := boltstore.Open(filepath.Join(cfg.DataDir, "history.db"), boltstore.Options{})
	if err != nil {
		return err
	}
	defer store.Close()
	adm.SetReady(compStore, nil)

	b, err := natsbus.Open(ctx, cfg.Bus, filepath.Join(cfg.DataDir, "jetstream"), log)
	if err != nil {
		return err
	}
	defer b.Close()
	adm.SetReady(compBus, b.Ready(ctx))

	model, err := buildModel(cfg.LLM, log)
	if err != nil {
		return err
	}
	if !cfg.LLM.Configured() {
		log.Warn("no language model is configured: every reply will explain how to configure one. " +
			"Set OPENAI_API_KEY (and OPENAI_BASE_URL / OPENAI_MODEL for other OpenAI-compatible servers such as Ollama or vLLM), " +
			"or edit the llm section of the config file")
	}
	registry, err := tools.NewRegistry(files.New(ws)...)
	if err != nil {
		return err
	}
	mgr, err := agent.NewManager(cfg.Agent, agent.Options{
		Subjects:        b.Subjects(),
		MaxTextBytes:    cfg.Bus.MaxTextBytes,
		ModelName:       cfg.LLM.Model,
		ContextWindow:   cfg.LLM.ContextWindow,
		MaxOutputTokens: cfg.LLM.MaxTokens,
		Temperature:     cfg.LLM.Temperature,
		ReadFile:        ws.ReadText,
	}, agent.Deps{Source: b, Publisher: b, Store: store, Model: model, Tools: registry, Prompts: ws, Log: log})
	if err != nil {
		return err
	}
	g.Go(func() error { return mgr.Run(gctx) })
	g.Go(func() error { watchBus(gctx, b, adm); return nil })
	adm.SetReady(compAgent, nil)
	log.Info("switchboard is running", "bus", busDescription(b), "admin", cfg.Admin.Listen,
		"model", cfg.LLM.Model, "workspace", ws.Dir(), "startup", time.Since(t0).Round(time.Microsecond))
	if onStart != nil {
		onStart(started{Bus: b, Admin: adm})
	}
	werr := g.Wait()
	log.Info("switchboard stopped")
	if werr != nil && !errors.Is(werr, context.Canceled) {
		return werr
	}
	return nil
}

// buildModel returns the model client: the primary endpoint, wrapped in a
// failover over llm.fallbacks when any are configured.
func buildModel(cfg llm.Config, log *slog.Logger) (agent.Model, error) {
	primary, err := llm.New(cfg, log)
	if err != nil || len(cfg.Fallbacks) == 0 {
		return primary, err
	}
	var fbs []llm.Streamer
	for i, f := range cfg.Fallbacks {
		c := cfg
		c.Fallbacks = nil
		if f.BaseURL != "" {
			c.BaseURL = f.BaseURL
		}
		if f.APIKey != "" {
			c.APIKey = f.APIKey
		}
		if f.Model != "" {
			c.Model = f.Model
		}
		fb, err := llm.New(c, log)
		if err != nil {
			return nil, fmt.Errorf("llm.fallbacks[%d]: %w", i, err)
		}
		fbs = append(fbs, fb)
	}
	return llm.NewFailover(log, cfg.FallbackCooldown, primary, fbs...), nil
}

// watchBus keeps the bus's readiness current (an external NATS can go away).
func watchBus(ctx context.Context, b *natsbus.Bus, adm *admin.Server) {
	t := time.NewTicker(5 * time.Second)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			adm.SetReady(compBus, b.Ready(rctx))
			cancel()
		}
	}
}

func busDescription(b *natsbus.Bus) string {
	if u := b.ClientURL(); u != "" {
		if b.Embedded() {
			return "embedded, listening on " + u
		}
		return u
	}
	return "embedded, in-process only"
}

package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/switchboard-chat/switchboard/bus/bridge"
	"github.com/switchboard-chat/switchboard/channels/console"
	"github.com/switchboard-chat/switchboard/internal/scripted"
	"github.com/switchboard-chat/switchboard/llm/llmtest"
)

// demoFirstMessage is sent automatically so a newcomer sees a tool round trip.
const demoFirstMessage = "What is in your workspace?"

// runDemo runs the daemon, a scripted OpenAI-compatible model and the
// terminal chat in one process, on a throw-away data folder. It is a demo:
// the "model" is a rule-based script, not a language model.
func runDemo(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("demo", flag.ContinueOnError)
	fs.SetOutput(stderr)
	keep := fs.Bool("keep", false, "keep the temporary data folder")
	verbose := fs.Bool("v", false, "show the daemon's log")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	model := llmtest.NewHandler(llmtest.WithResponder(scripted.DemoResponder), llmtest.WithRecordLimit(0))
	logOut := io.Discard
	if *verbose {
		logOut = stderr
	}
	log := slog.New(slog.NewTextHandler(logOut, nil))
	return scripted.Run(ctx, "switchboard-demo-", *keep, model, func(ctx context.Context, env scripted.Env) error {
		fmt.Fprintf(stdout, "=== Switchboard DEMO ===\n"+
			"This is a demo: the model is a scripted fake (it lists your workspace with a tool when you ask about your files, and echoes everything else).\n"+
			"Data and workspace live in %s and are removed on exit%s.\n"+
			"For a real model run `switchboard serve` with OPENAI_API_KEY set.\n\n", env.Dir, map[bool]string{true: " (unless --keep)", false: ""}[!*keep])
		ctx, cancel := context.WithCancel(ctx)
		defer cancel()
		g, gctx := errgroup.WithContext(ctx)
		ready := make(chan started, 1)
		g.Go(func() error { return serve(gctx, scriptedConfig(env), log, func(s started) { ready <- s }) })
		g.Go(func() error {
			defer cancel()
			var s started
			select {
			case s = <-ready:
			case <-gctx.Done():
				return nil
			}
			br, err := bridge.New(s.Bus.Conn(), bridge.Options{Channel: console.Channel, SubjectPrefix: s.Bus.Subjects().Prefix})
			if err != nil {
				return err
			}
			defer br.Close()
			c, err := console.New(br, console.Options{ChatID: "demo", UserID: "you", Wait: time.Minute}, stdout)
			if err != nil {
				return err
			}
			fmt.Fprintf(stdout, "> %s\n", demoFirstMessage)
			input := io.MultiReader(strings.NewReader(demoFirstMessage+"\n"), stdin)
			return c.Run(gctx, input)
		})
		return g.Wait()
	})
}

// scriptedConfig is the configuration of demo and bench: the defaults, on
// env's folders, with env's scripted model, the bus in-process only and
// no admin listener.
func scriptedConfig(env scripted.Env) Config {
	cfg := defaultConfig()
	cfg.DataDir, cfg.Agent.Workspace = env.DataDir, env.Workspace
	cfg.Bus.Listen, cfg.Admin.Listen = "", ""
	cfg.LLM.BaseURL, cfg.LLM.APIKey, cfg.LLM.Model = env.ModelURL, "scripted", "scripted-model"
	return cfg
}

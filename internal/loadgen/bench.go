package loadgen

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sync/errgroup"

	"github.com/switchboard-chat/switchboard/bus"
	"github.com/switchboard-chat/switchboard/bus/natsbus"
	"github.com/switchboard-chat/switchboard/internal/scripted"
	"github.com/switchboard-chat/switchboard/llm/llmtest"
)

// FileToolsOnly is the tools.disabled list that leaves the model only the
// four file tools of the foundation issue (read_file, write_file,
// edit_file, list_dir): `--tools files` and the tools=files benchmarks.
var FileToolsOnly = []string{"search_files", "web_fetch", "send_message", "schedule", "memory_*"}

// Tool sets of --tools.
const (
	ToolsAll   = "all"
	ToolsFiles = "files"
)

// Bench is `switchboard bench`: the daemon on a temporary folder
// (package scripted) with the scripted model answering "echo: …" (llmtest
// EchoResponder) after ModelLatency, loaded by Drive. With ModelURL the
// model is that OpenAI-compatible server instead (cmd/fakellm in another
// process keeps the model's allocations out of the figures).
type Bench struct {
	Load         Options
	Tools        string        // ToolsAll or ToolsFiles
	ModelLatency time.Duration // the scripted model's delay before its first byte
	ModelURL     string        // an external model's base URL; "" serves the scripted model in process
	JSON         string        // write the result there
	Compare      string        // print the ratio to the result saved there
	Keep         bool          // keep the temporary folder
}

// Flags registers the flags of `switchboard bench` on fs, their defaults
// set in b.
func (b *Bench) Flags(fs *flag.FlagSet) {
	fs.IntVar(&b.Load.Chats, "chats", 100, "number of chats (one session each)")
	fs.IntVar(&b.Load.Messages, "messages", 10, "messages each chat sends")
	fs.Float64Var(&b.Load.Rate, "rate", 0, "open loop: messages per second over all chats; 0 is the closed loop (a chat sends its next message when the final reply to the previous one arrived)")
	fs.DurationVar(&b.Load.Timeout, "timeout", DefaultTimeout, "how long a message may wait for its final reply before the run fails")
	fs.StringVar(&b.Tools, "tools", ToolsAll, "tools offered to the model: all (the default tool set) or files (the four file tools)")
	fs.DurationVar(&b.ModelLatency, "model-latency", 0, "the scripted model's delay before it answers (e.g. 200ms); 0 measures Switchboard alone")
	fs.StringVar(&b.ModelURL, "model-url", "", "use the OpenAI-compatible model at `URL` (e.g. fakellm in another process, so that its allocations are not counted) instead of the scripted model in this process")
	fs.StringVar(&b.JSON, "json", "", "write the result as JSON to `FILE`")
	fs.StringVar(&b.Compare, "compare", "", "print the ratio to the result saved in `FILE` by --json")
	fs.BoolVar(&b.Keep, "keep", false, "keep the temporary folder (data, workspace) and print its path")
}

// Validate reports the first setting that cannot be run, naming its flag.
func (b Bench) Validate() error {
	if err := b.Load.Validate(); err != nil {
		return err
	}
	if b.Load.Turns != 0 {
		return errors.New("loadgen: Bench runs chats × messages; Turns is for benchmarks")
	}
	if b.Tools != ToolsAll && b.Tools != ToolsFiles {
		return fmt.Errorf("--tools: must be %s or %s, got %q", ToolsAll, ToolsFiles, b.Tools)
	}
	if b.ModelLatency < 0 {
		return fmt.Errorf("--model-latency: must not be negative, got %s", b.ModelLatency)
	}
	if b.ModelURL != "" && b.ModelLatency != 0 {
		return errors.New("--model-latency: the scripted model's delay; with --model-url set the external model's own (fakellm --latency)")
	}
	if u, err := url.Parse(b.ModelURL); b.ModelURL != "" && (err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "") {
		return fmt.Errorf("--model-url: must be an http:// or https:// URL such as http://127.0.0.1:8088/v1, got %q", b.ModelURL)
	}
	if b.Load.Timeout == 0 {
		return errors.New("--timeout: must be positive, got 0s")
	}
	return nil
}

// Setup is what the daemon of a bench runs on.
type Setup struct {
	scripted.Env
	// DisabledTools is the daemon's tools.disabled.
	DisabledTools []string
}

// Target is the running daemon's bus: its TCP URL (the operator's
// credential is read from Setup.DataDir, natsbus.ReadOperatorToken) and
// its subjects.
type Target struct {
	URL      string
	Subjects bus.Subjects
	Metrics  prometheus.Gatherer // the daemon's metrics; nil: the result has no phases
}

// Daemon runs the daemon configured from s until ctx ends, and calls
// ready once it runs. Its bus must listen on TCP with the generated
// operator credential.
type Daemon func(ctx context.Context, s Setup, ready func(Target)) error

// Run runs the bench: Validate, read --compare's file, start the model
// and the daemon, Drive, stop them, print the result to w and save it
// with --json. The first error ends the run.
func (b Bench) Run(ctx context.Context, w io.Writer, daemon Daemon) error {
	if err := b.Validate(); err != nil {
		return err
	}
	var base *Result
	if b.Compare != "" {
		r, err := ReadResult(b.Compare)
		if err != nil {
			return err
		}
		base = &r
	}
	setup := Setup{}
	if b.Tools == ToolsFiles {
		setup.DisabledTools = FileToolsOnly
	}
	var model http.Handler
	if b.ModelURL == "" {
		model = llmtest.NewHandler(llmtest.WithResponder(llmtest.EchoResponder), llmtest.WithRecordLimit(0), llmtest.WithLatency(b.ModelLatency))
	}
	return scripted.Run(ctx, "switchboard-bench-", b.Keep, model, func(ctx context.Context, env scripted.Env) error {
		if b.ModelURL != "" {
			env.ModelURL = b.ModelURL
		}
		setup.Env = env
		r, err := b.drive(ctx, setup, daemon)
		if err != nil {
			return err
		}
		r.Tools, r.ModelLatencyMs, r.ModelURL = b.Tools, float64(b.ModelLatency.Microseconds())/1000, b.ModelURL
		if err := Print(w, r, base, b.Compare); err != nil {
			return err
		}
		if b.Keep {
			fmt.Fprintf(w, "\ndata and workspace kept in %s\n", env.Dir)
		}
		if b.JSON != "" {
			return WriteResult(b.JSON, r)
		}
		return nil
	})
}

// drive runs daemon on s, drives it once it is ready, and stops it.
func (b Bench) drive(ctx context.Context, s Setup, daemon Daemon) (Result, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	ready := make(chan Target, 1)
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error { return daemon(gctx, s, func(t Target) { ready <- t }) })
	var r Result
	g.Go(func() error {
		defer cancel() // the load is over: stop the daemon
		var t Target
		select {
		case t = <-ready:
		case <-gctx.Done():
			return errors.New("loadgen: the daemon stopped before it was ready")
		}
		token, err := natsbus.ReadOperatorToken(s.DataDir)
		if err != nil {
			return fmt.Errorf("loadgen: %w", err)
		}
		nc, err := nats.Connect(t.URL, nats.Token(token), nats.Name("switchboard-bench"))
		if err != nil {
			return fmt.Errorf("loadgen: connect %s: %w", t.URL, err)
		}
		defer nc.Close()
		load := b.Load
		load.Metrics = t.Metrics
		r, err = Drive(gctx, nc, t.Subjects, load)
		return err
	})
	if err := g.Wait(); err != nil {
		return Result{}, err
	}
	return r, nil
}

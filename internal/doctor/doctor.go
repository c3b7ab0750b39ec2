// Package doctor is `switchboard doctor` (also spelled `switchboard
// check`): it finds out whether the daemon of a configuration is running
// and then diagnoses it live, or runs the offline checks of a stopped one.
//
// Running means its admin listener answers GET /healthz, or (with the
// embedded bus) its bus listener accepts the configuration's operator
// credential. Live, it asks the daemon (admin API: GET /readyz?format=json
// for every component's readiness, channels included; GET /mcp for the
// MCP servers and their tool counts; GET /metrics for sessions and model
// requests), the bus as the operator (the agent consumer's lag, dead
// letters per channel, the streams' state) and the model endpoint (one
// real tool-call request, llm.Probe). Offline, it runs the checks cmd
// gives it ([Setup.Offline]), each in the package of what it checks.
//
// Output: one line per check, "✓" passed, "!" warning, "✗" failed, "-"
// skipped, then the detail with the hint; or JSON with --json. Exit code
// 0 when nothing failed, 1 when something failed, 2 for a bad command line
// or configuration.
package doctor

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"slices"
	"sync"

	"github.com/switchboard-chat/switchboard/config"
	"github.com/switchboard-chat/switchboard/internal/cli"
	"github.com/switchboard-chat/switchboard/internal/health"
)

// Check is one check; it returns its results (health's rules: bounded in
// time, never an error, nothing left behind).
type Check func(context.Context) []health.Result

// Setup is what doctor needs of a loaded configuration.
type Setup struct {
	ConfigFile string
	Live       Live
	// Offline are the checks of a stopped daemon, run concurrently.
	Offline []Check
}

// InvalidConfig is what a Load returns for a configuration that does not
// decode or validate: Err holds one error per problem (config.Problems).
type InvalidConfig struct {
	Err    error
	Source string // the file, or the built-in defaults, that was read
}

func (e *InvalidConfig) Error() string { return e.Err.Error() }

// Load reads the configuration at path.
type Load func(path string) (Setup, error)

// Run is `switchboard doctor [--config FILE] [--json]`; args follow the
// verb, defaultPath is --config's default. It returns the exit code.
func Run(ctx context.Context, args []string, stdout io.Writer, defaultPath string, load Load) int {
	fs := flag.NewFlagSet("doctor", flag.ContinueOnError)
	fs.SetOutput(stdout)
	path := fs.String("config", defaultPath, "configuration file (default ./config.yaml when it exists, else the built-in defaults)")
	asJSON := fs.Bool("json", false, "print the results as JSON")
	cli.SetUsage(fs)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stdout, "switchboard doctor: unexpected argument %q\n", fs.Arg(0))
		return 2
	}
	rep := report{json: *asJSON}
	setup, err := load(*path)
	if err != nil {
		var inv *InvalidConfig
		if errors.As(err, &inv) {
			problems := config.Problems(inv.Err)
			rep.add(health.Result{Name: "config", Status: health.Fail, Detail: fmt.Sprintf("%s: %d %s", inv.Source, len(problems), health.Plural(len(problems), "problem", "problems"))})
			for _, p := range problems {
				rep.Problems = append(rep.Problems, p.Error())
			}
		} else {
			rep.add(health.Result{Name: "config", Status: health.Fail, Detail: err.Error()})
		}
		rep.write(stdout)
		return 2
	}
	rep.add(health.Result{Name: "config", Status: health.OK, Detail: setup.ConfigFile + " is valid"})
	running, how := setup.Live.detect(ctx)
	if running {
		rep.Mode = "live"
		rep.add(health.Result{Name: "daemon", Status: health.OK, Detail: "running: " + how + "; checking it live"})
		rep.add(runAll(ctx, setup.Live.checks(setup.ConfigFile))...)
	} else {
		rep.Mode = "offline"
		rep.add(health.Result{Name: "daemon", Status: health.Skip, Detail: "not running (" + how + "): checking what it needs to start"})
		rep.add(runAll(ctx, setup.Offline)...)
	}
	rep.write(stdout)
	if rep.Failures > 0 {
		return 1
	}
	return 0
}

// runAll runs checks concurrently and returns their results in order.
func runAll(ctx context.Context, checks []Check) []health.Result {
	results := make([][]health.Result, len(checks))
	var wg sync.WaitGroup
	for i, check := range checks {
		wg.Go(func() { results[i] = check(ctx) })
	}
	wg.Wait()
	return slices.Concat(results...)
}

// report is the output of one run.
type report struct {
	json bool

	Problems []string     `json:"problems,omitempty"` // of an invalid config
	Mode     string       `json:"mode,omitempty"`     // live or offline
	Checks   []jsonResult `json:"checks"`
	Warnings int          `json:"warnings"`
	Failures int          `json:"failures"`
	results  []health.Result
}

type jsonResult struct {
	Name   string `json:"name"`
	Status string `json:"status"` // ok, warn, fail, skip
	Detail string `json:"detail"`
}

func (r *report) add(rs ...health.Result) {
	for _, x := range rs {
		r.results = append(r.results, x)
		r.Checks = append(r.Checks, jsonResult{Name: x.Name, Status: statusWord(x.Status), Detail: x.Detail})
		switch x.Status {
		case health.Warn:
			r.Warnings++
		case health.Fail:
			r.Failures++
		}
	}
}

func statusWord(s health.Status) string {
	switch s {
	case health.OK:
		return "ok"
	case health.Warn:
		return "warn"
	case health.Fail:
		return "fail"
	}
	return "skip"
}

// Symbol is how a status is shown: ✓ ! ✗ -.
func Symbol(s health.Status) string {
	switch s {
	case health.OK:
		return "✓"
	case health.Warn:
		return "!"
	case health.Fail:
		return "✗"
	}
	return "-"
}

func (r *report) write(w io.Writer) {
	if r.json {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		_ = enc.Encode(r)
		return
	}
	for i, x := range r.results {
		fmt.Fprintf(w, "%s %-12s  %s\n", Symbol(x.Status), x.Name, x.Detail)
		if i == 0 {
			for _, p := range r.Problems {
				fmt.Fprintf(w, "      - %s\n", p)
			}
		}
	}
	if len(r.Problems) == 0 {
		fmt.Fprintf(w, "\n%d %s, %d %s\n", r.Warnings, health.Plural(r.Warnings, "warning", "warnings"), r.Failures, health.Plural(r.Failures, "failure", "failures"))
	}
}

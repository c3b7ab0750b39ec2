package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"
	"unicode/utf8"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	bolt "go.etcd.io/bbolt"
	bolterrors "go.etcd.io/bbolt/errors"

	"github.com/switchboard-chat/switchboard/admin"
	"github.com/switchboard-chat/switchboard/bus"
	"github.com/switchboard-chat/switchboard/bus/natsbus"
	"github.com/switchboard-chat/switchboard/config"
	"github.com/switchboard-chat/switchboard/llm"
	"github.com/switchboard-chat/switchboard/tools"
	"github.com/switchboard-chat/switchboard/tools/bash"
	"github.com/switchboard-chat/switchboard/workspace"
)

// historyFile is the bbolt file inside data_dir.
const historyFile = "history.db"

// Bounds on the dependency checks.
const (
	checkNATSTimeout = 3 * time.Second
	checkLLMTimeout  = 5 * time.Second
	checkBoltTimeout = 200 * time.Millisecond
	checkMaxBody     = 4 << 20 // bytes of a /models answer read
)

// Check outcomes.
const (
	statusOK   = "OK"
	statusWarn = "WARN"
	statusFail = "FAIL"
	statusSkip = "SKIP" // not run because another check already warned
)

// checkResult is one line of `switchboard check` output.
type checkResult struct {
	name   string
	status string
	detail string
}

// runCheck implements `switchboard check [--config FILE]`: it validates the
// configuration (exit code 2 with every problem listed when it is invalid),
// then checks each dependency — NATS, the admin listener, the LLM endpoint,
// the data folder, the workspace — and prints one OK / WARN / FAIL line per
// dependency. The exit code is 0 when nothing failed (warnings allowed) and
// 1 otherwise. The checks run concurrently and each is bounded in time.
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

	data, err := readConfigFile(*path)
	if err != nil {
		printResult(stdout, checkResult{"config", statusFail, err.Error()})
		return 2
	}
	cfg, err := ParseConfig(data, os.LookupEnv)
	if err != nil {
		problems := config.Problems(err)
		printResult(stdout, checkResult{"config", statusFail, fmt.Sprintf("%s: %d %s", *path, len(problems), plural(len(problems), "problem", "problems"))})
		for _, p := range problems {
			fmt.Fprintf(stdout, "      - %s\n", p)
		}
		return 2
	}
	printResult(stdout, checkResult{"config", statusOK, *path + " is valid"})

	checks := []func(context.Context) checkResult{
		func(ctx context.Context) checkResult { return checkNATS(ctx, cfg.Bus, cfg.DataDir) },
		func(context.Context) checkResult { return checkBusAuth(cfg.Bus, cfg.DataDir) },
		func(ctx context.Context) checkResult { return checkAdmin(ctx, cfg.Admin) },
		func(ctx context.Context) checkResult { return checkLLM(ctx, cfg.LLM, *path) },
		func(context.Context) checkResult { return checkDataDir(cfg.DataDir) },
		func(context.Context) checkResult { return checkWorkspace(cfg.Agent.Workspace) },
		func(ctx context.Context) checkResult { return checkTelegram(ctx, cfg.Channels.Telegram) },
		func(ctx context.Context) checkResult { return checkSlack(ctx, cfg.Channels.Slack) },
	}
	if cfg.Tools.Bash.Enabled {
		checks = append(checks, func(context.Context) checkResult { return checkBash(cfg.Tools.Bash, nil) })
	}
	results := make([]checkResult, len(checks))
	var wg sync.WaitGroup
	for i, check := range checks {
		wg.Go(func() { results[i] = check(ctx) })
	}
	wg.Wait()
	// A real request only makes sense once the endpoint answered.
	const llmIndex = 3
	call := checkResult{name: "LLM call", status: statusSkip, detail: "not tried: the endpoint check did not pass"}
	if results[llmIndex].status == statusOK {
		call = checkLLMCall(ctx, cfg.LLM)
	}
	results = slices.Insert(results, llmIndex+1, call)

	var warns, fails int
	for _, r := range results {
		printResult(stdout, r)
		switch r.status {
		case statusWarn:
			warns++
		case statusFail:
			fails++
		}
	}
	fmt.Fprintf(stdout, "\n%d %s, %d %s\n", warns, plural(warns, "warning", "warnings"), fails, plural(fails, "failure", "failures"))
	if fails > 0 {
		return 1
	}
	return 0
}

func printResult(w io.Writer, r checkResult) {
	fmt.Fprintf(w, "%-4s  %-9s  %s\n", r.status, r.name, r.detail)
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

// checkNATS connects to an external server (and asks for JetStream), or
// checks that the embedded server's listen address is free. When it is
// not, it tries to connect there as an operator, as `switchboard chat` does,
// to tell a running daemon from another program.
func checkNATS(ctx context.Context, cfg natsbus.Config, dataDir string) checkResult {
	r := checkResult{name: "NATS"}
	if cfg.URL == "" {
		if cfg.Listen == "" {
			r.status, r.detail = statusOK, "embedded server, in-process only (no TCP listener: bridges and `switchboard chat` in other processes cannot connect)"
			return r
		}
		if err := bindable(ctx, cfg.Listen); err != nil {
			r.status, r.detail = statusFail, fmt.Sprintf("embedded server cannot listen on %s: %v (is the daemon already running? change bus.listen, or set it to \"\" for in-process only)", cfg.Listen, err)
			if url, opts, derr := cfg.OperatorDial(dataDir); derr == nil {
				if running := checkServer(ctx, url, opts); running.status == statusOK {
					r.status, r.detail = statusWarn, fmt.Sprintf("embedded server: %s is in use by a running bus that accepts this configuration's operator credential: %s; is the daemon already running?", cfg.Listen, running.detail)
				}
			}
			return r
		}
		r.status, r.detail = statusOK, fmt.Sprintf("embedded server: %s is free to bind", cfg.Listen)
		return r
	}
	return checkServer(ctx, cfg.URL, nil)
}

// checkServer connects to a NATS server at url (its credentials in it, or
// in opts) and asks for JetStream.
func checkServer(ctx context.Context, url string, opts []nats.Option) checkResult {
	r := checkResult{name: "NATS"}
	shown := bus.RedactURL(url)
	nc, err := nats.Connect(url, append(opts,
		nats.Name("switchboard check"),
		nats.Timeout(checkNATSTimeout),
		nats.NoReconnect(),
	)...)
	if err != nil {
		r.status, r.detail = statusFail, fmt.Sprintf("cannot connect to %s: %v", shown, err)
		return r
	}
	defer nc.Close()
	server := bus.RedactURL(nc.ConnectedUrl())
	version := nc.ConnectedServerVersion()

	js, err := jetstream.New(nc)
	if err == nil {
		jctx, cancel := context.WithTimeout(ctx, checkNATSTimeout)
		_, err = js.AccountInfo(jctx)
		cancel()
	}
	switch {
	case errors.Is(err, jetstream.ErrJetStreamNotEnabled), errors.Is(err, jetstream.ErrJetStreamNotEnabledForAccount):
		r.status, r.detail = statusFail, fmt.Sprintf("connected to %s (server %s), but JetStream is not enabled: start nats-server with -js", server, version)
	case err != nil:
		r.status, r.detail = statusFail, fmt.Sprintf("connected to %s (server %s), but JetStream does not answer: %v", server, version, err)
	default:
		r.status, r.detail = statusOK, fmt.Sprintf("connected to %s (server %s, JetStream enabled)", server, version)
	}
	return r
}

// checkBusAuth says who may connect to the bus. The embedded listener never
// accepts an anonymous client: it names the bridges and where operators'
// credentials come from (bus.admin, or the file the daemon generates in
// data_dir), and fails when that file exists but is unsafe, as the daemon
// would refuse to start.
func checkBusAuth(cfg natsbus.Config, dataDir string) checkResult {
	r := checkResult{name: "bus auth"}
	switch {
	case cfg.URL != "":
		r.status, r.detail = statusOK, "external NATS server: its own users and permissions apply (see docs/bus-protocol.md, section Authentication and isolation)"
		return r
	case cfg.Listen == "":
		r.status, r.detail = statusOK, "in-process only: no client outside the daemon can connect"
		return r
	}
	operators := "operators use bus.admin"
	if !cfg.Admin.Set() {
		path := natsbus.OperatorTokenPath(dataDir)
		switch _, err := natsbus.ReadOperatorToken(dataDir); {
		case errors.Is(err, fs.ErrNotExist):
			operators = fmt.Sprintf("operators use the token the daemon generates at its first start in %s", path)
		case err != nil:
			r.status, r.detail = statusFail, err.Error()
			return r
		default:
			operators = fmt.Sprintf("operators use the token in %s (`switchboard bus context` writes a nats CLI context for it)", path)
		}
	}
	bridges := "no bridge is declared"
	if len(cfg.Bridges) > 0 {
		names := make([]string, 0, len(cfg.Bridges))
		for name, b := range cfg.Bridges {
			names = append(names, fmt.Sprintf("%s (%s)", name, strings.Join(b.Channels, ", ")))
		}
		slices.Sort(names)
		bridges = fmt.Sprintf("%d %s, %s", len(names), plural(len(names), "bridge", "bridges"), strings.Join(names, "; "))
	}
	r.status, r.detail = statusOK, fmt.Sprintf("the embedded listener on %s requires credentials (no anonymous client): %s; %s", cfg.Listen, bridges, operators)
	return r
}

// checkAdmin checks that the admin listen address is free.
func checkAdmin(ctx context.Context, cfg admin.Config) checkResult {
	r := checkResult{name: "admin"}
	if cfg.Listen == "" {
		r.status, r.detail = statusOK, "disabled (admin.listen is empty)"
		return r
	}
	if err := bindable(ctx, cfg.Listen); err != nil {
		r.status, r.detail = statusFail, fmt.Sprintf("cannot listen on %s: %v (is the daemon already running? change admin.listen, or set it to \"\" to turn it off)", cfg.Listen, err)
		return r
	}
	r.status, r.detail = statusOK, fmt.Sprintf("%s is free to bind", cfg.Listen)
	return r
}

// bindable reports whether a TCP listener can be opened on addr now.
func bindable(ctx context.Context, addr string) error {
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", addr)
	if err != nil {
		var oe *net.OpError
		if errors.As(err, &oe) {
			return oe.Err
		}
		return err
	}
	return ln.Close()
}

// checkLLM asks the model endpoint for its model list (GET <base>/models).
func checkLLM(ctx context.Context, cfg llm.Config, configPath string) checkResult {
	r := checkResult{name: "LLM"}
	if !cfg.Configured() {
		r.status, r.detail = statusWarn, "not configured: set OPENAI_API_KEY, and optionally OPENAI_BASE_URL (e.g. http://localhost:11434/v1 for Ollama, no key needed) and OPENAI_MODEL; or edit llm.* in "+configPath
		return r
	}
	endpoint := strings.TrimRight(cfg.BaseURL, "/") + "/models"
	shown := bus.RedactURL(endpoint)

	ctx, cancel := context.WithTimeout(ctx, checkLLMTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, endpoint, nil)
	if err != nil {
		r.status, r.detail = statusFail, fmt.Sprintf("bad llm.base_url %s: %v", bus.RedactURL(cfg.BaseURL), err)
		return r
	}
	if cfg.APIKey != "" {
		req.Header.Set("Authorization", "Bearer "+cfg.APIKey)
	}
	req.Header.Set("Accept", "application/json")
	transport := http.DefaultTransport.(*http.Transport).Clone()
	transport.DisableKeepAlives = true
	defer transport.CloseIdleConnections()
	resp, err := (&http.Client{Transport: transport}).Do(req)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		if errors.Is(err, context.DeadlineExceeded) {
			r.status, r.detail = statusFail, fmt.Sprintf("GET %s: no answer within %s", shown, checkLLMTimeout)
		} else {
			r.status, r.detail = statusFail, fmt.Sprintf("cannot reach GET %s: %v", shown, err)
		}
		return r
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, checkMaxBody))

	switch {
	case resp.StatusCode == http.StatusUnauthorized || resp.StatusCode == http.StatusForbidden:
		if cfg.APIKey == "" {
			r.status, r.detail = statusFail, fmt.Sprintf("GET %s: HTTP %d, the endpoint wants an API key: set OPENAI_API_KEY or llm.api_key", shown, resp.StatusCode)
		} else {
			r.status, r.detail = statusFail, fmt.Sprintf("GET %s: HTTP %d, key rejected: check OPENAI_API_KEY or llm.api_key", shown, resp.StatusCode)
		}
		return r
	case resp.StatusCode == http.StatusNotFound:
		r.status, r.detail = statusFail, fmt.Sprintf("GET %s: HTTP 404: check llm.base_url (OpenAI-compatible servers usually end in /v1)", shown)
		return r
	case resp.StatusCode < 200 || resp.StatusCode > 299:
		r.status, r.detail = statusFail, fmt.Sprintf("GET %s: HTTP %d%s", shown, resp.StatusCode, bodyHint(body))
		return r
	}

	var list struct {
		Data []struct {
			ID string `json:"id"`
		} `json:"data"`
	}
	if json.Unmarshal(body, &list) != nil || len(list.Data) == 0 {
		r.status, r.detail = statusOK, fmt.Sprintf("GET %s: HTTP %d (model %s)", shown, resp.StatusCode, cfg.Model)
		return r
	}
	for _, m := range list.Data {
		if m.ID == cfg.Model || m.ID == cfg.Model+":latest" {
			r.status, r.detail = statusOK, fmt.Sprintf("GET %s: HTTP %d, model %s is available", shown, resp.StatusCode, cfg.Model)
			return r
		}
	}
	var some []string
	for _, m := range list.Data[:min(len(list.Data), 5)] {
		some = append(some, m.ID)
	}
	more := ""
	if len(list.Data) > len(some) {
		more = ", ..."
	}
	r.status, r.detail = statusWarn, fmt.Sprintf("GET %s: reachable, but model %q is not among the %d it lists (%s%s): check OPENAI_MODEL or llm.model",
		shown, cfg.Model, len(list.Data), strings.Join(some, ", "), more)
	return r
}

// bodyHint returns the start of an error body, on one line, for a FAIL line.
func bodyHint(body []byte) string {
	s := strings.Join(strings.Fields(string(body)), " ")
	if s == "" {
		return ""
	}
	if len(s) > 200 {
		cut := 200
		for cut > 0 && !utf8.RuneStart(s[cut]) {
			cut--
		}
		s = s[:cut] + "..."
	}
	return ": " + s
}

// checkDataDir checks that data_dir exists or can be created, is writable,
// and that history.db is not held by a running daemon.
func checkDataDir(dir string) checkResult {
	r := checkResult{name: "data dir"}
	created, err := dirUsable(dir)
	if err != nil {
		r.status, r.detail = statusFail, err.Error()
		return r
	}
	if created {
		r.status, r.detail = statusOK, fmt.Sprintf("%s does not exist yet; it will be created", dir)
		return r
	}
	db := filepath.Join(dir, historyFile)
	if _, err := os.Stat(db); errors.Is(err, fs.ErrNotExist) {
		r.status, r.detail = statusOK, fmt.Sprintf("%s is writable (no %s yet)", dir, historyFile)
		return r
	}
	bdb, err := bolt.Open(db, 0o600, &bolt.Options{Timeout: checkBoltTimeout, ReadOnly: true})
	if errors.Is(err, bolterrors.ErrTimeout) {
		r.status, r.detail = statusFail, fmt.Sprintf("%s is locked by another process: is the daemon running? Stop it, or use another data_dir", db)
		return r
	}
	if err != nil {
		r.status, r.detail = statusFail, fmt.Sprintf("%s cannot be opened: %v", db, err)
		return r
	}
	if err := bdb.Close(); err != nil {
		r.status, r.detail = statusFail, fmt.Sprintf("%s: close: %v", db, err)
		return r
	}
	r.status, r.detail = statusOK, fmt.Sprintf("%s is writable; %s is not in use", dir, historyFile)
	return r
}

// checkBash reports the bash tool's sandbox: a failure when the daemon
// would refuse to start (bwrap missing), a warning with sandbox none.
func checkBash(cfg tools.BashConfig, lookPath func(string) (string, error)) checkResult {
	r := checkResult{name: "bash"}
	warning, err := bash.CheckSandbox(cfg, lookPath)
	switch {
	case err != nil:
		r.status, r.detail = statusFail, err.Error()
	case warning != "":
		r.status, r.detail = statusWarn, warning
	default:
		r.status, r.detail = statusOK, "commands run in the bubblewrap sandbox"
	}
	return r
}

// checkWorkspace checks that the workspace exists or can be created, is
// writable, and that its prompt files are readable.
func checkWorkspace(dir string) checkResult {
	r := checkResult{name: "workspace"}
	created, err := dirUsable(dir)
	if err != nil {
		r.status, r.detail = statusFail, err.Error()
		return r
	}
	if created {
		r.status, r.detail = statusOK, fmt.Sprintf("%s does not exist yet; it will be created", dir)
		return r
	}
	var present, missing []string
	for _, name := range workspace.PromptFiles {
		p := filepath.Join(dir, name)
		f, err := os.Open(p)
		if errors.Is(err, fs.ErrNotExist) {
			missing = append(missing, name)
			continue
		}
		if err == nil {
			_, err = f.Read(make([]byte, 1))
			f.Close()
			if errors.Is(err, io.EOF) {
				err = nil
			}
		}
		if err != nil {
			r.status, r.detail = statusFail, fmt.Sprintf("%s is not readable: %v", p, err)
			return r
		}
		present = append(present, name)
	}
	detail := fmt.Sprintf("%s is writable", dir)
	if len(present) > 0 {
		detail += "; readable: " + strings.Join(present, ", ")
	}
	if len(missing) > 0 {
		detail += "; not present: " + strings.Join(missing, ", ")
	}
	r.status, r.detail = statusOK, detail
	return r
}

// dirUsable reports whether dir is a writable directory, or can be created:
// when it does not exist, its nearest existing ancestor must be a writable
// directory (created is then true). It creates nothing but a temporary
// probe file, which it removes.
func dirUsable(dir string) (created bool, err error) {
	info, err := os.Stat(dir)
	switch {
	case err == nil:
		if !info.IsDir() {
			return false, fmt.Errorf("%s is not a directory", dir)
		}
		if err := probeWrite(dir); err != nil {
			return false, fmt.Errorf("%s is not writable: %w", dir, err)
		}
		return false, nil
	case !notExist(err):
		return false, fmt.Errorf("%s: %w", dir, err)
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return false, fmt.Errorf("%s: %w", dir, err)
	}
	for parent := filepath.Dir(abs); ; parent = filepath.Dir(parent) {
		info, err := os.Stat(parent)
		if notExist(err) && parent != filepath.Dir(parent) {
			continue
		}
		if err != nil {
			return false, fmt.Errorf("%s cannot be created: %w", dir, err)
		}
		if !info.IsDir() {
			return false, fmt.Errorf("%s cannot be created: %s is not a directory", dir, parent)
		}
		if err := probeWrite(parent); err != nil {
			return false, fmt.Errorf("%s cannot be created: %s is not writable: %w", dir, parent, err)
		}
		return true, nil
	}
}

// notExist reports whether a stat error means the path is absent, including
// a path that runs through a regular file.
func notExist(err error) bool {
	return errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENOTDIR)
}

// probeWrite creates and removes a temporary file in dir.
func probeWrite(dir string) error {
	f, err := os.CreateTemp(dir, ".switchboard-check-*")
	if err != nil {
		return err
	}
	name := f.Name()
	cerr := f.Close()
	rerr := os.Remove(name)
	return errors.Join(cerr, rerr)
}

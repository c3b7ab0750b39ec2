package natsbus

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/switchboard-chat/switchboard/bus"
	"github.com/switchboard-chat/switchboard/internal/health"
)

// CheckTimeout bounds the connection and the JetStream question of
// [Config.Check].
const CheckTimeout = 3 * time.Second

// Check reports whether the bus of this configuration can be had, for
// `switchboard check` (result name "NATS"): with bus.url it connects to the
// external server and asks for JetStream; with the embedded server it
// checks that bus.listen is free to bind. When it is not, it tries to
// connect there as an operator of dataDir, as `switchboard chat` does, to
// tell a running daemon (a warning) from another program (a failure).
// Credentials never appear in the detail.
func (c Config) Check(ctx context.Context, dataDir string) health.Result {
	r := health.Result{Name: "NATS"}
	if c.URL == "" {
		if c.Listen == "" {
			r.Status, r.Detail = health.OK, "embedded server, in-process only (no TCP listener: bridges and `switchboard chat` in other processes cannot connect)"
			return r
		}
		if err := health.Bindable(ctx, c.Listen); err != nil {
			r.Status, r.Detail = health.Fail, fmt.Sprintf("embedded server cannot listen on %s: %v (is the daemon already running? change bus.listen, or set it to \"\" for in-process only)", c.Listen, err)
			if url, opts, derr := c.OperatorDial(dataDir); derr == nil {
				if running := checkServer(ctx, url, opts); running.Status == health.OK {
					r.Status, r.Detail = health.Warn, fmt.Sprintf("embedded server: %s is in use by a running bus that accepts this configuration's operator credential: %s; is the daemon already running?", c.Listen, running.Detail)
				}
			}
			return r
		}
		r.Status, r.Detail = health.OK, fmt.Sprintf("embedded server: %s is free to bind", c.Listen)
		return r
	}
	return checkServer(ctx, c.URL, nil)
}

// checkServer connects to a NATS server at url (its credentials in it, or
// in opts) and asks for JetStream.
func checkServer(ctx context.Context, url string, opts []nats.Option) health.Result {
	r := health.Result{Name: "NATS"}
	shown := bus.RedactURL(url)
	nc, err := nats.Connect(url, append(opts,
		nats.Name("switchboard check"),
		nats.Timeout(CheckTimeout),
		nats.NoReconnect(),
	)...)
	if err != nil {
		r.Status, r.Detail = health.Fail, fmt.Sprintf("cannot connect to %s: %v", shown, err)
		return r
	}
	defer nc.Close()
	server := bus.RedactURL(nc.ConnectedUrl())
	version := nc.ConnectedServerVersion()

	js, err := jetstream.New(nc)
	if err == nil {
		jctx, cancel := context.WithTimeout(ctx, CheckTimeout)
		_, err = js.AccountInfo(jctx)
		cancel()
	}
	switch {
	case errors.Is(err, jetstream.ErrJetStreamNotEnabled), errors.Is(err, jetstream.ErrJetStreamNotEnabledForAccount):
		r.Status, r.Detail = health.Fail, fmt.Sprintf("connected to %s (server %s), but JetStream is not enabled: start nats-server with -js", server, version)
	case err != nil:
		r.Status, r.Detail = health.Fail, fmt.Sprintf("connected to %s (server %s), but JetStream does not answer: %v", server, version, err)
	default:
		r.Status, r.Detail = health.OK, fmt.Sprintf("connected to %s (server %s, JetStream enabled)", server, version)
	}
	return r
}

// CheckAuth says who may connect to the bus of this configuration, for
// `switchboard check` (result name "bus auth"). The embedded listener never
// accepts an anonymous client: the detail names the bridges and where
// operators' credentials come from (bus.admin, or [OperatorTokenFile] in
// dataDir). It fails when that file exists but is unsafe, as the daemon
// would refuse to start.
func (c Config) CheckAuth(dataDir string) health.Result {
	r := health.Result{Name: "bus auth"}
	switch {
	case c.URL != "":
		r.Status, r.Detail = health.OK, "external NATS server: its own users and permissions apply (see docs/bus-protocol.md, section Authentication and isolation)"
		return r
	case c.Listen == "":
		r.Status, r.Detail = health.OK, "in-process only: no client outside the daemon can connect"
		return r
	}
	operators := "operators use bus.admin"
	if !c.Admin.Set() {
		path := OperatorTokenPath(dataDir)
		switch _, err := ReadOperatorToken(dataDir); {
		case errors.Is(err, fs.ErrNotExist):
			operators = fmt.Sprintf("operators use the token the daemon generates at its first start in %s", path)
		case err != nil:
			r.Status, r.Detail = health.Fail, err.Error()
			return r
		default:
			operators = fmt.Sprintf("operators use the token in %s (`switchboard bus context` writes a nats CLI context for it)", path)
		}
	}
	bridges := "no bridge is declared"
	if len(c.Bridges) > 0 {
		names := make([]string, 0, len(c.Bridges))
		for name, b := range c.Bridges {
			names = append(names, fmt.Sprintf("%s (%s)", name, strings.Join(b.Channels, ", ")))
		}
		slices.Sort(names)
		bridges = fmt.Sprintf("%d %s, %s", len(names), health.Plural(len(names), "bridge", "bridges"), strings.Join(names, "; "))
	}
	r.Status, r.Detail = health.OK, fmt.Sprintf("the embedded listener on %s requires credentials (no anonymous client): %s; %s", c.Listen, bridges, operators)
	if weak := c.WeakSecrets(); len(weak) > 0 {
		r.Status, r.Detail = health.Warn, r.Detail+"; "+strings.Join(weak, "; ")
	}
	return r
}

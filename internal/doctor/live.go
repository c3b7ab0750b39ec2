package doctor

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/switchboard-chat/switchboard/admin"
	"github.com/switchboard-chat/switchboard/bus"
	"github.com/switchboard-chat/switchboard/bus/natsbus"
	"github.com/switchboard-chat/switchboard/internal/health"
	"github.com/switchboard-chat/switchboard/llm"
	"github.com/switchboard-chat/switchboard/tools/mcp"
)

// Bounds of the live checks.
const (
	askTimeout = 5 * time.Second // one admin request, one bus question
	// LagWarn is the agent consumer's undelivered backlog from which the
	// lag is a warning.
	LagWarn = 100
)

// Live is how to reach a running daemon of the configuration.
type Live struct {
	Admin admin.Config
	// Bus is the configuration's bus; DataDir holds its operator token.
	Bus     natsbus.Config
	DataDir string
	LLM     llm.Config
}

// adminBase is the daemon's admin URL ("" when it has none that another
// process can reach: off, or a random port).
func (l Live) adminBase() string {
	host, port, err := net.SplitHostPort(l.Admin.Listen)
	if err != nil || port == "0" {
		return ""
	}
	switch host {
	case "", "0.0.0.0":
		host = "127.0.0.1"
	case "::":
		host = "::1"
	}
	return "http://" + net.JoinHostPort(host, port)
}

// dialBus connects to the bus as the operator.
func (l Live) dialBus() (*nats.Conn, string, error) {
	op, err := l.Bus.Operator(l.DataDir)
	if err != nil {
		return nil, "", err
	}
	nc, err := nats.Connect(op.URL, append(op.Options(), nats.Name("switchboard doctor"), nats.Timeout(askTimeout), nats.NoReconnect())...)
	if err != nil {
		return nil, bus.RedactURL(op.URL), fmt.Errorf("connect to %s: %w", bus.RedactURL(op.URL), err)
	}
	return nc, bus.RedactURL(op.URL), nil
}

// detect tells whether the daemon runs and how that was found (or why
// not).
func (l Live) detect(ctx context.Context) (bool, string) {
	var why []string
	if base := l.adminBase(); base != "" {
		if err := admin.Healthy(ctx, base+"/healthz"); err == nil {
			return true, "its admin listener " + base + " answers"
		}
		why = append(why, "nothing answers on "+base)
	} else {
		why = append(why, "no admin listener to ask")
	}
	if l.Bus.URL == "" && l.Bus.Listen != "" {
		// The embedded bus runs only inside the daemon.
		if nc, url, err := l.dialBus(); err == nil {
			nc.Close()
			return true, "its embedded bus " + url + " takes the operator credential"
		}
		why = append(why, "its bus does not take the operator")
	}
	return false, strings.Join(why, ", ")
}

// checks are the live checks.
func (l Live) checks(configFile string) []Check {
	return []Check{
		l.readiness,
		l.mcpServers,
		l.sessions,
		l.busState,
		func(ctx context.Context) []health.Result { return llm.Probe(ctx, l.LLM, configFile) },
	}
}

// get GETs url within askTimeout and returns the status and body.
func get(ctx context.Context, url string) (int, []byte, error) {
	ctx, cancel := context.WithTimeout(ctx, askTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, nil, err
	}
	transport := http.DefaultTransport.(*http.Transport).Clone()
	transport.DisableKeepAlives = true // one request: leave no idle connection behind
	defer transport.CloseIdleConnections()
	resp, err := (&http.Client{Transport: transport}).Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 8<<20))
	return resp.StatusCode, body, err
}

func one(name string, s health.Status, format string, a ...any) []health.Result {
	return []health.Result{{Name: name, Status: s, Detail: fmt.Sprintf(format, a...)}}
}

// readiness is one result per component of GET /readyz?format=json.
func (l Live) readiness(ctx context.Context) []health.Result {
	base := l.adminBase()
	if base == "" {
		return one("readiness", health.Skip, "no admin listener (admin.listen %q): readiness, MCP and metrics are not reachable", l.Admin.Listen)
	}
	_, body, err := get(ctx, base+"/readyz?format=json")
	var rd admin.Readiness
	if err == nil {
		err = json.Unmarshal(body, &rd)
	}
	if err != nil {
		return one("readiness", health.Fail, "GET %s/readyz: %v", base, err)
	}
	var out []health.Result
	for _, c := range rd.Components {
		r := health.Result{Name: c.Name, Status: health.OK, Detail: "ready"}
		if !c.Ready {
			r.Status, r.Detail = health.Fail, "not ready: "+c.Reason+" (see the daemon's log)"
		}
		out = append(out, r)
	}
	return out
}

// mcpServers is one result per MCP server of GET /mcp.
func (l Live) mcpServers(ctx context.Context) []health.Result {
	base := l.adminBase()
	if base == "" {
		return nil
	}
	code, body, err := get(ctx, base+"/mcp")
	var st []mcp.ServerStatus
	if err == nil && code != http.StatusOK {
		err = fmt.Errorf("HTTP %d", code)
	}
	if err == nil {
		err = json.Unmarshal(body, &st)
	}
	if err != nil {
		return one("MCP", health.Fail, "GET %s/mcp: %v", base, err)
	}
	if len(st) == 0 {
		return one("MCP", health.Skip, "no servers configured (mcp.servers)")
	}
	var out []health.Result
	for _, s := range st {
		r := health.Result{Name: "MCP " + s.Name}
		switch {
		case s.Disabled:
			r.Status, r.Detail = health.Skip, "disabled"
		case s.Ready:
			r.Status, r.Detail = health.OK, fmt.Sprintf("connected, %d %s offered to the model", s.Tools, health.Plural(s.Tools, "tool", "tools"))
		default:
			r.Status, r.Detail = health.Fail, fmt.Sprintf("not connected after %d %s: %s (the daemon retries; check mcp.servers.%s)", s.Attempts, health.Plural(s.Attempts, "attempt", "attempts"), s.Error, s.Name)
		}
		out = append(out, r)
	}
	return out
}

// sessions reads GET /metrics: sessions, queued messages, turns and model
// requests by status.
func (l Live) sessions(ctx context.Context) []health.Result {
	base := l.adminBase()
	if base == "" {
		return nil
	}
	code, body, err := get(ctx, base+"/metrics")
	if err == nil && code != http.StatusOK {
		err = fmt.Errorf("HTTP %d", code)
	}
	var fams map[string]*dto.MetricFamily
	if err == nil {
		p := expfmt.NewTextParser(model.UTF8Validation)
		fams, err = p.TextToMetricFamilies(strings.NewReader(string(body)))
	}
	if err != nil {
		return one("metrics", health.Fail, "GET %s/metrics: %v", base, err)
	}
	sum := func(name string, label, value string) float64 {
		var n float64
		f := fams[name]
		if f == nil {
			return 0
		}
		for _, m := range f.GetMetric() {
			if label != "" && !slices.ContainsFunc(m.GetLabel(), func(l *dto.LabelPair) bool { return l.GetName() == label && l.GetValue() == value }) {
				continue
			}
			switch {
			case m.GetGauge() != nil:
				n += m.GetGauge().GetValue()
			case m.GetCounter() != nil:
				n += m.GetCounter().GetValue()
			}
		}
		return n
	}
	total, failed := sum("switchboard_llm_requests_total", "", ""), sum("switchboard_llm_requests_total", "status", "error")
	r := health.Result{Name: "sessions", Status: health.OK, Detail: fmt.Sprintf("%g active, %g queued messages; %g turns, %g model requests (%g failed) since start",
		sum("switchboard_active_sessions", "", ""), sum("switchboard_queued_messages", "", ""), sum("switchboard_turns_total", "", ""), total, failed)}
	if failed > 0 && failed == total {
		r.Status, r.Detail = health.Warn, r.Detail+": every model request failed, see the LLM lines"
	}
	return []health.Result{r}
}

// busState asks the bus as the operator: the agent consumer's lag, dead
// letters per channel, the streams.
func (l Live) busState(ctx context.Context) []health.Result {
	if l.Bus.URL == "" && l.Bus.Listen == "" {
		return one("bus", health.Skip, "in-process only (bus.listen is empty): lag and dead letters are not reachable from another process")
	}
	nc, _, err := l.dialBus()
	if err != nil {
		return one("bus", health.Fail, "%v", err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return one("bus", health.Fail, "%v", err)
	}
	ctx, cancel := context.WithTimeout(ctx, askTimeout)
	defer cancel()
	streams, subj := natsbus.StreamsFor(l.Bus.SubjectPrefix), bus.Subjects{Prefix: l.Bus.SubjectPrefix}
	return slices.Concat(lag(ctx, js, streams), deadLetters(ctx, js, streams, subj), streamState(ctx, js, streams))
}

func lag(ctx context.Context, js jetstream.JetStream, streams natsbus.Streams) []health.Result {
	name := "lag"
	st, err := js.Stream(ctx, streams.In)
	if err != nil {
		return one(name, health.Fail, "stream %s: %v", streams.In, err)
	}
	// The runtime's consumers: "agent", and "agent-p<k>" per partition
	// (agent.partitions above 1).
	var pending, acking, redelivered uint64
	var names []string
	list := st.ListConsumers(ctx)
	for info := range list.Info() {
		if info.Name != natsbus.ConsumerName && !strings.HasPrefix(info.Name, natsbus.ConsumerName+"-p") {
			continue
		}
		names = append(names, info.Name)
		pending += info.NumPending
		acking += uint64(info.NumAckPending)
		redelivered += uint64(info.NumRedelivered)
	}
	if err := list.Err(); err != nil {
		return one(name, health.Fail, "consumers of %s: %v", streams.In, err)
	}
	if len(names) == 0 {
		return one(name, health.Warn, "no agent consumer on %s yet: the daemon is starting, or its agent does not run", streams.In)
	}
	what := streams.In + "/" + names[0]
	if len(names) > 1 {
		what = fmt.Sprintf("%s/%s (%d consumers)", streams.In, natsbus.ConsumerName+"*", len(names))
	}
	r := health.Result{Name: name, Status: health.OK, Detail: fmt.Sprintf("consumer %s: %d waiting, %d being answered, %d redelivered",
		what, pending, acking, redelivered)}
	if pending >= LagWarn {
		r.Status, r.Detail = health.Warn, r.Detail+": the agent is behind (a slow model? raise agent.max_concurrent_turns)"
	}
	return []health.Result{r}
}

func deadLetters(ctx context.Context, js jetstream.JetStream, streams natsbus.Streams, subj bus.Subjects) []health.Result {
	s, err := js.Stream(ctx, streams.DLQ)
	var info *jetstream.StreamInfo
	if err == nil {
		info, err = s.Info(ctx, jetstream.WithSubjectFilter(subj.DLQAll()))
	}
	if err != nil {
		return one("DLQ", health.Fail, "stream %s: %v", streams.DLQ, err)
	}
	if len(info.State.Subjects) == 0 {
		return one("DLQ", health.OK, "no dead letters")
	}
	var out []health.Result
	prefix := strings.TrimSuffix(subj.DLQAll(), ">")
	for _, subject := range slices.Sorted(maps.Keys(info.State.Subjects)) {
		n := info.State.Subjects[subject]
		ch := strings.TrimPrefix(subject, prefix)
		out = append(out, health.Result{Name: "DLQ " + ch, Status: health.Warn, Detail: fmt.Sprintf("%d dead %s on %s: see why with `switchboard bus tail --channel %s` or `nats stream view %s`",
			n, health.Plural(int(n), "letter", "letters"), subject, ch, streams.DLQ)})
	}
	return out
}

func streamState(ctx context.Context, js jetstream.JetStream, streams natsbus.Streams) []health.Result {
	var parts []string
	status := health.OK
	for _, name := range []string{streams.In, streams.Out, streams.DLQ} {
		s, err := js.Stream(ctx, name)
		var info *jetstream.StreamInfo
		if err == nil {
			info, err = s.Info(ctx)
		}
		if err != nil {
			if errors.Is(err, jetstream.ErrStreamNotFound) {
				err = errors.New("missing")
			}
			parts, status = append(parts, name+" "+err.Error()), health.Fail
			continue
		}
		parts = append(parts, fmt.Sprintf("%s %d %s (%s)", name, info.State.Msgs, health.Plural(int(info.State.Msgs), "message", "messages"), bytesText(info.State.Bytes)))
	}
	return one("streams", status, "%s", strings.Join(parts, ", "))
}

func bytesText(n uint64) string {
	switch {
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
}

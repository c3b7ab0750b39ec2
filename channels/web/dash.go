package web

import (
	"context"
	"encoding/json"
	"errors"
	"math"
	"net/http"
	"sort"
	"strconv"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/switchboard-chat/switchboard/bus"
	"github.com/switchboard-chat/switchboard/bus/natsbus"
	"github.com/switchboard-chat/switchboard/internal/observe"
	"github.com/switchboard-chat/switchboard/internal/reqlog"
)

// Gatherer is the daemon's metrics registry (a prometheus.Gatherer).
type Gatherer = prometheus.Gatherer

// dlqShown is how many of the newest dead letters the dashboard lists.
const dlqShown = 50

func (c *Channel) dashRoutes(mux *http.ServeMux) {
	for path, h := range map[string]func(http.ResponseWriter, *http.Request, login){
		"sessions": c.dashSessions, "traces": c.dashTraces, "health": c.dashHealth,
		"dlq": c.dashDLQ, "metrics": c.dashMetrics, "config": c.dashConfig, "requests": c.dashRequests,
	} {
		mux.HandleFunc("GET /api/dash/"+path, c.authed(true, c.dashOnly(h)))
	}
}

// dashOnly answers 404 while the dashboard is off, and 403 to a user who
// is not an operator.
func (c *Channel) dashOnly(h func(http.ResponseWriter, *http.Request, login)) func(http.ResponseWriter, *http.Request, login) {
	return func(w http.ResponseWriter, r *http.Request, l login) {
		switch {
		case !c.cfg.Dashboard:
			apiError(w, http.StatusNotFound, "dashboard_off", "The dashboard is off (channels.web.dashboard).")
		case !c.operator(l.User):
			apiError(w, http.StatusForbidden, "not_operator", notOperator(l.User))
		default:
			h(w, r, l)
		}
	}
}

// notOperator tells a user why the dashboard is refused.
func notOperator(user string) string {
	return "The dashboard is for the operators listed in " + key("operators") + "; " + user + " is not one of them. The chat is at /."
}

func (c *Channel) dashPage(w http.ResponseWriter, r *http.Request, l login) {
	switch {
	case !c.cfg.Dashboard:
		http.NotFound(w, r)
	case !c.operator(l.User):
		http.Error(w, notOperator(l.User), http.StatusForbidden)
	default:
		c.page("dashboard.html")(w, r)
	}
}

func (c *Channel) dashSessions(w http.ResponseWriter, _ *http.Request, _ login) {
	if c.deps.Dash.Sessions == nil {
		writeJSON(w, http.StatusOK, map[string]any{"available": false, "sessions": []observe.Session{}})
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"available": true, "sessions": append([]observe.Session{}, c.deps.Dash.Sessions()...)})
}

func (c *Channel) dashTraces(w http.ResponseWriter, r *http.Request, _ login) {
	after, _ := strconv.ParseInt(r.URL.Query().Get("after"), 10, 64)
	writeJSON(w, http.StatusOK, map[string]any{"events": c.trace.after(after)})
}

func (c *Channel) dashHealth(w http.ResponseWriter, _ *http.Request, _ login) {
	notReady := map[string]string{}
	if c.deps.Dash.Health != nil {
		notReady = c.deps.Dash.Health()
	}
	writeJSON(w, http.StatusOK, map[string]any{"available": c.deps.Dash.Health != nil, "ready": len(notReady) == 0, "not_ready": notReady})
}

func (c *Channel) dashConfig(w http.ResponseWriter, _ *http.Request, _ login) {
	writeJSON(w, http.StatusOK, map[string]any{"available": c.deps.Dash.Config != nil, "config": c.deps.Dash.Config})
}

// dashRequests lists the last model requests of ?session=KEY, newest
// first.
func (c *Channel) dashRequests(w http.ResponseWriter, r *http.Request, _ login) {
	if c.deps.Dash.Requests == nil {
		writeJSON(w, http.StatusOK, map[string]any{"available": false, "requests": []reqlog.Record{}})
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"available": true, "requests": append([]reqlog.Record{}, c.deps.Dash.Requests(r.URL.Query().Get("session"))...)})
}

// dlqEntry is one dead letter for the dashboard.
type dlqEntry struct {
	Seq     uint64    `json:"seq"`
	Subject string    `json:"subject"`
	Reason  string    `json:"reason"`
	Size    int       `json:"size"`
	Time    time.Time `json:"time"`
	Excerpt string    `json:"excerpt"`
}

// dashDLQ lists the newest dead letters of the DLQ stream, newest first.
func (c *Channel) dashDLQ(w http.ResponseWriter, r *http.Request, _ login) {
	ctx, cancel := context.WithTimeout(r.Context(), 10*time.Second)
	defer cancel()
	out, err := c.deadLetters(ctx)
	if err != nil {
		c.log.Warn("dashboard: read the dead-letter stream", "err", err)
		apiError(w, http.StatusServiceUnavailable, "dlq_unavailable", "The dead-letter stream could not be read: "+err.Error())
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"dead_letters": out})
}

func (c *Channel) deadLetters(ctx context.Context) ([]dlqEntry, error) {
	js, err := jetstream.New(c.deps.Conn)
	if err != nil {
		return nil, err
	}
	st, err := js.Stream(ctx, natsbus.StreamsFor(c.deps.Subjects.Prefix).DLQ)
	if err != nil {
		return nil, err
	}
	info, err := st.Info(ctx)
	if err != nil {
		return nil, err
	}
	out := []dlqEntry{}
	for seq := info.State.LastSeq; seq >= info.State.FirstSeq && seq > 0 && len(out) < dlqShown; seq-- {
		m, err := st.GetMsg(ctx, seq)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			continue
		}
		if err != nil {
			return out, err
		}
		var rec bus.DLQRecord
		_ = json.Unmarshal(m.Data, &rec)
		ex := rec.Payload
		if rec.PayloadBase64 {
			ex = "(binary payload)"
		}
		if len(ex) > 300 {
			ex = ex[:300] + "…"
		}
		out = append(out, dlqEntry{Seq: seq, Subject: m.Subject, Reason: rec.Reason, Size: rec.Size, Time: rec.Time, Excerpt: ex})
	}
	return out, nil
}

// metricSummary is what the dashboard charts: cumulative counters (the
// page derives rates from two samples) and latency percentiles.
type metricSummary struct {
	Turns        float64            `json:"turns_total"`
	ModelCalls   float64            `json:"model_requests_total"`
	ModelErrors  float64            `json:"model_errors_total"`
	ToolCalls    float64            `json:"tool_calls_total"`
	TurnLatency  map[string]float64 `json:"turn_latency_seconds"`  // p50, p95, p99 of the final phase
	ModelLatency map[string]float64 `json:"model_latency_seconds"` // p50, p95, p99
}

func (c *Channel) dashMetrics(w http.ResponseWriter, _ *http.Request, _ login) {
	if c.deps.Dash.Gather == nil {
		writeJSON(w, http.StatusOK, map[string]any{"available": false})
		return
	}
	fams, err := c.deps.Dash.Gather.Gather()
	if err != nil {
		apiError(w, http.StatusInternalServerError, "metrics", "The metrics could not be gathered: "+err.Error())
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"available": true, "metrics": summarise(fams)})
}

func summarise(fams []*dto.MetricFamily) metricSummary {
	s := metricSummary{}
	for _, f := range fams {
		switch f.GetName() {
		case "switchboard_turns_total":
			s.Turns = sumCounter(f, nil)
		case "switchboard_llm_requests_total":
			s.ModelCalls = sumCounter(f, nil)
			s.ModelErrors = sumCounter(f, func(l map[string]string) bool { return l["status"] != "ok" && l["status"] != "cancelled" })
		case "switchboard_tool_calls_total":
			s.ToolCalls = sumCounter(f, nil)
		case "switchboard_turn_duration_seconds":
			s.TurnLatency = percentiles(f, func(l map[string]string) bool { return l["phase"] == "final" })
		case "switchboard_llm_request_duration_seconds":
			s.ModelLatency = percentiles(f, nil)
		}
	}
	return s
}

func labels(m *dto.Metric) map[string]string {
	out := map[string]string{}
	for _, l := range m.GetLabel() {
		out[l.GetName()] = l.GetValue()
	}
	return out
}

func sumCounter(f *dto.MetricFamily, keep func(map[string]string) bool) float64 {
	t := 0.0
	for _, m := range f.GetMetric() {
		if keep == nil || keep(labels(m)) {
			t += m.GetCounter().GetValue()
		}
	}
	return t
}

// percentiles estimates p50, p95 and p99 from the merged histogram
// buckets (the upper bound of the bucket the rank falls in, as
// Prometheus's histogram_quantile does without interpolation).
func percentiles(f *dto.MetricFamily, keep func(map[string]string) bool) map[string]float64 {
	cum := map[float64]uint64{}
	var count uint64
	for _, m := range f.GetMetric() {
		if keep != nil && !keep(labels(m)) {
			continue
		}
		h := m.GetHistogram()
		count += h.GetSampleCount()
		for _, b := range h.GetBucket() {
			cum[b.GetUpperBound()] += b.GetCumulativeCount()
		}
	}
	out := map[string]float64{}
	if count == 0 {
		return out
	}
	bounds := make([]float64, 0, len(cum))
	for b := range cum {
		bounds = append(bounds, b)
	}
	sort.Float64s(bounds)
	for name, q := range map[string]float64{"p50": .5, "p95": .95, "p99": .99} {
		rank := uint64(math.Ceil(q * float64(count)))
		v := math.Inf(1)
		for _, b := range bounds {
			if cum[b] >= rank {
				v = b
				break
			}
		}
		if math.IsInf(v, 1) {
			v = -1 // above the last bucket
		}
		out[name] = v
	}
	return out
}

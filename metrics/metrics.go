// Package metrics exposes Switchboard's Prometheus metrics (served at GET
// /metrics on admin.listen). Every label value is bounded: channel names
// are capped to the first 64 seen, tools to the registered ones, and no
// label ever carries a chat, user or message id.
//
// A Metrics value is safe for concurrent use. It implements the agent's
// Observer and wraps the model client and the history store.
package metrics

import (
	"context"
	"errors"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/switchboard-chat/switchboard/llm"
)

const maxChannels = 64

// Metrics holds every collector of the daemon.
type Metrics struct {
	reg *prometheus.Registry

	inbound      *prometheus.CounterVec
	outbound     *prometheus.CounterVec
	turns        *prometheus.CounterVec
	turnDuration *prometheus.HistogramVec
	llmRequests  *prometheus.CounterVec
	llmTokens    *prometheus.CounterVec
	llmDuration  *prometheus.HistogramVec
	toolCalls    *prometheus.CounterVec
	toolDuration *prometheus.HistogramVec
	breakerTrips *prometheus.CounterVec
	rollbacks    *prometheus.CounterVec
	commit       prometheus.Histogram
	inFlight     prometheus.Gauge
	storeFails   *prometheus.CounterVec
	rateWaits    *prometheus.CounterVec
	platform     *prometheus.CounterVec
	outDups      *prometheus.CounterVec
	redelivered  *prometheus.CounterVec
	inboundDups  *prometheus.CounterVec
	collected    *prometheus.CounterVec
	heartbeats   *prometheus.CounterVec

	mu       sync.Mutex
	channels map[string]bool
}

// New returns a Metrics with the Go runtime and process collectors.
func New() *Metrics {
	m := &Metrics{reg: prometheus.NewRegistry(), channels: map[string]bool{}}
	f := func(c prometheus.Collector) { m.reg.MustRegister(c) }
	f(collectors.NewGoCollector())
	f(collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	m.inbound = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "switchboard_inbound_messages_total",
		Help: "Inbound messages by channel and outcome (accepted, duplicate, rejected_invalid, rejected_too_large, rejected_rate_limited, denied, dead_lettered)."}, []string{"channel", "outcome"})
	m.outbound = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "switchboard_outbound_messages_total",
		Help: "Final outbound messages published by the runtime, by channel and kind."}, []string{"channel", "kind"})
	m.turns = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "switchboard_turns_total",
		Help: "Finished turns by agent and stop reason."}, []string{"agent", "stop_reason"})
	m.turnDuration = prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "switchboard_turn_duration_seconds",
		Help:    "Turn latency from start to the first streamed delta (phase=first_delta) and to the final answer (phase=final).",
		Buckets: []float64{.05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 120, 300}}, []string{"phase"})
	m.llmRequests = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "switchboard_llm_requests_total",
		Help: "Model requests by model and status (ok, error, rate_limited, overflow, timeout, cancelled, not_configured)."}, []string{"model", "status"})
	m.llmTokens = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "switchboard_llm_tokens_total",
		Help: "Tokens reported by the model endpoint, by model and direction (in, out)."}, []string{"model", "direction"})
	m.llmDuration = prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "switchboard_llm_request_duration_seconds",
		Help: "Model request latency (whole stream, retries included).", Buckets: prometheus.ExponentialBuckets(0.05, 2, 12)}, []string{"model"})
	m.toolCalls = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "switchboard_tool_calls_total",
		Help: "Tool calls by tool and outcome (ok, error, denied)."}, []string{"tool", "outcome"})
	m.toolDuration = prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "switchboard_tool_duration_seconds",
		Help: "Tool call duration.", Buckets: prometheus.ExponentialBuckets(0.001, 4, 10)}, []string{"tool"})
	m.breakerTrips = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "switchboard_circuit_breaker_trips_total",
		Help: "Tool calls blocked (kind=block) and runs ended (kind=abort) by the circuit breakers."}, []string{"kind"})
	m.rollbacks = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "switchboard_rollbacks_total",
		Help: "Model replies rolled back and resampled, by reason (markup, unknown_tool, duplicate)."}, []string{"reason"})
	m.commit = prometheus.NewHistogram(prometheus.HistogramOpts{Name: "switchboard_store_commit_duration_seconds",
		Help: "History store commit latency (group commit across sessions).", Buckets: prometheus.ExponentialBuckets(0.0001, 3, 10)})
	m.inFlight = prometheus.NewGauge(prometheus.GaugeOpts{Name: "switchboard_store_commits_in_flight",
		Help: "History store commits waiting or running; concurrent commits share one transaction."})
	m.storeFails = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "switchboard_store_failures_total",
		Help: "History store operations that failed (disk full, I/O error), by operation (commit, mark_published); the messages they hit are redelivered."}, []string{"op"})
	m.rateWaits = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "switchboard_rate_limit_waits_total",
		Help: "Waits imposed by platform rate limits, by channel."}, []string{"channel"})
	m.platform = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "switchboard_platform_sends_total",
		Help: "Messages sent to chat platforms by channel adapters, by channel and status (ok, retry, failed)."}, []string{"channel", "status"})
	m.outDups = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "switchboard_outbound_duplicates_suppressed_total",
		Help: "Outbound messages a channel adapter did not show again because their id was already shown (a final re-published after a crash), by channel."}, []string{"channel"})
	m.redelivered = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "switchboard_inbound_redeliveries_total",
		Help: "Inbound messages delivered again by the bus (after a crash or an expired ack wait), by channel."}, []string{"channel"})
	m.inboundDups = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "switchboard_inbound_duplicates_suppressed_total",
		Help: "Inbound deliveries of messages already answered (receipt found): nothing processed or shown again, by channel."}, []string{"channel"})
	m.collected = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "switchboard_collected_messages_total",
		Help: "Inbound messages answered together with others in one turn (agent.queue_mode collect), by channel."}, []string{"channel"})
	m.heartbeats = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "switchboard_heartbeats_total",
		Help: "Heartbeat slots and answers by agent and outcome (fired, skipped_busy, skipped_no_target, sent, silent, failed)."}, []string{"agent", "outcome"})
	for _, c := range []prometheus.Collector{m.heartbeats, m.inbound, m.outbound, m.turns, m.turnDuration, m.llmRequests, m.llmTokens,
		m.llmDuration, m.toolCalls, m.toolDuration, m.breakerTrips, m.rollbacks, m.commit, m.inFlight, m.storeFails, m.rateWaits, m.platform,
		m.outDups, m.redelivered, m.inboundDups, m.collected} {
		f(c)
	}
	return m
}

// Heartbeat counts a heartbeat outcome of agent (agent/heartbeat).
func (m *Metrics) Heartbeat(agent, outcome string) {
	m.heartbeats.WithLabelValues(agent, outcome).Inc()
}

// Gatherer is the registry, for in-process readers (the web console's
// dashboard).
func (m *Metrics) Gatherer() prometheus.Gatherer { return m.reg }

// Handler serves the metrics in the Prometheus text format.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{Registry: m.reg})
}

// Gauge registers a gauge whose value fn computes at scrape time (fn must
// be cheap and safe for concurrent use).
func (m *Metrics) Gauge(name, help string, fn func() float64) {
	m.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: help}, fn))
}

// channel bounds channel label values.
func (m *Metrics) channel(name string) string {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.channels[name] {
		return name
	}
	if len(m.channels) >= maxChannels {
		return "_other"
	}
	m.channels[name] = true
	return name
}

// Inbound counts an inbound message outcome (agent.Observer).
func (m *Metrics) Inbound(channel, outcome string) {
	m.inbound.WithLabelValues(m.channel(channel), outcome).Inc()
}

// Outbound counts a final outbound message (agent.Observer).
func (m *Metrics) Outbound(channel, kind string) {
	m.outbound.WithLabelValues(m.channel(channel), kind).Inc()
}

// TurnDone records a finished turn (agent.Observer). firstDelta is zero
// when nothing was streamed; agent is bounded by the configured agents.
func (m *Metrics) TurnDone(agent, stopReason string, firstDelta, total time.Duration) {
	m.turns.WithLabelValues(agent, stopReason).Inc()
	if firstDelta > 0 {
		m.turnDuration.WithLabelValues("first_delta").Observe(firstDelta.Seconds())
	}
	m.turnDuration.WithLabelValues("final").Observe(total.Seconds())
}

// ToolDone records a tool call (agent.Observer).
func (m *Metrics) ToolDone(tool, outcome string, d time.Duration) {
	m.toolCalls.WithLabelValues(tool, outcome).Inc()
	m.toolDuration.WithLabelValues(tool).Observe(d.Seconds())
}

// Rollback counts a rollback (agent.Observer).
func (m *Metrics) Rollback(reason string) { m.rollbacks.WithLabelValues(reason).Inc() }

// BreakerTrip counts a circuit-breaker trip (agent.Observer).
func (m *Metrics) BreakerTrip(kind string) { m.breakerTrips.WithLabelValues(kind).Inc() }

// Redelivered counts an inbound redelivery (agent.Observer).
func (m *Metrics) Redelivered(channel string) {
	m.redelivered.WithLabelValues(m.channel(channel)).Inc()
}

// DuplicateSuppressed counts an inbound delivery already answered
// (agent.Observer).
func (m *Metrics) DuplicateSuppressed(channel string) {
	m.inboundDups.WithLabelValues(m.channel(channel)).Inc()
}

// Collected counts messages answered together in one turn (agent.Observer).
func (m *Metrics) Collected(channel string, n int) {
	m.collected.WithLabelValues(m.channel(channel)).Add(float64(n))
}

// RateLimitWait counts a wait imposed by a platform's rate limit.
func (m *Metrics) RateLimitWait(channel string) {
	m.rateWaits.WithLabelValues(m.channel(channel)).Inc()
}

// PlatformSend counts a send to a chat platform by a channel adapter.
func (m *Metrics) PlatformSend(channel, status string) {
	m.platform.WithLabelValues(m.channel(channel), status).Inc()
}

// OutboundDuplicate counts an outbound message a channel adapter dropped
// because its id was already shown (channels.Metrics).
func (m *Metrics) OutboundDuplicate(channel string) {
	m.outDups.WithLabelValues(m.channel(channel)).Inc()
}

// Commit records one history store commit.
func (m *Metrics) Commit(start time.Time) { m.commit.Observe(time.Since(start).Seconds()) }

// StoreFailure counts a failed history store operation (op is one of a
// fixed set: commit, mark_published).
func (m *Metrics) StoreFailure(op string) { m.storeFails.WithLabelValues(op).Inc() }

// CommitStarted and CommitDone track commits in flight.
func (m *Metrics) CommitStarted() { m.inFlight.Inc() }

// CommitDone marks the end of a commit.
func (m *Metrics) CommitDone() { m.inFlight.Dec() }

// Streamer is the model client contract (agent.Model).
type Streamer interface {
	Stream(ctx context.Context, req llm.Request, onDelta func(llm.Delta)) (*llm.Response, error)
}

// Model wraps a model client so every request is counted and timed.
type Model struct {
	Next         Streamer
	DefaultModel string
	M            *Metrics
}

// Stream implements agent.Model.
func (w Model) Stream(ctx context.Context, req llm.Request, onDelta func(llm.Delta)) (*llm.Response, error) {
	model := req.Model
	if model == "" {
		model = w.DefaultModel
	}
	start := time.Now()
	resp, err := w.Next.Stream(ctx, req, onDelta)
	w.M.llmDuration.WithLabelValues(model).Observe(time.Since(start).Seconds())
	w.M.llmRequests.WithLabelValues(model, llmStatus(ctx, err)).Inc()
	if resp != nil {
		w.M.llmTokens.WithLabelValues(model, "in").Add(float64(resp.Usage.PromptTokens))
		w.M.llmTokens.WithLabelValues(model, "out").Add(float64(resp.Usage.CompletionTokens))
	}
	return resp, err
}

func llmStatus(ctx context.Context, err error) string {
	var ae *llm.APIError
	switch {
	case err == nil:
		return "ok"
	case ctx.Err() != nil:
		return "cancelled"
	case errors.Is(err, llm.ErrNotConfigured):
		return "not_configured"
	case errors.Is(err, llm.ErrContextOverflow):
		return "overflow"
	case errors.Is(err, llm.ErrIdle), errors.Is(err, context.DeadlineExceeded):
		return "timeout"
	case errors.As(err, &ae) && ae.Status == http.StatusTooManyRequests:
		return "rate_limited"
	}
	return "error"
}

package metrics

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/switchboard-chat/switchboard/internal/httpserve"
)

// Listeners is what the connection metrics read of the daemon's HTTP
// listeners (*httpserve.Servers implements it).
type Listeners interface {
	Stats() []httpserve.Stat
}

// The HTTP listeners' connections, labelled by listener (openai, web,
// admin, slack, telegram: a bounded set).
var (
	httpOpen = prometheus.NewDesc("switchboard_http_open_connections",
		"Connections open on the HTTP listener.", []string{"listener"}, nil)
	httpMax = prometheus.NewDesc("switchboard_http_max_connections",
		"The most connections the HTTP listener keeps open (http.max_conns).", []string{"listener"}, nil)
	httpRefused = prometheus.NewDesc("switchboard_http_refused_connections_total",
		"Connections the HTTP listener answered 503 and closed at once, by reason: max_conns (the listener full), max_conns_per_ip (the client address's share full).",
		[]string{"listener", "reason"}, nil)
)

// HTTP registers the HTTP listeners' connection metrics, read at scrape
// time. The process's open file descriptors and their limit are the
// process collector's process_open_fds and process_max_fds.
func (m *Metrics) HTTP(l Listeners) { m.reg.MustRegister(listenerCollector{l}) }

type listenerCollector struct{ l Listeners }

func (c listenerCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- httpOpen
	ch <- httpMax
	ch <- httpRefused
}

func (c listenerCollector) Collect(ch chan<- prometheus.Metric) {
	for _, st := range c.l.Stats() {
		ch <- prometheus.MustNewConstMetric(httpOpen, prometheus.GaugeValue, float64(st.Open), st.Listener)
		ch <- prometheus.MustNewConstMetric(httpMax, prometheus.GaugeValue, float64(st.MaxConns), st.Listener)
		ch <- prometheus.MustNewConstMetric(httpRefused, prometheus.CounterValue, float64(st.RefusedFull), st.Listener, "max_conns")
		ch <- prometheus.MustNewConstMetric(httpRefused, prometheus.CounterValue, float64(st.RefusedPerIP), st.Listener, "max_conns_per_ip")
	}
}

package metrics

import (
	"io"
	"net/http/httptest"
	"strings"
	"testing"
)

// TestQueueCounters: the agent's redelivery, duplicate and collect
// measurements are exported with a channel label.
func TestQueueCounters(t *testing.T) {
	m := New()
	m.Redelivered("telegram")
	m.DuplicateSuppressed("telegram")
	m.DuplicateSuppressed("telegram")
	m.Collected("slack", 3)
	rec := httptest.NewRecorder()
	m.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	body, _ := io.ReadAll(rec.Body)
	for _, want := range []string{
		`switchboard_inbound_redeliveries_total{channel="telegram"} 1`,
		`switchboard_inbound_duplicates_suppressed_total{channel="telegram"} 2`,
		`switchboard_collected_messages_total{channel="slack"} 3`,
	} {
		if !strings.Contains(string(body), want) {
			t.Errorf("metrics lack %s", want)
		}
	}
}

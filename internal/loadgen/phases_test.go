package loadgen

import (
	"math"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// TestPhasesFromTheDaemonsHistograms: the per-turn means are the growth
// of the daemon's histogram sums over the run, the turn's only at phase
// final, whatever other label sets and families the registry holds.
func TestPhasesFromTheDaemonsHistograms(t *testing.T) {
	reg := prometheus.NewRegistry()
	turn := prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: metricTurn}, []string{"phase"})
	model := prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: metricModel}, []string{"model"})
	commit := prometheus.NewHistogram(prometheus.HistogramOpts{Name: metricCommit})
	other := prometheus.NewHistogram(prometheus.HistogramOpts{Name: "switchboard_tool_duration_seconds"})
	reg.MustRegister(turn, model, commit, other)

	turn.WithLabelValues("final").Observe(10) // before the run: not counted
	before, err := gatherSums(reg)
	if err != nil {
		t.Fatal(err)
	}
	for range 4 { // four turns of 3 ms, each with two model calls of 0.5 ms on two models and a 1 ms commit
		turn.WithLabelValues("final").Observe(0.003)
		turn.WithLabelValues("first_delta").Observe(1) // another phase: not counted
		model.WithLabelValues("a").Observe(0.0005)
		model.WithLabelValues("b").Observe(0.0005)
		commit.Observe(0.001)
		other.Observe(5)
	}
	after, err := gatherSums(reg)
	if err != nil {
		t.Fatal(err)
	}
	r := Result{Turns: 4}
	r.setPhases(before, after)
	for name, got := range map[string][2]float64{"turn": {r.TurnMs, 3}, "model": {r.ModelMs, 1}, "commit": {r.CommitMs, 1}} {
		if math.Abs(got[0]-got[1]) > 1e-6 {
			t.Errorf("%s: %g ms per turn, want %g", name, got[0], got[1])
		}
	}
}

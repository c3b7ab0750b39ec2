package loadgen

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

// Where a turn's time goes, from the daemon's own histograms: their sums
// before and after a run, divided by the turns of the run. A turn in the
// daemon (switchboard_turn_duration_seconds, phase final: from the turn's
// start in its session to its final published and acknowledged) holds the
// prompt build, its model requests
// (switchboard_llm_request_duration_seconds, retries included) and the
// history commit (switchboard_store_commit_duration_seconds). What the
// client measured beyond the turn came before it: the inbound message's
// publish, its delivery from JetStream and its wait in the session's
// queue (and the final's way back, which overlaps its acknowledgement).
const (
	metricTurn   = "switchboard_turn_duration_seconds"
	metricModel  = "switchboard_llm_request_duration_seconds"
	metricCommit = "switchboard_store_commit_duration_seconds"
)

// histSums is the sum of each histogram of interest, in seconds, over its
// label sets (the turn's only at phase="final").
type histSums struct{ turn, model, commit float64 }

// gatherSums reads the sums from g; a histogram not there counts 0.
func gatherSums(g prometheus.Gatherer) (histSums, error) {
	families, err := g.Gather()
	if err != nil {
		return histSums{}, fmt.Errorf("loadgen: read the daemon's metrics: %w", err)
	}
	var s histSums
	for _, f := range families {
		for _, m := range f.GetMetric() {
			h := m.GetHistogram()
			if h == nil {
				continue
			}
			switch f.GetName() {
			case metricTurn:
				for _, l := range m.GetLabel() {
					if l.GetName() == "phase" && l.GetValue() == "final" {
						s.turn += h.GetSampleSum()
					}
				}
			case metricModel:
				s.model += h.GetSampleSum()
			case metricCommit:
				s.commit += h.GetSampleSum()
			}
		}
	}
	return s, nil
}

// setPhases fills r's per-turn means from the sums before and after its run.
func (r *Result) setPhases(before, after histSums) {
	if r.Turns == 0 {
		return
	}
	per := func(a, b float64) float64 { return (b - a) * 1000 / float64(r.Turns) }
	r.TurnMs = per(before.turn, after.turn)
	r.ModelMs = per(before.model, after.model)
	r.CommitMs = per(before.commit, after.commit)
}

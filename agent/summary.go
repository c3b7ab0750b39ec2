package agent

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/switchboard-chat/switchboard/agent/loop"
	"github.com/switchboard-chat/switchboard/llm"
	"github.com/switchboard-chat/switchboard/memory"
)

// Background summaries (issue: compaction with summaries, durably).
const (
	summaryMaxTokens   = 500
	summaryTimeout     = 2 * time.Minute
	summaryQueue       = 256
	summaryWorkers     = 2
	summaryMaxAttempts = 3
	summarySystem      = "You maintain the running summary of a chat between a user and an assistant. " +
		"Merge the previous summary with the conversation excerpt into one summary of event-style bullet points (\"- \"), " +
		"oldest first. Keep facts about the user, decisions, results, open questions and to-dos; drop small talk and greetings. " +
		"Never invent anything. At most 400 words. Output only the bullets."
)

// SummarizerFor is the Summarizer of an agent whose model is configured
// (a ModelSummarizer), else nil: the rule-based digest stands alone.
func SummarizerFor(configured bool, model Model) Summarizer {
	if !configured {
		return nil
	}
	return ModelSummarizer{Model: model}
}

// ModelSummarizer writes summaries with the model itself (temperature 0,
// at most 500 tokens). Safe for concurrent use.
type ModelSummarizer struct {
	Model Model
	// ModelName overrides the model for summaries ("" = configured).
	ModelName string
}

// Summarize implements Summarizer.
func (s ModelSummarizer) Summarize(ctx context.Context, session, previous string, dropped []memory.Message) (string, error) {
	var b strings.Builder
	if previous != "" {
		b.WriteString("Previous summary:\n")
		b.WriteString(previous)
		b.WriteString("\n\n")
	}
	b.WriteString("Conversation excerpt to fold in:\n")
	for _, m := range dropped {
		text := strings.TrimSpace(m.Text())
		switch {
		case m.Role == memory.RoleTool || text == "":
			continue
		case m.Role == memory.RoleUser:
			fmt.Fprintf(&b, "[%s] user: %s\n", m.Time.Format("2006-01-02 15:04"), loop.TruncateMiddle(text, 2000))
		default:
			fmt.Fprintf(&b, "[%s] assistant: %s\n", m.Time.Format("2006-01-02 15:04"), loop.TruncateMiddle(text, 2000))
		}
	}
	zero := float32(0)
	resp, err := s.Model.Stream(ctx, llm.Request{
		Model:       s.ModelName,
		MaxTokens:   summaryMaxTokens,
		Temperature: &zero,
		Messages:    []llm.Message{{Role: llm.RoleSystem, Content: summarySystem}, {Role: llm.RoleUser, Content: b.String()}},
	}, nil)
	if err != nil {
		return "", fmt.Errorf("agent: summarize %s: %w", session, err)
	}
	out := strings.TrimSpace(loop.StripThink(resp.Text))
	if out == "" {
		return "", fmt.Errorf("agent: summarize %s: the model returned nothing", session)
	}
	return loop.TruncateMiddle(out, maxSummaryBytes), nil
}

// summaryStore is the optional store capability of saving a summary alone.
type summaryStore interface {
	SetSummary(ctx context.Context, session, summary string) error
}

// summaryJob asks for a model-written summary to replace a digest.
type summaryJob struct {
	s        *session
	agent    string // whose Summarizer writes it (its current generation's)
	base     string // the summary the digest produced (what the result replaces)
	previous string // the summary before the digest
	dropped  []memory.Message
	attempt  int
}

// summaries runs the background summariser: jobs never block a reply; the
// digest already keeps the context within budget, and a model-written
// summary replaces it when ready. Failures are retried with backoff.
func (m *Manager) summaries(ctx context.Context) {
	for range summaryWorkers {
		m.wg.Go(func() {
			for {
				select {
				case <-ctx.Done():
					return
				case j := <-m.summaryJobs:
					m.runSummary(ctx, j)
				}
			}
		})
	}
}

func (m *Manager) runSummary(ctx context.Context, j summaryJob) {
	g, ok := m.agents.acquire(ctx, j.agent)
	if !ok {
		return
	}
	sm := g.env.prof.Summarizer
	if sm == nil || g.env.agent != j.agent {
		m.agents.release(g) // the agent lost its summarizer, or was removed: the digest stays
		return
	}
	sctx, cancel := context.WithTimeout(ctx, summaryTimeout)
	sum, err := sm.Summarize(sctx, j.s.key, j.previous, j.dropped)
	cancel()
	m.agents.release(g)
	if err != nil {
		if ctx.Err() != nil || errors.Is(err, context.Canceled) {
			return
		}
		j.attempt++
		m.env.log.Warn("background summary failed; the plain digest stays for now", "session", j.s.key, "attempt", j.attempt, "err", err)
		if j.attempt >= summaryMaxAttempts {
			return
		}
		wait := time.Duration(j.attempt) * time.Minute
		m.wg.Go(func() {
			t := time.NewTimer(wait)
			defer t.Stop()
			select {
			case <-ctx.Done():
			case <-t.C:
				m.enqueueSummary(j)
			}
		})
		return
	}
	j.s.applySummary(ctx, j.base, sum)
}

// enqueueSummary queues a job without blocking; a full queue keeps the digest.
func (m *Manager) enqueueSummary(j summaryJob) {
	select {
	case m.summaryJobs <- j:
	default:
		m.env.log.Warn("summary queue full; keeping the plain digest", "session", j.s.key)
	}
}

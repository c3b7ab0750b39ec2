// Package reqlog keeps the last model requests of each session, as they
// were sent to the model, for the web console's dashboard ("what was the
// model sent?"). [Model] wraps the daemon's model client; the agent marks
// a session's context with [WithSession], and requests made under an
// unmarked context (summaries) are not kept.
//
// Memory is bounded: at most PerSession requests for each of at most
// Sessions sessions (the least recently active is dropped first), each
// record at most MaxRecordBytes of JSON (image data is never kept, long
// texts are cut in the middle). Every configured secret (Recorder.Secrets:
// the model API key, channel tokens, …) is replaced with "(redacted)"
// wherever it appears, and so are strings shaped like common API keys.
package reqlog

import (
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/switchboard-chat/switchboard/llm"
)

// Default bounds.
const (
	DefaultSessions   = 32
	DefaultPerSession = 3
	// MaxRecordBytes bounds one record's request JSON.
	MaxRecordBytes = 64 << 10
	// maxTextBytes bounds one message's text in a record.
	maxTextBytes = 8 << 10
)

type ctxKey struct{}

// WithSession marks ctx as a turn of session (its key).
func WithSession(ctx context.Context, session string) context.Context {
	return context.WithValue(ctx, ctxKey{}, session)
}

func sessionOf(ctx context.Context) string {
	s, _ := ctx.Value(ctxKey{}).(string)
	return s
}

// Record is one model request and how it ended.
type Record struct {
	Time       time.Time       `json:"time"`
	DurationMS int64           `json:"duration_ms"`
	Request    json.RawMessage `json:"request"` // model, max_tokens, temperature, tools (names), messages
	Truncated  bool            `json:"truncated,omitempty"`
	Usage      llm.Usage       `json:"usage"`
	Finish     string          `json:"finish_reason,omitempty"`
	Error      string          `json:"error,omitempty"`

	// req is the request as made; Requests encodes it (redacted, cut,
	// bounded) when the dashboard asks, so a turn pays only for keeping a
	// reference to it (its messages' texts are the history's own strings).
	req llm.Request
}

// Recorder holds the records. Build it with [New]; safe for concurrent use.
type Recorder struct {
	sessions, perSession int
	secrets              []string

	mu    sync.Mutex
	order []string // sessions, least recently active first
	recs  map[string][]Record
}

// New returns a recorder with the default bounds that masks secrets
// (empty strings and strings under 6 bytes are ignored).
func New(secrets ...string) *Recorder {
	r := &Recorder{sessions: DefaultSessions, perSession: DefaultPerSession, recs: map[string][]Record{}}
	for _, s := range secrets {
		if len(s) >= 6 {
			r.secrets = append(r.secrets, s)
		}
	}
	return r
}

// Requests returns session's records, newest first.
func (r *Recorder) Requests(session string) []Record {
	r.mu.Lock()
	out := slices.Clone(r.recs[session])
	r.mu.Unlock()
	slices.Reverse(out)
	for i := range out {
		out[i].Request, out[i].Truncated = r.encode(out[i].req)
		out[i].req = llm.Request{}
	}
	return out
}

func (r *Recorder) add(session string, rec Record) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if i := slices.Index(r.order, session); i >= 0 {
		r.order = slices.Delete(r.order, i, i+1)
	}
	r.order = append(r.order, session)
	for len(r.order) > r.sessions {
		delete(r.recs, r.order[0])
		r.order = r.order[1:]
	}
	l := append(r.recs[session], rec)
	if len(l) > r.perSession {
		l = slices.Clone(l[len(l)-r.perSession:])
	}
	r.recs[session] = l
}

// keyShaped are strings that look like API keys and bearer tokens.
var keyShaped = regexp.MustCompile(`\b(sk-[A-Za-z0-9_-]{12,}|xox[abprs]-[A-Za-z0-9-]{10,}|xapp-[A-Za-z0-9-]{10,}|gh[pousr]_[A-Za-z0-9]{20,}|AKIA[0-9A-Z]{16}|[0-9]{6,12}:AA[A-Za-z0-9_-]{30,})\b|(?i:bearer\s+)[A-Za-z0-9._~+/=-]{12,}`)

func (r *Recorder) redact(s string) string {
	for _, sec := range r.secrets {
		s = strings.ReplaceAll(s, sec, "(redacted)")
	}
	return keyShaped.ReplaceAllString(s, "(redacted)")
}

func cut(s string) (string, bool) {
	if len(s) <= maxTextBytes {
		return s, false
	}
	h := maxTextBytes / 2
	return strings.ToValidUTF8(s[:h], "") + fmt.Sprintf("\n… (%d bytes cut) …\n", len(s)-2*h) + strings.ToValidUTF8(s[len(s)-h:], ""), true
}

type recMessage struct {
	Role      string         `json:"role"`
	Content   string         `json:"content,omitempty"`
	Images    int            `json:"images,omitempty"`
	Reasoning string         `json:"reasoning,omitempty"`
	ToolCalls []llm.ToolCall `json:"tool_calls,omitempty"`
	ToolID    string         `json:"tool_call_id,omitempty"`
}

type recRequest struct {
	Model       string       `json:"model,omitempty"`
	MaxTokens   int          `json:"max_tokens,omitempty"`
	Temperature *float32     `json:"temperature,omitempty"`
	Tools       []string     `json:"tools,omitempty"`
	Messages    []recMessage `json:"messages"`
}

// encode is req as kept: redacted, images counted not kept, texts cut,
// the whole bounded (oldest messages dropped first, the system prompt kept).
func (r *Recorder) encode(req llm.Request) (json.RawMessage, bool) {
	rr := recRequest{Model: req.Model, MaxTokens: req.MaxTokens, Temperature: req.Temperature}
	tools := req.Tools
	if req.ToolSet != nil {
		tools = req.ToolSet.Tools()
	}
	for _, t := range tools {
		rr.Tools = append(rr.Tools, t.Name)
	}
	truncated := false
	for _, m := range req.Messages {
		c, cc := cut(m.Content)
		rs, rc := cut(m.Reasoning)
		truncated = truncated || cc || rc
		rm := recMessage{Role: m.Role, Content: r.redact(c), Images: len(m.Images), Reasoning: r.redact(rs), ToolID: m.ToolID}
		for _, tc := range m.ToolCalls {
			a, ac := cut(tc.Arguments)
			truncated = truncated || ac
			rm.ToolCalls = append(rm.ToolCalls, llm.ToolCall{ID: tc.ID, Name: tc.Name, Arguments: r.redact(a)})
		}
		rr.Messages = append(rr.Messages, rm)
	}
	for {
		b, _ := json.Marshal(rr)
		if len(b) <= MaxRecordBytes || len(rr.Messages) <= 2 {
			return b, truncated || len(b) > MaxRecordBytes
		}
		rr.Messages = slices.Delete(rr.Messages, 1, 2) // keep the system prompt
		truncated = true
	}
}

// Streamer is the model client Model wraps.
type Streamer interface {
	Stream(ctx context.Context, req llm.Request, onDelta func(llm.Delta)) (*llm.Response, error)
}

// Model records every request made under a session's context, then
// passes it on unchanged.
type Model struct {
	Next Streamer
	R    *Recorder
}

// Stream implements the agent's model interface.
func (m Model) Stream(ctx context.Context, req llm.Request, onDelta func(llm.Delta)) (*llm.Response, error) {
	session := sessionOf(ctx)
	if session == "" || m.R == nil {
		return m.Next.Stream(ctx, req, onDelta)
	}
	start := time.Now()
	resp, err := m.Next.Stream(ctx, req, onDelta)
	req.OnRetry = nil // keep the request, not the turn its callback holds
	rec := Record{Time: start.UTC(), DurationMS: time.Since(start).Milliseconds(), req: req}
	if resp != nil {
		rec.Usage, rec.Finish = resp.Usage, resp.FinishReason
	}
	if err != nil {
		rec.Error = m.R.redact(err.Error())
	}
	m.R.add(session, rec)
	return resp, err
}

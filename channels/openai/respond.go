package openai

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"
)

// maxHops bounds how many "answered by" links a request follows.
const maxHops = 8

// responder answers one request from its turn: one JSON completion, or
// the stream of chunks.
type responder struct {
	c       *Channel
	w       http.ResponseWriter
	req     *chatRequest
	id      string
	created int64

	// Streaming state.
	started    bool
	sent       string // content streamed so far
	diverged   bool   // a delta did not extend sent: no more deltas
	progressAt int    // progress notes already sent
}

// respond waits for the final of *tp (following "answered by" links,
// updating *tp) and answers. It reports whether the request got its
// answer (or an error that ends it); false means ctx ended first.
func (r *responder) respond(ctx context.Context, tp **turn) bool {
	if r.req.stream {
		r.start()
	}
	keep := time.NewTicker(r.c.keepAlive)
	defer keep.Stop()
	for hops := 0; ; {
		t := *tp
		s := t.snapshot(r.progressAt)
		if s.final != nil && s.final.AnsweredBy != "" && hops < maxHops {
			// The agent answered this message together with a later one
			// of the session: the answer is that one's final.
			hops++
			next := r.c.turns.join(s.final.AnsweredBy)
			r.c.turns.leave(t)
			*tp, r.progressAt = next, 0
			if a, ok, _ := r.c.store.getAnswer(s.final.AnsweredBy); ok {
				next.update(func() {
					if next.final == nil {
						next.final = &a
					}
				})
			}
			continue
		}
		if s.final != nil {
			r.finish(*s.final, s.use)
			return true
		}
		if r.req.stream {
			r.progressAt += len(s.progress)
			for _, p := range s.progress {
				r.comment(p)
			}
			r.content(s.text)
			r.flush()
		}
		select {
		case <-s.changed:
		case <-keep.C:
			if r.req.stream {
				r.comment("keep-alive")
				r.flush()
			}
		case <-ctx.Done():
			return r.abort(ctx)
		}
	}
}

// abort answers a request whose wait ended before the final: the
// channel stopping (503) or request_timeout (504). A client that went
// away gets nothing. It reports whether the request was answered.
func (r *responder) abort(ctx context.Context) bool {
	select {
	case <-r.c.stopping:
		r.fail(&httpError{status: http.StatusServiceUnavailable, typ: typeServer, code: "shutting_down",
			message: "Switchboard is shutting down. Retry with the same Idempotency-Key to get the answer once it is back."})
		return false
	default:
	}
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		r.fail(&httpError{status: http.StatusGatewayTimeout, typ: typeServer, code: "timeout",
			message: fmt.Sprintf("The agent did not answer within %s (channels.openai.request_timeout). With an Idempotency-Key the turn goes on and a retry with the same key gets its answer.", r.c.cfg.RequestTimeout)})
	}
	return false
}

// finish answers with the final.
func (r *responder) finish(a answer, use usage) {
	if a.Kind == "error" {
		r.fail(&httpError{status: http.StatusInternalServerError, typ: typeServer, code: "agent_error", message: a.Text})
		return
	}
	if !r.req.stream {
		writeJSON(r.w, http.StatusOK, completion{ID: r.id, Object: "chat.completion", Created: r.created, Model: r.req.model,
			Choices: []completionChoice{{Message: responseMessage{Role: "assistant", Content: a.Text}, FinishReason: "stop"}},
			Usage:   use})
		return
	}
	rest := a.Text
	switch {
	case strings.HasPrefix(a.Text, r.sent):
		rest = a.Text[len(r.sent):]
	case r.sent != "":
		// The streamed text was not the start of the final (the model
		// wrote before calling a tool, or a model stream was retried):
		// the final follows it after a blank line.
		rest = "\n\n" + a.Text
		r.c.log.Debug("streamed text was not the start of the final", "id", r.id)
	}
	if rest != "" {
		r.data(r.chunk(chunkDelta{Content: &rest}, nil))
	}
	stop := "stop"
	r.data(r.chunk(chunkDelta{}, &stop))
	if r.req.includeUsage {
		r.data(chunk{ID: r.id, Object: "chat.completion.chunk", Created: r.created, Model: r.req.model, Choices: []chunkChoice{}, Usage: &use})
	}
	r.raw("data: [DONE]\n\n")
	r.flush()
}

// fail answers with an error: its status before the stream started, an
// error event in the stream after (as OpenAI does).
func (r *responder) fail(e *httpError) {
	if !r.started {
		writeError(r.w, e)
		return
	}
	r.data(e.body())
	r.flush()
}

// start sends the stream's headers and its first chunk (the role).
func (r *responder) start() {
	h := r.w.Header()
	h.Set("Content-Type", "text/event-stream; charset=utf-8")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no")
	r.w.WriteHeader(http.StatusOK)
	r.started = true
	empty := ""
	r.data(r.chunk(chunkDelta{Role: "assistant", Content: &empty}, nil))
	r.flush()
}

// content streams what text adds to the content sent so far.
func (r *responder) content(text string) {
	if r.diverged || text == "" || text == r.sent {
		return
	}
	if !strings.HasPrefix(text, r.sent) {
		r.diverged = true
		return
	}
	d := text[len(r.sent):]
	r.sent = text
	r.data(r.chunk(chunkDelta{Content: &d}, nil))
}

func (r *responder) chunk(d chunkDelta, finish *string) chunk {
	return chunk{ID: r.id, Object: "chat.completion.chunk", Created: r.created, Model: r.req.model,
		Choices: []chunkChoice{{Delta: d, FinishReason: finish}}}
}

func (r *responder) data(v any) {
	b, err := json.Marshal(v)
	if err != nil {
		return
	}
	r.raw("data: " + string(b) + "\n\n")
}

// comment sends an SSE comment line (clients ignore it).
func (r *responder) comment(s string) { r.raw(": " + strings.ReplaceAll(s, "\n", " ") + "\n\n") }

func (r *responder) raw(s string) { _, _ = r.w.Write([]byte(s)) }

func (r *responder) flush() { _ = http.NewResponseController(r.w).Flush() }

package llmtest

import (
	"io"
	"net"
	"net/http"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/switchboard-chat/switchboard/internal/jsonwire"
)

// reply answers req with rep: an HTTP error or an SSE stream.
func (h *Handler) reply(w http.ResponseWriter, r *http.Request, req *Request, rep *Reply) {
	ctx := r.Context()
	if rep.Block != nil {
		select {
		case <-rep.Block:
		case <-ctx.Done():
			return
		case <-h.closed:
			writeError(w, http.StatusServiceUnavailable, "", "llmtest: server is shutting down")
			return
		}
	}
	keepAlive := rep.KeepAlive > 0 && rep.Status == 0
	if keepAlive {
		if !h.keepAlive(w, ctx.Done(), h.latency+rep.Delay, rep.KeepAlive) {
			return
		}
	} else if !h.wait(ctx.Done(), h.latency+rep.Delay) {
		return
	}
	if rep.Reset && rep.Status == 0 && rep.Text == "" && rep.Reasoning == "" && len(rep.ToolCalls) == 0 && len(rep.RawChunks) == 0 {
		reset(w)
		return
	}
	if rep.Status != 0 {
		if rep.RetryAfter != "" {
			w.Header().Set("Retry-After", rep.RetryAfter)
		}
		body := []byte(rep.ErrorBody)
		if len(body) == 0 {
			body = appendErrorEnvelope(nil, errorType(rep.Status), "", http.StatusText(rep.Status))
		}
		writeRaw(w, rep.Status, body)
		return
	}

	if !keepAlive {
		writeStreamHeader(w)
	}

	s := &stream{
		h:     h,
		done:  ctx.Done(),
		w:     w,
		rc:    http.NewResponseController(w),
		delay: rep.ChunkDelay,
		buf:   make([]byte, 0, 512+len(rep.Text)+len(rep.Reasoning)),
	}
	s.prefix = s.appendPrefix(make([]byte, 0, 128+len(req.Body.Model)), req)

	if len(rep.RawChunks) > 0 {
		for _, c := range rep.RawChunks {
			b := append(s.buf[:0], "data: "...)
			b = append(b, c...)
			s.buf = append(b, "\n\n"...)
			if !s.write(s.buf) {
				return
			}
		}
	} else if !s.content(req, rep, h.chunkSizeFor(rep)) {
		return
	}

	switch {
	case rep.MidStreamError != "":
		b := append(s.buf[:0], "data: "...)
		b = appendErrorEnvelope(b, "server_error", "", rep.MidStreamError)
		s.buf = append(b, "\n\n"...)
		s.write(s.buf)
		return
	case rep.Stall:
		select {
		case <-ctx.Done():
		case <-h.closed:
		}
		return
	case rep.Reset:
		reset(w)
		return
	case rep.Truncate:
		return
	}
	if len(rep.RawChunks) == 0 {
		finish := rep.FinishReason
		if finish == "" {
			finish = "stop"
			if len(rep.ToolCalls) > 0 {
				finish = "tool_calls"
			}
		}
		if !s.closeChunk(s.openChunk(), finish) {
			return
		}
		if req.Body.StreamOptions != nil && req.Body.StreamOptions.IncludeUsage && !s.usage(req, rep) {
			return
		}
	}
	s.write(append(s.buf[:0], "data: [DONE]\n\n"...))
}

// reset flushes what was written and resets the connection: it is hijacked
// and closed with SO_LINGER 0, so the peer gets an RST. When the connection
// cannot be hijacked (HTTP/2), the handler panics with
// http.ErrAbortHandler, which aborts the stream.
func reset(w http.ResponseWriter) {
	conn, buf, err := http.NewResponseController(w).Hijack()
	if err != nil {
		panic(http.ErrAbortHandler)
	}
	_ = buf.Flush()
	if tc, ok := conn.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
	_ = conn.Close()
}

// writeStreamHeader sends the 200 status and the SSE headers.
func writeStreamHeader(w http.ResponseWriter) {
	hdr := w.Header()
	hdr.Set("Content-Type", "text/event-stream")
	hdr.Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
}

// keepAlive sends the stream headers, then a comment every interval until
// d has passed; false when the request ended or the handler closed first.
func (h *Handler) keepAlive(w http.ResponseWriter, done <-chan struct{}, d, interval time.Duration) bool {
	writeStreamHeader(w)
	rc := http.NewResponseController(w)
	if rc.Flush() != nil {
		return false
	}
	end := time.Now().Add(d)
	for {
		left := time.Until(end)
		if left <= 0 {
			return true
		}
		if !h.wait(done, min(left, interval)) {
			return false
		}
		if time.Until(end) <= 0 {
			return true
		}
		if _, err := io.WriteString(w, ": keep-alive\n\n"); err != nil || rc.Flush() != nil {
			return false
		}
	}
}

// chunkSizeFor returns the chunk size a reply uses.
func (h *Handler) chunkSizeFor(rep *Reply) int {
	if rep.ChunkSize > 0 {
		return rep.ChunkSize
	}
	return h.chunkSize
}

// wait waits d; false when done (the request's context) or the handler
// closed first.
func (h *Handler) wait(done <-chan struct{}, d time.Duration) bool {
	if d <= 0 {
		select {
		case <-done:
			return false
		default:
			return true
		}
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-done:
		return false
	case <-h.closed:
		return false
	}
}

// stream writes the SSE events of one reply. Every event is flushed.
type stream struct {
	h      *Handler
	done   <-chan struct{} // the request context's Done
	w      http.ResponseWriter
	rc     *http.ResponseController
	delay  time.Duration
	prefix []byte // `{"id":..,"object":..,"created":..,"model":..,"choices":[`
	buf    []byte
	n      int  // events written
	role   bool // the role was sent
	comma  bool // the open delta object has a field
}

func (s *stream) appendPrefix(b []byte, req *Request) []byte {
	b = append(b, `{"id":"chatcmpl-`...)
	b = appendID(b, s.h.idSalt, req.Seq, 0)
	b = append(b, `","object":"chat.completion.chunk","created":`...)
	b = strconv.AppendInt(b, time.Now().Unix(), 10)
	b = append(b, `,"model":`...)
	b = jsonwire.AppendString(b, req.Body.Model)
	return append(b, `,"choices":[`...)
}

// content streams reasoning, text and tool calls.
func (s *stream) content(req *Request, rep *Reply, size int) bool {
	for p := range textPieces(rep.Reasoning, size) {
		b := s.field(s.openChunk())
		b = append(b, `"reasoning_content":`...)
		if !s.closeChunk(jsonwire.AppendString(b, p), "") {
			return false
		}
	}
	for p := range textPieces(rep.Text, size) {
		b := s.field(s.openChunk())
		b = append(b, `"content":`...)
		if !s.closeChunk(jsonwire.AppendString(b, p), "") {
			return false
		}
	}
	if !rep.InterleaveToolCalls {
		for i := range rep.ToolCalls {
			if !s.toolStart(req, rep, i) {
				return false
			}
			for p := range argPieces(rep.ToolCalls[i].Arguments, size) {
				if !s.toolArgs(i, p) {
					return false
				}
			}
		}
		return true
	}
	for i := range rep.ToolCalls {
		if !s.toolStart(req, rep, i) {
			return false
		}
	}
	rest := make([]string, len(rep.ToolCalls))
	for i, tc := range rep.ToolCalls {
		rest[i] = tc.Arguments
	}
	for more := true; more; {
		more = false
		for i, a := range rest {
			if a == "" {
				continue
			}
			cut := len(a)
			if size > 0 && size < cut {
				cut = size
			}
			if !s.toolArgs(i, a[:cut]) {
				return false
			}
			rest[i] = a[cut:]
			more = more || rest[i] != ""
		}
	}
	return true
}

func (s *stream) toolStart(req *Request, rep *Reply, i int) bool {
	tc := rep.ToolCalls[i]
	b := s.field(s.openChunk())
	b = append(b, `"tool_calls":[{"index":`...)
	b = strconv.AppendInt(b, int64(i), 10)
	b = append(b, `,"id":`...)
	if tc.ID != "" {
		b = jsonwire.AppendString(b, tc.ID)
	} else {
		b = append(b, `"call_`...)
		b = appendID(b, s.h.idSalt, req.Seq, i+1)
		b = append(b, '"')
	}
	b = append(b, `,"type":"function","function":{"name":`...)
	b = jsonwire.AppendString(b, tc.Name)
	b = append(b, `,"arguments":""}}]`...)
	return s.closeChunk(b, "")
}

func (s *stream) toolArgs(i int, frag string) bool {
	b := s.field(s.openChunk())
	b = append(b, `"tool_calls":[{"index":`...)
	b = strconv.AppendInt(b, int64(i), 10)
	b = append(b, `,"function":{"arguments":`...)
	b = jsonwire.AppendString(b, frag)
	b = append(b, "}}]"...)
	return s.closeChunk(b, "")
}

// usage writes the usage chunk (empty choices).
func (s *stream) usage(req *Request, rep *Reply) bool {
	var u Usage
	if rep.Usage != nil {
		u = *rep.Usage
	} else {
		out := len(rep.Text) + len(rep.Reasoning)
		for _, tc := range rep.ToolCalls {
			out += len(tc.Name) + len(tc.Arguments)
		}
		u = Usage{PromptTokens: len(req.Raw)/4 + 1, CompletionTokens: out/4 + 1}
	}
	b := append(s.buf[:0], "data: "...)
	b = append(b, s.prefix...)
	b = append(b, `],"usage":{"prompt_tokens":`...)
	b = strconv.AppendInt(b, int64(u.PromptTokens), 10)
	b = append(b, `,"completion_tokens":`...)
	b = strconv.AppendInt(b, int64(u.CompletionTokens), 10)
	b = append(b, `,"total_tokens":`...)
	b = strconv.AppendInt(b, int64(u.PromptTokens+u.CompletionTokens), 10)
	s.buf = append(b, "}}\n\n"...)
	return s.write(s.buf)
}

// openChunk starts a chunk event up to the inside of its delta object; the
// first chunk of the stream carries the role.
func (s *stream) openChunk() []byte {
	b := append(s.buf[:0], "data: "...)
	b = append(b, s.prefix...)
	b = append(b, `{"index":0,"delta":{`...)
	s.comma = false
	if !s.role {
		s.role = true
		b = append(b, `"role":"assistant"`...)
		s.comma = true
	}
	return b
}

// field adds the separator before a delta field.
func (s *stream) field(b []byte) []byte {
	if s.comma {
		b = append(b, ',')
	}
	s.comma = true
	return b
}

// closeChunk ends the delta and the chunk (finish "" is null) and writes it.
func (s *stream) closeChunk(b []byte, finish string) bool {
	b = append(b, `},"logprobs":null,"finish_reason":`...)
	if finish == "" {
		b = append(b, "null"...)
	} else {
		b = jsonwire.AppendString(b, finish)
	}
	b = append(b, "}]}\n\n"...)
	s.buf = b
	return s.write(b)
}

// write sends one event (after ChunkDelay, except for the first) and
// flushes it. It reports false when the request is over.
func (s *stream) write(b []byte) bool {
	if s.n > 0 && s.delay > 0 && !s.h.wait(s.done, s.delay) {
		return false
	}
	s.n++
	if _, err := s.w.Write(b); err != nil {
		return false
	}
	return s.rc.Flush() == nil
}

// textPieces yields s in pieces of at most size bytes without splitting a
// rune (a rune longer than size is one piece); size 0 yields s whole. An
// empty s yields nothing.
func textPieces(s string, size int) func(yield func(string) bool) {
	return func(yield func(string) bool) {
		for len(s) > 0 {
			cut := len(s)
			if size > 0 && size < cut {
				cut = size
				for cut > 0 && !utf8.RuneStart(s[cut]) {
					cut--
				}
				if cut == 0 {
					_, cut = utf8.DecodeRuneInString(s)
				}
			}
			if !yield(s[:cut]) {
				return
			}
			s = s[cut:]
		}
	}
}

// argPieces yields s in pieces of size bytes, split anywhere; size 0 yields
// s whole. An empty s yields nothing.
func argPieces(s string, size int) func(yield func(string) bool) {
	return func(yield func(string) bool) {
		for len(s) > 0 {
			cut := len(s)
			if size > 0 && size < cut {
				cut = size
			}
			if !yield(s[:cut]) {
				return
			}
			s = s[cut:]
		}
	}
}

// appendID appends 24 hex digits: the handler's random salt, then seq and
// n, so ids are unique per handler and unlikely to repeat across restarts.
func appendID(b []byte, salt uint32, seq, n int) []byte {
	const hexdigits = "0123456789abcdef"
	var d [24]byte
	v := uint64(seq)<<16 | uint64(n&0xffff)
	for i := 23; i >= 8; i-- {
		d[i] = hexdigits[v&0xf]
		v >>= 4
	}
	for i := 7; i >= 0; i-- {
		d[i] = hexdigits[salt&0xf]
		salt >>= 4
	}
	return append(b, d[:]...)
}

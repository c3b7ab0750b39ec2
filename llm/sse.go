package llm

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"

	openai "github.com/sashabaranov/go-openai"
)

// The response side of a call: the server-sent events of a chat
// completion stream, read the way go-openai's stream reader reads them
// (data lines; [DONE] ends the stream; a data line starting with
// {"error": is a mid-stream error; other lines are kept and, when the body
// ends, read as an error envelope), without its per-line allocations and
// regular expressions. Chunks decode into go-openai's wire type.

const (
	// maxErrorBody bounds the error body of a failed request read.
	maxErrorBody = 1 << 20
	// maxOtherLines bounds the non-data lines kept for an error envelope
	// sent without "data:".
	maxOtherLines = 64 << 10
)

// readerPool holds the bufio.Readers of finished streams.
var readerPool = sync.Pool{New: func() any { return bufio.NewReaderSize(nil, 4096) }}

// sseReader reads the data events of one response body.
type sseReader struct {
	r     *bufio.Reader
	long  []byte // a line longer than the reader's buffer
	other []byte // non-data, non-comment lines
	done  bool
}

func newSSEReader(body io.Reader) *sseReader {
	r := readerPool.Get().(*bufio.Reader)
	r.Reset(body)
	return &sseReader{r: r}
}

// release returns the reader's buffer for reuse; s is unusable afterwards.
func (s *sseReader) release() {
	if s.r != nil {
		s.r.Reset(nil)
		readerPool.Put(s.r)
		s.r = nil
	}
}

// recv returns the next chunk. It returns io.EOF after [DONE] or when the
// body ends without one (the caller tells a complete stream from a cut one
// by the finish reason), an *openai.APIError (wrapped) for a mid-stream
// error or an error envelope the body ended with, and read errors as they
// are.
func (s *sseReader) recv(chunk *openai.ChatCompletionStreamResponse) error {
	payload, err := s.next()
	if err != nil {
		return err
	}
	return json.Unmarshal(payload, chunk)
}

// next returns the payload of the next data event; it is valid until the
// next call.
func (s *sseReader) next() ([]byte, error) {
	if s.done {
		return nil, io.EOF
	}
	for {
		line, err := s.readLine()
		if err != nil {
			if e := s.envelope(); e != nil {
				return nil, e
			}
			return nil, err
		}
		line = bytes.TrimSpace(line)
		payload, ok := bytes.CutPrefix(line, []byte("data:"))
		if !ok {
			if len(line) > 0 && line[0] != ':' && len(s.other) < maxOtherLines {
				s.other = append(s.other, line...)
			}
			continue
		}
		payload = bytes.TrimLeft(payload, " \t\r\n\f")
		if bytes.HasPrefix(payload, []byte(`{"error":`)) {
			return nil, streamError(payload)
		}
		if string(payload) == "[DONE]" {
			s.done = true
			return nil, io.EOF
		}
		return payload, nil
	}
}

// readLine returns the next line with its newline. A line cut by the end
// of the body is dropped (as go-openai drops it): the error is returned.
func (s *sseReader) readLine() ([]byte, error) {
	line, err := s.r.ReadSlice('\n')
	if !errors.Is(err, bufio.ErrBufferFull) {
		return line, err
	}
	s.long = append(s.long[:0], line...)
	for {
		line, err = s.r.ReadSlice('\n')
		s.long = append(s.long, line...)
		if !errors.Is(err, bufio.ErrBufferFull) {
			return s.long, err
		}
	}
}

// envelope returns the error of an error envelope made of the non-data
// lines, or nil.
func (s *sseReader) envelope() error {
	if len(s.other) == 0 {
		return nil
	}
	var er openai.ErrorResponse
	if json.Unmarshal(s.other, &er) != nil || er.Error == nil {
		return nil
	}
	return fmt.Errorf("error, %w", er.Error)
}

// streamError reads a mid-stream error event.
func streamError(payload []byte) error {
	var er openai.ErrorResponse
	if err := json.Unmarshal(payload, &er); err != nil || er.Error == nil {
		return fmt.Errorf("llm: unreadable error event in the stream: %s", cutRunes(string(payload), 200, "…"))
	}
	return fmt.Errorf("error, %w", er.Error)
}

// errorResponse reads the error of a non-2xx answer as go-openai does: an
// *openai.APIError from an OpenAI envelope, else an *openai.RequestError
// carrying the body.
func errorResponse(resp *http.Response) error {
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxErrorBody))
	if err != nil {
		return fmt.Errorf("error, reading response body: %w", err)
	}
	var er openai.ErrorResponse
	err = json.Unmarshal(body, &er)
	if err != nil || er.Error == nil {
		re := &openai.RequestError{HTTPStatus: resp.Status, HTTPStatusCode: resp.StatusCode, Err: err, Body: body}
		if er.Error != nil {
			re.Err = er.Error
		}
		return re
	}
	er.Error.HTTPStatus = resp.Status
	er.Error.HTTPStatusCode = resp.StatusCode
	return er.Error
}

package openai

import (
	"encoding/json"
	"net/http"
	"strconv"
)

// The wire format of OpenAI's Chat Completions API, as far as this server
// speaks it. Requests are decoded with go-openai's types; the responses are
// written with these, which keep OpenAI's nulls (a finish_reason of null,
// an error's param and code of null) that go-openai's omit.

// apiError is OpenAI's error body: {"error": {...}}.
type apiError struct {
	Error errorDetail `json:"error"`
}

type errorDetail struct {
	Message string  `json:"message"`
	Type    string  `json:"type"`
	Param   *string `json:"param"`
	Code    *string `json:"code"`
}

// Error types, as OpenAI names them.
const (
	typeInvalidRequest = "invalid_request_error"
	typeRateLimit      = "requests"
	typeServer         = "server_error"
)

// httpError is an error answered with an OpenAI error body.
type httpError struct {
	status  int
	typ     string
	code    string // "" is null
	param   string // "" is null
	message string
	// retryAfter, when positive, is sent as Retry-After (seconds).
	retryAfter int
}

func (e *httpError) Error() string { return e.message }

func strOrNil(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

func (e *httpError) body() apiError {
	return apiError{Error: errorDetail{Message: e.message, Type: e.typ, Param: strOrNil(e.param), Code: strOrNil(e.code)}}
}

// writeError answers with e's status and body.
func writeError(w http.ResponseWriter, e *httpError) {
	if e.retryAfter > 0 {
		w.Header().Set("Retry-After", strconv.Itoa(e.retryAfter))
	}
	writeJSON(w, e.status, e.body())
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	data, err := json.Marshal(v)
	if err != nil {
		status, data = http.StatusInternalServerError, []byte(`{"error":{"message":"could not encode the response","type":"server_error","param":null,"code":null}}`)
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(append(data, '\n'))
}

func badRequest(param, code, msg string) *httpError {
	return &httpError{status: http.StatusBadRequest, typ: typeInvalidRequest, param: param, code: code, message: msg}
}

// completion is a chat.completion object.
type completion struct {
	ID      string             `json:"id"`
	Object  string             `json:"object"`
	Created int64              `json:"created"`
	Model   string             `json:"model"`
	Choices []completionChoice `json:"choices"`
	Usage   usage              `json:"usage"`
}

type completionChoice struct {
	Index        int             `json:"index"`
	Message      responseMessage `json:"message"`
	FinishReason string          `json:"finish_reason"`
}

type responseMessage struct {
	Role    string  `json:"role"`
	Content string  `json:"content"`
	Refusal *string `json:"refusal"`
}

// chunk is a chat.completion.chunk object.
type chunk struct {
	ID      string        `json:"id"`
	Object  string        `json:"object"`
	Created int64         `json:"created"`
	Model   string        `json:"model"`
	Choices []chunkChoice `json:"choices"`
	Usage   *usage        `json:"usage,omitempty"`
}

type chunkChoice struct {
	Index        int        `json:"index"`
	Delta        chunkDelta `json:"delta"`
	FinishReason *string    `json:"finish_reason"`
}

type chunkDelta struct {
	Role    string  `json:"role,omitempty"`
	Content *string `json:"content,omitempty"`
}

// model is a model object of GET /v1/models.
type model struct {
	ID      string `json:"id"`
	Object  string `json:"object"`
	Created int64  `json:"created"`
	OwnedBy string `json:"owned_by"`
}

type modelList struct {
	Object string  `json:"object"`
	Data   []model `json:"data"`
}

package llm

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"

	openai "github.com/sashabaranov/go-openai"
)

// Transcriber turns speech into text with the OpenAI-compatible
// /audio/transcriptions endpoint of llm.base_url, using
// llm.transcription_model (e.g. whisper-1) and llm.api_key. It is
// immutable and safe for concurrent use.
type Transcriber struct {
	api        *openai.Client
	model      string
	configured bool
	timeout    time.Duration
}

// NewTranscriber returns a transcriber for cfg. It does no I/O. It fails
// when cfg.TranscriptionModel is empty or cfg.BaseURL is not an http(s)
// URL (empty means DefaultBaseURL). hc sends the requests; nil means a
// client of its own. Each call is bounded by cfg.RequestTimeout.
func NewTranscriber(cfg Config, hc *http.Client) (*Transcriber, error) {
	if strings.TrimSpace(cfg.TranscriptionModel) == "" {
		return nil, errors.New("llm: transcriber: llm.transcription_model is empty")
	}
	if cfg.BaseURL == "" {
		cfg.BaseURL = DefaultBaseURL
	}
	if u, err := url.Parse(cfg.BaseURL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("llm: transcriber: llm.base_url: must be an http(s) URL, got %q", cfg.BaseURL)
	}
	if hc == nil {
		tr := http.DefaultTransport.(*http.Transport).Clone()
		hc = &http.Client{Transport: tr}
	}
	oc := openai.DefaultConfig(cfg.APIKey)
	oc.BaseURL = cfg.BaseURL
	oc.HTTPClient = hc
	return &Transcriber{api: openai.NewClientWithConfig(oc), model: cfg.TranscriptionModel,
		configured: cfg.Configured(), timeout: cfg.RequestTimeout}, nil
}

// Transcribe returns the text spoken in audio, a file named fileName (its
// extension tells the server the format, e.g. "voice.ogg"). It blocks
// until the endpoint answers, ctx ends or the request timeout passes.
// Errors: ErrNotConfigured (no endpoint set up, no I/O happens), an
// *APIError for an error answer, or a transport or ctx error; all wrapped.
func (t *Transcriber) Transcribe(ctx context.Context, fileName string, audio []byte) (string, error) {
	if !t.configured {
		return "", fmt.Errorf("llm: transcribe: %w", ErrNotConfigured)
	}
	if len(audio) == 0 {
		return "", errors.New("llm: transcribe: no audio")
	}
	if t.timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, t.timeout)
		defer cancel()
	}
	resp, err := t.api.CreateTranscription(ctx, openai.AudioRequest{
		Model:    t.model,
		FilePath: fileName,
		Reader:   bytes.NewReader(audio),
		Format:   openai.AudioResponseFormatJSON,
	})
	if err != nil {
		var oe *openai.APIError
		var re *openai.RequestError
		switch {
		case errors.As(err, &oe):
			return "", fmt.Errorf("llm: transcribe: %w", &APIError{Status: oe.HTTPStatusCode, Message: oe.Message, Err: err})
		case errors.As(err, &re):
			return "", fmt.Errorf("llm: transcribe: %w", &APIError{Status: re.HTTPStatusCode, Message: string(re.Body), Err: err})
		}
		return "", fmt.Errorf("llm: transcribe: %w", err)
	}
	return strings.TrimSpace(resp.Text), nil
}

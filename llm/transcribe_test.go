package llm_test

import (
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/switchboard-chat/switchboard/llm"
)

// transcriptionServer answers POST /v1/audio/transcriptions with status and
// body, recording the multipart fields and the uploaded file.
type transcriptionServer struct {
	mu                    sync.Mutex
	model, fileName, auth string
	audio                 []byte
	path                  string
	status                int
	body                  string
	srv                   *httptest.Server
	calls                 int
}

func newTranscriptionServer(t *testing.T, status int, body string) *transcriptionServer {
	t.Helper()
	ts := &transcriptionServer{status: status, body: body}
	ts.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ts.mu.Lock()
		defer ts.mu.Unlock()
		ts.calls++
		ts.path, ts.auth = r.URL.Path, r.Header.Get("Authorization")
		if err := r.ParseMultipartForm(1 << 20); err == nil {
			ts.model = r.FormValue("model")
			if f, hdr, err := r.FormFile("file"); err == nil {
				ts.fileName = hdr.Filename
				ts.audio, _ = io.ReadAll(f)
				f.Close()
			}
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(ts.status)
		_, _ = io.WriteString(w, ts.body)
	}))
	t.Cleanup(ts.srv.Close)
	return ts
}

func transcriberFor(t *testing.T, ts *transcriptionServer, key string) *llm.Transcriber {
	t.Helper()
	cfg := llm.DefaultConfig()
	cfg.BaseURL = ts.srv.URL + "/v1"
	cfg.APIKey = key
	cfg.TranscriptionModel = "whisper-1"
	tr, err := llm.NewTranscriber(cfg, ts.srv.Client())
	if err != nil {
		t.Fatal(err)
	}
	return tr
}

func TestTranscribe(t *testing.T) {
	ts := newTranscriptionServer(t, http.StatusOK, `{"text":"  hello from a voice note "}`)
	tr := transcriberFor(t, ts, "sk-test")
	got, err := tr.Transcribe(t.Context(), "voice.ogg", []byte("OggS-audio"))
	if err != nil {
		t.Fatal(err)
	}
	if got != "hello from a voice note" {
		t.Errorf("Transcribe = %q, want the trimmed text", got)
	}
	ts.mu.Lock()
	defer ts.mu.Unlock()
	if ts.path != "/v1/audio/transcriptions" || ts.model != "whisper-1" || ts.fileName != "voice.ogg" ||
		string(ts.audio) != "OggS-audio" || ts.auth != "Bearer sk-test" {
		t.Errorf("request: path %q model %q file %q audio %q auth %q", ts.path, ts.model, ts.fileName, ts.audio, ts.auth)
	}
}

func TestTranscribeErrors(t *testing.T) {
	ts := newTranscriptionServer(t, http.StatusBadRequest, `{"error":{"message":"Invalid file format.","type":"invalid_request_error"}}`)
	tr := transcriberFor(t, ts, "sk-test")
	_, err := tr.Transcribe(t.Context(), "voice.ogg", []byte("x"))
	var ae *llm.APIError
	if !errors.As(err, &ae) || ae.Status != http.StatusBadRequest || !strings.Contains(ae.Message, "Invalid file format") {
		t.Fatalf("Transcribe error = %v, want an *APIError with status 400 and the message", err)
	}

	if _, err := tr.Transcribe(t.Context(), "voice.ogg", nil); err == nil {
		t.Error("Transcribe(no audio) succeeded")
	}

	// Not configured: OpenAI's URL and no key. No request is made.
	cfg := llm.DefaultConfig()
	cfg.TranscriptionModel = "whisper-1"
	unconf, err := llm.NewTranscriber(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := unconf.Transcribe(t.Context(), "voice.ogg", []byte("x")); !errors.Is(err, llm.ErrNotConfigured) {
		t.Errorf("unconfigured Transcribe error = %v, want ErrNotConfigured", err)
	}

	if _, err := llm.NewTranscriber(llm.DefaultConfig(), nil); err == nil || !strings.Contains(err.Error(), "llm.transcription_model") {
		t.Errorf("NewTranscriber without a model = %v, want an error naming llm.transcription_model", err)
	}
	bad := llm.DefaultConfig()
	bad.TranscriptionModel = "whisper-1"
	bad.BaseURL = "ftp://x"
	if _, err := llm.NewTranscriber(bad, nil); err == nil || !strings.Contains(err.Error(), "llm.base_url") {
		t.Errorf("NewTranscriber with a bad base URL = %v, want an error naming llm.base_url", err)
	}
}

package search

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/http"
	"net/url"
	"time"

	openai "github.com/sashabaranov/go-openai"
)

// Embedder turns texts into vectors. Implementations are safe for
// concurrent use and honour ctx.
type Embedder interface {
	// Embed returns one vector per text, in order, all of the same length.
	Embed(ctx context.Context, texts []string) ([][]float32, error)
	// Model names the embedding model; vectors of another model are
	// recomputed.
	Model() string
}

// EmbedderConfig configures [NewOpenAIEmbedder].
type EmbedderConfig struct {
	// BaseURL is the OpenAI-compatible API root, e.g.
	// https://api.openai.com/v1 (required).
	BaseURL string
	// APIKey is sent as a Bearer token (may be empty for local servers).
	APIKey string
	// Model is the embedding model, e.g. text-embedding-3-small (required).
	Model string
	// Timeout bounds one request (default 60s).
	Timeout time.Duration
	// BatchSize is the most texts sent in one request (default 64).
	BatchSize int
	// HTTPClient is used for requests (default: a new client).
	HTTPClient *http.Client
}

// OpenAIEmbedder calls the OpenAI-compatible POST /embeddings endpoint
// through go-openai. It is safe for concurrent use.
type OpenAIEmbedder struct {
	api     *openai.Client
	model   string
	timeout time.Duration
	batch   int
}

var _ Embedder = (*OpenAIEmbedder)(nil)

// NewOpenAIEmbedder validates cfg and returns an embedder. It does no I/O.
func NewOpenAIEmbedder(cfg EmbedderConfig) (*OpenAIEmbedder, error) {
	var errs []error
	if u, err := url.Parse(cfg.BaseURL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		errs = append(errs, fmt.Errorf("base url must be an http(s) URL, got %q", cfg.BaseURL))
	}
	if cfg.Model == "" {
		errs = append(errs, errors.New("model is empty"))
	}
	if cfg.Timeout < 0 || cfg.BatchSize < 0 {
		errs = append(errs, errors.New("timeout and batch size must not be negative"))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("search: embedder: %w", err)
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = 60 * time.Second
	}
	if cfg.BatchSize == 0 {
		cfg.BatchSize = 64
	}
	oc := openai.DefaultConfig(cfg.APIKey)
	oc.BaseURL = cfg.BaseURL
	if cfg.HTTPClient != nil {
		oc.HTTPClient = cfg.HTTPClient
	}
	return &OpenAIEmbedder{api: openai.NewClientWithConfig(oc), model: cfg.Model, timeout: cfg.Timeout, batch: cfg.BatchSize}, nil
}

// Model implements [Embedder].
func (e *OpenAIEmbedder) Model() string { return e.model }

// Embed implements [Embedder]: texts are sent in batches; every answer is
// checked (one vector per input, matching indexes, equal non-zero
// lengths, finite values).
func (e *OpenAIEmbedder) Embed(ctx context.Context, texts []string) ([][]float32, error) {
	out := make([][]float32, len(texts))
	dims := 0
	for from := 0; from < len(texts); from += e.batch {
		batch := texts[from:min(from+e.batch, len(texts))]
		rctx, cancel := context.WithTimeout(ctx, e.timeout)
		resp, err := e.api.CreateEmbeddings(rctx, openai.EmbeddingRequestStrings{Input: batch, Model: openai.EmbeddingModel(e.model)})
		cancel()
		if err != nil {
			return nil, fmt.Errorf("search: embeddings (%s): %w", e.model, err)
		}
		if len(resp.Data) != len(batch) {
			return nil, fmt.Errorf("search: embeddings (%s): %d vectors for %d inputs", e.model, len(resp.Data), len(batch))
		}
		for _, d := range resp.Data {
			if d.Index < 0 || d.Index >= len(batch) || out[from+d.Index] != nil {
				return nil, fmt.Errorf("search: embeddings (%s): bad or repeated index %d", e.model, d.Index)
			}
			if len(d.Embedding) == 0 || (dims != 0 && len(d.Embedding) != dims) {
				return nil, fmt.Errorf("search: embeddings (%s): vector of %d dimensions (want %d)", e.model, len(d.Embedding), dims)
			}
			for _, v := range d.Embedding {
				if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
					return nil, fmt.Errorf("search: embeddings (%s): vector holds a non-finite value", e.model)
				}
			}
			dims = len(d.Embedding)
			out[from+d.Index] = d.Embedding
		}
	}
	return out, nil
}

// normalize scales v to unit length in place (a zero vector stays zero).
func normalize(v []float32) []float32 {
	var sum float64
	for _, x := range v {
		sum += float64(x) * float64(x)
	}
	if sum == 0 {
		return v
	}
	inv := float32(1 / math.Sqrt(sum))
	for i := range v {
		v[i] *= inv
	}
	return v
}

func dot(a, b []float32) float64 {
	var s float32
	for i := range a {
		s += a[i] * b[i]
	}
	return float64(s)
}

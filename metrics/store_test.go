package metrics_test

import (
	"bytes"
	"errors"
	"io"
	"log/slog"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"

	"github.com/switchboard-chat/switchboard/memory"
	"github.com/switchboard-chat/switchboard/memory/boltstore"
	"github.com/switchboard-chat/switchboard/memory/jsstore"
	"github.com/switchboard-chat/switchboard/memory/memtest"
	"github.com/switchboard-chat/switchboard/metrics"
)

// Both history stores can be wrapped (memory.store: bolt or jetstream).
var (
	_ metrics.History = (*boltstore.Store)(nil)
	_ metrics.History = (*jsstore.Store)(nil)
)

func scrape(t *testing.T, m *metrics.Metrics) string {
	t.Helper()
	rec := httptest.NewRecorder()
	m.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	body, _ := io.ReadAll(rec.Body)
	return string(body)
}

// TestStoreMeasuresAndFails: commits through the wrapper are timed and
// stored; an injected disk failure leaves nothing written, is counted by
// operation and logged once for many failures; a duplicate is an answer,
// not a failure; and the bbolt store's other capabilities stay visible.
func TestStoreMeasuresAndFails(t *testing.T) {
	bolt, err := boltstore.Open(filepath.Join(t.TempDir(), "history.db"), boltstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer bolt.Close()
	m := metrics.New()
	var logs bytes.Buffer
	failing := false
	s := metrics.Store{History: bolt, M: m, Fails: &memory.FailureLog{Log: slog.New(slog.NewTextHandler(&logs, nil))},
		Fault: func(op string) error {
			if failing {
				return errors.New("write history.db: no space left on device (injected " + op + ")")
			}
			return nil
		}}
	var _ memory.Store = s
	if _, ok := any(s).(memory.Compactor); !ok {
		t.Error("the wrapper hides the store's compaction")
	}

	ctx := t.Context()
	rec := memtest.Turn("console/c1", "m1", "hello", "hi")
	if err := s.CommitTurn(ctx, rec); err != nil {
		t.Fatal(err)
	}
	if err := s.CommitTurn(ctx, rec); !errors.Is(err, memory.ErrDuplicate) {
		t.Fatalf("second commit = %v, want ErrDuplicate", err)
	}
	failing = true
	other := memtest.Turn("console/c1", "m2", "again", "hi")
	for range 3 {
		if err := s.CommitTurn(ctx, other); err == nil || !strings.Contains(err.Error(), "injected commit") {
			t.Fatalf("failing commit = %v", err)
		}
	}
	if err := s.MarkPublished(ctx, rec.Receipt.Key); err == nil {
		t.Fatal("failing mark_published succeeded")
	}
	failing = false
	if _, ok, err := bolt.Receipt(ctx, other.Receipt.Key); ok || err != nil {
		t.Errorf("a failed commit was written: ok=%v err=%v", ok, err)
	}
	if r, ok, err := bolt.Receipt(ctx, rec.Receipt.Key); !ok || err != nil || r.Published {
		t.Errorf("receipt = %+v, %v, %v; want stored and not published", r, ok, err)
	}

	body := scrape(t, m)
	for _, want := range []string{
		`switchboard_store_commit_duration_seconds_count 5`,
		`switchboard_store_failures_total{op="commit"} 3`,
		`switchboard_store_failures_total{op="mark_published"} 1`,
		`switchboard_store_commits_in_flight 0`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("metrics lack %s", want)
		}
	}
	if n := strings.Count(logs.String(), "history store failing"); n != 1 {
		t.Errorf("%d failure lines for 4 failures, want 1:\n%s", n, logs.String())
	}
}

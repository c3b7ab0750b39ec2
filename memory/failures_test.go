package memory_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/switchboard-chat/switchboard/memory"
)

func TestIsFailure(t *testing.T) {
	for _, tt := range []struct {
		err  error
		want bool
	}{
		{nil, false},
		{fmt.Errorf("x: %w", memory.ErrDuplicate), false},
		{fmt.Errorf("x: %w", memory.ErrInvalid), false},
		{fmt.Errorf("x: %w", memory.ErrNotFound), false},
		{context.Canceled, false},
		{context.DeadlineExceeded, true},
		{fmt.Errorf("x: %w", memory.ErrClosed), true},
		{errors.New("write: no space left on device"), true},
	} {
		if got := memory.IsFailure(tt.err); got != tt.want {
			t.Errorf("IsFailure(%v) = %v, want %v", tt.err, got, tt.want)
		}
	}
}

// TestFailureLogOncePerInterval: a burst of failures writes one line,
// and the next line after the interval counts what it skipped.
func TestFailureLogOncePerInterval(t *testing.T) {
	var buf bytes.Buffer
	var mu sync.Mutex
	f := &memory.FailureLog{Log: slog.New(slog.NewTextHandler(lockedWriter{&mu, &buf}, nil)), Every: time.Hour}
	var wg sync.WaitGroup
	for range 100 {
		wg.Go(func() { f.Failed("commit", errors.New("disk full")) })
	}
	wg.Wait()
	mu.Lock()
	out := buf.String()
	mu.Unlock()
	if n := strings.Count(out, "history store failing"); n != 1 {
		t.Fatalf("%d lines for 100 failures within the interval, want 1:\n%s", n, out)
	}
	if !strings.Contains(out, "failures=1 ") || !strings.Contains(out, "disk full") {
		t.Errorf("first line = %q", out)
	}

	now := time.Now()
	g := &memory.FailureLog{Log: f.Log, Every: time.Minute, Now: func() time.Time { return now }}
	g.Failed("commit", errors.New("a"))
	g.Failed("commit", errors.New("b"))
	g.Failed("commit", errors.New("c"))
	now = now.Add(time.Minute)
	g.Failed("mark_published", errors.New("d"))
	mu.Lock()
	defer mu.Unlock()
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 3 || !strings.Contains(lines[2], "failures=3 ") || !strings.Contains(lines[2], "op=mark_published") {
		t.Errorf("after the interval: %q; want a third line counting the 3 failures since the last", lines)
	}
}

type lockedWriter struct {
	mu *sync.Mutex
	w  *bytes.Buffer
}

func (l lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

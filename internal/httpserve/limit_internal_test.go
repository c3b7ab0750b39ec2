package httpserve

import (
	"log/slog"
	"strings"
	"testing"

	"github.com/switchboard-chat/switchboard/internal/syncbuf"
)

// TestWithinLimit: max_conns above a sixteenth of the open-file limit is
// lowered to it, with a warning; below it, or with the limit unknown,
// nothing changes.
func TestWithinLimit(t *testing.T) {
	var logs syncbuf.Buffer
	log := slog.New(slog.NewTextHandler(&logs, nil))
	cfg := DefaultConfig()
	if got := withinLimit(cfg, 1<<20, log); got != cfg {
		t.Errorf("limit 1 Mi: %+v, want the config unchanged", got)
	}
	if got := withinLimit(cfg, 0, log); got != cfg {
		t.Errorf("unknown limit: %+v, want the config unchanged", got)
	}
	if logs.String() != "" {
		t.Errorf("logged without lowering: %s", logs.String())
	}
	got := withinLimit(cfg, 1024, log)
	if got.MaxConns != 64 || got.MaxConnsPerIP != 64 {
		t.Errorf("limit 1024: max_conns %d, max_conns_per_ip %d, want 64 and 64", got.MaxConns, got.MaxConnsPerIP)
	}
	if !strings.Contains(logs.String(), "http.max_conns lowered") || !strings.Contains(logs.String(), "open_file_limit=1024") {
		t.Errorf("no warning naming the limit: %s", logs.String())
	}
	if got := withinLimit(cfg, 64, log); got.MaxConns != minClampedConns {
		t.Errorf("limit 64: max_conns %d, want %d", got.MaxConns, minClampedConns)
	}
}

package logging

import (
	"bytes"
	"log/slog"
	"testing"
	"time"
)

// TestWithWritesWhatLoggerWithWrites: the same lines as slog's own With,
// for both handlers, with more attributes, groups and levels after it.
func TestWithWritesWhatLoggerWithWrites(t *testing.T) {
	attrs := []slog.Attr{slog.String("channel", "wechat"), slog.String("session", "wechat/room <1>"),
		slog.String("msg_id", "m&1"), slog.Int64("turn", 7)}
	args := []any{attrs[0], attrs[1], attrs[2], attrs[3]}
	use := func(log *slog.Logger) {
		log.Info("turn done", "stop_reason", "end", "steps", 2, "tokens", 300)
		log.Debug("hidden")
		log.With("more", 1).Warn("with more", "k", "v")
		log.WithGroup("g").With("in", true).Error("grouped", "x", 1.5)
		log.LogAttrs(t.Context(), slog.LevelInfo, "attrs", slog.Int("a", 1), slog.Group("grp", slog.String("b", "c")))
		log.Info("many", "a", 1, "b", 2, "c", 3, "d", 4, "e", 5, "f", 6)
	}
	at := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	fixTime := func(_ []string, a slog.Attr) slog.Attr {
		if a.Key == slog.TimeKey {
			a.Value = slog.TimeValue(at)
		}
		return a
	}
	for _, format := range []string{"text", "json"} {
		var want, got bytes.Buffer
		newLog := func(buf *bytes.Buffer) *slog.Logger {
			opts := &slog.HandlerOptions{Level: slog.LevelInfo, ReplaceAttr: fixTime, AddSource: true}
			if format == "json" {
				return slog.New(slog.NewJSONHandler(buf, opts))
			}
			return slog.New(slog.NewTextHandler(buf, opts))
		}
		use(newLog(&want).With(args...))
		use(With(newLog(&got), attrs...))
		if got.String() != want.String() {
			t.Errorf("%s:\n%s\nwant\n%s", format, got.String(), want.String())
		}
	}
}

// TestWithAllocations: a turn's logger costs a few allocations, not the
// handler's formatting of its attributes.
func TestWithAllocations(t *testing.T) {
	var buf bytes.Buffer
	log := slog.New(slog.NewTextHandler(&buf, nil))
	n := testing.AllocsPerRun(100, func() {
		_ = With(log, slog.String("channel", "wechat"), slog.String("session", "wechat/room"), slog.String("msg_id", "m1"), slog.Int64("turn", 7))
	})
	if n > 3 {
		t.Errorf("With: %.0f allocations, want at most 3", n)
	}
	before := testing.AllocsPerRun(100, func() {
		_ = log.With("channel", "wechat", "session", "wechat/room", "msg_id", "m1", "turn", int64(7000))
	})
	t.Logf("With: %.0f allocations; slog.Logger.With: %.0f", n, before)
}

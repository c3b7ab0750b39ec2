package natsbus

import (
	"context"
	"fmt"
	"log/slog"
)

// serverLog routes the embedded nats-server's log to slog: notices, debug
// and trace at Debug, warnings at Warn, errors and fatals at Error (a fatal
// never exits the process).
type serverLog struct{ log *slog.Logger }

func (l serverLog) logf(level slog.Level, format string, v []any) {
	if !l.log.Enabled(context.Background(), level) {
		return
	}
	l.log.Log(context.Background(), level, fmt.Sprintf(format, v...))
}

func (l serverLog) Noticef(format string, v ...any) { l.logf(slog.LevelDebug, format, v) }
func (l serverLog) Warnf(format string, v ...any)   { l.logf(slog.LevelWarn, format, v) }
func (l serverLog) Fatalf(format string, v ...any)  { l.logf(slog.LevelError, format, v) }
func (l serverLog) Errorf(format string, v ...any)  { l.logf(slog.LevelError, format, v) }
func (l serverLog) Debugf(format string, v ...any)  { l.logf(slog.LevelDebug, format, v) }
func (l serverLog) Tracef(format string, v ...any)  { l.logf(slog.LevelDebug, format, v) }

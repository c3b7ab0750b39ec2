package natsbus

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"

	"github.com/nats-io/nats-server/v2/server"
)

// serverLog routes the embedded nats-server's log to slog: notices, debug
// and trace at Debug, warnings at Warn, errors and fatals at Error (a fatal
// never exits the process). The server's line for a failed login is left
// out: it names the user the client sent, which may be a secret typed in
// the wrong field; the authenticator logs failed logins without it
// ([loginGuard]).
type serverLog struct{ log *slog.Logger }

func (l serverLog) logf(level slog.Level, format string, v []any) {
	if !l.log.Enabled(context.Background(), level) {
		return
	}
	l.log.Log(context.Background(), level, fmt.Sprintf(format, v...))
}

// authFailure reports whether a server log line is its report of a failed
// login ("<client> - authentication error - User \"...\"").
func authFailure(format string, v []any) bool {
	if strings.HasSuffix(format, server.ErrAuthentication.Error()) {
		return true
	}
	for _, a := range v {
		if err, ok := a.(error); ok && errors.Is(err, server.ErrAuthentication) {
			return true
		}
	}
	return false
}

func (l serverLog) Noticef(format string, v ...any) { l.logf(slog.LevelDebug, format, v) }
func (l serverLog) Warnf(format string, v ...any)   { l.logf(slog.LevelWarn, format, v) }
func (l serverLog) Fatalf(format string, v ...any)  { l.logf(slog.LevelError, format, v) }
func (l serverLog) Debugf(format string, v ...any)  { l.logf(slog.LevelDebug, format, v) }
func (l serverLog) Tracef(format string, v ...any)  { l.logf(slog.LevelDebug, format, v) }

func (l serverLog) Errorf(format string, v ...any) {
	if authFailure(format, v) {
		return
	}
	l.logf(slog.LevelError, format, v)
}

// Package logging builds the process logger from its configuration (YAML
// section "log"): log/slog with the text (logfmt-style key=value) or JSON
// handler at the configured level, and With, a logger with attributes for
// one unit of work that costs nothing to format until it logs. Every
// component receives the logger it is given; nothing here is global.
package logging

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
)

// Config configures the process logger (YAML section "log").
type Config struct {
	// Level is the lowest level logged: debug, info, warn or error.
	Level string `yaml:"level"`
	// Format is text (logfmt-style key=value) or json.
	Format string `yaml:"format"`
}

// DefaultConfig is info level, text format.
func DefaultConfig() Config { return Config{Level: "info", Format: "text"} }

// Validate reports every problem, each naming its key.
func (c Config) Validate() error {
	var errs []error
	if _, ok := levels[c.Level]; !ok {
		errs = append(errs, fmt.Errorf("log.level: must be one of debug, info, warn, error, got %q", c.Level))
	}
	if c.Format != "text" && c.Format != "json" {
		errs = append(errs, fmt.Errorf("log.format: must be text or json, got %q", c.Format))
	}
	return errors.Join(errs...)
}

var levels = map[string]slog.Level{"debug": slog.LevelDebug, "info": slog.LevelInfo, "warn": slog.LevelWarn, "error": slog.LevelError}

// New returns the logger writing to w in c's level (info when unknown) and
// format. A nil w discards.
func (c Config) New(w io.Writer) *slog.Logger {
	if w == nil {
		return slog.New(slog.DiscardHandler)
	}
	opts := &slog.HandlerOptions{Level: levels[c.Level]}
	if c.Format == "json" {
		return slog.New(slog.NewJSONHandler(w, opts))
	}
	return slog.New(slog.NewTextHandler(w, opts))
}

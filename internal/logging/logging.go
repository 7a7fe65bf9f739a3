// Package logging builds the log/slog logger of sweep's commands from their
// --log-format and --log-level flags.
package logging

import (
	"fmt"
	"io"
	"log/slog"
)

// New returns a logger writing to w in format ("text" or "json") at level
// ("debug", "info", "warn" or "error").
func New(w io.Writer, format, level string) (*slog.Logger, error) {
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("invalid --log-level %q: %w", level, err)
	}
	opts := &slog.HandlerOptions{Level: lvl}
	switch format {
	case "text":
		return slog.New(slog.NewTextHandler(w, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	default:
		return nil, fmt.Errorf("invalid --log-format %q: want text or json", format)
	}
}

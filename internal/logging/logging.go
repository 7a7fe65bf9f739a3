// Package logging builds the log/slog logger of sweep's commands from their
// --log-format and --log-level flags, and routes client-go's klog output
// into it.
package logging

import (
	"context"
	"fmt"
	"io"
	"log/slog"

	"k8s.io/klog/v2"
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

// Setup returns New's logger and makes klog, which client-go logs through
// ("Failed to watch", API server warnings), write to the same handler:
// otherwise those lines are klog's plain text in the middle of JSON logs,
// exactly when the API server flaps. klog is process-wide, so a command
// calls Setup once, before it makes clients. klog keeps its own verbosity
// (0): client-go's warnings and errors come through, not its V(n) detail;
// klog's warnings arrive at level INFO, as logr has no warning level.
func Setup(w io.Writer, format, level string) (*slog.Logger, error) {
	logger, err := New(w, format, level)
	if err != nil {
		return nil, err
	}
	klog.SetSlogLogger(slog.New(errorKey{logger.Handler()}))
	return logger, nil
}

// errorKey renames the "err" attribute, which logr gives a klog error, to
// "error", the key sweep's own logs use for errors: one vocabulary for a
// query over a daemon's logs.
type errorKey struct{ slog.Handler }

func (h errorKey) Handle(ctx context.Context, r slog.Record) error {
	renamed := false
	r.Attrs(func(a slog.Attr) bool {
		renamed = renamed || a.Key == "err"
		return !renamed
	})
	if !renamed {
		return h.Handler.Handle(ctx, r)
	}
	out := slog.NewRecord(r.Time, r.Level, r.Message, r.PC)
	r.Attrs(func(a slog.Attr) bool {
		if a.Key == "err" {
			a.Key = "error"
		}
		out.AddAttrs(a)
		return true
	})
	return h.Handler.Handle(ctx, out)
}

func (h errorKey) WithAttrs(attrs []slog.Attr) slog.Handler {
	for i, a := range attrs {
		if a.Key == "err" {
			attrs = append([]slog.Attr(nil), attrs...)
			attrs[i].Key = "error"
		}
	}
	return errorKey{h.Handler.WithAttrs(attrs)}
}

func (h errorKey) WithGroup(name string) slog.Handler {
	return errorKey{h.Handler.WithGroup(name)}
}

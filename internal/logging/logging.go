// Package logging builds the log/slog logger of sweep's commands from their
// --log-format and --log-level flags, and routes client-go's klog output
// into it.
package logging

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"
)

// New returns a logger writing to w in format ("text" or "json") at level
// ("debug", "info", "warn" or "error").
func New(w io.Writer, format, level string) (*slog.Logger, error) {
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("invalid --log-level %q: %w", level, err)
	}
	opts := &slog.HandlerOptions{Level: lvl, ReplaceAttr: durationString}
	switch format {
	case "text":
		return slog.New(slog.NewTextHandler(w, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	default:
		return nil, fmt.Errorf("invalid --log-format %q: want text or json", format)
	}
}

// durationString writes a time.Duration as its String ("30s"), as the text
// handler does by itself: the JSON handler's default is nanoseconds
// ("deleted_pod_grace":30000000000), which nobody reads at a glance, and
// the same key would then hold "30s" in one format and a number in the
// other.
func durationString(_ []string, a slog.Attr) slog.Attr {
	if a.Value.Kind() == slog.KindDuration {
		a.Value = slog.StringValue(a.Value.Duration().String())
	}
	return a
}

// Setup returns New's logger and makes klog, which client-go logs through
// ("Failed to watch", API server warnings), write to the same handler:
// otherwise those lines are klog's plain text in the middle of JSON logs,
// exactly when the API server flaps. klog is process-wide, so a command
// calls Setup once, before it makes clients. klog keeps its own verbosity
// (0): client-go's warnings and errors come through, not its V(n) detail.
//
// Levels follow klog's severities: klog's warnings (klog.Warning, which
// logr alone would pass on as INFO, having no warning level) are WARN, and
// so are the API server's warnings (the Warning header, which client-go's
// default handler logs at INFO): Setup makes the handler of every rest.Config
// that sets none its own. The feature-gate lines client-go logs once at
// V(1) are dropped: ten lines of defaults at the top of every debug run.
func Setup(w io.Writer, format, level string) (*slog.Logger, error) {
	logger, err := New(w, format, level)
	if err != nil {
		return nil, err
	}
	h := klogHandler{Handler: errorKey{logger.Handler()}, limit: newRepeatLimit(klogRepeatEvery, time.Now)}
	klog.SetLoggerWithOptions(logr.FromSlogHandler(h), klog.ContextualLogger(true),
		klog.WriteKlogBuffer(func(data []byte) { writeKlogLine(h, data) }))
	rest.SetDefaultWarningHandlerWithContext(apiWarnings{logger})
	return logger, nil
}

// writeKlogLine logs a line of klog's unstructured API (klog.Warning,
// klog.Errorf): klog gives it with its text header, whose first letter is
// the only place that says its severity.
func writeKlogLine(h slog.Handler, data []byte) {
	lvl, msg := parseKlogLine(data)
	ctx := context.Background()
	if !h.Enabled(ctx, lvl) {
		return
	}
	_ = h.Handle(ctx, slog.NewRecord(time.Now(), lvl, msg, 0))
}

// parseKlogLine splits a klog text line, "W0301 14:32:05.123456   42
// file.go:12] message", into its level and message. A line without the
// header is logged whole at INFO.
func parseKlogLine(data []byte) (slog.Level, string) {
	line := strings.TrimSuffix(string(data), "\n")
	if len(line) < 6 || line[5] != ' ' || strings.Trim(line[1:5], "0123456789") != "" {
		return slog.LevelInfo, line
	}
	end := strings.Index(line, "] ")
	if end < 0 {
		return slog.LevelInfo, line
	}
	lvl := slog.LevelInfo
	switch line[0] {
	case 'I':
	case 'W':
		lvl = slog.LevelWarn
	case 'E', 'F':
		lvl = slog.LevelError
	default:
		return slog.LevelInfo, line
	}
	return lvl, line[end+2:]
}

// apiWarnings logs the API server's warnings (deprecated APIs, admission
// warnings) at WARN, as kubectl shows them as "Warning:" lines.
type apiWarnings struct{ log *slog.Logger }

// HandleWarningHeaderWithContext logs a warning header; like client-go's
// default it ignores all but code 299.
func (a apiWarnings) HandleWarningHeaderWithContext(ctx context.Context, code int, _ string, message string) {
	if code != 299 || message == "" {
		return
	}
	a.log.WarnContext(ctx, "api server warning", "warning", message)
}

// klogHandler is the handler klog writes to: the command's, with errorKey's
// renaming, without the feature-gate noise, and with client-go's repeated
// warnings and errors limited (repeatLimit).
type klogHandler struct {
	slog.Handler
	limit *repeatLimit // shared by the handlers WithAttrs and WithGroup derive
}

// klogRepeatEvery is how often one warning or error of client-go's is
// logged while it repeats: a reflector whose watch fails retries within a
// second or two, and logs each retry at ERROR ("Failed to watch"); on 500
// nodes in an API server outage, that floods an error dashboard with the
// one fact each daemon's own WARN already said.
const klogRepeatEvery = 30 * time.Second

// repeatLimit lets one record of each level and message through per
// interval, and counts the rest; the next one through says how many were
// suppressed. Its keys are client-go's messages, a fixed set.
type repeatLimit struct {
	every time.Duration
	now   func() time.Time
	mu    sync.Mutex
	seen  map[string]*repeats
}

type repeats struct {
	last       time.Time
	suppressed int
}

func newRepeatLimit(every time.Duration, now func() time.Time) *repeatLimit {
	return &repeatLimit{every: every, now: now, seen: map[string]*repeats{}}
}

// allow reports whether r may be logged, and how many like it were
// suppressed since the last that was.
func (l *repeatLimit) allow(r slog.Record) (bool, int) {
	key := r.Level.String() + " " + r.Message
	now := l.now()
	l.mu.Lock()
	defer l.mu.Unlock()
	e, ok := l.seen[key]
	if !ok {
		l.seen[key] = &repeats{last: now}
		return true, 0
	}
	if now.Sub(e.last) < l.every {
		e.suppressed++
		return false, 0
	}
	n := e.suppressed
	e.last, e.suppressed = now, 0
	return true, n
}

// featureGateDefault is what client-go's feature gates log, once per gate,
// when they first read their environment: each gate's default, at V(1).
const featureGateDefault = "Feature gate default state"

func (h klogHandler) Handle(ctx context.Context, r slog.Record) error {
	if r.Message == featureGateDefault {
		return nil
	}
	if r.Level < slog.LevelInfo {
		// logr's V(n) arrives as level -n: DEBUG+3 for V(1), DEBUG-2 for
		// V(6). Those say nothing to an operator; all verbose klog lines
		// are DEBUG, and --log-level=debug shows them up to V(4).
		r.Level = slog.LevelDebug
	}
	if r.Level >= slog.LevelWarn && h.limit != nil {
		ok, suppressed := h.limit.allow(r)
		if !ok {
			return nil
		}
		if suppressed > 0 {
			r = r.Clone()
			r.AddAttrs(slog.Int("suppressed", suppressed))
		}
	}
	return h.Handler.Handle(ctx, r)
}

func (h klogHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	return klogHandler{Handler: h.Handler.WithAttrs(attrs), limit: h.limit}
}

func (h klogHandler) WithGroup(name string) slog.Handler {
	return klogHandler{Handler: h.Handler.WithGroup(name), limit: h.limit}
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

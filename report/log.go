package report

import (
	"context"
	"log/slog"
)

// Log says what each scheduled run became in the daemon's log, with its
// summary's attributes (prune.Summary.LogAttrs): "prune done", or why it
// was skipped or stopped, at WARN where nothing (more) was deleted. A
// targeted run is the check of deleted pods', which logs its own.
type Log struct{ log *slog.Logger }

// NewLog logs to log.
func NewLog(log *slog.Logger) Log { return Log{log: log} }

// Report implements Reporter.
func (l Log) Report(_ context.Context, r Run) {
	if r.Kind != Scheduled {
		return
	}
	if r.Result.BootRecordErr != nil {
		l.log.Warn("cannot write the boot record; reboot-aware staleness will know fewer sandboxes after the next reboot",
			"error", r.Result.BootRecordErr)
	}
	if !r.Started() {
		switch r.Skip {
		case SkipStillRunning:
			l.log.Warn("prune skipped: the previous run is still in progress")
		case SkipPaused:
			l.log.Info("prune skipped: paused; it runs when the pause is lifted", "pause", r.Why)
		case SkipNodeUnproven, SkipRuntimeUnproven:
			l.log.Warn("prune skipped: nothing deleted", "error", r.Err)
		case SkipNotSynced:
			l.log.Warn("prune skipped: no fresh view of the node's pods; nothing deleted", "error", r.Err)
		case SkipCRIUnavailable:
			l.log.Warn("prune skipped: no list of sandboxes from the container runtime; nothing deleted", "error", r.Err)
		default:
			l.log.Error("prune skipped", "error", r.Err)
		}
		return
	}
	attrs := r.Summary.LogAttrs()
	switch {
	case r.Skip == SkipPaused:
		l.log.Warn("prune stopped: paused; nothing more deleted, the rest runs when the pause is lifted", append(attrs, "pause", r.Why)...)
	case r.Skip == SkipNotSynced:
		l.log.Warn("prune stopped: a view went stale or stopped being proven; nothing more deleted", append(attrs, "error", r.Why)...)
	case r.Err != nil:
		l.log.Error("prune stopped", append(attrs, "error", r.Err)...)
	default:
		l.log.Info("prune done", attrs...)
	}
}

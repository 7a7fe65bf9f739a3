// Package report turns what a prune run of the daemon became into what
// operators look at, each sink by a reporter of its own, as
// node-problem-detector hands its monitors' problems to its exporters: the
// metrics (Metrics), the Node's Normal Events (Events), its Warning Events
// and condition (Problems, with Condition), and the log lines (Log). The
// journal of removals (package journal) and the gauges of the ranges and of
// Whereabouts (package ranges) report themselves the same way. The daemon
// starts runs and hands each outcome, one Run, to its Reporters: a new sink
// is one Reporter and one line where the daemon builds them.
package report

import (
	"context"
	"errors"

	"github.com/sweep-k8s/sweep/liveness"
	"github.com/sweep-k8s/sweep/prune"
)

// Kind is what started a run.
type Kind string

const (
	// Scheduled: the schedule, the start, or a lifted pause.
	Scheduled Kind = "scheduled"
	// Targeted: a check of deleted pods (package deleted), over their
	// files alone.
	Targeted Kind = "targeted"
)

// Skip is why a run did not start, or stopped before its end, without
// failing: a closed set, the label of sweep_prune_skipped_runs_total.
type Skip string

const (
	// SkipNotSynced: no fresh view of the node's pods, or a view went
	// stale during the run.
	SkipNotSynced Skip = "not-synced"
	// SkipStillRunning: the previous run had not finished.
	SkipStillRunning Skip = "still-running"
	// SkipCRIUnavailable: no list of sandboxes from the container runtime.
	SkipCRIUnavailable Skip = "cri-unavailable"
	// SkipNodeUnproven, SkipRuntimeUnproven: the views could not prove
	// they are this node's (liveness.ErrNodeUnproven,
	// liveness.ErrRuntimeUnproven).
	SkipNodeUnproven    Skip = "node-unproven"
	SkipRuntimeUnproven Skip = "runtime-unproven"
	// SkipPaused: a pause (--pause, the Node's annotation) kept it from
	// starting or stopped it.
	SkipPaused Skip = "paused"
)

// Skips lists every Skip.
func Skips() []Skip {
	return []Skip{SkipNotSynced, SkipStillRunning, SkipCRIUnavailable, SkipNodeUnproven, SkipRuntimeUnproven, SkipPaused}
}

// Run is what one prune run became: the one value every reporter takes.
type Run struct {
	Kind Kind
	// Summary is what the run did; nil when it did not start.
	Summary *prune.Summary
	// Result is what the cycle found beside the summary (the runtime's
	// sandboxes, the boot record's write).
	Result prune.CycleResult
	// Err is the error the run stopped with, or that kept it from
	// starting; with Skip set it is the skip's cause.
	Err error
	// Skip is set when the run did not start, or stopped early, for one
	// of the closed set of reasons that are no failure of the run.
	Skip Skip
	// Why is the detail of a skip the log says: the pause in force, the
	// view that went stale.
	Why string
}

// NewRun classifies what prune.Cycle returned for a run of kind.
func NewRun(kind Kind, sum *prune.Summary, res prune.CycleResult, err error) Run {
	r := Run{Kind: kind, Summary: sum, Result: res, Err: err}
	switch {
	case err == nil:
	case errors.Is(err, liveness.ErrNodeUnproven):
		r.Skip = SkipNodeUnproven
	case errors.Is(err, liveness.ErrRuntimeUnproven):
		r.Skip = SkipRuntimeUnproven
	case sum == nil && errors.Is(err, prune.ErrPodsUnavailable):
		r.Skip = SkipNotSynced
	case sum == nil && errors.Is(err, prune.ErrSandboxesUnavailable):
		r.Skip = SkipCRIUnavailable
	case errors.Is(err, prune.ErrPaused):
		r.Skip = SkipPaused
	case errors.Is(err, prune.ErrNotSynced):
		r.Skip = SkipNotSynced
	}
	return r
}

// Started reports whether the run got as far as its files.
func (r Run) Started() bool { return r.Summary != nil }

// Failed reports whether the run failed: it stopped with an error that is
// no skip.
func (r Run) Failed() bool { return r.Err != nil && r.Skip == "" }

// Completed reports whether the run went through every file without error
// of its own (some files may still have failed: Summary.Errors).
func (r Run) Completed() bool { return r.Summary != nil && r.Err == nil }

// Unproven reports whether the views were not proven to be this node's.
func (r Run) Unproven() bool { return r.Skip == SkipNodeUnproven || r.Skip == SkipRuntimeUnproven }

// Reporter makes one sink of what a run became.
type Reporter interface {
	// Report takes one run's outcome. The runs that start are reported
	// one at a time, in the order they end; one that did not start (a
	// skip, still-running above all) may be reported while another runs.
	Report(ctx context.Context, r Run)
}

// Reporters are the daemon's reporters, in the order they report.
type Reporters []Reporter

// Report hands r to each reporter.
func (rs Reporters) Report(ctx context.Context, r Run) {
	for _, rep := range rs {
		rep.Report(ctx, r)
	}
}

// Skipped is a run of kind that did not start, for skip (why: its detail).
func Skipped(kind Kind, skip Skip, why string) Run {
	return Run{Kind: kind, Skip: skip, Why: why, Result: prune.CycleResult{Sandboxes: -1}}
}

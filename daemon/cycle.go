package daemon

import (
	"context"
	"errors"
	"runtime/debug"
	"time"

	"github.com/robfig/cron/v3"

	"github.com/sweep-k8s/sweep/deleted"
	"github.com/sweep-k8s/sweep/internal/exepages"
	"github.com/sweep-k8s/sweep/prune"
	"github.com/sweep-k8s/sweep/report"
)

// cycle is one scheduled prune (the schedule's, the start's, or a lifted
// pause's): skipped unless every view is fresh and no other run is in
// progress.
func (d *Daemon) cycle(ctx context.Context) {
	if !d.running.TryLock() {
		if !d.checking.Load() {
			d.reporters.Report(ctx, report.Skipped(report.Scheduled, report.SkipStillRunning, ""))
			return
		}
		// A check of deleted pods is short: wait for it rather than skip
		// the scheduled run for a whole interval.
		d.running.Lock()
	}
	defer d.running.Unlock()
	if why := d.notePause(ctx, nil); why != "" {
		d.holdUp()
		d.reporters.Report(ctx, report.Skipped(report.Scheduled, report.SkipPaused, why))
		return
	}
	opts := prune.Options{Config: d.pruneConfig(ctx), Deps: d.deps}
	if opts.Release != nil {
		opts.ReleaseUntil = releaseUntil(d.schedule, time.Now())
	}
	// What it became is the reporters'.
	_, _ = d.run(ctx, report.Scheduled, opts)
}

// run is every prune run of the daemon, scheduled or targeted: it runs the
// cycle and hands what it became to the reporters (metrics, log, the
// Node's Events and condition, the journal, the ranges' gauges). The caller
// holds running.
func (d *Daemon) run(ctx context.Context, kind report.Kind, opts prune.Options) (*prune.Summary, error) {
	defer d.returnMemory()
	sum, res, err := prune.Cycle(ctx, d.sources, opts)
	if sum == nil && ctx.Err() != nil {
		return nil, err // stopping: nothing to report
	}
	r := report.NewRun(kind, sum, res, err)
	switch {
	case r.Skip == report.SkipPaused:
		r.Why = d.pauseReason()
		if kind == report.Scheduled {
			d.holdUp()
		}
	case r.Skip == report.SkipNotSynced && r.Started():
		r.Why = d.staleReason().Error()
	}
	if kind == report.Scheduled && (r.Started() || r.Unproven()) {
		// The run proved the views, or failed to.
		if r.Unproven() {
			d.setProven(err)
		} else {
			d.setProven(nil)
		}
	}
	d.reporters.Report(ctx, r)
	return sum, err
}

// maxCheckReleases bounds the time in which a check of deleted pods starts
// CNI DELs (prune.Options.ReleaseUntil): they wait for the pace and for
// pods being bound (--cni-del-yield), on a busy node for long, and a
// scheduled run waits for the check. What is not started by then is kept
// (cni-del-deferred) and checked again.
const maxCheckReleases = time.Minute

// checkPruner runs the targeted runs of the check of deleted pods
// (deleted.Pruner) with the daemon's configuration, views and lock.
type checkPruner struct{ d *Daemon }

// PruneTargets runs a targeted prune unless the node is paused or another
// run holds the caches. A scheduled run that finds it running waits for it
// (cycle).
func (p checkPruner) PruneTargets(ctx context.Context, uids map[string]struct{}) (*prune.Summary, error) {
	d := p.d
	if d.paused() {
		return nil, prune.ErrPaused
	}
	// Set before the lock is taken and cleared after it is let go, so that
	// a scheduled run that finds the lock taken by a check always knows it.
	d.checking.Store(true)
	if !d.running.TryLock() {
		d.checking.Store(false)
		return nil, deleted.ErrBusy
	}
	defer func() {
		d.running.Unlock()
		d.checking.Store(false)
	}()
	opts := prune.Options{Config: d.pruneConfig(ctx), Deps: d.deps, Targets: &prune.Targets{UIDs: uids},
		ReleaseUntil: time.Now().Add(maxCheckReleases)}
	return d.run(ctx, report.Targeted, opts)
}

// returnMemory gives what a run freed back to the kernel at once. The
// daemon idles between runs, an hour at the chart's schedule, and Go's
// scavenger returns freed memory only gradually and keeps a margin over the
// heap's goal: the node would see each run's peak as the daemon's size
// (docs/measurements.md, "The daemon over a day"). One forced collection a
// run costs a few milliseconds. The binary's pages that start-up and the
// run mapped are unmapped too (package exepages): they were most of the
// daemon's resident memory, and what it touches while it idles is mapped
// again as it runs.
func (d *Daemon) returnMemory() {
	debug.FreeOSMemory()
	n, err := exepages.Release()
	if err != nil {
		// Nothing depends on it: the pages stay mapped, as before.
		d.log.Debug("binary's pages not unmapped", "error", err)
		return
	}
	d.log.Debug("binary's pages unmapped", "bytes", n)
}

// releaseUntil is when a run started at now stops starting CNI DELs: before
// the next scheduled run, by a tenth of the time to it (at most a minute),
// which leaves the run time to finish its DELs and its scan. A paced drain
// then goes on run after run, each picking up where the last stopped (the
// files released are gone), and the runs never overlap.
func releaseUntil(sched cron.Schedule, now time.Time) time.Time {
	next := sched.Next(now)
	return next.Add(-min(next.Sub(now)/10, time.Minute))
}

// staleReason says why a run stopped for a view that went stale.
func (d *Daemon) staleReason() error {
	if err := d.views.Unheld(); err != nil {
		return err
	}
	return errors.New("a view went stale during the run, and is fresh again")
}

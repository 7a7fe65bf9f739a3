package daemon

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"time"

	"github.com/robfig/cron/v3"

	"github.com/sweep-k8s/sweep/deleted"
	"github.com/sweep-k8s/sweep/liveness"
	"github.com/sweep-k8s/sweep/prune"
)

// cycle is one scheduled prune: skipped unless every view is fresh and no
// other run is in progress.
func (d *Daemon) cycle(ctx context.Context) {
	if !d.running.TryLock() {
		if !d.checking.Load() {
			d.metrics.skipped.WithLabelValues(skipStillRunning).Inc()
			d.log.Warn("prune skipped: the previous run is still in progress")
			return
		}
		// A check of deleted pods is short: wait for it rather than skip
		// the scheduled run for a whole interval.
		d.running.Lock()
	}
	defer d.running.Unlock()
	defer returnMemory()
	// What the run released shows in the ranges at once.
	defer d.refreshRanges(ctx)
	if why := d.notePause(ctx, nil); why != "" {
		d.holdUp()
		d.metrics.skipped.WithLabelValues(skipPaused).Inc()
		d.log.Info("prune skipped: paused; it runs when the pause is lifted", "pause", why)
		return
	}
	opts := prune.Options{Config: d.pruneConfig(), Deps: d.deps}
	if opts.Release != nil {
		opts.ReleaseUntil = releaseUntil(d.schedule, time.Now())
	}
	var live liveFiles
	opts.OnFile = live.collect(opts.OnFile)
	sum, res, err := prune.Cycle(ctx, d.sources, opts)
	if sum != nil && err == nil {
		// A complete run saw every live pod's results file.
		d.whereabouts.set(live.whereabouts())
	}
	if res.Sandboxes >= 0 {
		d.metrics.sandboxes.Set(float64(res.Sandboxes))
	}
	if res.BootRecordErr != nil {
		d.metrics.bootErrors.Inc()
		d.log.Warn("cannot write the boot record; reboot-aware staleness will know fewer sandboxes after the next reboot",
			"error", res.BootRecordErr)
	}
	if sum == nil {
		switch {
		case ctx.Err() != nil:
		case errors.Is(err, liveness.ErrNodeUnproven):
			d.metrics.skipped.WithLabelValues(skipNodeUnproven).Inc()
			d.setProven(err)
			d.log.Warn("prune skipped: nothing deleted", "error", err)
			d.warnNode(ctx, warnUnproven, "prune skipped, nothing deleted: "+err.Error())
		case errors.Is(err, liveness.ErrRuntimeUnproven):
			d.metrics.skipped.WithLabelValues(skipRuntimeUnproven).Inc()
			d.setProven(err)
			d.log.Warn("prune skipped: nothing deleted", "error", err)
			d.warnNode(ctx, warnUnproven, "prune skipped, nothing deleted: "+err.Error())
		case errors.Is(err, prune.ErrPodsUnavailable):
			d.metrics.skipped.WithLabelValues(skipNotSynced).Inc()
			d.log.Warn("prune skipped: no fresh view of the node's pods; nothing deleted", "error", err)
			d.warnNode(ctx, warnNoView, "prune skipped, nothing deleted: no fresh view of the node's pods: "+err.Error())
		case errors.Is(err, prune.ErrSandboxesUnavailable):
			d.metrics.skipped.WithLabelValues(skipCRIUnavailable).Inc()
			d.log.Warn("prune skipped: no list of sandboxes from the container runtime; nothing deleted", "error", err)
			d.warnNode(ctx, warnNoView, "prune skipped, nothing deleted: no list of sandboxes from the container runtime: "+err.Error())
		default:
			d.log.Error("prune skipped", "error", err)
			d.noteFailure(ctx, err)
		}
		return
	}
	d.setProven(nil)
	d.metrics.runs.Inc()
	d.metrics.observe(sum, err)
	d.afterRun(ctx, sum)
	attrs := sum.LogAttrs()
	switch {
	case errors.Is(err, prune.ErrPaused):
		d.holdUp()
		d.metrics.skipped.WithLabelValues(skipPaused).Inc()
		d.log.Warn("prune stopped: paused; nothing more deleted, the rest runs when the pause is lifted", append(attrs, "pause", d.pauseReason())...)
	case errors.Is(err, prune.ErrNotSynced):
		d.metrics.skipped.WithLabelValues(skipNotSynced).Inc()
		d.log.Warn("prune stopped: a view went stale or stopped being proven; nothing more deleted", append(attrs, "error", d.staleReason())...)
	case err != nil:
		d.log.Error("prune stopped", append(attrs, "error", err)...)
		d.noteFailure(ctx, err)
	default:
		d.failStreak = 0
		if d.condition != nil {
			d.condition.set(ctx, false, conditionHealthy, "the last prune run completed")
		}
		d.log.Info("prune done", attrs...)
	}
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
		returnMemory()
		d.running.Unlock()
		d.checking.Store(false)
	}()
	opts := prune.Options{Config: d.pruneConfig(), Deps: d.deps, Targets: &prune.Targets{UIDs: uids},
		ReleaseUntil: time.Now().Add(maxCheckReleases)}
	sum, _, err := prune.Cycle(ctx, d.sources, opts)
	if sum == nil {
		return nil, err
	}
	d.metrics.count(sum)
	d.afterRun(ctx, sum)
	// What the check released shows in the ranges at once.
	d.refreshRanges(ctx)
	return sum, err
}

// returnMemory gives what a run freed back to the kernel at once. The
// daemon idles between runs, an hour at the chart's schedule, and Go's
// scavenger returns freed memory only gradually and keeps a margin over the
// heap's goal: the node would see each run's peak as the daemon's size
// (docs/measurements.md, "The daemon over a day"). One forced collection a
// run costs a few milliseconds.
func returnMemory() { debug.FreeOSMemory() }

// warnNode posts a Warning Event on the Node (nodeEvents.warn), where the
// daemon posts Events at all (not with cri liveness: no API client).
func (d *Daemon) warnNode(ctx context.Context, reason, note string) {
	if d.events != nil {
		d.events.warn(ctx, reason, note)
	}
	if d.condition != nil {
		d.condition.set(ctx, true, reason, note)
	}
}

// noteFailure counts a failed run; warnFailStreak of them in a row are a
// Warning on the Node. The caller holds running.
func (d *Daemon) noteFailure(ctx context.Context, err error) {
	d.failStreak++
	if d.failStreak >= warnFailStreak {
		d.warnNode(ctx, warnFailing, fmt.Sprintf("%d prune runs in a row failed; the last: %v", d.failStreak, err))
	}
}

// afterRun records a run's removals where they outlive the log: the
// journal and the Node's Events. The caller holds running.
func (d *Daemon) afterRun(ctx context.Context, sum *prune.Summary) {
	if d.journal != nil {
		if jerr := d.journal.Flush(); jerr != nil && !d.journalFailed {
			d.journalFailed = true
			d.log.Warn("cannot write the journal of removals; the log and the Node's Events still have them", "error", jerr)
		}
	}
	if d.events != nil {
		d.events.record(ctx, sum)
	}
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

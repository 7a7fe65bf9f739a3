package daemon

import (
	"cmp"
	"context"
	"log/slog"
	"sync"

	"github.com/sweep-k8s/sweep/journal"
	"github.com/sweep-k8s/sweep/liveness"
	"github.com/sweep-k8s/sweep/prune"
	"github.com/sweep-k8s/sweep/report"
)

// PruneOnce runs one prune cycle with the views of cfg's liveness, the
// node's pods listed once instead of watched (`sweepd prune`): no schedule,
// no server, no daemon. deps give its logger and per-file listing; the CNI
// DELs are cfg's. The error wraps prune.ErrPodsUnavailable or
// prune.ErrSandboxesUnavailable when nothing could be deleted for want of
// a view; the summary is then nil.
func PruneOnce(ctx context.Context, cfg Config, deps prune.Deps) (*prune.Summary, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg.Liveness.Mode = cmp.Or(cfg.Liveness.Mode, liveness.ModeAPI)
	log := deps.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
		deps.Logger = log
	}
	views, err := liveness.New(cfg.Liveness, liveness.WithLogger(log))
	if err != nil {
		return nil, err
	}
	deps, err = releaseDeps(cfg, deps, nil)
	if err != nil {
		return nil, err
	}
	src := views.Sources()
	if cfg.RebootAware {
		src.Boot = loadBoot(cfg, log, func() {})
	}
	src.Clock = prune.NewClockGuard()
	// Deferred in this order so that cancel runs first and the clock
	// watcher has returned when PruneOnce does.
	var wg sync.WaitGroup
	defer wg.Wait()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	watchClock(ctx, &wg, src.Clock, log, nil)
	var j *journal.Reporter
	if cfg.StateDir != "" {
		// A removal by hand is the node's record too (sweepd journal).
		j = journal.NewReporter(cfg.StateDir, log)
		defer func() {
			if err := j.Close(); err != nil {
				log.Warn("cannot close the journal of removals", "error", err)
			}
		}()
		onFile := deps.OnFile
		deps.OnFile = func(f prune.File) {
			j.File(f)
			if onFile != nil {
				onFile(f)
			}
		}
	}
	sum, res, err := prune.Cycle(ctx, src, prune.Options{Config: cfg.Prune, Deps: deps})
	if j != nil {
		j.Report(ctx, report.NewRun(report.Scheduled, sum, res, err))
	}
	if res.BootRecordErr != nil {
		log.Warn("cannot write the boot record; reboot-aware staleness will know fewer sandboxes after the next reboot",
			"error", res.BootRecordErr)
	}
	return sum, err
}

package prune

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sweep-k8s/sweep/cachefile"
	"github.com/sweep-k8s/sweep/internal/nofollow"
)

// ErrNotSynced means a liveness view (pods or sandboxes) was not, or stopped
// being, complete and fresh, so the prune deleted nothing more.
var ErrNotSynced = errors.New("liveness view not synced")

// ErrPaused means the run was paused (Deps.Paused) before a removal, so
// it removed nothing more; what it left is for the run after the pause.
var ErrPaused = errors.New("paused")

// ErrNoLiveness means Run was given neither a pod index nor a sandbox index.
var ErrNoLiveness = errors.New("no liveness view: need pods, sandboxes or both")

// ErrReservationsNeedRuntime means Run was asked to release host-local
// reservations without the container runtime's view: a reservation names a
// container, which only the runtime can say is gone.
var ErrReservationsNeedRuntime = errors.New("releasing host-local reservations needs sandbox liveness from the container runtime")

// Run prunes the caches of opts against views. It refuses to start unless
// every view is synced, and stops at the first removal it would make after
// one stops being synced (ErrNotSynced) or ctx is cancelled. The summary is
// valid whatever the error.
func Run(ctx context.Context, views Views, opts Options) (*Summary, error) {
	opts.Config = opts.withDefaults(runtime.GOMAXPROCS(0))
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	paceCtx := ctx
	if opts.Release != nil && !opts.DryRun {
		opts.Workers = max(opts.Workers, opts.ReleaseConcurrency)
		if !opts.ReleaseUntil.IsZero() {
			var cancel context.CancelFunc
			paceCtx, cancel = context.WithDeadline(ctx, opts.ReleaseUntil)
			defer cancel()
		}
	}
	var targeted *TargetedCounts
	var found map[CacheName][]string
	if t := opts.Targets; t != nil {
		if err := t.validate(); err != nil {
			return newSummary(opts.Dir, opts.DryRun, opts.Release != nil), err
		}
		if opts.PodFiles == nil {
			opts.PodFiles = NewPodFiles()
		}
		var st FindStats
		var err error
		found, st, err = opts.PodFiles.Find(opts.Config, t.UIDs)
		targeted = &TargetedCounts{Pods: map[string]PodOutcome{}, Read: st.Read, Unread: st.Unread}
		if err != nil {
			sum := newSummary(opts.Dir, opts.DryRun, opts.Release != nil)
			sum.Targeted = targeted
			return sum, fmt.Errorf("find the files of the targeted pods: %w", err)
		}
		opts.MinAge = min(opts.MinAge, opts.ADDBound())
	}
	// start first: clockStepped measures from it, so a set between it and
	// now, which now would not show, stops the run's removals.
	start := time.Now()
	now := opts.Now()
	clock := ClockState{Uptime: math.MaxInt64}
	if views.Clock != nil {
		// Asked after now is read: a step before it has then been either
		// seen or not yet reported, and State measures both.
		clock = views.Clock(opts.MinAge)
	}
	e := &executor{
		opts:  opts,
		views: views,
		planner: Planner{Index: views.Pods, Mirrors: mirrorHistory(views.Pods), Sandboxes: views.Sandboxes, Boot: views.Boot,
			NodeName: views.NodeName, Now: now, MinAge: opts.MinAge, Clock: clock, ViewTime: views.ViewTime},
		debug:    opts.Logger.Enabled(ctx, slog.LevelDebug),
		paceCtx:  paceCtx,
		started:  start,
		skew:     opts.clockSkew,
		slots:    make(chan struct{}, opts.ReleaseConcurrency),
		named:    map[SandboxID]struct{}{},
		targeted: map[SandboxID]struct{}{},
		found:    found,
		outcomes: targeted,
	}
	e.caches = opts.caches()
	sum := newSummary(opts.Dir, opts.DryRun, opts.Release != nil)
	sum.Targeted = targeted
	sum.AgesTrustedFrom = clock.TrustedFrom
	if err := validateViews(views, opts); err != nil {
		return sum, err
	}
	if len(opts.HostLocalDirs) > 0 {
		sum.Reservations = &ReservationCounts{Dirs: opts.HostLocalDirs, Networks: opts.HostLocalNetworks, Kept: map[Reason]int{}}
	}
	var err error
	if opts.Release != nil && !opts.DryRun {
		stop := e.logProgress(ctx, start)
		err = e.run(ctx, sum)
		stop()
		sum.CNIDel.HeldSeconds = e.gateHeld.held().Seconds()
	} else {
		err = e.run(ctx, sum)
	}
	if err == nil && sum.Reservations != nil {
		// Only after a complete prune: the cache files it left are then
		// all known, and its views were fresh to the end.
		err = e.releaseReservations(ctx, sum, e.named)
	}
	sum.Duration = time.Since(start)
	if n := e.fileWarnings.Load(); n > maxFileWarnings {
		opts.Logger.Warn("more file problems than logged; see the summary's error count, or --log-level=debug for each",
			"logged", maxFileWarnings, "not_logged", n-maxFileWarnings)
	}
	if n := e.removals.Load(); n > maxRemovalLogs {
		msg := "more files removed than logged; see the summary's counts, or --log-level=debug for each"
		if opts.DryRun {
			msg = "more files would be removed than logged; see the summary's counts, or --log-level=debug for each"
		}
		opts.Logger.Info(msg, "logged", maxRemovalLogs, "not_logged", n-maxRemovalLogs)
	}
	return sum, err
}

// mirrorHistory returns idx's memory of mirror pods, if it keeps one.
func mirrorHistory(idx PodIndex) MirrorHistory {
	h, _ := idx.(MirrorHistory)
	return h
}

type executor struct {
	opts    Options
	views   Views
	planner Planner
	debug   bool
	// caches are the directories the run prunes, in order.
	caches []cache
	// stop is set once a removal found the view unsynced or the run
	// paused; every worker then stops before its next file. paused says
	// which.
	stop, paused atomic.Bool
	// releases counts the Release calls taken against MaxReleases.
	releases atomic.Int64
	// fileWarnings counts the per-file warnings of the run, so that a
	// read-only or failing filesystem does not log a line per file.
	fileWarnings atomic.Int64
	// removals counts the removals (in a dry run, the would-be removals),
	// so that the first maxRemovalLogs are logged at info level.
	removals atomic.Int64
	// The CNI DELs so far, for the progress log; each worker also counts
	// its own for the summary.
	delsAttempted, delsSucceeded, delsFailed atomic.Int64
	// onFile serializes the calls of Deps.OnFile.
	onFile sync.Mutex
	// started is when the run began, with the monotonic reading that
	// clockStepped measures the wall clock against; skew replaces that
	// measurement in tests.
	started  time.Time
	skew     func() time.Duration
	stepOnce sync.Once
	// paceCtx ends at Options.ReleaseUntil: no Release starts after it.
	paceCtx context.Context
	// slots holds one token per Release in progress
	// (Config.ReleaseConcurrency).
	slots chan struct{}
	// sandboxes keeps two Release calls of one sandbox from overlapping.
	sandboxes sandboxLocks
	// gateHeld is the time Release calls waited at Deps.ReleaseGate.
	gateHeld heldTime
	// named holds the sandboxes that the cache files the run left (or in
	// a dry run would leave) name, in every cache: the results files' of
	// multus's and the runtime's cache (by name and containerId) and the
	// scratch files'. The reservations' phase keeps their reservations
	// (cache-named): a DEL replay of such a file is the better release.
	// It is not Summary.kept, which is nil when a cache has no results
	// directory, for the boot record; a reservation must be kept for
	// every file left, whatever another cache lacks.
	named map[SandboxID]struct{}
	// dryNamed, in a dry run with DEL replay, holds the sandboxes of the
	// results files it would DEL and remove (dryRunNamed).
	dryMu    sync.Mutex
	dryNamed map[SandboxID]struct{}
	// targeted holds, in a targeted run (Options.Targets), the sandboxes
	// that the targeted pods' results files name: the only ones whose
	// scratch files and reservations the run may remove.
	targeted map[SandboxID]struct{}
	// found are, in a targeted run, the targeted pods' results files by
	// cache, and outcomes what became of each pod (under onFile).
	found    map[CacheName][]string
	outcomes *TargetedCounts
	// siblings are the verdicts of the results phase of the cache being
	// pruned that decide a file unread (worker.sibling); nil where none
	// may.
	siblings *siblingVerdicts
}

// noteTarget adds a results file's outcome to its pod's, in a targeted run.
// A file that could not be read again this run is its pod's as the memory
// of the caches knows it. The caller holds onFile.
func (e *executor) noteTarget(f File) {
	uid := f.Pod.UID
	if uid == "" {
		uid = e.opts.PodFiles.UIDOf(f.Cache, f.Name)
	}
	if !e.opts.Targets.has(uid) {
		return
	}
	o := e.outcomes.Pods[uid]
	o.note(f, e.opts.MinAge)
	e.outcomes.Pods[uid] = o
}

// maxRemovalLogs is how many removals a run logs at info level, each with
// its file, pod and reason: the record of what went (in a dry run, of what
// would go, so that a dry-run daemon shows at its default level what it
// would do), bounded so that a run over a large leak does not flood the
// log. The rest are logged at debug level and counted in the summary.
const maxRemovalLogs = 100

// maxFileWarnings is how many per-file problems a run logs at warning level;
// the rest are logged at debug level and counted in the summary.
const maxFileWarnings = 20

// warnFile logs a problem with one file: at warning level for the first
// maxFileWarnings of the run, then at debug level.
func (e *executor) warnFile(msg string, args ...any) {
	if e.fileWarnings.Add(1) <= maxFileWarnings {
		e.opts.Logger.Warn(msg, args...)
	} else if e.debug {
		e.opts.Logger.Debug(msg, args...)
	}
}

// synced reports whether every liveness view in use is synced, and still
// comparable with the files' times: the wall clock has not been set since
// the run began.
func (e *executor) synced() bool {
	if e.views.Pods != nil && !e.views.Pods.Synced() {
		return false
	}
	if e.views.Sandboxes != nil && !e.views.Sandboxes.Synced() {
		return false
	}
	return !e.clockStepped()
}

// halt reports whether the run must stop before its next removal, DEL or
// release, and with what reason: a view that stopped being synced (or the
// clock set), or a pause. It records the first stop for the workers.
func (e *executor) halt() (Reason, bool) {
	if !e.synced() {
		e.stop.Store(true)
		return e.stopReason(), true
	}
	if e.opts.Paused != nil && e.opts.Paused() {
		if e.stop.CompareAndSwap(false, true) {
			e.paused.Store(true)
			e.opts.Logger.Warn("paused: nothing more is removed, DELed or released in this run")
		}
		return e.stopReason(), true
	}
	return "", false
}

// stopReason is why the run stopped: ReasonPaused or ReasonViewStale.
func (e *executor) stopReason() Reason {
	if e.paused.Load() {
		return ReasonPaused
	}
	return ReasonViewStale
}

// stopErr is the run's error once it stopped.
func (e *executor) stopErr() error {
	if e.paused.Load() {
		return ErrPaused
	}
	return ErrNotSynced
}

// clockStepTolerance is how far the wall clock may move against the
// monotonic clock during a run: far above the nanoseconds between the two
// readings, far below any step that matters.
const clockStepTolerance = 10 * time.Millisecond

// clockStepped reports whether the wall clock was set since the run began.
// The run's rules compare files' times with the wall clock (their age) and
// with the time of the views (newer-than-view); the clock guard vouches for
// the clock at the start only, and a paced run lasts up to an hour. A step
// back then makes a file made after the views look older than them, a step
// forward makes a young file look old: either could condemn a new pod's
// file or reservation. NTP's slewing moves both clocks alike; only a set
// moves one against the other, or a suspend: Go's monotonic clock is
// CLOCK_MONOTONIC, which stops while the node is suspended and the wall
// clock does not, so a suspend during the run is a forward step here too
// (an ADD frozen by it is no further along at the resume), and the clock
// guard counts it for the runs after (ClockGuard).
func (e *executor) clockStepped() bool {
	skew := e.skew
	if skew == nil {
		skew = func() time.Duration {
			now := time.Now()
			return now.Round(0).Sub(e.started.Round(0)) - now.Sub(e.started)
		}
	}
	d := skew()
	if d > clockStepTolerance || d < -clockStepTolerance {
		e.stepOnce.Do(func() {
			e.opts.Logger.Warn("wall clock set, or the node suspended, during the run: nothing more is removed or released in it", "step_seconds", d.Seconds())
		})
		return true
	}
	return false
}

func (e *executor) run(ctx context.Context, sum *Summary) error {
	if _, halt := e.halt(); halt {
		return e.stopErr()
	}
	// e.named collects the sandboxes that the results files left name, of
	// every cache; the boot record takes them only when every cache's
	// results could be read.
	complete := true
	for _, c := range e.caches {
		sum.startCache(c.name, c.dir)
		referenced, err := e.runCache(ctx, c, sum)
		if err != nil {
			return err
		}
		if referenced == nil {
			complete = false
		}
		maps.Copy(e.named, referenced)
	}
	if complete && e.opts.Targets == nil {
		// Before a dry run's would-be DELs join: the record is of files left.
		sum.kept = maps.Clone(e.named)
	}
	maps.Copy(e.named, e.dryNamed)
	return nil
}

// runCache prunes one cache directory and returns the sandboxes its results
// files left name, or nil when it has no results directory to read.
func (e *executor) runCache(ctx context.Context, c cache, sum *Summary) (map[SandboxID]struct{}, error) {
	dir, err := nofollow.OpenDir(unix.AT_FDCWD, c.dir)
	if err != nil {
		return nil, fmt.Errorf("open cache directory %s: %w", c.dir, err)
	}
	defer dir.Close()
	if c.flat {
		// The runtime's cache is a results directory itself, with no
		// scratch phase.
		referenced, err := e.results(ctx, c, dir, sum)
		if err == nil && e.opts.Targets != nil {
			// What a targeted run did not read still names sandboxes:
			// their reservations are the files' DEL's, as in a full run.
			err = e.namedIn(dir, referenced)
		}
		return referenced, err
	}

	var referenced map[SandboxID]struct{}
	results, err := nofollow.OpenDir(int(dir.Fd()), "results")
	switch {
	case errors.Is(err, unix.ENOENT):
		// No results directory: multus before v3.7.2 kept delegate results
		// elsewhere, so nothing here says which sandboxes are in use, and
		// phase 2 keeps every scratch file (referenced stays nil).
		e.opts.Logger.Warn("no results directory: scratch files are kept (multus before v3.7.2 keeps delegate results elsewhere)",
			"dir", c.dir)
	case err != nil:
		// A symlink (ELOOP) or a file where results/ should be: without
		// reading it, phase 2 can't know which sandboxes are referenced.
		return nil, fmt.Errorf("open %s: %w", filepath.Join(c.dir, "results"), err)
	default:
		defer results.Close()
		referenced, err = e.results(ctx, c, results, sum)
		if err != nil {
			return nil, err
		}
	}
	var scratchNames []string
	if e.opts.Targets != nil {
		if scratchNames, referenced, err = e.targetedScratch(results, referenced); err != nil {
			return nil, err
		}
	}
	err = e.phase(ctx, c, dir, PhaseScratch, sum, scratchNames, func(w *worker, fd int, name string, typ os.FileMode) {
		w.scratch(fd, name, typ, referenced)
	}, func(ws []*worker) {
		for _, w := range ws {
			for id := range w.scratchKept {
				e.named[id] = struct{}{}
			}
		}
	})
	return referenced, err
}

// results runs phase 1 and returns the sandboxes that the results files left
// name. Files that wait for a witness (an earlier-boot sandbox of a live pod)
// are decided after the scan, once it is known which pods have a sandbox of
// the current boot; they are few, one per live pod at most.
func (e *executor) results(ctx context.Context, c cache, dir *os.File, sum *Summary) (map[SandboxID]struct{}, error) {
	referenced := map[SandboxID]struct{}{}
	var pending []string
	newer := map[string]struct{}{}
	var names []string
	if e.opts.Targets != nil {
		names = append([]string{}, e.found[c.name]...) // not nil: none is none
	}
	// Siblings decided unread only where a file's content does nothing but
	// name its pod: a DEL replays the content, a targeted run keeps
	// another pod's file by its content (not-target), and the runtime's
	// cache keeps a file that names no pod UID.
	e.siblings = nil
	if e.opts.Release == nil && e.opts.Targets == nil && !c.requirePodUID {
		e.siblings = newSiblingVerdicts()
	}
	err := e.phase(ctx, c, dir, PhaseResults, sum, names, func(w *worker, fd int, name string, typ os.FileMode) {
		w.results(fd, name, typ, nil)
	}, func(ws []*worker) {
		for _, w := range ws {
			for id := range w.targeted {
				e.targeted[id] = struct{}{}
			}
			for id := range w.referenced {
				referenced[id] = struct{}{}
			}
			pending = append(pending, w.pending...)
			for uid := range w.current {
				newer[uid] = struct{}{}
			}
		}
	})
	if err != nil || len(pending) == 0 {
		return referenced, err
	}
	w := e.newWorker(ctx, c, PhaseResults)
	for _, name := range pending {
		if e.stop.Load() || ctx.Err() != nil {
			break
		}
		w.results(int(dir.Fd()), name, 0, newer) // 0: a regular file, as readdir said
	}
	sum.add(&w.counts)
	for id := range w.referenced {
		referenced[id] = struct{}{}
	}
	switch {
	case e.stop.Load():
		return referenced, e.stopErr()
	case ctx.Err() != nil:
		return referenced, ctx.Err()
	}
	return referenced, nil
}

// phase streams the entries of dir to workers and merges their counts. The
// directory is read in batches while workers delete, so memory does not grow
// with the number of files. A targeted run gives the names instead (not
// nil), which are then taken for regular files until opened.
func (e *executor) phase(ctx context.Context, c cache, dir *os.File, phase Phase, sum *Summary, names []string,
	handle func(w *worker, fd int, name string, typ os.FileMode), merge func([]*worker)) error {
	type item struct {
		name string
		typ  os.FileMode
	}
	batches := make(chan []item, e.opts.Workers)
	workers := make([]*worker, e.opts.Workers)
	var wg sync.WaitGroup
	for i := range workers {
		w := e.newWorker(ctx, c, phase)
		workers[i] = w
		wg.Go(func() {
			for batch := range batches {
				for _, it := range batch {
					if ctx.Err() != nil {
						continue // drain so the reader never blocks
					}
					if e.stop.Load() {
						// Left because the run stopped: say why.
						r := e.stopReason()
						w.counts.kept[r]++
						if phase == PhaseResults || it.name != "results" {
							w.report(w.file(phase, it.name), keep(r))
						}
						continue
					}
					handle(w, int(dir.Fd()), it.name, it.typ)
				}
			}
		})
	}
	// Results files go one by one to the workers when they may need a DEL:
	// a DEL takes milliseconds to seconds, and a batch held by one worker
	// would run its DELs one after the other whatever the concurrency.
	chunk := 256
	if phase == PhaseResults && e.opts.Release != nil && !e.opts.DryRun {
		chunk = 1
	}
	var readErr error
	if names != nil {
		for len(names) > 0 && ctx.Err() == nil && !e.stop.Load() {
			n := min(chunk, len(names))
			batch := make([]item, n)
			for i, name := range names[:n] {
				batch[i] = item{name: name}
			}
			batches <- batch
			names = names[n:]
		}
	}
	for names == nil && ctx.Err() == nil && !e.stop.Load() {
		ents, err := dir.ReadDir(256)
		for len(ents) > 0 {
			n := min(chunk, len(ents))
			batch := make([]item, n)
			for i, de := range ents[:n] {
				batch[i] = item{de.Name(), de.Type()}
			}
			batches <- batch
			ents = ents[n:]
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			readErr = fmt.Errorf("read %s: %w", dir.Name(), err)
			break
		}
	}
	close(batches)
	wg.Wait()
	for _, w := range workers {
		sum.add(&w.counts)
	}
	if merge != nil {
		merge(workers)
	}
	switch {
	case e.stop.Load():
		return e.stopErr()
	case ctx.Err() != nil:
		return ctx.Err()
	}
	return readErr
}

// targetedScratch returns, for a targeted run, the scratch files it may
// remove (those of the targeted pods' sandboxes) and the sandboxes still
// named, adding to referenced those that a results file left in results
// names: a targeted run read only its own, and another pod's file of the
// same sandbox (never made by multus, but possible by hand) keeps the
// scratch file as in a full run.
func (e *executor) targetedScratch(results *os.File, referenced map[SandboxID]struct{}) ([]string, map[SandboxID]struct{}, error) {
	names := []string{}
	if results == nil {
		return names, referenced, nil
	}
	for id := range e.targeted {
		names = append(names, id.String())
	}
	if len(names) == 0 {
		return names, referenced, nil
	}
	if err := e.namedIn(results, referenced); err != nil {
		return nil, nil, err
	}
	return names, referenced, nil
}

// namedIn adds to named the targeted sandboxes that a name left in the
// results directory dir carries. It lists the names only.
func (e *executor) namedIn(dir *os.File, named map[SandboxID]struct{}) error {
	if len(e.targeted) == 0 {
		return nil
	}
	if _, err := dir.Seek(0, io.SeekStart); err != nil {
		return fmt.Errorf("list %s again: %w", dir.Name(), err)
	}
	for {
		left, err := dir.Readdirnames(256)
		for _, name := range left {
			if id, ok := cachefile.SandboxIDFromResultsName(name); ok {
				if _, t := e.targeted[id]; t {
					named[id] = struct{}{}
				}
			}
		}
		if err == io.EOF || len(left) == 0 {
			return nil
		}
		if err != nil {
			return fmt.Errorf("read %s: %w", dir.Name(), err)
		}
	}
}

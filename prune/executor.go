package prune

import (
	"github.com/sweep-k8s/sweep/cachefile"

	"cmp"
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
)

// ErrNotSynced means a liveness view (pods or sandboxes) was not, or stopped
// being, complete and fresh, so the prune deleted nothing more.
var ErrNotSynced = errors.New("liveness view not synced")

// ErrNoLiveness means Run was given neither a pod index nor a sandbox index.
var ErrNoLiveness = errors.New("no liveness view: need pods, sandboxes or both")

// ErrReservationsNeedRuntime means Run was asked to release host-local
// reservations without the container runtime's view: a reservation names a
// container, which only the runtime can say is gone.
var ErrReservationsNeedRuntime = errors.New("releasing host-local reservations needs sandbox liveness from the container runtime")

// DefaultMaxFileSize bounds what is read of a results file. Real ones are one
// to a few KiB; anything bigger is not a cache file and is kept unread.
const DefaultMaxFileSize = 256 << 10

// Options configure Run.
type Options struct {
	// Dir is the multus cache directory, /var/lib/cni/multus on a node.
	Dir string
	// RuntimeDir, when set, is the container runtime's own libcni cache,
	// /var/lib/cni/results on a node (containerd, CRI-O): the results files
	// of the pods' primary network, in the same format as multus's results/
	// and judged by the same rules, with no scratch files. It is pruned
	// after Dir. Empty: not pruned.
	RuntimeDir string
	// MinAge keeps files younger than this: their ADD may still be running.
	MinAge time.Duration
	// DryRun decides and reports but removes nothing.
	DryRun bool
	// Workers is the number of files handled at once; default GOMAXPROCS.
	Workers int
	// MaxFileSize bounds what is read of a results file; default
	// DefaultMaxFileSize.
	MaxFileSize int64
	// Logger receives one debug line per file and warnings; default discard.
	Logger *slog.Logger
	// Now is the clock; default time.Now.
	Now func() time.Time
	// Release, when set, undoes a results file's network attachment (CNI
	// DEL, package cnidel) right before the file is removed. A file whose
	// Release fails is kept (ReasonCNIDelFailed) and counted as an error, so
	// that the next run tries again; removing it would lose the only record
	// of what to release. Never called in a dry run.
	Release Releaser
	// MaxReleases caps the Release calls of one run (0: no cap), which bounds
	// a run's duration when plugins are slow. Results files beyond it are
	// kept (ReasonCNIDelDeferred) for a later run. A dry run counts against
	// it too, so that it reports what a real run would do.
	MaxReleases int
	// ReleaseRate, when set, paces the Release calls: each waits for it
	// before it starts. The caller keeps one across runs, so that a drain
	// spread over several runs keeps one pace.
	ReleaseRate Limiter
	// ReleaseGate, when set, is waited for right before each Release,
	// after the rate: no DEL starts while it is closed. The time DELs
	// waited for it is Summary.CNIDel.HeldSeconds.
	ReleaseGate Gate
	// ReleaseConcurrency is how many Release calls run at once; default 1.
	// Never two run for one sandbox. A run with Release has at least this
	// many workers, as each waits for its own DEL.
	ReleaseConcurrency int
	// ReleaseUntil, when set, is when the run stops starting Release calls:
	// the results files that still need one are kept (ReasonCNIDelDeferred)
	// for a later run, and the run finishes its scan. The daemon sets it
	// before its next scheduled run, so that a paced drain spreads over runs
	// that never overlap and each run's summary counts what is left.
	ReleaseUntil time.Time
	// Sandboxes, when set, is the container runtime's view of the node's
	// sandboxes: sandbox liveness, alone (Run's pod index nil) or with the
	// pod index (both must agree before a removal).
	Sandboxes SandboxIndex
	// Boot, when set, makes the files of sandboxes recorded under an
	// earlier boot stale (reboot-aware staleness).
	Boot BootRecord
	// NodeName is this node, to recognise static pods by name.
	NodeName string
	// Clock, when set, says how far ages by the wall clock can be trusted
	// for a minimum age of window (ClockGuard.State); Run asks it for
	// MinAge. nil: always trusted (tests, library use).
	Clock func(window time.Duration) ClockState
	// ViewTime, when set, is when the oldest liveness view was taken; files
	// changed after it are kept for a later run (Planner.ViewTime).
	ViewTime time.Time
	// OnFile, when set, receives each file's outcome as the run decides it
	// (files that vanish meanwhile excepted): the per-file listing of
	// `sweepd prune`. The workers call it one at a time, in no particular
	// order, so it need not be safe for concurrent use; it should be quick,
	// as the workers wait for it. Nil keeps the run's memory independent of
	// the number of files.
	OnFile func(File)
	// ProgressInterval is how often a run with Release logs the CNI DELs
	// so far, so that a long run is seen to progress; default 30s.
	ProgressInterval time.Duration
	// clockSkew, in tests, replaces the measurement of the wall clock
	// against the monotonic clock since the run began (clockStepped).
	clockSkew func() time.Duration
	// HostLocalDirs are host-local data directories (its dataDir,
	// /var/lib/cni/networks by default) whose orphaned reservations a run
	// that completed releases (ReasonOrphanedReservation): those of
	// sandboxes the runtime does not know that no cache file left names,
	// in the networks of HostLocalNetworks. Needs Sandboxes and
	// HostLocalNetworks.
	HostLocalDirs []string
	// HostLocalNetworks are the networks (host-local's subdirectories of a
	// data directory, named by the network) whose reservations may be
	// released: networks of Kubernetes' pods alone. The runtime lists only
	// the kubelet's sandboxes, so a container of another CNI user in a
	// network (nerdctl, podman with CNI) would look orphaned; the entries
	// of any other network are kept (ReasonNetworkNotAllowed) unopened.
	// There is no default: which networks are the pods' alone only the
	// node's operator knows.
	HostLocalNetworks []string
	// HostLocalLockWait bounds the wait for host-local's lock of a network
	// before a release; default DefaultLockWait.
	HostLocalLockWait time.Duration
}

// DefaultProgressInterval is the default of Options.ProgressInterval.
const DefaultProgressInterval = 30 * time.Second

// Releaser undoes what the CNI ADD behind a results file set up.
type Releaser interface {
	// Release runs CNI DEL for the attachment that data, the content of the
	// results file name, describes. It must not touch the file itself; nil
	// means every plugin succeeded.
	Release(ctx context.Context, name string, data []byte) error
}

// Run prunes the cache under opts.Dir against idx (nil for sandbox liveness
// alone) and opts.Sandboxes. It refuses to start unless every view is synced,
// and stops at the first removal it would make after one stops being synced
// (ErrNotSynced) or ctx is cancelled. The summary is valid whatever the
// error.
func Run(ctx context.Context, idx PodIndex, opts Options) (*Summary, error) {
	if opts.Workers <= 0 {
		opts.Workers = runtime.GOMAXPROCS(0)
	}
	if opts.MaxFileSize <= 0 {
		opts.MaxFileSize = DefaultMaxFileSize
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.ProgressInterval <= 0 {
		opts.ProgressInterval = DefaultProgressInterval
	}
	if opts.ReleaseConcurrency <= 0 {
		opts.ReleaseConcurrency = 1
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
	if opts.HostLocalLockWait <= 0 {
		opts.HostLocalLockWait = DefaultLockWait
	}
	// start first: clockStepped measures from it, so a set between it and
	// now, which now would not show, stops the run's removals.
	start := time.Now()
	now := opts.Now()
	clock := ClockState{Uptime: math.MaxInt64}
	if opts.Clock != nil {
		// Asked after now is read: a step before it has then been either
		// seen or not yet reported, and State measures both.
		clock = opts.Clock(opts.MinAge)
	}
	e := &executor{
		opts: opts,
		idx:  idx,
		planner: Planner{Index: idx, Mirrors: mirrorHistory(idx), Sandboxes: opts.Sandboxes, Boot: opts.Boot, NodeName: opts.NodeName,
			Now: now, MinAge: opts.MinAge, Clock: clock, ViewTime: opts.ViewTime},
		debug:   opts.Logger.Enabled(ctx, slog.LevelDebug),
		paceCtx: paceCtx,
		started: start,
		skew:    opts.clockSkew,
		slots:   make(chan struct{}, opts.ReleaseConcurrency),
		named:   map[SandboxID]struct{}{},
	}
	e.caches = opts.caches()
	sum := newSummary(opts.Dir, opts.DryRun, opts.Release != nil)
	sum.AgesTrustedFrom = clock.TrustedFrom
	if idx == nil && opts.Sandboxes == nil {
		return sum, ErrNoLiveness
	}
	if len(opts.HostLocalDirs) > 0 {
		if opts.Sandboxes == nil {
			return sum, ErrReservationsNeedRuntime
		}
		if len(opts.HostLocalNetworks) == 0 {
			return sum, ErrReservationsNeedNetworks
		}
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
		opts.Logger.Info("more files removed than logged; see the summary's counts, or --log-level=debug for each",
			"logged", maxRemovalLogs, "not_logged", n-maxRemovalLogs)
	}
	return sum, err
}

// logProgress logs the CNI DELs of the run every ProgressInterval until the
// returned function is called: one DEL can take a plugin's timeout, and a
// run of a thousand is otherwise silent until its end.
func (e *executor) logProgress(ctx context.Context, start time.Time) (stop func()) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		tick := time.NewTicker(e.opts.ProgressInterval)
		defer tick.Stop()
		for {
			select {
			case <-done:
				return
			case <-ctx.Done():
				return
			case <-tick.C:
				ok, failed := e.delsSucceeded.Load(), e.delsFailed.Load()
				e.opts.Logger.Info("cni del in progress", "elapsed_seconds", time.Since(start).Seconds(),
					slog.Group("cni_del", "attempted", e.delsAttempted.Load(), "succeeded", ok, "failed", failed,
						"held_seconds", e.gateHeld.held().Seconds()))
			}
		}
	})
	return func() {
		close(done)
		wg.Wait()
	}
}

// mirrorHistory returns idx's memory of mirror pods, if it keeps one.
func mirrorHistory(idx PodIndex) MirrorHistory {
	h, _ := idx.(MirrorHistory)
	return h
}

type executor struct {
	opts    Options
	idx     PodIndex
	planner Planner
	debug   bool
	// caches are the directories the run prunes, in order.
	caches []cache
	// stop is set once a removal found the view unsynced; every worker then
	// stops before its next file.
	stop atomic.Bool
	// releases counts the Release calls taken against MaxReleases.
	releases atomic.Int64
	// fileWarnings counts the per-file warnings of the run, so that a
	// read-only or failing filesystem does not log a line per file.
	fileWarnings atomic.Int64
	// removals counts the removals of a real run, so that the first
	// maxRemovalLogs are logged at info level.
	removals atomic.Int64
	// The CNI DELs so far, for the progress log; each worker also counts
	// its own for the summary.
	delsAttempted, delsSucceeded, delsFailed atomic.Int64
	// onFile serializes the calls of Options.OnFile.
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
	// (Options.ReleaseConcurrency).
	slots chan struct{}
	// sandboxes keeps two Release calls of one sandbox from overlapping.
	sandboxes sandboxLocks
	// gateHeld is the time Release calls waited at Options.ReleaseGate.
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
}

// maxRemovalLogs is how many removals a real run logs at info level, each
// with its file, pod and reason: the record of what went, bounded so that a
// run over a large leak does not flood the log. The rest are logged at
// debug level and counted in the summary.
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

// reserveRelease takes one of the run's Release calls; false once the cap is
// reached. A refusal takes nothing, so that a call given back later (pace's
// done) can be taken again.
func (e *executor) reserveRelease() bool {
	n := e.releases.Add(1)
	if e.opts.MaxReleases > 0 && n > int64(e.opts.MaxReleases) {
		e.releases.Add(-1)
		return false
	}
	return true
}

// pace waits until the results file being handled may have its Release:
// one of the run's Release calls (MaxReleases), its sandbox free, a
// concurrency slot and the rate's and the gate's permission. false when it
// may not in this run (the cap is reached, Options.ReleaseUntil passed or
// the run ended): the file is then deferred. done gives back what pace took,
// the Release call too unless ran says that it was made.
func (w *worker) pace() (done func(ran bool), ok bool) {
	e := w.e
	// Taken first, so that no worker waits for a DEL that would not run,
	// and workers that wait at once never pass the cap together.
	if !e.reserveRelease() {
		return nil, false
	}
	unreserve := func() { e.releases.Add(-1) }
	ctx := e.paceCtx
	if ctx.Err() != nil {
		unreserve()
		return nil, false
	}
	id := cmp.Or(w.sandbox, w.name)
	if err := e.sandboxes.lock(ctx, id); err != nil {
		unreserve()
		return nil, false
	}
	select {
	case e.slots <- struct{}{}:
	case <-ctx.Done():
		e.sandboxes.unlock(id)
		unreserve()
		return nil, false
	}
	done = func(ran bool) {
		<-e.slots
		e.sandboxes.unlock(id)
		if !ran {
			unreserve()
		}
	}
	// Waited for holding the slot: the rate then counts DELs as they start,
	// not workers queueing for a slot.
	if e.opts.ReleaseRate != nil {
		if err := e.opts.ReleaseRate.Wait(ctx); err != nil {
			done(false)
			return nil, false
		}
	}
	// Last of all: a pod that started while this DEL waited for its turn
	// comes first.
	if e.opts.ReleaseGate != nil {
		if err := e.gateHeld.wait(ctx, e.opts.ReleaseGate); err != nil {
			done(false)
			return nil, false
		}
	}
	return done, true
}

// synced reports whether every liveness view in use is synced, and still
// comparable with the files' times: the wall clock has not been set since
// the run began.
func (e *executor) synced() bool {
	if e.idx != nil && !e.idx.Synced() {
		return false
	}
	if e.opts.Sandboxes != nil && !e.opts.Sandboxes.Synced() {
		return false
	}
	return !e.clockStepped()
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
	if !e.synced() {
		return ErrNotSynced
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
	if complete {
		// Before a dry run's would-be DELs join: the record is of files left.
		sum.kept = maps.Clone(e.named)
	}
	maps.Copy(e.named, e.dryNamed)
	return nil
}

// dryRunNamed records the sandboxes of a results file that a dry run with
// DEL replay would release and remove (named); the workers call it at once.
func (e *executor) dryRunNamed(ids []SandboxID) {
	e.dryMu.Lock()
	defer e.dryMu.Unlock()
	if e.dryNamed == nil {
		e.dryNamed = map[SandboxID]struct{}{}
	}
	for _, id := range ids {
		e.dryNamed[id] = struct{}{}
	}
}

// runCache prunes one cache directory and returns the sandboxes its results
// files left name, or nil when it has no results directory to read.
func (e *executor) runCache(ctx context.Context, c cache, sum *Summary) (map[SandboxID]struct{}, error) {
	dir, err := openDir(unix.AT_FDCWD, c.dir)
	if err != nil {
		return nil, fmt.Errorf("open cache directory %s: %w", c.dir, err)
	}
	defer dir.Close()
	if c.flat {
		// The runtime's cache is a results directory itself, with no
		// scratch phase.
		return e.results(ctx, c, dir, sum)
	}

	var referenced map[SandboxID]struct{}
	results, err := openDir(int(dir.Fd()), "results")
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
		referenced, err = e.results(ctx, c, results, sum)
		results.Close()
		if err != nil {
			return nil, err
		}
	}
	err = e.phase(ctx, c, dir, PhaseScratch, sum, func(w *worker, fd int, name string, typ os.FileMode) {
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
	err := e.phase(ctx, c, dir, PhaseResults, sum, func(w *worker, fd int, name string, typ os.FileMode) {
		w.results(fd, name, typ, nil)
	}, func(ws []*worker) {
		for _, w := range ws {
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
		return referenced, ErrNotSynced
	case ctx.Err() != nil:
		return referenced, ctx.Err()
	}
	return referenced, nil
}

// phase streams the entries of dir to workers and merges their counts. The
// directory is read in batches while workers delete, so memory does not grow
// with the number of files.
func (e *executor) phase(ctx context.Context, c cache, dir *os.File, phase Phase, sum *Summary,
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
						// Left because the view went stale: say so.
						w.counts.kept[ReasonViewStale]++
						if phase == PhaseResults || it.name != "results" {
							w.report(w.file(phase, it.name), keep(ReasonViewStale))
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
	for ctx.Err() == nil && !e.stop.Load() {
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
		return ErrNotSynced
	case ctx.Err() != nil:
		return ctx.Err()
	}
	return readErr
}

// worker handles files one at a time with its own read buffer and counts, so
// workers share nothing but the stop flag.
type worker struct {
	e     *executor
	ctx   context.Context
	cache cache
	phase Phase
	// planner is the executor's, with the rules of the worker's cache.
	planner Planner
	buf     []byte
	// raw is the content of the results file being handled, a slice of buf.
	raw []byte
	// name and sandbox are the results file being handled and its
	// sandbox, for the Release's pacing.
	name, sandbox string
	counts        counts
	referenced    map[SandboxID]struct{}
	// pending are results files that wait for a witness (Planner.Witnessed);
	// current holds the UIDs of live pods that have a results file of a
	// sandbox not from an earlier boot: that witness.
	pending []string
	current map[string]struct{}
	// scratchKept holds the sandboxes of the scratch files kept (phase 2).
	scratchKept map[SandboxID]struct{}
}

func (e *executor) newWorker(ctx context.Context, c cache, phase Phase) *worker {
	w := &worker{e: e, ctx: ctx, cache: c, phase: phase, planner: e.planner, counts: newCounts()}
	w.planner.RequirePodUID = c.requirePodUID
	if phase == PhaseResults {
		w.buf = make([]byte, e.opts.MaxFileSize)
		w.referenced = map[SandboxID]struct{}{}
		w.current = map[string]struct{}{}
	} else {
		w.scratchKept = map[SandboxID]struct{}{}
	}
	return w
}

// results handles one results file. newer is nil during the scan; in the
// witness pass after it, it holds the UIDs of pods with a sandbox of the
// current boot, and name is a file the scan left pending.
func (w *worker) results(dirfd int, name string, typ os.FileMode, newer map[string]struct{}) {
	if newer == nil {
		w.counts.scanned[PhaseResults]++
	}
	w.raw = nil
	re := ResultsEntry{Entry: Entry{Name: name}}
	var d Decision
	st, err := w.read(dirfd, name, typ, &re)
	switch {
	case errors.Is(err, unix.ENOENT):
		w.counts.vanished[PhaseResults]++ // removed by someone else meanwhile
		return
	case errors.Is(err, errNotRegular):
		d = keep(ReasonNotRegular)
	case err != nil:
		w.e.warnFile("cannot read cache file", "phase", PhaseResults, "file", name, "error", err)
		d = keep(ReasonError)
		w.counts.errors++
	default:
		d = w.planner.Results(re)
	}
	switch {
	case d.NeedsWitness && newer == nil:
		w.pending = append(w.pending, name)
		return
	case d.NeedsWitness:
		_, ok := newer[re.Cache.PodUID]
		d = w.planner.Witnessed(re.Entry, ok)
	case d.Reason == ReasonPodLive && re.Cache.PodUID != "":
		w.current[re.Cache.PodUID] = struct{}{}
	}
	if d.Remove {
		if w.e.opts.Release != nil {
			w.name, w.sandbox = name, re.Cache.ContainerID
			if _, ok := cachefile.ParseSandboxID(w.sandbox); !ok {
				// Without a containerId, the sandbox the name carries: two
				// files of one sandbox must not DEL at once either way.
				if id, ok := cachefile.SandboxIDFromResultsName(name); ok {
					w.sandbox = id.String()
				}
			}
		}
		d = w.remove(dirfd, name, st, d)
	}
	if d.Reason == reasonVanished {
		w.counts.vanished[PhaseResults]++
		return
	}
	if !d.Remove {
		ids, n := re.sandboxes()
		for _, id := range ids[:n] {
			w.referenced[id] = struct{}{}
		}
	} else if w.e.opts.DryRun && w.e.opts.Release != nil {
		// A real run's DEL of this file releases the sandbox's
		// reservations itself, or fails and keeps the file: either way the
		// reservations' phase of a dry run must not count them as its own.
		w.e.dryRunNamed(re.Sandboxes())
	}
	if err == nil {
		w.left(st, d)
	}
	f := w.file(PhaseResults, name)
	f.ModTime = re.ModTime
	if err == nil && re.ParseReason == "" {
		f.Pod = PodRef{Namespace: re.Cache.PodNamespace, Name: re.Cache.PodName, UID: re.Cache.PodUID}
		f.Sandbox = re.Cache.ContainerID
	}
	w.record(f, d)
}

// reasonVanished marks a file that someone else removed between the plan and
// the removal: neither removed by the prune nor kept. Never counted by reason.
const reasonVanished Reason = "vanished"

var errNotRegular = errors.New("not a regular file")

// read opens name without following a symlink or blocking on a FIFO, checks
// that it is a regular file and parses it into re.
func (w *worker) read(dirfd int, name string, typ os.FileMode, re *ResultsEntry) (unix.Stat_t, error) {
	var st unix.Stat_t
	if !typ.IsRegular() {
		return st, errNotRegular
	}
	const flags = unix.O_RDONLY | unix.O_NOFOLLOW | unix.O_NONBLOCK | unix.O_CLOEXEC
	// O_NOATIME spares an inode write per file; it needs ownership or
	// CAP_FOWNER, so fall back without it.
	fd, err := unix.Openat(dirfd, name, flags|unix.O_NOATIME, 0)
	if errors.Is(err, unix.EPERM) {
		fd, err = unix.Openat(dirfd, name, flags, 0)
	}
	if errors.Is(err, unix.ELOOP) {
		return st, errNotRegular // replaced by a symlink since readdir
	}
	if err != nil {
		return st, err
	}
	defer unix.Close(fd)
	if err := unix.Fstat(fd, &st); err != nil {
		return st, err
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return st, errNotRegular
	}
	re.ModTime = time.Unix(st.Mtim.Unix())
	re.ChangeTime = time.Unix(st.Ctim.Unix())
	if st.Size > w.e.opts.MaxFileSize {
		re.ParseReason = ReasonTooLarge
		return st, nil
	}
	// Read what fstat saw, no more: a file that grows meanwhile has a newer
	// mtime, which the re-check before removal catches; one that shrinks
	// reads short and fails to parse, so it is kept.
	n, err := readFull(fd, w.buf[:st.Size])
	if err != nil {
		return st, err
	}
	w.raw = w.buf[:n]
	cf, err := cachefile.ParseCacheFile(w.raw)
	switch {
	case errors.Is(err, cachefile.ErrNotCache):
		re.ParseReason = ReasonNotCache
	case errors.Is(err, cachefile.ErrConflict):
		re.ParseReason = ReasonConflicting
	case err != nil:
		re.ParseReason = ReasonUnparseable
	}
	re.Cache = cf
	return st, nil
}

func readFull(fd int, buf []byte) (int, error) {
	n := 0
	for n < len(buf) {
		m, err := unix.Read(fd, buf[n:])
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return n, err
		}
		if m == 0 {
			break
		}
		n += m
	}
	return n, nil
}

func (w *worker) scratch(dirfd int, name string, typ os.FileMode, referenced map[SandboxID]struct{}) {
	id, ok := cachefile.ParseSandboxID(name)
	if !ok {
		if name != "results" {
			w.counts.scanned[PhaseOther]++
			w.record(w.file(PhaseOther, name), keep(ReasonOtherName))
		}
		return
	}
	w.counts.scanned[PhaseScratch]++
	// The name is the sandbox's ID: reporting it costs nothing.
	f := w.file(PhaseScratch, name)
	f.Sandbox = name
	if !typ.IsRegular() {
		w.record(f, keep(ReasonNotRegular))
		return
	}
	var st unix.Stat_t
	if err := unix.Fstatat(dirfd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		if errors.Is(err, unix.ENOENT) {
			w.counts.vanished[PhaseScratch]++
			return
		}
		w.e.warnFile("cannot stat scratch file", "phase", PhaseScratch, "file", name, "error", err)
		w.counts.errors++
		w.record(f, keep(ReasonError))
		return
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		w.record(f, keep(ReasonNotRegular))
		return
	}
	e := Entry{Name: name, ModTime: time.Unix(st.Mtim.Unix()), ChangeTime: time.Unix(st.Ctim.Unix())}
	f.ModTime = e.ModTime
	d := w.planner.Scratch(e, id, referenced)
	if d.Remove {
		// The lstat just taken is both the plan's and the re-check's.
		d = w.unlink(dirfd, name, d)
	}
	if d.Reason == reasonVanished {
		w.counts.vanished[PhaseScratch]++
		return
	}
	if !d.Remove {
		w.scratchKept[id] = struct{}{}
	}
	w.left(st, d)
	w.record(f, d)
}

// file returns the File of an entry of the worker's cache, for report.
func (w *worker) file(phase Phase, name string) File {
	return File{Cache: w.cache.name, CacheDir: w.cache.dir, Phase: phase, Name: name}
}

// left adds the disk space of a regular file, as the stat the run took
// anyway saw it, to the cache's bytes on disk when the run leaves the file
// there: kept, or in a dry run any.
func (w *worker) left(st unix.Stat_t, d Decision) {
	if !d.Remove || w.e.opts.DryRun {
		w.counts.diskBytes += st.Blocks * 512 // st_blocks counts 512-byte units, whatever the block size
	}
}

// remove carries out a removal decided on the state st: it re-checks that
// the liveness views are still synced and that the entry is still the same
// regular file, no newer than planned, then unlinks it relative to the
// directory.
func (w *worker) remove(dirfd int, name string, st unix.Stat_t, d Decision) Decision {
	release := w.e.opts.Release != nil && w.phase == PhaseResults
	if w.e.opts.DryRun {
		if release {
			if !w.e.reserveRelease() {
				return keep(ReasonCNIDelDeferred)
			}
			w.counts.cniDel.Attempted++ // would run
		}
		return d
	}
	// ran says whether the Release was made: a file kept by the re-check
	// spends none of the run's DELs.
	ran := false
	if release {
		// Before the re-check: the wait for a slot and the rate may be
		// long, and the re-check must be as late as it can.
		done, ok := w.pace()
		if !ok {
			return keep(ReasonCNIDelDeferred)
		}
		defer func() { done(ran) }()
	}
	var now unix.Stat_t
	err := unix.Fstatat(dirfd, name, &now, unix.AT_SYMLINK_NOFOLLOW)
	if errors.Is(err, unix.ENOENT) {
		return keep(reasonVanished)
	}
	if err != nil {
		w.e.warnFile("cannot re-check file", "phase", w.phase, "file", name, "error", err)
		w.counts.errors++
		return keep(ReasonError)
	}
	if now.Mode&unix.S_IFMT != unix.S_IFREG || now.Ino != st.Ino || now.Dev != st.Dev ||
		time.Unix(now.Mtim.Unix()).After(time.Unix(st.Mtim.Unix())) {
		return keep(ReasonChanged)
	}
	if release {
		// The DEL is the destructive step now: it needs the same fresh view
		// as the unlink, and a run that stops spends none of its budget.
		if !w.e.synced() {
			w.e.stop.Store(true)
			return keep(ReasonViewStale)
		}
		ran = true
		if !w.release(name) {
			return keep(ReasonCNIDelFailed)
		}
	}
	return w.unlink(dirfd, name, d)
}

// release runs the Releaser for the file just read; false when it failed.
func (w *worker) release(name string) bool {
	w.counts.cniDel.Attempted++
	w.e.delsAttempted.Add(1)
	start := time.Now()
	err := w.e.opts.Release.Release(w.ctx, name, w.raw)
	if err != nil {
		w.counts.cniDel.Failed++
		w.e.delsFailed.Add(1)
		w.counts.errors++
		w.e.warnFile("cni del failed; file kept for the next run", "phase", w.phase, "file", name,
			"duration_seconds", time.Since(start).Seconds(), "error", err)
		return false
	}
	w.counts.cniDel.Succeeded++
	w.e.delsSucceeded.Add(1)
	if w.e.debug {
		w.e.opts.Logger.Debug("cni del", "phase", w.phase, "file", name, "duration_seconds", time.Since(start).Seconds())
	}
	return true
}

// unlink removes name relative to the directory once the views are known to
// be synced. A file that is gone already was removed by someone else, not by
// this run (reasonVanished).
func (w *worker) unlink(dirfd int, name string, d Decision) Decision {
	if w.e.opts.DryRun {
		return d
	}
	if !w.e.synced() {
		w.e.stop.Store(true)
		return keep(ReasonViewStale)
	}
	err := unix.Unlinkat(dirfd, name, 0)
	switch {
	case errors.Is(err, unix.ENOENT):
		return keep(reasonVanished)
	case err != nil:
		w.e.warnFile("cannot remove file", "phase", w.phase, "file", name, "error", err)
		w.counts.errors++
		return keep(ReasonError)
	}
	return d
}

// record counts the outcome d of the file f and reports it.
func (w *worker) record(f File, d Decision) {
	if d.Remove {
		w.counts.removed[f.Phase]++
		w.counts.removedBy[d.Reason]++
	} else {
		w.counts.kept[d.Reason]++
	}
	w.report(f, d)
}

// report logs the outcome d of the file f and passes it to OnFile. A real
// run's removals are its record of what went: the first maxRemovalLogs at
// info level, the rest, and every other outcome, at debug level.
func (w *worker) report(f File, d Decision) {
	e := w.e
	f.Remove, f.Reason, f.DryRun = d.Remove, d.Reason, e.opts.DryRun
	level := slog.LevelDebug
	if d.Remove && !e.opts.DryRun && e.removals.Add(1) <= maxRemovalLogs {
		level = slog.LevelInfo
	}
	if level == slog.LevelInfo || e.debug {
		msg := "kept"
		switch {
		case d.Remove && e.opts.DryRun:
			msg = "would remove"
		case d.Remove:
			msg = "removed"
		}
		attrs := []slog.Attr{slog.String("cache", string(f.Cache)), slog.String("phase", string(f.Phase)), slog.String("file", f.Name),
			slog.String("reason", string(d.Reason))}
		if pod := f.PodName(); pod != "" {
			attrs = append(attrs, slog.String("pod", pod))
		}
		if f.Pod.UID != "" {
			attrs = append(attrs, slog.String("pod_uid", f.Pod.UID))
		}
		e.opts.Logger.LogAttrs(w.ctx, level, msg, attrs...)
	}
	if e.opts.OnFile == nil {
		return
	}
	if f.Sandbox == "" && f.Phase == PhaseResults {
		if id, ok := cachefile.SandboxIDFromResultsName(f.Name); ok {
			f.Sandbox = id.String()
		}
	}
	e.onFile.Lock()
	defer e.onFile.Unlock()
	e.opts.OnFile(f)
}

// openDir opens a directory relative to dirfd without following a symlink in
// its last component.
func openDir(dirfd int, name string) (*os.File, error) {
	fd, err := unix.Openat(dirfd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	return os.NewFile(uintptr(fd), name), nil
}

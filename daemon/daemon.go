// Package daemon is sweepd's node daemon: it starts the prune runs of the
// node's caches (package prune), by the schedule, when a pause is lifted
// and for the check of deleted pods, all through one function (run), and
// wires the rest around them, each part's job in its own package: the
// views of the node and their proofs (liveness), the check of deleted pods
// (deleted), CNI DEL (cnidel), the uninstall cleanup (uninstall), and what
// each run becomes (report: metrics, log lines, the Node's Events and
// condition; journal; ranges' gauges). What it keeps itself is what joins
// them: the lock that lets one run at a time, the pause and dry run read
// from the Node, readiness, and /metrics, /healthz and /readyz over HTTP.
// PruneOnce builds one cycle the same way, for `sweepd prune`.
package daemon

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/robfig/cron/v3"
	"golang.org/x/time/rate"
	"k8s.io/client-go/rest"

	"github.com/sweep-k8s/sweep/cnidel"
	"github.com/sweep-k8s/sweep/deleted"
	"github.com/sweep-k8s/sweep/internal/field"
	"github.com/sweep-k8s/sweep/journal"
	"github.com/sweep-k8s/sweep/liveness"
	"github.com/sweep-k8s/sweep/prune"
	"github.com/sweep-k8s/sweep/ranges"
	"github.com/sweep-k8s/sweep/report"
	"github.com/sweep-k8s/sweep/uninstall"
)

// Option injects a dependency.
type Option func(*Daemon)

// WithLogger sets the logger; the default discards.
func WithLogger(l *slog.Logger) Option { return func(d *Daemon) { d.log = l } }

// WithReadyNotifier calls f once, after the first sync (systemd's READY=1).
func WithReadyNotifier(f func()) Option { return func(d *Daemon) { d.onReady = f } }

// Daemon is a configured node daemon; Run runs it.
type Daemon struct {
	cfg     Config
	log     *slog.Logger
	onReady func()
	// uninstall is the uninstall cleanup, nil without it (Config.Uninstall).
	uninstall *uninstall.Coordinator

	schedule cron.Schedule
	views    *liveness.Views
	boot     *prune.BootState
	clock    *prune.ClockGuard
	sources  prune.Sources
	deps     prune.Deps // the prune's, the same for every run
	health   *health
	pause    pause
	// dryRunState is the dry run as the last run took it (pruneConfig).
	dryRunState dryRunState
	// reporters take what each run became (run).
	reporters report.Reporters
	metrics   *report.Metrics
	// problems posts the Warnings on the Node, and keeps its condition.
	problems *report.Problems
	// condition is the Node's condition, nil unless Config.NodeCondition.
	condition *report.NodeCondition
	// events posts the runs' Events on the Node; nil without an API client.
	events    *report.NodeEvents
	journal   *journal.Reporter // nil without a state directory
	ranges    *ranges.Reader    // nil without a CNI configuration directory
	synced    atomic.Bool       // first sync done
	proven    atomic.Bool       // the last proof of the views succeeded
	proofMu   sync.Mutex
	proofSeen bool       // a proof has been recorded
	proofMsg  string     // its error, "" for success
	running   sync.Mutex // held by the prune run in progress
	// deleted is the check of deleted pods, nil without it
	// (Config.Deleted); checking is set while one of its runs holds
	// running.
	deleted  *deleted.Checker
	checking atomic.Bool
}

// New checks cfg and builds a daemon. An invalid schedule is an error here,
// before anything starts.
func New(cfg Config, opts ...Option) (*Daemon, error) {
	d := &Daemon{cfg: cfg, log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	for _, o := range opts {
		o(d)
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Schedule == "" {
		return nil, fieldError("Schedule", "a schedule is required")
	}
	d.cfg.Liveness.Mode = cmp.Or(d.cfg.Liveness.Mode, liveness.ModeAPI)
	d.schedule, _ = cron.ParseStandard(cfg.Schedule) // checked by Validate
	node := cfg.Liveness.NodeName
	if node != "" {
		d.log = d.log.With("node", node)
	}
	views, err := liveness.New(d.cfg.Liveness, liveness.WithLogger(d.log), liveness.Following())
	if err != nil {
		return nil, err
	}
	d.views = views
	d.health = newHealth(d.log)
	if err := d.buildUninstall(); err != nil {
		return nil, err
	}
	d.deps, err = releaseDeps(d.cfg, prune.Deps{Logger: d.log, Paused: d.paused},
		func(o cnidel.Observed) { d.metrics.ObserveDEL(o) })
	if err != nil {
		return nil, err
	}
	if pods := views.Pods(); pods != nil && cfg.Deleted.Grace > 0 {
		// The memory of which pod each results file names, which every
		// run adds to, spares a check reading the caches anew.
		d.deps.PodFiles = prune.NewPodFiles()
		d.deleted = deleted.New(cfg.Deleted, views.Metadata(), node, checkPruner{d}, d.log)
		pods.OnDeletion(d.deleted.PodDeleted)
	} else if cfg.Deleted.Grace > 0 {
		d.log.Info("deleted pods are not checked early: with cri liveness the daemon does not watch the node's pods; the scheduled runs prune their files",
			"deleted_pod_grace", cfg.Deleted.Grace)
	}
	whereabouts := ranges.NewWhereaboutsHeld()
	if cfg.StateDir != "" {
		// The record of the removals that outlives the log; without it
		// the log and the Node's Events still have them.
		d.journal = journal.NewReporter(cfg.StateDir, d.log)
	}
	d.deps.OnFile = func(f prune.File) {
		whereabouts.File(f)
		if d.journal != nil {
			d.journal.File(f)
		}
	}
	if pods := views.Pods(); pods != nil {
		if d.deps.Release != nil && d.cfg.CNIDelYield > 0 {
			g := newStartGate(d.cfg.CNIDelYield)
			pods.OnArrival(g.podBound)
			d.deps.ReleaseGate = g
		}
	} else if d.deps.Release != nil && d.cfg.CNIDelYield > 0 {
		d.log.Info("CNI DELs do not yield to starting pods: with cri liveness the daemon does not watch the node's pods",
			"cni_del_yield", d.cfg.CNIDelYield)
	}
	d.metrics = report.NewMetrics(report.MetricsConfig{Prune: cfg.Prune, Pods: views.Pods(), Runtime: views.Runtime() != nil,
		Liveness: d.cfg.Liveness.Mode, CNIDel: d.deps.Release != nil, RebootAware: cfg.RebootAware})
	if d.deleted != nil {
		d.metrics.MustRegister(d.deleted.Collectors()...)
	}
	d.metrics.MustRegister(whereabouts)
	if d.cfg.RebootAware {
		d.boot = loadBoot(d.cfg, d.log, d.metrics.BootRecordError)
	}
	d.clock = prune.NewClockGuard()
	d.sources = views.Sources()
	d.sources.Boot, d.sources.Clock = d.boot, d.clock
	if cfg.CNIConfDir != "" {
		d.ranges = d.newRangeReader()
		d.metrics.MustRegister(d.ranges.Collector())
	}
	if d.uninstall != nil {
		d.metrics.MustRegister(d.uninstall.Collectors()...)
	}
	d.buildReporters(whereabouts)
	return d, nil
}

// buildReporters makes the reporters of the runs, in the order they
// report. A new sink is one more here.
func (d *Daemon) buildReporters(whereabouts *ranges.WhereaboutsHeld) {
	var (
		events    *report.NodeEvents
		condition *report.NodeCondition
	)
	node := d.cfg.Liveness.NodeName
	if dc := d.views.Dynamic(); dc != nil && node != "" {
		events = report.NewNodeEvents(dc, node, d.views.NodeUID, d.log)
		d.events = events
		if d.cfg.NodeCondition {
			condition = report.NewNodeCondition(dc, node, d.log)
			d.condition = condition
		}
	} else if d.cfg.NodeCondition {
		d.log.Warn("the Node's condition is not set: with cri liveness the daemon has no API client", "condition", report.ConditionType)
	}
	d.problems = report.NewProblems(events, condition)
	d.reporters = report.Reporters{d.metrics}
	if d.journal != nil {
		d.reporters = append(d.reporters, d.journal)
	}
	if events != nil {
		d.reporters = append(d.reporters, events)
	}
	d.reporters = append(d.reporters, report.NewLog(d.log), d.problems, whereabouts)
	if d.ranges != nil {
		d.reporters = append(d.reporters, d.ranges)
	}
}

// newRangeReader makes the reader of the ranges of the daemon's CNI
// configuration directory.
func (d *Daemon) newRangeReader() *ranges.Reader {
	// A reservation exists from the middle of its sandbox's ADD, and the
	// runtime lists the sandbox once the ADD is done: as for the release,
	// the minimum age, and at least the ADD's bound (prune.Config.ADDBound), before an unlisted
	// sandbox's reservation is dead.
	grace := max(d.cfg.Prune.MinAge, d.cfg.Prune.ADDBound())
	if d.cfg.AllowShortIntervals {
		grace = d.cfg.Prune.MinAge
	}
	return ranges.NewReader(d.cfg.CNIConfDir, grace, d.trustedSandboxes, d.log)
}

// trustedSandboxes returns the runtime's list of sandboxes when the views
// are proven to be this node's and the list is complete; else nil, and the
// ranges say reserved rather than guess who holds an address.
func (d *Daemon) trustedSandboxes(ctx context.Context) ranges.Sandboxes {
	src := d.sources.Sandboxes
	if src == nil || !d.proven.Load() {
		return nil
	}
	idx, err := src.Sandboxes(ctx)
	if err != nil || !idx.Synced() {
		if err != nil {
			d.log.Debug("ranges read without the runtime's sandboxes", "error", err)
		}
		return nil
	}
	return idx
}

// buildUninstall makes the uninstall cleanup from the configuration.
func (d *Daemon) buildUninstall() error {
	if d.cfg.Uninstall == nil {
		return nil
	}
	if d.cfg.Liveness.RESTConfig == nil {
		return errors.New("no kubernetes access: no client configuration")
	}
	cfg, err := d.cfg.Liveness.RESTConfig()
	if err != nil {
		return fmt.Errorf("no kubernetes access: %w", err)
	}
	ucfg := rest.CopyConfig(cfg)
	// Deleting many objects in parallel needs more than client-go's
	// default 5 requests per second.
	if ucfg.QPS == 0 {
		ucfg.QPS, ucfg.Burst = 50, 100
	}
	// The condition goes with the node phase, while the daemon still has
	// the right to take it off: the cluster phase deletes the right.
	removeCondition := func(ctx context.Context) {
		if d.condition != nil {
			d.condition.Remove(ctx)
		}
	}
	u, err := uninstall.New(d.cfg.uninstallConfig(), uninstall.WithLogger(d.log), uninstall.WithRESTConfig(ucfg),
		uninstall.WithNodeDone(removeCondition))
	if err != nil {
		return fmt.Errorf("uninstall cleanup: %w", err)
	}
	d.uninstall = u
	return nil
}

// releaseDeps returns deps with the CNI DEL releaser of cfg.CNIDel and its
// pace, when cfg asks for DELs. The plugin directories are checked here:
// without them every DEL would fail, and that is better seen at start-up
// than as a growing error count.
func releaseDeps(cfg Config, deps prune.Deps, observe func(cnidel.Observed)) (prune.Deps, error) {
	if cfg.CNIDel == nil {
		return deps, nil
	}
	if err := cfg.CNIDel.CheckBinDirs(); err != nil {
		return deps, fieldError("CNIDel.BinDirs", "%w", err)
	}
	opts := *cfg.CNIDel
	if opts.Observe == nil && observe != nil {
		opts.Observe = observe
	}
	rel, err := cnidel.New(opts)
	if err != nil {
		return deps, field.Wrap("CNIDel", err)
	}
	deps.Release = rel
	if cfg.CNIDelRate > 0 {
		// A token bucket of one: DELs start evenly spaced, never in a burst
		// that would queue a new pod's ADD behind several of them at once.
		deps.ReleaseRate = rate.NewLimiter(rate.Limit(cfg.CNIDelRate), 1)
	}
	return deps, nil
}

// watchClock measures steps of the wall clock for the prune's age guard
// until ctx ends, telling stepped of each (nil: none).
func watchClock(ctx context.Context, wg *sync.WaitGroup, clock *prune.ClockGuard, log *slog.Logger, stepped func(prune.ClockStep)) {
	wg.Go(func() {
		if err := clock.Watch(ctx, stepped); err != nil {
			log.Warn("cannot watch for steps of the wall clock; ages are guarded by the uptime alone", "error", err)
		}
	})
}

// clockStepped reports a step of the wall clock. Only a forward one holds
// files back, so only it is a warning: a node whose time sync sets the clock
// every minute logs no warning for sets that hold nothing back.
func (d *Daemon) clockStepped(s prune.ClockStep) {
	d.metrics.ClockStepped(max(s.Size, 0).Seconds())
	minAge := d.cfg.Prune.MinAge
	switch {
	case s.Err != nil:
		d.log.Warn("the wall clock was set, but its step cannot be measured; until it is, no file is old",
			"min_age", minAge, "error", s.Err)
	case s.Size > 0:
		st := d.clock.State(minAge)
		msg := "the wall clock was set forward: files older than the minimum age by less than forward_steps are kept (clock-unsettled) until ages_trusted_from"
		if s.Suspended > 0 {
			// The wall clock runs on across a suspend while a CNI ADD is
			// frozen: its files would look old at resume.
			msg = "the node was suspended, which is a forward step of the wall clock: files older than the minimum age by less than forward_steps are kept (clock-unsettled) until ages_trusted_from"
		}
		d.log.Warn(msg, "step", s.Size, "suspended", s.Suspended, "direction", "forward", "forward_steps", st.Forward, "min_age", minAge,
			"ages_trusted_from", st.TrustedFrom)
	default:
		direction := "backward"
		if s.Size == 0 {
			direction = "none"
		}
		d.log.Info("the wall clock was set, not forward: this step holds no file back",
			"step", s.Size, "direction", direction, "min_age", minAge)
	}
}

// Run runs the informer, the schedule and the HTTP server until ctx is
// cancelled, then lets a prune in progress stop after its current file and
// returns. It returns early with the first error of the HTTP server.
func (d *Daemon) Run(ctx context.Context) error {
	if d.journal != nil {
		// Last, once no run can write to it.
		defer func() {
			if err := d.journal.Close(); err != nil {
				d.log.Warn("cannot close the journal of removals", "error", err)
			}
		}()
	}
	// Deferred in this order so that cancel runs first and every goroutine
	// has returned when Run does.
	var wg sync.WaitGroup
	defer wg.Wait()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()

	errc := make(chan error, 1)
	if d.cfg.MetricsAddr != "" {
		srv, err := d.serve(ctx, &wg, errc)
		if err != nil {
			return err
		}
		defer srv.Close()
	}

	wg.Go(func() { d.views.Run(ctx) })
	wg.Go(func() { d.watchState(ctx, &wg, time.Second) })
	if d.ranges != nil {
		wg.Go(func() { d.ranges.Loop(ctx) })
	}
	if d.condition != nil {
		wg.Go(func() { heartbeat(ctx, d.condition) })
	}
	watchClock(ctx, &wg, d.clock, d.log, d.clockStepped)
	if d.uninstall != nil {
		// Independent of the pod view: the uninstall cleanup must run even
		// if the prune never gets a fresh view.
		wg.Go(func() {
			if err := d.uninstall.Run(ctx); err != nil {
				d.log.Error("uninstall cleanup stopped", "error", err)
			}
		})
	}
	if synced, err := d.waitFirstSync(ctx, errc); !synced {
		return err
	}
	d.synced.Store(true)
	if d.deleted != nil {
		wg.Go(func() { d.deleted.Run(ctx) })
	}
	// Not ready until the views are proven to be this node's; the proof is
	// kept up between runs, so that readiness follows a Node that goes or
	// starts reporting another boot.
	wg.Go(func() { d.proveLoop(ctx) })

	c := cron.New(cron.WithLocation(time.Local))
	c.Schedule(d.schedule, cron.FuncJob(func() { d.cycle(ctx) }))
	if d.cfg.PruneOnStart {
		wg.Go(func() { d.cycle(ctx) })
	} else {
		// Start-up is over; a run would have returned its memory.
		d.returnMemory()
	}
	c.Start()
	d.log.Info("prune scheduled", "schedule", d.cfg.Schedule, "dir", d.cfg.Prune.Dir, "runtime_cache_dir", d.cfg.Prune.RuntimeDir,
		"dry_run", d.cfg.Prune.DryRun,
		"cni_del", d.deps.Release != nil, "liveness", d.cfg.Liveness.Mode, "reboot_aware", d.boot != nil)
	if !d.views.FollowsNode() {
		// An operator who annotates this node must learn here that it
		// changes nothing.
		d.log.Info("the Node's annotations are not read: with cri liveness the daemon reads no Node; --pause pauses it and --dry-run decides its dry run",
			"annotations", []string{liveness.PauseAnnotation, liveness.DryRunAnnotation})
	}

	select {
	case <-ctx.Done():
	case err := <-errc:
		cancel()
		<-c.Stop().Done()
		return err
	}
	// Stop scheduling; the run in progress sees ctx and stops after its
	// current file.
	<-c.Stop().Done()
	stopCtx, stopCancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer stopCancel()
	if d.events != nil {
		// The runs counted for the next Normal Event are not lost.
		d.events.Flush(stopCtx)
	}
	if d.condition != nil {
		// What the condition says is kept up to date no more.
		d.condition.Stop(stopCtx)
	}
	d.log.Info("stopped")
	return nil
}

// heartbeat renews the Node's condition's heartbeat until ctx ends.
func heartbeat(ctx context.Context, c *report.NodeCondition) {
	t := time.NewTicker(report.HeartbeatEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			c.Heartbeat(ctx)
		}
	}
}

// waitFirstSync waits for the first sync of the node's pods or, with cri
// liveness alone, for the first answer of the runtime.
func (d *Daemon) waitFirstSync(ctx context.Context, errc <-chan error) (bool, error) {
	pods, runtime := d.views.Pods(), d.views.Runtime()
	if pods != nil {
		d.log.Info("waiting for the first sync of the node's pods")
	} else {
		d.log.Info("waiting for the container runtime", "endpoint", runtime.Endpoint())
	}
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	var lastTry time.Time
	for {
		if pods != nil && pods.HasSynced() {
			d.log.Info("pods synced", "pods", pods.Len())
			return true, nil
		}
		if pods == nil && time.Since(lastTry) >= time.Second {
			lastTry = time.Now()
			name, version, err := runtime.Version(ctx)
			if err == nil {
				d.health.clear(time.Now(), sourceRuntime)
				d.log.Info("container runtime answered", "runtime", name, "runtime_version", version)
				return true, nil
			}
			if ctx.Err() == nil {
				d.health.set(time.Now(), sourceRuntime, fmt.Errorf("%s: %w", runtime.Endpoint(), err))
			}
		}
		select {
		case <-ctx.Done():
			return false, nil
		case err := <-errc:
			return false, err
		case <-tick.C:
		}
	}
}

// Intervals of the proof that the views are this node's: retried quickly
// while it fails (after a reboot the kubelet reports the new boot ID within
// seconds), then renewed at a pace a large cluster's API server does not
// feel; every prune run proves the views again anyway.
const (
	proveRetryMin = 2 * time.Second
	proveRetryMax = time.Minute
	proveRenew    = 5 * time.Minute
)

// proveLoop proves the views until ctx ends, and calls onReady after the
// first success.
func (d *Daemon) proveLoop(ctx context.Context) {
	retry := proveRetryMin
	notified := false
	for {
		err := d.prove(ctx)
		wait := proveRenew
		if err != nil || !d.proven.Load() {
			wait, retry = retry, min(2*retry, proveRetryMax)
		} else {
			retry = proveRetryMin
			if !notified && d.onReady != nil {
				d.onReady()
			}
			if !notified {
				// The ranges' first read with the runtime's sandboxes
				// trusted, rather than at the next tick.
				if d.ranges != nil {
					d.ranges.Refresh(ctx)
				}
			}
			notified = true
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
	}
}

// prove checks, outside a prune run, that the views are this node's.
func (d *Daemon) prove(ctx context.Context) error {
	err := d.views.Prove(ctx)
	if err != nil && liveness.ProofError(err) == nil {
		// A failure to ask proves nothing either way. An outage of the API
		// server is said by the health's watch of the views; what else
		// fails to answer is the runtime.
		if ctx.Err() == nil && len(d.views.Problems()) == 0 && d.cfg.Liveness.Mode.Runtime() {
			d.health.set(time.Now(), sourceRuntime, err)
		}
		d.log.Debug("cannot prove the views now", "error", err)
		return err
	}
	if d.cfg.Liveness.Mode.Runtime() {
		d.health.clear(time.Now(), sourceRuntime)
	}
	d.setProven(err)
	return err
}

// setProven records the outcome of a proof: readiness, a metric, and a log
// line when the outcome changes, so that a failing proof retried every few
// seconds logs once.
func (d *Daemon) setProven(err error) {
	if pe := liveness.ProofError(err); pe != nil {
		err = pe // as the prove loop reports it, not wrapped by a cycle
	}
	d.proven.Store(err == nil)
	d.metrics.SetProven(err == nil)
	msg := ""
	if err != nil {
		msg = err.Error()
	}
	d.proofMu.Lock()
	changed := !d.proofSeen || msg != d.proofMsg
	d.proofSeen, d.proofMsg = true, msg
	d.proofMu.Unlock()
	switch {
	case !changed:
	case err != nil:
		d.log.Error("nothing will be deleted: the views are not proven to be this node's", "error", err)
	default:
		d.log.Info("views proven to be this node's", "liveness", d.cfg.Liveness.Mode, "self_pod_uid", d.cfg.Liveness.SelfPodUID,
			"expect_runtime", d.cfg.Liveness.ExpectRuntime)
	}
}

// loadBoot reads the boot ID and the boot record. Any failure is logged and
// counted (failed), never fatal: without a boot ID the daemon is not
// reboot-aware; with an unusable record nothing is earlier-boot until the
// next reboot.
func loadBoot(cfg Config, log *slog.Logger, failed func()) *prune.BootState {
	id, err := prune.ReadBootID(cmp.Or(cfg.Liveness.BootIDFile, prune.DefaultBootIDFile))
	if err != nil {
		failed()
		log.Warn("no boot id: reboot-aware staleness is off", "error", err)
		return nil
	}
	b, err := prune.LoadBootState(cfg.StateDir, id)
	if err != nil {
		failed()
		log.Warn("boot record unusable: no sandbox counts as earlier-boot", "state_dir", cfg.StateDir, "error", err)
	}
	log.Info("boot record loaded", "boot_id", id, "earlier_boot_sandboxes", b.Earlier())
	return b
}

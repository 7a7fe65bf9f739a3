// Package daemon is sweepd's node daemon: a pod informer scoped to its node
// feeds a cron-scheduled prune of the multus cache (package prune), with
// Prometheus metrics and health endpoints over HTTP.
package daemon

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/robfig/cron/v3"
	"golang.org/x/time/rate"
	"k8s.io/client-go/rest"

	"github.com/sweep-k8s/sweep/cnidel"
	"github.com/sweep-k8s/sweep/cri"
	"github.com/sweep-k8s/sweep/internal/field"
	"github.com/sweep-k8s/sweep/journal"
	"github.com/sweep-k8s/sweep/liveness"
	"github.com/sweep-k8s/sweep/prune"
	"github.com/sweep-k8s/sweep/uninstall"
)

// Config is what the daemon does; Options inject what it does it with.
type Config struct {
	// NodeName is this node; only its pods are watched. Optional with cri
	// liveness, where it only labels the logs.
	NodeName string
	// Prune configures each prune run (directories, minimum age, dry run,
	// the CNI DELs' cap and concurrency, host-local's release).
	Prune prune.Config
	// Schedule is a cron spec (standard five fields or a descriptor such as
	// "@every 1h").
	Schedule string
	// PruneOnStart runs a prune right after the first sync.
	PruneOnStart bool
	// DeletedPodGrace, when positive, checks the files of each pod of the
	// node this long after the view of its pods sees it deleted, instead
	// of leaving them to the next scheduled run: a targeted run over that
	// pod's files once the API server confirms its deletion
	// (DefaultDeletedPodGrace; 0: off). Needs the pods' view: api or both
	// liveness.
	DeletedPodGrace time.Duration
	// DeletedPodMinAge is the minimum age of a deleted pod's file before its
	// check removes it, when Prune.MinAge is longer (DefaultDeletedPodMinAge
	// when 0): twice the kubelet's runtimeRequestTimeout plus a minute, the
	// longest a force-deleted pod's last sandbox can still be in its ADD.
	DeletedPodMinAge time.Duration
	// SyncTimeout bounds the wait for a fresh view before a run is skipped.
	SyncTimeout time.Duration
	// MetricsAddr is the listen address of /metrics, /healthz and /readyz;
	// empty disables the server.
	MetricsAddr string
	// Liveness is what decides that a sandbox is dead; default api.
	Liveness liveness.Mode
	// StateDir, when set with RebootAware, holds the boot record
	// (prune.BootState); it must survive reboots.
	StateDir string
	// RebootAware makes the files of sandboxes recorded under an earlier
	// boot stale. Needs StateDir.
	RebootAware bool
	// BootIDFile is read for the current boot ID; default
	// prune.DefaultBootIDFile. The Node named NodeName must report the same
	// boot ID before its pods' view condemns anything.
	BootIDFile string
	// SelfPodUID is the UID of the daemon's own pod (the downward API's
	// metadata.uid); empty on a bare node. When set, the view of the node's
	// pods must hold it and the runtime must list the daemon's own sandbox
	// READY for it.
	SelfPodUID string
	// ExpectRuntime names the kubelet's container runtime, NAME or
	// NAME://VERSION as a Node's containerRuntimeVersion reads: the
	// runtime must answer so. A check against mistakes, never a proof on
	// its own: any runtime can answer to a name.
	ExpectRuntime string
	// CNIConfDir is the CNI configuration directory whose host-local
	// networks' ranges the daemon counts by state (package ranges), reading
	// their reservations where the configurations put them; empty: none.
	CNIConfDir string
	// Pause stops every removal, CNI DEL and release on the node while the
	// daemon runs, as the Node's liveness.PauseAnnotation does for one
	// node: for maintenance or an investigation.
	Pause bool
	// NodeCondition keeps the Node's condition SweepProblem up to date
	// (nodeCondition), for remediation tools that act on Node conditions
	// (node-problem-detector's model). Off by default: it needs patch on
	// nodes/status, a right over every field of every Node's status.
	NodeCondition bool
	// AllowShortIntervals accepts a minimum age and a schedule interval
	// under MinInterval, for tests and demos.
	AllowShortIntervals bool

	// RESTConfig returns the API server's client config. New and PruneOnce
	// call it only when the liveness needs the pods and no client was
	// injected (WithMetadataClient, WithDynamicClient): cri liveness reads
	// no kubeconfig and never contacts the API server.
	RESTConfig func() (*rest.Config, error)
	// CRIEndpoint is the container runtime's CRI socket
	// (cri.ParseEndpoint), default cri.DefaultEndpoint; CRITimeout bounds
	// each call to it, default cri.DefaultTimeout. Both are for cri and
	// both liveness, unless WithRuntime injected a client.
	CRIEndpoint string
	CRITimeout  time.Duration
	// CNIDel, when set, runs CNI DEL for a stale results file's attachment
	// before it is removed (prune.Deps.Release), with plugins from its
	// BinDirs, which must exist.
	// Prune.MaxReleases caps the DELs of one run, Prune.ReleaseConcurrency
	// says how many run at once, CNIDelRate paces them.
	CNIDel *cnidel.Options
	// CNIDelRate is how many CNI DELs may start per second, over all the
	// runs of the daemon (0: unpaced).
	CNIDelRate float64
	// CNIDelYield is how long no CNI DEL starts after a pod is bound to
	// the node, so that the CNI ADD of its sandbox never waits for one on
	// an IPAM lock (DefaultCNIDelYield; 0: DELs never wait). The daemon learns of new pods from its
	// view of the node's pods, so with api or both liveness only.
	CNIDelYield time.Duration
	// Uninstall, when set, runs the uninstall cleanup (package uninstall)
	// next to the prune, unless WithUninstall injected one: its NodeName
	// and StateDir are the daemon's, and it needs API server access, so not
	// with cri liveness.
	Uninstall *uninstall.Config
}

// minDeletedPodGrace is the floor of DeletedPodGrace, unless
// AllowShortIntervals.
const minDeletedPodGrace = 5 * time.Second

// MinInterval is the floor of the minimum age and of the schedule's
// interval. A minimum age under it no longer covers a slow CNI ADD (the
// runtime lists a sandbox only once its ADD is done), and a zero or
// negative "@every" runs a prune every second.
const MinInterval = time.Minute

// HostLocalMinAge is the floor of the minimum age when host-local
// reservations are released: a reservation exists from the middle of its
// ADD, and the kubelet gives RunPodSandbox twice its runtimeRequestTimeout
// (4 minutes by default; containerd runs the ADD under that deadline)
// before the runtime lists the sandbox, plus a minute for the plugin's
// delegates. A kubelet with a raised runtimeRequestTimeout needs a higher
// --min-age: 2 x its timeout + 1m (docs/cni-del.md). sweepd cannot read the
// kubelet's setting without rights to its configz.
const HostLocalMinAge = 2*kubeletRuntimeRequestTimeout + time.Minute

// kubeletRuntimeRequestTimeout is the kubelet's default
// runtimeRequestTimeout.
const kubeletRuntimeRequestTimeout = 2 * time.Minute

// FieldError is an invalid field of a Config, so that a command can name
// the flag that set it; Field is the Config field: "Prune.MinAge",
// "Schedule", ...
type FieldError = field.Error

func fieldError(name, format string, args ...any) error { return field.Errorf(name, format, args...) }

// wrapField names the field of a nested configuration's error by its path
// in Config: "Prune.MinAge".
func wrapField(name string, err error) error {
	if fe := (*field.Error)(nil); errors.As(err, &fe) {
		return field.Wrap(name+"."+fe.Field, fe.Err)
	}
	return field.Wrap(name, err)
}

// Validate checks the configuration without touching anything. An empty
// Schedule is not checked (a single prune has none). Errors are
// *FieldError.
func (c Config) Validate() error {
	if c.Liveness != "" {
		if _, err := liveness.ParseMode(string(c.Liveness)); err != nil {
			return field.Wrap("Liveness", err)
		}
	}
	if c.NodeName == "" && c.Liveness != liveness.ModeCRI {
		return fieldError("NodeName", "node name is required")
	}
	if c.Prune.MinAge < MinInterval && !c.AllowShortIntervals {
		return fieldError("Prune.MinAge", "%s is under the floor of %s: a CNI ADD may still be running on files that young "+
			"(allow shorter ones for tests and demos only)", c.Prune.MinAge, MinInterval)
	}
	if c.MetricsAddr != "" {
		if err := checkListenAddr(c.MetricsAddr); err != nil {
			return fieldError("MetricsAddr", "%q: %w", c.MetricsAddr, err)
		}
	}
	if c.Schedule != "" {
		sched, err := cron.ParseStandard(c.Schedule)
		if err != nil {
			return fieldError("Schedule", "invalid schedule %q: %w", c.Schedule, err)
		}
		// Five-field specs run at most once a minute; "@every" is what can
		// go under (cron rounds a zero or negative interval up to 1s).
		if every, ok := sched.(cron.ConstantDelaySchedule); ok && every.Delay < MinInterval && !c.AllowShortIntervals {
			return fieldError("Schedule", "schedule %q runs every %s, under the floor of %s (allow shorter ones for tests and demos only)",
				c.Schedule, every.Delay, MinInterval)
		}
	}
	if c.CNIConfDir != "" && !filepath.IsAbs(c.CNIConfDir) {
		return fieldError("CNIConfDir", "%q is not an absolute path", c.CNIConfDir)
	}
	if c.RebootAware && c.StateDir == "" {
		return fieldError("RebootAware", "reboot-aware staleness needs a state directory")
	}
	if c.ExpectRuntime != "" {
		if err := liveness.ParseExpectRuntime(c.ExpectRuntime); err != nil {
			return field.Wrap("ExpectRuntime", err)
		}
	}
	if c.Liveness.Runtime() {
		if c.CRIEndpoint != "" {
			if _, err := cri.ParseEndpoint(c.CRIEndpoint); err != nil {
				return field.Wrap("CRIEndpoint", err)
			}
		}
		if c.CRITimeout < 0 {
			return fieldError("CRITimeout", "must not be negative")
		}
	}
	if len(c.Prune.HostLocalDirs) > 0 {
		if !c.Liveness.Runtime() {
			// A reservation names a container and no pod: only the runtime
			// can say it is gone.
			return fieldError("Prune.HostLocalDirs", "releasing host-local reservations needs sandbox liveness from the container runtime: --liveness=cri or both")
		}
		if c.Prune.MinAge < HostLocalMinAge && !c.AllowShortIntervals {
			// host-local writes a reservation during the ADD, and the
			// runtime lists the sandbox only once RunPodSandbox returns,
			// which the kubelet allows up to twice its request timeout:
			// until then the reservation's age is all that keeps it.
			return fieldError("Prune.MinAge", "%s is under the floor of %s for releasing host-local reservations: "+
				"the runtime lists a sandbox only after its ADD, which may take twice the kubelet's runtimeRequestTimeout "+
				"(a raised timeout needs 2 x it + 1m)", c.Prune.MinAge, HostLocalMinAge)
		}
	}
	// After the rules above, which say first what a field needs of the
	// daemon's other settings (as --liveness for host-local's release).
	if err := c.Prune.Validate(); err != nil {
		return wrapField("Prune", err)
	}
	if c.Prune.RuntimeDir != "" && c.CNIDel != nil && !c.Liveness.Runtime() {
		// A pod force-deleted from the API server may still run: the DEL
		// of its runtime cache file would take its primary address from
		// under it, and the runtime sends that DEL itself when it stops
		// the sandbox. Only the runtime can say it is gone.
		return fieldError("Prune.RuntimeDir", "replaying CNI DEL from the runtime's own cache needs sandbox liveness from the container runtime: --liveness=cri or both")
	}
	if c.Uninstall != nil {
		if !c.Liveness.Pods() {
			return fieldError("Uninstall", "the uninstall cleanup needs API server access: not with cri liveness")
		}
		if err := c.uninstallConfig().Validate(); err != nil {
			return wrapField("Uninstall", err)
		}
	}
	if c.CNIDelRate < 0 {
		return fieldError("CNIDelRate", "must not be negative")
	}
	if c.CNIDelYield < 0 {
		return fieldError("CNIDelYield", "must not be negative")
	}
	if c.DeletedPodGrace < 0 {
		return fieldError("DeletedPodGrace", "must not be negative (0: off)")
	}
	if c.DeletedPodMinAge < 0 {
		return fieldError("DeletedPodMinAge", "must not be negative (0: the default)")
	}
	if c.DeletedPodMinAge > 0 && c.DeletedPodMinAge < MinInterval && !c.AllowShortIntervals {
		return fieldError("DeletedPodMinAge", "must be at least %s", MinInterval)
	}
	if c.DeletedPodGrace > 0 && c.DeletedPodGrace < minDeletedPodGrace && !c.AllowShortIntervals {
		// Under it, the check races the kubelet's own teardown: a DEL
		// twice, and a force-deleted pod's sandbox still stopping.
		return fieldError("DeletedPodGrace", "must be at least %s (0: off)", minDeletedPodGrace)
	}
	if c.CNIDel != nil {
		if len(c.CNIDel.BinDirs) == 0 {
			return fieldError("CNIDel.BinDirs", "CNI DEL needs a plugin directory")
		}
		if c.CNIDel.Timeout < 0 {
			return fieldError("CNIDel.Timeout", "must not be negative")
		}
	}
	return nil
}

// uninstallConfig is Uninstall with the daemon's node name and state
// directory.
func (c Config) uninstallConfig() uninstall.Config {
	u := *c.Uninstall
	u.NodeName, u.StateDir = c.NodeName, c.StateDir
	return u
}

// Option injects a dependency.
type Option func(*Daemon)

// WithLogger sets the logger; the default discards.
func WithLogger(l *slog.Logger) Option { return func(d *Daemon) { d.log = l } }

// Uninstaller is a task that runs for the daemon's lifetime next to the
// prune, with its metrics on the daemon's registry: the uninstall cleanup
// (package uninstall). It returns only when ctx ends or it cannot go on.
type Uninstaller interface {
	Run(ctx context.Context) error
	Collectors() []prometheus.Collector
}

// WithUninstall runs u next to the prune.
func WithUninstall(u Uninstaller) Option { return func(d *Daemon) { d.uninstall = u } }

// WithReadyNotifier calls f once, after the first sync (systemd's READY=1).
func WithReadyNotifier(f func()) Option { return func(d *Daemon) { d.onReady = f } }

// Daemon is a configured node daemon; Run runs it.
type Daemon struct {
	cfg       Config
	log       *slog.Logger
	onReady   func()
	uninstall Uninstaller

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
	// failStreak counts the runs in a row that failed (noteFailure).
	failStreak int
	// condition is the Node's condition, nil unless NodeCondition.
	condition *nodeCondition
	events    *nodeEvents     // nil without the API server
	journal   *journal.Writer // nil without a state directory
	ranges    *rangeReader    // nil without a CNI configuration directory
	// whereabouts is the gauge of the Whereabouts addresses the node's
	// live pods hold.
	whereabouts *whereaboutsHeld
	// journalFailed: a write error was logged; the cycles run one at a
	// time (running).
	journalFailed bool
	metrics       *metrics
	synced        atomic.Bool // first sync done
	proven        atomic.Bool // the last proof of the views succeeded
	proofMu       sync.Mutex
	proofSeen     bool       // a proof has been recorded
	proofMsg      string     // its error, "" for success
	running       sync.Mutex // held by the prune run in progress
	// The check of deleted pods; nil without it (DeletedPodGrace).
	deletedQueue *deletedQueue
	podFiles     *prune.PodFiles
	// checking is set while a check of deleted pods holds running.
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
	d.cfg.Liveness = cmp.Or(d.cfg.Liveness, liveness.ModeAPI)
	d.schedule, _ = cron.ParseStandard(cfg.Schedule) // checked by Validate
	if cfg.NodeName != "" {
		d.log = d.log.With("node", cfg.NodeName)
	}
	views, err := liveness.New(d.cfg.livenessConfig(), liveness.WithLogger(d.log), liveness.Following())
	if err != nil {
		return nil, err
	}
	d.views = views
	d.health = newHealth(d.log)
	if cfg.StateDir != "" {
		// The record of the removals that outlives the log; without it
		// the log and the Node's Events still have them.
		if j, err := journal.Open(cfg.StateDir); err != nil {
			d.log.Warn("no journal of removals in the state directory", "state_dir", cfg.StateDir, "error", err)
		} else {
			d.journal = j
		}
	}
	if dc := views.Dynamic(); dc != nil && cfg.NodeName != "" {
		d.events = newNodeEvents(dc, cfg.NodeName, d.log)
		if cfg.NodeCondition {
			d.condition = newNodeCondition(dc, cfg.NodeName, d.log)
		}
	} else if cfg.NodeCondition {
		d.log.Warn("the Node's condition is not set: with cri liveness the daemon has no API client", "condition", conditionType)
	}
	if err := d.buildUninstall(); err != nil {
		return nil, err
	}
	d.deps, err = releaseDeps(d.cfg, prune.Deps{Logger: d.log, Paused: d.paused},
		func(o cnidel.Observed) { d.metrics.observeDEL(o) })
	if err != nil {
		return nil, err
	}
	if pods := views.Pods(); pods != nil && cfg.DeletedPodGrace > 0 {
		d.deletedQueue, d.podFiles = newDeletedQueue(), prune.NewPodFiles()
		pods.OnDeletion(d.podDeleted)
	} else if cfg.DeletedPodGrace > 0 {
		d.log.Info("deleted pods are not checked early: with cri liveness the daemon does not watch the node's pods; the scheduled runs prune their files",
			"deleted_pod_grace", cfg.DeletedPodGrace)
	}
	d.deps.OnFile = d.onFile()
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
	d.metrics = newMetrics(cfg.Prune.Dir, views.Pods(), views.Runtime() != nil, metricsConfig{
		dryRun: cfg.Prune.DryRun, cniDel: d.deps.Release != nil, rebootAware: cfg.RebootAware, liveness: d.cfg.Liveness,
		hostLocal:    len(cfg.Prune.HostLocalDirs) > 0,
		runtimeCache: cfg.Prune.RuntimeDir != "",
	})
	if d.deletedQueue != nil {
		d.metrics.deletedPodSeries(d.deletedQueue.len)
	}
	d.whereabouts = newWhereaboutsHeld()
	d.metrics.registry.MustRegister(d.whereabouts)
	if d.cfg.RebootAware {
		d.boot = loadBoot(d.cfg, d.log, d.metrics.bootErrors.Inc)
	}
	d.clock = prune.NewClockGuard()
	d.sources = views.Sources()
	d.sources.Boot, d.sources.Clock = d.boot, d.clock
	if cfg.CNIConfDir != "" {
		d.ranges = d.newRangeReader()
		d.metrics.registry.MustRegister(d.ranges.gauges)
	}
	if d.uninstall != nil {
		if err := registerAll(d.metrics.registry, d.uninstall.Collectors()); err != nil {
			return nil, err
		}
	}
	return d, nil
}

// livenessConfig is what the views of the configured liveness need.
func (c Config) livenessConfig() liveness.Config {
	return liveness.Config{
		Mode: c.Liveness, NodeName: c.NodeName, BootIDFile: c.BootIDFile, SelfPodUID: c.SelfPodUID,
		ExpectRuntime: c.ExpectRuntime, CRIEndpoint: c.CRIEndpoint, CRITimeout: c.CRITimeout,
		SyncTimeout: c.SyncTimeout, RESTConfig: c.RESTConfig,
	}
}

// buildUninstall makes the uninstall cleanup from the configuration when
// no option injected one.
func (d *Daemon) buildUninstall() error {
	if d.cfg.Uninstall == nil || d.uninstall != nil {
		return nil
	}
	if d.cfg.RESTConfig == nil {
		return errors.New("no kubernetes access: no client configuration")
	}
	cfg, err := d.cfg.RESTConfig()
	if err != nil {
		return fmt.Errorf("no kubernetes access: %w", err)
	}
	ucfg := rest.CopyConfig(cfg)
	// Deleting many objects in parallel needs more than client-go's
	// default 5 requests per second.
	if ucfg.QPS == 0 {
		ucfg.QPS, ucfg.Burst = 50, 100
	}
	u, err := uninstall.New(d.cfg.uninstallConfig(), uninstall.WithLogger(d.log), uninstall.WithRESTConfig(ucfg))
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
	for _, dir := range cfg.CNIDel.BinDirs {
		if fi, err := os.Stat(dir); err != nil || !fi.IsDir() {
			return deps, fieldError("CNIDel.BinDirs", "%s is not a directory", dir)
		}
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
	cfg.Liveness = cmp.Or(cfg.Liveness, liveness.ModeAPI)
	log := deps.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
		deps.Logger = log
	}
	views, err := liveness.New(cfg.livenessConfig(), liveness.WithLogger(log))
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
	sum, res, err := prune.Cycle(ctx, src, prune.Options{Config: cfg.Prune, Deps: deps})
	if res.BootRecordErr != nil {
		log.Warn("cannot write the boot record; reboot-aware staleness will know fewer sandboxes after the next reboot",
			"error", res.BootRecordErr)
	}
	return sum, err
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
	d.metrics.clockSteps.Inc()
	minAge := d.cfg.Prune.MinAge
	switch {
	case s.Err != nil:
		d.log.Warn("the wall clock was set, but its step cannot be measured; until it is, no file is old",
			"min_age", minAge, "error", s.Err)
	case s.Size > 0:
		d.metrics.clockFwd.Add(s.Size.Seconds())
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
		wg.Go(func() { d.ranges.loop(ctx) })
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
	if d.deletedQueue != nil {
		wg.Go(func() { d.checkDeletedPods(ctx) })
	}
	// Not ready until the views are proven to be this node's; the proof is
	// kept up between runs, so that readiness follows a Node that goes or
	// starts reporting another boot.
	wg.Go(func() { d.proveLoop(ctx) })

	c := cron.New(cron.WithLocation(time.Local))
	c.Schedule(d.schedule, cron.FuncJob(func() { d.cycle(ctx) }))
	if d.cfg.PruneOnStart {
		wg.Go(func() { d.cycle(ctx) })
	}
	c.Start()
	d.log.Info("prune scheduled", "schedule", d.cfg.Schedule, "dir", d.cfg.Prune.Dir, "runtime_cache_dir", d.cfg.Prune.RuntimeDir,
		"dry_run", d.cfg.Prune.DryRun,
		"cni_del", d.deps.Release != nil, "liveness", d.cfg.Liveness, "reboot_aware", d.boot != nil)
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
	d.log.Info("stopped")
	return nil
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
				d.refreshRanges(ctx)
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
		if ctx.Err() == nil && len(d.views.Problems()) == 0 && d.cfg.Liveness.Runtime() {
			d.health.set(time.Now(), sourceRuntime, err)
		}
		d.log.Debug("cannot prove the views now", "error", err)
		return err
	}
	if d.cfg.Liveness.Runtime() {
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
	d.metrics.proven.Set(boolFloat(err == nil))
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
		d.log.Info("views proven to be this node's", "liveness", d.cfg.Liveness, "self_pod_uid", d.cfg.SelfPodUID,
			"expect_runtime", d.cfg.ExpectRuntime)
	}
}

// loadBoot reads the boot ID and the boot record. Any failure is logged and
// counted (failed), never fatal: without a boot ID the daemon is not
// reboot-aware; with an unusable record nothing is earlier-boot until the
// next reboot.
func loadBoot(cfg Config, log *slog.Logger, failed func()) *prune.BootState {
	id, err := prune.ReadBootID(cmp.Or(cfg.BootIDFile, prune.DefaultBootIDFile))
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
	held := whereaboutsCount{}
	opts.OnLive = held.add
	sum, res, err := prune.Cycle(ctx, d.sources, opts)
	if sum != nil && err == nil {
		// A complete run read every live pod's results file.
		d.whereabouts.set(held)
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
	attrs := summaryAttrs(sum)
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

// onFile is what the runs tell of each file: the journal's record of a
// removal, and the memory of which pod each results file left belongs to,
// so that the check of a deleted pod need not read it.
func (d *Daemon) onFile() func(prune.File) {
	switch {
	case d.journal != nil && d.podFiles != nil:
		return func(f prune.File) {
			d.journal.File(f)
			d.podFiles.Observe(f)
		}
	case d.journal != nil:
		return d.journal.File
	case d.podFiles != nil:
		return d.podFiles.Observe
	}
	return nil
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

// summaryAttrs are the log attributes of a prune's summary. Counts by phase
// or reason are groups keyed by the phase or reason (kept.pod-live=3), so
// that every key is one of a fixed set; a dry run says would_remove where
// a real run says removed.
func summaryAttrs(sum *prune.Summary) []any {
	removed := "removed"
	if sum.DryRun {
		removed = "would_remove"
	}
	attrs := []any{
		"dry_run", sum.DryRun,
		slog.Group("scanned", "results", sum.Scanned[prune.PhaseResults], "scratch", sum.Scanned[prune.PhaseScratch],
			"other", sum.Scanned[prune.PhaseOther]),
		slog.Group(removed, "results", sum.Removed[prune.PhaseResults], "scratch", sum.Removed[prune.PhaseScratch]),
		reasonGroup(removed+"_by", sum.RemovedBy),
		reasonGroup("kept", sum.Kept),
		"vanished", sum.Vanished[prune.PhaseResults] + sum.Vanished[prune.PhaseScratch],
		"errors", sum.Errors, "duration_seconds", sum.Duration.Seconds(),
	}
	if c := sum.CNIDel; c != nil && sum.DryRun {
		attrs = append(attrs, slog.Group("cni_del", "would_run", c.Attempted))
	} else if c != nil {
		attrs = append(attrs, slog.Group("cni_del", "attempted", c.Attempted, "succeeded", c.Succeeded, "failed", c.Failed))
	}
	if r := sum.Reservations; r != nil {
		released := "released"
		if sum.DryRun {
			released = "would_release"
		}
		attrs = append(attrs, slog.Group("host_local", "scanned", r.Scanned, released, r.Released,
			reasonGroup("kept", r.Kept), "vanished", r.Vanished, "errors", r.Errors))
	}
	if !sum.AgesTrustedFrom.IsZero() {
		attrs = append(attrs, "ages_trusted_from", sum.AgesTrustedFrom)
	}
	// The counts above are the run's; each cache but multus's, the first
	// and usually the only one, adds its own.
	for _, c := range sum.Caches {
		if c.Name != prune.CacheMultus {
			attrs = append(attrs, slog.Group(string(c.Name)+"_cache", "scanned", c.Scanned[prune.PhaseResults],
				removed, c.Removed[prune.PhaseResults], "errors", c.Errors, "disk_bytes", c.DiskBytes))
		}
	}
	return attrs
}

// reasonGroup is a group of the counts of m by reason, in order, so that log
// lines are stable.
func reasonGroup(name string, m map[prune.Reason]int) slog.Attr {
	args := make([]any, 0, 2*len(m))
	for _, r := range sortedReasons(m) {
		args = append(args, string(r), m[r])
	}
	return slog.Group(name, args...)
}

// sortedReasons returns the keys of m in order, so that log lines are
// stable.
func sortedReasons(m map[prune.Reason]int) []prune.Reason {
	rs := make([]prune.Reason, 0, len(m))
	for r := range m {
		rs = append(rs, r)
	}
	slices.Sort(rs)
	return rs
}

// staleReason says why a run stopped for a view that went stale.
func (d *Daemon) staleReason() error {
	if err := d.views.Unheld(); err != nil {
		return err
	}
	return errors.New("a view went stale during the run, and is fresh again")
}

// checkListenAddr checks a listen address, HOST:PORT or :PORT, before
// anything starts: a typo is a usage error, not a daemon that fails later.
func checkListenAddr(addr string) error {
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		return err
	}
	if n, err := strconv.Atoi(port); err != nil || n < 0 || n > 65535 {
		return fmt.Errorf("port %q is not a number from 0 to 65535", port)
	}
	return nil
}

package report

import (
	"cmp"
	"context"
	"runtime"
	"strconv"
	"sync"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"golang.org/x/sys/unix"

	"github.com/sweep-k8s/sweep/cnidel"
	"github.com/sweep-k8s/sweep/internal/version"
	"github.com/sweep-k8s/sweep/liveness"
	"github.com/sweep-k8s/sweep/prune"
)

// Results of a CNI DEL; a closed set, used as a label.
const (
	cniDelSucceeded = "succeeded"
	cniDelFailed    = "failed"
)

// Metrics are the daemon's metrics, on a registry of its own so that tests
// and several daemons in one process never collide: a reporter of the runs,
// and the gauges and counters of what happens between them (the proof, the
// pause, the clock, each CNI DEL).
type Metrics struct {
	registry *prometheus.Registry

	removed     *prometheus.CounterVec
	cniDels     *prometheus.CounterVec
	removedBy   *prometheus.CounterVec
	bootErrors  prometheus.Counter
	sandboxes   prometheus.Gauge
	runs        prometheus.Counter
	failures    prometheus.Counter
	fileErrors  prometheus.Counter
	skipped     *prometheus.CounterVec
	lastSuccess prometheus.Gauge
	duration    prometheus.Histogram
	kept        *prometheus.GaugeVec
	stale       *prometheus.GaugeVec
	lastRun     prometheus.Gauge
	lastRunOK   prometheus.Gauge
	failStreak  prometheus.Gauge
	cacheFiles  *prometheus.GaugeVec
	cacheBytes  *prometheus.GaugeVec
	// caches are the cache directories the runs prune, multus's first.
	caches     []prune.CacheName
	pods       prometheus.GaugeFunc
	viewFresh  prometheus.GaugeFunc
	clockSteps prometheus.Counter
	clockFwd   prometheus.Counter
	proven     prometheus.Gauge
	paused     prometheus.Gauge
	delSeconds *prometheus.HistogramVec
	delHeld    prometheus.Counter
	// delLabels are the plugin and IPAM types seen so far, up to
	// maxDELLabels: the types come from the cache files, which must not
	// grow the series without bound.
	delMu     sync.Mutex
	delLabels map[[2]string]struct{}
	// The host-local reservations' series; nil unless they are released.
	hlReleases *prometheus.CounterVec
	hlKept     *prometheus.GaugeVec
	hlStale    prometheus.Gauge
	// configInfo is sweep_config_info, whose dry_run changes with the
	// mode in force (SetDryRun).
	configInfo *prometheus.GaugeVec
	dryRunMu   sync.Mutex
}

// maxDELLabels bounds the plugin and IPAM pairs of
// sweep_cni_del_duration_seconds; further pairs are counted as "other".
const maxDELLabels = 16

// MetricsConfig is what the series are made for.
type MetricsConfig struct {
	// Prune is the runs' configuration: the caches, each with series of
	// its own, the dry run, the host-local directories whose reservations
	// are counted when released.
	Prune prune.Config
	// Pods is the view of the node's pods, nil with cri liveness: the pod
	// series are then absent, as sweep_runtime_sandboxes is without
	// Runtime.
	Pods    *liveness.PodView
	Runtime bool
	// Liveness, CNIDel and RebootAware change what the other series mean:
	// sweep_config_info says them.
	Liveness            liveness.Mode
	CNIDel, RebootAware bool
}

// NewMetrics makes the daemon's metrics.
func NewMetrics(cfg MetricsConfig) *Metrics {
	view, cacheDir := cfg.Pods, cfg.Prune.Dir
	m := &Metrics{
		registry: prometheus.NewRegistry(),
		removed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sweep_prune_removed_files_total",
			Help: "Cache files removed by the prune, by cache directory (multus, runtime) and phase (results, scratch).",
		}, []string{"cache", "phase"}),
		cniDels: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sweep_prune_cni_dels_total",
			Help: "CNI DELs run before removing results files (--cni-del), by result (succeeded, failed); attempted is their sum. A failed DEL keeps its file for the next run.",
		}, []string{"result"}),
		removedBy: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sweep_prune_removals_total",
			Help: "Cache files removed by the prune (the same removals as sweep_prune_removed_files_total), by cache directory (multus, runtime) and reason (pod-gone, pod-name-gone, orphan-scratch, sandbox-gone, earlier-boot).",
		}, []string{"cache", "reason"}),
		bootErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sweep_boot_record_errors_total",
			Help: "Failures to read the boot ID or the boot record, or to write the record; reboot-aware staleness then knows fewer sandboxes, never more.",
		}),
		sandboxes: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "sweep_runtime_sandboxes",
			Help: "Pod sandboxes, in any state, that the container runtime listed at the last prune (cri and both liveness).",
		}),
		clockSteps: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sweep_clock_steps_total",
			Help: "Sets of the wall clock seen by the daemon, of any size and direction; only forward ones hold files back (sweep_clock_forward_steps_seconds_total).",
		}),
		clockFwd: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sweep_clock_forward_steps_seconds_total",
			Help: "Sum of the forward steps of the wall clock seen by the daemon. For the minimum age after each, files older than the minimum age by less than the forward steps of that time are kept (clock-unsettled).",
		}),
		proven: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "sweep_views_proven",
			Help: "1 while the liveness views are proven to be this node's (the Node exists and reports this boot ID, the daemon's own pod is in them, the runtime is the kubelet's), else 0; nothing is deleted at 0.",
		}),
		paused: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "sweep_paused",
			Help: "1 while sweep is paused on this node (the Node's sweep.k8s.io/pause annotation, or --pause): nothing is removed, DELed or released; else 0.",
		}),
		runs: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sweep_prune_runs_total",
			Help: "Prune runs started.",
		}),
		failures: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sweep_prune_failures_total",
			Help: "Prune runs that stopped with an error or failed on at least one file.",
		}),
		fileErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sweep_prune_file_errors_total",
			Help: "Cache files that could not be read, checked or removed.",
		}),
		skipped: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sweep_prune_skipped_runs_total",
			Help: "Scheduled prune runs skipped, by reason (not-synced: no fresh view of the node's pods; cri-unavailable: no list of sandboxes from the container runtime; node-unproven: the pods listed for the node name are not proven to be this machine's; runtime-unproven: the runtime is not proven to be the kubelet's; still-running: the previous run had not finished; paused: sweep is paused on the node, or the pause stopped the run).",
		}, []string{"reason"}),
		lastSuccess: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "sweep_prune_last_success_timestamp_seconds",
			Help: "Unix time of the end of the last prune run that completed without error.",
		}),
		duration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "sweep_prune_duration_seconds",
			Help:    "Duration of prune runs.",
			Buckets: prometheus.ExponentialBuckets(0.001, 4, 10), // 1 ms to about 4 min
		}),
		kept: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "sweep_prune_kept_files",
			Help: "Files the last prune run kept, by cache directory (multus, runtime) and reason.",
		}, []string{"cache", "reason"}),
		stale: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "sweep_prune_stale_files",
			Help: "Files the last complete prune run found stale, by cache directory (multus, runtime) and reason: removed, or in a dry run the ones a real run would remove.",
		}, []string{"cache", "reason"}),
		lastRun: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "sweep_prune_last_run_timestamp_seconds",
			Help: "Unix time of the end of the last prune run, successful or not (0 until one); skipped runs do not count.",
		}),
		lastRunOK: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "sweep_prune_last_run_success",
			Help: "1 if the last prune run completed without error, 0 if it failed (or none ran yet).",
		}),
		failStreak: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "sweep_prune_consecutive_failures",
			Help: "Prune runs in a row, up to the last one, that failed (as counted by sweep_prune_failures_total); 0 after a success. Skipped runs neither count nor reset it.",
		}),
		delSeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "sweep_cni_del_duration_seconds",
			Help:    "Duration of the CNI DELs run before removing results files (--cni-del), by the type of the network's first plugin and of its IPAM as the cached config names them (at most 16 pairs, then other); the count is the DELs run, failed ones included.",
			Buckets: prometheus.ExponentialBuckets(0.005, 2, 12), // 5 ms to about 10 s, the default plugin timeout
		}, []string{"plugin", "ipam"}),
		delHeld: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sweep_cni_del_held_seconds_total",
			Help: "Time the CNI DELs of the prune runs waited for pods that were bound to the node meanwhile, so as not to delay their sandboxes' CNI ADDs (--cni-del-yield); added at each run's end.",
		}),
		delLabels: map[[2]string]struct{}{},
		cacheFiles: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "sweep_multus_cache_files",
			Help: "Files in the cache directories after the last prune run, by cache (multus, runtime) and directory (results, scratch).",
		}, []string{"cache", "dir"}),
		cacheBytes: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "sweep_cache_disk_bytes",
			Help: "Disk space (allocated blocks) of the results and scratch files in the cache directories after the last prune run, by cache (multus, runtime).",
		}, []string{"cache"}),
		caches: cfg.Prune.Caches(),
	}
	if view != nil {
		m.pods = prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "sweep_pods",
			Help: "Pods on this node in the daemon's view.",
		}, func() float64 { return float64(view.Len()) })
		m.viewFresh = prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "sweep_pod_view_fresh",
			Help: "1 while the view of the node's pods is synced and following the API server, else 0; prunes run only at 1.",
		}, func() float64 {
			if view.Synced() {
				return 1
			}
			return 0
		})
		m.registry.MustRegister(m.pods, m.viewFresh)
	}
	if cfg.Runtime {
		m.registry.MustRegister(m.sandboxes)
	}
	if len(cfg.Prune.HostLocalDirs) > 0 {
		m.hlReleases = prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sweep_host_local_releases_total",
			Help: "host-local reservations released (--release-host-local-dir), by reason (orphaned-reservation).",
		}, []string{"reason"})
		m.hlKept = prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "sweep_host_local_kept_reservations",
			Help: "Entries of host-local's network directories the last complete run kept, by reason.",
		}, []string{"reason"})
		m.hlStale = prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "sweep_host_local_stale_reservations",
			Help: "host-local reservations the last complete run found orphaned: released, or in a dry run the ones a real run would release.",
		})
		for _, r := range prune.ReservationReleasedReasons() {
			m.hlReleases.WithLabelValues(string(r))
		}
		for _, r := range prune.ReservationKeptReasons() {
			m.hlKept.WithLabelValues(string(r))
		}
		m.registry.MustRegister(m.hlReleases, m.hlKept, m.hlStale)
	}
	for _, r := range []string{cniDelSucceeded, cniDelFailed} {
		m.cniDels.WithLabelValues(r)
	}
	for _, r := range Skips() {
		m.skipped.WithLabelValues(string(r))
	}
	for _, c := range m.caches {
		for _, p := range c.Phases() {
			m.removed.WithLabelValues(string(c), string(p))
			m.cacheFiles.WithLabelValues(string(c), string(p))
		}
		m.cacheBytes.WithLabelValues(string(c))
		for _, r := range prune.KeptReasons() {
			m.kept.WithLabelValues(string(c), string(r))
		}
		for _, r := range prune.RemovedReasons() {
			m.removedBy.WithLabelValues(string(c), string(r))
			m.stale.WithLabelValues(string(c), string(r))
		}
	}
	mode := cmp.Or(cfg.Liveness, liveness.ModeAPI)
	m.configInfo = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "sweep_config_info",
		Help: "The daemon's configuration that changes what the other series mean; always 1. dry_run is the mode in force on the node: the Node's sweep.k8s.io/dry-run annotation over --dry-run.",
		ConstLabels: prometheus.Labels{
			"liveness": string(mode), "cni_del": strconv.FormatBool(cfg.CNIDel), "reboot_aware": strconv.FormatBool(cfg.RebootAware),
		},
	}, []string{"dry_run"})
	m.SetDryRun(cfg.Prune.DryRun)
	buildInfo := prometheus.NewGauge(prometheus.GaugeOpts{
		Name:        "sweep_build_info",
		Help:        "Build information; always 1.",
		ConstLabels: prometheus.Labels{"version": version.Version(), "revision": version.Revision(), "goversion": runtime.Version()},
	})
	buildInfo.Set(1)
	m.registry.MustRegister(
		m.removed, m.removedBy, m.cniDels, m.bootErrors, m.clockSteps, m.clockFwd, m.proven, m.paused, m.runs, m.failures, m.fileErrors,
		m.skipped,
		m.lastSuccess, m.duration, m.delSeconds, m.delHeld, m.kept, m.stale, m.lastRun, m.lastRunOK, m.failStreak, m.cacheFiles, m.cacheBytes,
		buildInfo, m.configInfo, newFilesystemCollector(cacheDir),
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	)
	return m
}

// Registry is the registry of the metrics, which /metrics serves; other
// packages' collectors join it (MustRegister).
func (m *Metrics) Registry() *prometheus.Registry { return m.registry }

// MustRegister adds collectors to the registry.
func (m *Metrics) MustRegister(cs ...prometheus.Collector) { m.registry.MustRegister(cs...) }

// Report implements Reporter: a scheduled run's skip, counts, findings and
// result; a targeted run's counts alone.
func (m *Metrics) Report(_ context.Context, r Run) {
	if r.Kind == Targeted {
		if r.Summary != nil {
			m.count(r.Summary)
		}
		return
	}
	if r.Result.Sandboxes >= 0 {
		m.sandboxes.Set(float64(r.Result.Sandboxes))
	}
	if r.Result.BootRecordErr != nil {
		m.bootErrors.Inc()
	}
	if r.Summary != nil {
		m.runs.Inc()
		m.observe(r.Summary, r.Err)
	}
	if r.Skip != "" {
		m.skipped.WithLabelValues(string(r.Skip)).Inc()
	}
}

// SetDryRun sets the mode in force, sweep_config_info's dry_run: one
// series, replaced when the mode changes.
func (m *Metrics) SetDryRun(dry bool) {
	m.dryRunMu.Lock()
	defer m.dryRunMu.Unlock()
	m.configInfo.DeleteLabelValues(strconv.FormatBool(!dry))
	m.configInfo.WithLabelValues(strconv.FormatBool(dry)).Set(1)
}

// SetProven sets sweep_views_proven.
func (m *Metrics) SetProven(proven bool) { m.proven.Set(boolFloat(proven)) }

// SetPaused sets sweep_paused.
func (m *Metrics) SetPaused(paused bool) { m.paused.Set(boolFloat(paused)) }

// ClockStepped counts a set of the wall clock, forward by forward (0: not
// forward).
func (m *Metrics) ClockStepped(forward float64) {
	m.clockSteps.Inc()
	if forward > 0 {
		m.clockFwd.Add(forward)
	}
}

// BootRecordError counts a failure to read the boot ID or the boot record.
func (m *Metrics) BootRecordError() { m.bootErrors.Inc() }

// count adds a run's removals, DELs and releases to the counters: all a
// targeted run (a check of deleted pods) records, as it saw a few files and
// its counts of what is left would mislead.
func (m *Metrics) count(sum *prune.Summary) {
	m.fileErrors.Add(float64(sum.Errors))
	if sum.DryRun {
		return
	}
	for _, c := range sum.Caches {
		for _, p := range c.Name.Phases() {
			m.removed.WithLabelValues(string(c.Name), string(p)).Add(float64(c.Removed[p]))
		}
		for _, r := range prune.RemovedReasons() {
			m.removedBy.WithLabelValues(string(c.Name), string(r)).Add(float64(c.RemovedBy[r]))
		}
	}
	if c := sum.CNIDel; c != nil {
		m.cniDels.WithLabelValues(cniDelSucceeded).Add(float64(c.Succeeded))
		m.cniDels.WithLabelValues(cniDelFailed).Add(float64(c.Failed))
		m.delHeld.Add(c.HeldSeconds)
	}
	if r := sum.Reservations; r != nil && m.hlReleases != nil {
		m.hlReleases.WithLabelValues(string(prune.ReasonOrphanedReservation)).Add(float64(r.Released))
	}
}

// observe records one finished scheduled run.
func (m *Metrics) observe(sum *prune.Summary, err error) {
	m.duration.Observe(sum.Duration.Seconds())
	m.count(sum)
	caches := sum.Caches
	m.lastRun.SetToCurrentTime()
	if err != nil {
		// An interrupted run saw part of the cache only: its counts of kept,
		// stale and remaining files would mislead.
		m.failed()
		return
	}
	for _, c := range caches {
		name := string(c.Name)
		for _, r := range prune.KeptReasons() {
			m.kept.WithLabelValues(name, string(r)).Set(float64(c.Kept[r]))
		}
		// RemovedBy counts would-be removals in a dry run: what a dry run
		// is for, so these are set in both.
		for _, r := range prune.RemovedReasons() {
			m.stale.WithLabelValues(name, string(r)).Set(float64(c.RemovedBy[r]))
		}
		for _, p := range c.Name.Phases() {
			m.cacheFiles.WithLabelValues(name, string(p)).Set(float64(c.Remaining(p, sum.DryRun)))
		}
		m.cacheBytes.WithLabelValues(name).Set(float64(c.DiskBytes))
	}
	if r := sum.Reservations; r != nil && m.hlKept != nil {
		for _, reason := range prune.ReservationKeptReasons() {
			m.hlKept.WithLabelValues(string(reason)).Set(float64(r.Kept[reason]))
		}
		m.hlStale.Set(float64(r.Released))
	}
	if sum.Errors > 0 {
		m.failed()
		return
	}
	m.lastSuccess.SetToCurrentTime()
	m.lastRunOK.Set(1)
	m.failStreak.Set(0)
}

// ObserveDEL records one CNI DEL as it ends, so that a long drain shows its
// pace while it runs.
func (m *Metrics) ObserveDEL(o cnidel.Observed) {
	key := [2]string{delLabel(o.Plugin), delLabel(o.IPAM)}
	m.delMu.Lock()
	if _, ok := m.delLabels[key]; !ok {
		if len(m.delLabels) < maxDELLabels {
			m.delLabels[key] = struct{}{}
		} else {
			key = [2]string{"other", "other"}
		}
	}
	m.delMu.Unlock()
	m.delSeconds.WithLabelValues(key[0], key[1]).Observe(o.Duration.Seconds())
}

// delLabel is a plugin type as a label value: "none" for a network without
// IPAM, "other" for what no plugin would be named.
func delLabel(typ string) string {
	switch {
	case typ == "":
		return "none"
	case len(typ) > 64 || !utf8.ValidString(typ):
		return "other"
	}
	return typ
}

// failed records a failed run.
func (m *Metrics) failed() {
	m.failures.Inc()
	m.lastRunOK.Set(0)
	m.failStreak.Inc()
}

// filesystemCollector reports the inodes and bytes of the filesystem that
// holds the cache at scrape time, from one statfs: running out of inodes is
// the failure the prune exists to prevent.
type filesystemCollector struct {
	dir                               string
	free, total, freeBytes, sizeBytes *prometheus.Desc
}

func newFilesystemCollector(dir string) *filesystemCollector {
	return &filesystemCollector{
		dir: dir,
		// Named as node_exporter's node_filesystem_files{,_free} and
		// node_filesystem_{free,size}_bytes, so that node-mixin's queries
		// and alerts carry over.
		free: prometheus.NewDesc("sweep_multus_filesystem_files_free",
			"Free inodes (file nodes) of the filesystem holding the multus cache.", nil, nil),
		total: prometheus.NewDesc("sweep_multus_filesystem_files",
			"Total inodes (file nodes) of the filesystem holding the multus cache.", nil, nil),
		freeBytes: prometheus.NewDesc("sweep_multus_filesystem_free_bytes",
			"Free bytes of the filesystem holding the multus cache, those reserved for root included (CNI plugins write as root).", nil, nil),
		sizeBytes: prometheus.NewDesc("sweep_multus_filesystem_size_bytes",
			"Size in bytes of the filesystem holding the multus cache.", nil, nil),
	}
}

func (c *filesystemCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.free
	ch <- c.total
	ch <- c.freeBytes
	ch <- c.sizeBytes
}

func (c *filesystemCollector) Collect(ch chan<- prometheus.Metric) {
	var st unix.Statfs_t
	if err := unix.Statfs(c.dir, &st); err != nil {
		// A missing cache directory must not fail the whole scrape; the
		// series are absent until it exists.
		return
	}
	ch <- prometheus.MustNewConstMetric(c.free, prometheus.GaugeValue, float64(st.Ffree))
	ch <- prometheus.MustNewConstMetric(c.total, prometheus.GaugeValue, float64(st.Files))
	// Blocks are counted in units of the fragment size, which is the block
	// size on the filesystems a node has (statfs(2)).
	unit := float64(st.Frsize)
	if unit == 0 {
		unit = float64(st.Bsize)
	}
	ch <- prometheus.MustNewConstMetric(c.freeBytes, prometheus.GaugeValue, float64(st.Bfree)*unit)
	ch <- prometheus.MustNewConstMetric(c.sizeBytes, prometheus.GaugeValue, float64(st.Blocks)*unit)
}

func boolFloat(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

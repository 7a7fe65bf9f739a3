package report

import (
	"bytes"
	"errors"
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"

	"github.com/sweep-k8s/sweep/cnidel"
	"github.com/sweep-k8s/sweep/liveness"
	"github.com/sweep-k8s/sweep/prune"
)

// run is one finished prune run as the daemon observes it.
type run struct {
	sum *prune.Summary
	err error
}

func summary(dryRun bool, scanned, errs int, removedBy map[prune.Reason]int) *prune.Summary {
	removed := 0
	for _, n := range removedBy {
		removed += n
	}
	counts := prune.FileCounts{
		Scanned:   map[prune.Phase]int{prune.PhaseResults: scanned},
		Removed:   map[prune.Phase]int{prune.PhaseResults: removed},
		RemovedBy: removedBy,
		Kept:      map[prune.Reason]int{prune.ReasonPodLive: scanned - removed},
		Errors:    errs,
	}
	return &prune.Summary{DryRun: dryRun, FileCounts: counts, Caches: []*prune.CacheSummary{{Name: prune.CacheMultus, FileCounts: counts}}}
}

// TestMetricsObserve checks what Prometheus sees after a sequence of runs:
// a dry run's stale files (issue 18: the first rollout is a dry run, and
// its findings must not be in the logs only), the last run's result and
// the count of failures in a row that SweepPruneFailing alerts on.
func TestMetricsObserve(t *testing.T) {
	interrupted := errors.New("interrupted")
	for _, c := range []struct {
		name   string
		dryRun bool
		runs   []run
		want   map[string]float64 // series (name or name{label="v"}) to value
	}{
		{
			name: "no run yet",
			want: map[string]float64{
				"sweep_prune_last_run_success": 0, "sweep_prune_consecutive_failures": 0,
				"sweep_prune_last_run_timestamp_seconds": 0, `sweep_prune_stale_files{cache="multus",reason="pod-gone"}`: 0,
			},
		},
		{
			name:   "dry run: stale files reported, none removed",
			dryRun: true,
			runs:   []run{{summary(true, 10, 0, map[prune.Reason]int{prune.ReasonPodGone: 3, prune.ReasonEarlierBoot: 1}), nil}},
			want: map[string]float64{
				`sweep_prune_stale_files{cache="multus",reason="pod-gone"}`: 3, `sweep_prune_stale_files{cache="multus",reason="earlier-boot"}`: 1,
				`sweep_prune_stale_files{cache="multus",reason="sandbox-gone"}`: 0, `sweep_prune_removals_total{cache="multus",reason="pod-gone"}`: 0,
				`sweep_prune_removed_files_total{cache="multus",phase="results"}`: 0, `sweep_multus_cache_files{cache="multus",dir="results"}`: 10,
				"sweep_prune_last_run_success": 1, "sweep_prune_consecutive_failures": 0,
				`sweep_config_info{cni_del="false",dry_run="true",liveness="api",reboot_aware="false"}`: 1,
			},
		},
		{
			name: "real run: stale files are the removed ones",
			runs: []run{{summary(false, 10, 0, map[prune.Reason]int{prune.ReasonPodGone: 3}), nil}},
			want: map[string]float64{
				`sweep_prune_stale_files{cache="multus",reason="pod-gone"}`: 3, `sweep_prune_removals_total{cache="multus",reason="pod-gone"}`: 3,
				`sweep_multus_cache_files{cache="multus",dir="results"}`: 7, "sweep_prune_last_run_success": 1,
				`sweep_config_info{cni_del="false",dry_run="false",liveness="api",reboot_aware="false"}`: 1,
			},
		},
		{
			name: "two failures in a row: file errors, then an interrupted run",
			runs: []run{
				{summary(false, 10, 0, map[prune.Reason]int{prune.ReasonPodGone: 2}), nil},
				{summary(false, 10, 1, map[prune.Reason]int{prune.ReasonPodGone: 1}), nil},
				{summary(false, 4, 0, map[prune.Reason]int{prune.ReasonPodGone: 4}), interrupted},
			},
			want: map[string]float64{
				"sweep_prune_last_run_success": 0, "sweep_prune_consecutive_failures": 2, "sweep_prune_failures_total": 2,
				// The interrupted run saw part of the cache: the last
				// complete run's findings stay.
				`sweep_prune_stale_files{cache="multus",reason="pod-gone"}`: 1,
			},
		},
		{
			name: "a success resets the failures in a row",
			runs: []run{
				{summary(false, 10, 1, nil), nil},
				{summary(false, 10, 1, nil), nil},
				{summary(false, 10, 0, nil), nil},
			},
			want: map[string]float64{"sweep_prune_last_run_success": 1, "sweep_prune_consecutive_failures": 0, "sweep_prune_failures_total": 2},
		},
	} {
		t.Run(c.name, func(t *testing.T) {
			m := NewMetrics(MetricsConfig{Prune: prune.Config{Dir: t.TempDir(), DryRun: c.dryRun}})
			for _, r := range c.runs {
				m.observe(r.sum, r.err)
			}
			got := gatherSeries(t, m)
			for series, want := range c.want {
				if v, ok := got[series]; !ok {
					t.Errorf("no series %s", series)
				} else if v != want {
					t.Errorf("%s = %v, want %v", series, v, want)
				}
			}
			if got["sweep_multus_filesystem_size_bytes"] <= 0 || got["sweep_multus_filesystem_free_bytes"] > got["sweep_multus_filesystem_size_bytes"] {
				t.Errorf("filesystem bytes: free %v of %v", got["sweep_multus_filesystem_free_bytes"], got["sweep_multus_filesystem_size_bytes"])
			}
			if len(c.runs) > 0 && got["sweep_prune_last_run_timestamp_seconds"] == 0 {
				t.Error("sweep_prune_last_run_timestamp_seconds not set by a run")
			}
		})
	}
}

// withReservations adds to sum a reservations' phase that released
// released and kept one live and one named.
func withReservations(sum *prune.Summary, released int) *prune.Summary {
	sum.Reservations = &prune.ReservationCounts{Scanned: released + 2, Released: released,
		Kept: map[prune.Reason]int{prune.ReasonSandboxLive: 1, prune.ReasonCacheNamed: 1}}
	return sum
}

// TestMetricsReservations: host-local releases are counted by a real run
// only; a dry run's and a real run's findings are the stale gauge; an
// interrupted run leaves the last complete run's.
func TestMetricsReservations(t *testing.T) {
	for _, c := range []struct {
		name   string
		dryRun bool
		runs   []run
		want   map[string]float64
	}{
		{
			name:   "dry run",
			dryRun: true,
			runs:   []run{{withReservations(summary(true, 1, 0, nil), 2), nil}},
			want: map[string]float64{
				`sweep_host_local_releases_total{reason="orphaned-reservation"}`: 0, "sweep_host_local_stale_reservations": 2,
				`sweep_host_local_kept_reservations{reason="sandbox-live"}`: 1, `sweep_host_local_kept_reservations{reason="cache-named"}`: 1,
				`sweep_host_local_kept_reservations{reason="lock-busy"}`: 0, `sweep_host_local_kept_reservations{reason="network-not-allowed"}`: 0,
			},
		},
		{
			name: "real runs, the last interrupted",
			runs: []run{
				{withReservations(summary(false, 1, 0, nil), 2), nil},
				{withReservations(summary(false, 1, 0, nil), 1), errors.New("interrupted")},
			},
			want: map[string]float64{
				`sweep_host_local_releases_total{reason="orphaned-reservation"}`: 3, "sweep_host_local_stale_reservations": 2,
			},
		},
	} {
		t.Run(c.name, func(t *testing.T) {
			m := NewMetrics(MetricsConfig{Prune: prune.Config{Dir: t.TempDir(), DryRun: c.dryRun, HostLocalDirs: []string{"/var/lib/cni/networks"}},
				Runtime: true, Liveness: liveness.ModeCRI})
			for _, r := range c.runs {
				m.observe(r.sum, r.err)
			}
			got := gatherSeries(t, m)
			for series, want := range c.want {
				if v, ok := got[series]; !ok {
					t.Errorf("no series %s", series)
				} else if v != want {
					t.Errorf("%s = %v, want %v", series, v, want)
				}
			}
		})
	}
	// Without the release, no such series.
	m := NewMetrics(MetricsConfig{Prune: prune.Config{Dir: t.TempDir()}, Runtime: true, Liveness: liveness.ModeCRI})
	for series := range gatherSeries(t, m) {
		if strings.HasPrefix(series, "sweep_host_local_") {
			t.Errorf("series %s without --release-host-local-dir", series)
		}
	}
}

// TestMetricsPerCache checks that each cache directory is counted apart,
// with its bytes on disk, and that the runtime cache's series exist only
// when it is pruned.
func TestMetricsPerCache(t *testing.T) {
	cache := func(name prune.CacheName, scanned, removed int, bytes int64) *prune.CacheSummary {
		return &prune.CacheSummary{Name: name, FileCounts: prune.FileCounts{
			Scanned: map[prune.Phase]int{prune.PhaseResults: scanned}, Removed: map[prune.Phase]int{prune.PhaseResults: removed},
			RemovedBy: map[prune.Reason]int{prune.ReasonPodGone: removed}, Kept: map[prune.Reason]int{prune.ReasonPodLive: scanned - removed},
			Vanished: map[prune.Phase]int{}}, DiskBytes: bytes}
	}
	for _, tc := range []struct {
		name       string
		runtimeDir string // the runtime's cache pruned too
		caches     []*prune.CacheSummary
		want       map[string]float64
		absent     []string
	}{
		{
			name: "multus only", caches: []*prune.CacheSummary{cache(prune.CacheMultus, 10, 3, 28672)},
			want: map[string]float64{
				`sweep_prune_removals_total{cache="multus",reason="pod-gone"}`: 3, `sweep_multus_cache_files{cache="multus",dir="results"}`: 7,
				`sweep_cache_disk_bytes{cache="multus"}`: 28672, `sweep_prune_kept_files{cache="multus",reason="pod-live"}`: 7,
			},
			absent: []string{`sweep_prune_removals_total{cache="runtime",reason="pod-gone"}`, `sweep_cache_disk_bytes{cache="runtime"}`},
		},
		{
			name: "both caches", runtimeDir: "/var/lib/cni/results",
			caches: []*prune.CacheSummary{cache(prune.CacheMultus, 10, 3, 28672), cache(prune.CacheRuntime, 5, 4, 4096)},
			want: map[string]float64{
				`sweep_prune_removals_total{cache="multus",reason="pod-gone"}`: 3, `sweep_prune_removals_total{cache="runtime",reason="pod-gone"}`: 4,
				`sweep_prune_stale_files{cache="runtime",reason="pod-gone"}`: 4, `sweep_prune_kept_files{cache="runtime",reason="pod-live"}`: 1,
				`sweep_prune_removed_files_total{cache="runtime",phase="results"}`: 4, `sweep_multus_cache_files{cache="runtime",dir="results"}`: 1,
				`sweep_cache_disk_bytes{cache="runtime"}`: 4096, `sweep_cache_disk_bytes{cache="multus"}`: 28672,
			},
			// The runtime's cache has no scratch files.
			absent: []string{`sweep_multus_cache_files{cache="runtime",dir="scratch"}`, `sweep_prune_removed_files_total{cache="runtime",phase="scratch"}`},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := NewMetrics(MetricsConfig{Prune: prune.Config{Dir: t.TempDir(), RuntimeDir: tc.runtimeDir}})
			sum := &prune.Summary{FileCounts: prune.FileCounts{Scanned: map[prune.Phase]int{}, Removed: map[prune.Phase]int{},
				RemovedBy: map[prune.Reason]int{}, Kept: map[prune.Reason]int{}}, Caches: tc.caches}
			m.observe(sum, nil)
			got := gatherSeries(t, m)
			for series, want := range tc.want {
				if v, ok := got[series]; !ok || v != want {
					t.Errorf("%s = %v (present %v), want %v", series, v, ok, want)
				}
			}
			for _, series := range tc.absent {
				if _, ok := got[series]; ok {
					t.Errorf("series %s present", series)
				}
			}
		})
	}
}

// TestMetricsLint runs promtool check metrics (naming, units, help) on
// every series the daemon registers, with every optional collector on.
func TestMetricsLint(t *testing.T) {
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		t.Fatalf("promtool is needed (Debian package prometheus; .ci/run installs it): %v", err)
	}
	m := NewMetrics(MetricsConfig{Prune: prune.Config{Dir: t.TempDir(), RuntimeDir: "/var/lib/cni/results", HostLocalDirs: []string{"/var/lib/cni/networks"}},
		Runtime: true, Liveness: liveness.ModeBoth, CNIDel: true, RebootAware: true})
	m.observe(withReservations(summary(false, 3, 0, map[prune.Reason]int{prune.ReasonSandboxGone: 1}), 1), nil)
	cmd := exec.Command(promtool, "check", "metrics")
	cmd.Stdin = bytes.NewReader(exposition(t, m))
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Errorf("promtool check metrics: %v\n%s", err, out)
	}
	got := gatherSeries(t, m)
	for _, name := range []string{"sweep_multus_filesystem_files", "sweep_multus_filesystem_files_free", "sweep_runtime_sandboxes",
		"sweep_multus_filesystem_free_bytes", "sweep_multus_filesystem_size_bytes"} {
		if _, ok := got[name]; !ok {
			t.Errorf("no series %s", name)
		}
	}
}

// exposition is the registry in the text format, as /metrics serves it.
func exposition(t *testing.T, m *Metrics) []byte {
	t.Helper()
	mfs, err := m.registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	enc := expfmt.NewEncoder(&buf, expfmt.NewFormat(expfmt.TypeTextPlain))
	for _, mf := range mfs {
		if err := enc.Encode(mf); err != nil {
			t.Fatal(err)
		}
	}
	return buf.Bytes()
}

// gatherSeries returns the gauges and counters of the registry by series:
// the name, with its labels in the exposition's order when it has any.
func gatherSeries(t *testing.T, m *Metrics) map[string]float64 {
	t.Helper()
	mfs, err := m.registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	series := map[string]float64{}
	for _, mf := range mfs {
		for _, metric := range mf.GetMetric() {
			var labels []string
			for _, l := range metric.GetLabel() {
				labels = append(labels, l.GetName()+`="`+l.GetValue()+`"`)
			}
			name := mf.GetName()
			if len(labels) > 0 {
				name += "{" + strings.Join(labels, ",") + "}"
			}
			switch {
			case metric.Gauge != nil:
				series[name] = metric.GetGauge().GetValue()
			case metric.Counter != nil:
				series[name] = metric.GetCounter().GetValue()
			}
		}
	}
	return series
}

// TestObserveDELBounded: the plugin types come from cache files; past
// maxDELLabels pairs, and for names no plugin has, they count as other.
func TestObserveDELBounded(t *testing.T) {
	m := NewMetrics(MetricsConfig{Prune: prune.Config{Dir: t.TempDir()}, CNIDel: true})
	for i := range maxDELLabels + 5 {
		m.ObserveDEL(cnidel.Observed{Plugin: fmt.Sprintf("p%d", i), IPAM: "host-local", Duration: time.Millisecond})
	}
	m.ObserveDEL(cnidel.Observed{Plugin: "bridge", Duration: time.Millisecond})
	m.ObserveDEL(cnidel.Observed{Plugin: "p0", IPAM: "host-local", Duration: time.Millisecond})
	m.ObserveDEL(cnidel.Observed{Plugin: strings.Repeat("x", 65), IPAM: "host-local", Duration: time.Millisecond})
	counts := map[[2]string]uint64{}
	mfs, err := m.registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "sweep_cni_del_duration_seconds" {
			continue
		}
		for _, s := range mf.GetMetric() {
			var key [2]string
			for _, l := range s.GetLabel() {
				if l.GetName() == "plugin" {
					key[0] = l.GetValue()
				} else {
					key[1] = l.GetValue()
				}
			}
			counts[key] = s.GetHistogram().GetSampleCount()
		}
	}
	if len(counts) != maxDELLabels+1 {
		t.Errorf("%d series, want %d and other", len(counts), maxDELLabels)
	}
	for key, want := range map[[2]string]uint64{
		{"p0", "host-local"}: 2,
		{"other", "other"}:   5 + 2, // the pairs past the bound, bridge without IPAM, the over-long name
	} {
		if counts[key] != want {
			t.Errorf("%v: %d DELs, want %d (all: %v)", key, counts[key], want, counts)
		}
	}
}

package prune_test

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/sweep-k8s/sweep/prune"
)

// TestSummaryLogAttrs checks the keys of a run's log line: snake_case, the
// reasons as keys of a group rather than pasted into key names, and a dry
// run's would-be removals under would_remove, never removed (issue 26).
func TestSummaryLogAttrs(t *testing.T) {
	trusted := time.Date(2026, 3, 1, 14, 32, 5, 0, time.UTC)
	for _, tc := range []struct {
		name    string
		sum     *prune.Summary
		want    map[string]any // JSON paths (dotted) and their values
		without []string       // top-level keys that must be absent
	}{
		{
			name: "real run",
			sum: &prune.Summary{
				FileCounts: prune.FileCounts{
					Scanned:   map[prune.Phase]int{prune.PhaseResults: 4, prune.PhaseScratch: 2, prune.PhaseOther: 1},
					Removed:   map[prune.Phase]int{prune.PhaseResults: 2, prune.PhaseScratch: 1},
					RemovedBy: map[prune.Reason]int{prune.ReasonPodGone: 2, prune.ReasonOrphanScratch: 1},
					Kept:      map[prune.Reason]int{prune.ReasonPodLive: 2, prune.ReasonSandboxReferenced: 1, prune.ReasonOtherName: 1},
				},
				CNIDel: &prune.CNIDelCounts{Attempted: 2, Succeeded: 1, Failed: 1},
				Reservations: &prune.ReservationCounts{Scanned: 3, Released: 1,
					Kept: map[prune.Reason]int{prune.ReasonSandboxLive: 1, prune.ReasonCacheNamed: 1}},
				Caches: []*prune.CacheSummary{{Name: prune.CacheMultus}, {Name: prune.CacheRuntime,
					FileCounts: prune.FileCounts{Scanned: map[prune.Phase]int{prune.PhaseResults: 1}, Removed: map[prune.Phase]int{prune.PhaseResults: 1}},
					DiskBytes:  4096}},
			},
			want: map[string]any{
				"dry_run": false, "removed.results": 2.0, "removed.scratch": 1.0, "scanned.other": 1.0,
				"removed_by.pod-gone": 2.0, "removed_by.orphan-scratch": 1.0, "kept.pod-live": 2.0,
				"cni_del.attempted": 2.0, "cni_del.failed": 1.0,
				"host_local.scanned": 3.0, "host_local.released": 1.0, "host_local.kept.cache-named": 1.0,
				"runtime_cache.scanned": 1.0, "runtime_cache.removed": 1.0, "runtime_cache.disk_bytes": 4096.0,
			},
			without: []string{"would_remove", "would_remove_by", "ages_trusted_from", "multus_cache"},
		},
		{
			name: "dry run",
			sum: &prune.Summary{
				DryRun: true,
				FileCounts: prune.FileCounts{
					Scanned:   map[prune.Phase]int{prune.PhaseResults: 4},
					Removed:   map[prune.Phase]int{prune.PhaseResults: 2},
					RemovedBy: map[prune.Reason]int{prune.ReasonPodGone: 2},
					Kept:      map[prune.Reason]int{prune.ReasonClockUnsettled: 2},
				},
				CNIDel:          &prune.CNIDelCounts{Attempted: 2},
				AgesTrustedFrom: trusted,
				Reservations:    &prune.ReservationCounts{Scanned: 1, Released: 1, Kept: map[prune.Reason]int{}},
			},
			want: map[string]any{
				"dry_run": true, "would_remove.results": 2.0, "would_remove_by.pod-gone": 2.0,
				"kept.clock-unsettled": 2.0, "cni_del.would_run": 2.0, "ages_trusted_from": "2026-03-01T14:32:05Z",
				"host_local.would_release": 1.0,
			},
			without: []string{"removed", "removed_by", "runtime_cache"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var buf bytes.Buffer
			slog.New(slog.NewJSONHandler(&buf, nil)).Info("prune done", tc.sum.LogAttrs()...)
			var line map[string]any
			if err := json.Unmarshal(buf.Bytes(), &line); err != nil {
				t.Fatalf("%v: %s", err, buf.Bytes())
			}
			t.Logf("%s", buf.Bytes())
			for path, want := range tc.want {
				if got := lookup(line, path); got != want {
					t.Errorf("%s = %v, want %v", path, got, want)
				}
			}
			for _, k := range tc.without {
				if _, ok := line[k]; ok {
					t.Errorf("key %s in %s", k, buf.Bytes())
				}
			}
			snake := regexp.MustCompile(`^[a-z][a-z0-9]*(_[a-z0-9]+)*$`)
			for k := range line {
				if !snake.MatchString(k) {
					t.Errorf("key %q is not snake_case", k)
				}
			}
		})
	}
}

// lookup follows a dotted path through nested JSON objects. A reason
// contains no dot, so the last element is always one key.
func lookup(m map[string]any, path string) any {
	var v any = m
	for _, k := range strings.Split(path, ".") {
		o, ok := v.(map[string]any)
		if !ok {
			return nil
		}
		v = o[k]
	}
	return v
}

package report

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"

	"github.com/sweep-k8s/sweep/liveness"
	"github.com/sweep-k8s/sweep/prune"
)

// TestNewRun pins how a cycle's return becomes a Run: which errors are
// skips (a closed set, sweep_prune_skipped_runs_total's labels), which
// failures, and what each reporter is then told, by the log's line.
func TestNewRun(t *testing.T) {
	sum := summary(false, 3, 0, map[prune.Reason]int{prune.ReasonPodGone: 1})
	unproven := fmt.Errorf("%w: no Node", liveness.ErrNodeUnproven)
	for _, tc := range []struct {
		name              string
		sum               *prune.Summary
		err               error
		skip              Skip
		failed, completed bool
		log               string // the line Log writes for a scheduled run
	}{
		{"done", sum, nil, "", false, true, `level=INFO msg="prune done"`},
		{"node unproven", nil, unproven, SkipNodeUnproven, false, false, `level=WARN msg="prune skipped: nothing deleted"`},
		{"runtime unproven", nil, fmt.Errorf("%w: x", liveness.ErrRuntimeUnproven), SkipRuntimeUnproven, false, false, `level=WARN msg="prune skipped: nothing deleted"`},
		{"no view of the pods", nil, fmt.Errorf("%w: x", prune.ErrPodsUnavailable), SkipNotSynced, false, false, `msg="prune skipped: no fresh view of the node's pods; nothing deleted"`},
		{"no list of sandboxes", nil, fmt.Errorf("%w: x", prune.ErrSandboxesUnavailable), SkipCRIUnavailable, false, false, `msg="prune skipped: no list of sandboxes from the container runtime; nothing deleted"`},
		{"paused midway", sum, prune.ErrPaused, SkipPaused, false, false, `level=WARN msg="prune stopped: paused; nothing more deleted, the rest runs when the pause is lifted"`},
		{"a view went stale", sum, prune.ErrNotSynced, SkipNotSynced, false, false, `level=WARN msg="prune stopped: a view went stale or stopped being proven; nothing more deleted"`},
		{"failed midway", sum, errors.New("disk"), "", true, false, `level=ERROR msg="prune stopped"`},
		{"failed to start", nil, errors.New("boom"), "", true, false, `level=ERROR msg="prune skipped"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := NewRun(Scheduled, tc.sum, prune.CycleResult{Sandboxes: -1}, tc.err)
			if r.Skip != tc.skip || r.Failed() != tc.failed || r.Completed() != tc.completed {
				t.Errorf("skip %q, failed %v, completed %v; want %q, %v, %v", r.Skip, r.Failed(), r.Completed(), tc.skip, tc.failed, tc.completed)
			}
			var buf bytes.Buffer
			NewLog(slog.New(slog.NewTextHandler(&buf, nil))).Report(context.Background(), r)
			if !strings.Contains(buf.String(), tc.log) {
				t.Errorf("log %q, want %q", buf.String(), tc.log)
			}
			// A targeted run is the check of deleted pods', which logs its
			// own lines.
			buf.Reset()
			r.Kind = Targeted
			NewLog(slog.New(slog.NewTextHandler(&buf, nil))).Report(context.Background(), r)
			if buf.Len() != 0 {
				t.Errorf("a targeted run logged %q", buf.String())
			}
		})
	}
}

// TestMetricsReport: what the metrics take of each kind of run: a
// scheduled run's skip, its count and findings; a targeted run's removals
// alone; a run skipped before it started no sandboxes' count.
func TestMetricsReport(t *testing.T) {
	m := NewMetrics(MetricsConfig{Prune: prune.Config{Dir: t.TempDir()}, Runtime: true})
	ctx := context.Background()
	m.Report(ctx, NewRun(Scheduled, summary(false, 5, 0, map[prune.Reason]int{prune.ReasonPodGone: 2}), prune.CycleResult{Sandboxes: 7}, nil))
	m.Report(ctx, Skipped(Scheduled, SkipStillRunning, ""))
	m.Report(ctx, NewRun(Targeted, summary(false, 2, 0, map[prune.Reason]int{prune.ReasonPodGone: 1}), prune.CycleResult{Sandboxes: 1}, nil))
	m.Report(ctx, NewRun(Scheduled, nil, prune.CycleResult{Sandboxes: -1}, fmt.Errorf("%w: x", liveness.ErrRuntimeUnproven)))
	got := gatherSeries(t, m)
	for series, want := range map[string]float64{
		"sweep_prune_runs_total":                                       1,
		`sweep_prune_skipped_runs_total{reason="still-running"}`:       1,
		`sweep_prune_skipped_runs_total{reason="runtime-unproven"}`:    1,
		`sweep_prune_removals_total{cache="multus",reason="pod-gone"}`: 3,
		// The last scheduled run's findings, not the targeted run's.
		`sweep_prune_stale_files{cache="multus",reason="pod-gone"}`: 2,
		"sweep_runtime_sandboxes":                                   7,
	} {
		if got[series] != want {
			t.Errorf("%s = %v, want %v", series, got[series], want)
		}
	}
}

package prune_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sweep-k8s/sweep/prune"
	"github.com/sweep-k8s/sweep/test/framework"
	"github.com/sweep-k8s/sweep/test/framework/multuscache"
)

// TestRunOnFile checks the per-file report that `sweepd prune` lists
// (issue 26): one File per entry, agreeing with the summary's counts, with
// the pod and sandbox of each results file and the age of each regular
// file. The callback appends without a lock: the run serializes its calls,
// which -race checks with several workers.
func TestRunOnFile(t *testing.T) {
	for _, dryRun := range []bool{false, true} {
		t.Run(fmt.Sprintf("dry run %v", dryRun), func(t *testing.T) {
			tr := newTree(t)
			var files []prune.File
			sum, err := prune.Run(t.Context(), prune.Views{Pods: prune.NewPodSet(tr.live)}, prune.Options{Config: prune.Config{Dir: tr.dir, MinAge: 15 * time.Minute, DryRun: dryRun, Workers: 4}, Deps: prune.Deps{OnFile: func(f prune.File) { files = append(files, f) }}})
			if err != nil {
				t.Fatal(err)
			}
			removed, kept := map[prune.Reason]int{}, map[prune.Reason]int{}
			byPhase := map[prune.Phase]int{}
			for _, f := range files {
				byPhase[f.Phase]++
				if f.DryRun != dryRun {
					t.Errorf("%s: DryRun %v", f.Name, f.DryRun)
				}
				if !f.Remove {
					kept[f.Reason]++
					continue
				}
				removed[f.Reason]++
				want := "removed"
				if dryRun {
					want = "would-remove"
				}
				if f.Action() != want {
					t.Errorf("%s: action %s, want %s", f.Name, f.Action(), want)
				}
				if f.ModTime.IsZero() || time.Since(f.ModTime) < time.Hour {
					t.Errorf("%s: mtime %v, want the hour-old mtime it was judged by", f.Name, f.ModTime)
				}
				switch f.Phase {
				case prune.PhaseResults:
					if f.Pod.UID == "" || f.Pod.Namespace != "default" || f.Pod.Name == "" || len(f.Sandbox) != 64 ||
						!strings.Contains(f.Name, f.Sandbox) {
						t.Errorf("%s: pod %+v, sandbox %q; want the file's pod and sandbox", f.Name, f.Pod, f.Sandbox)
					}
				case prune.PhaseScratch:
					if f.Sandbox != f.Name || f.Pod != (prune.PodRef{}) {
						t.Errorf("%s: pod %+v, sandbox %q; want no pod, the name as sandbox", f.Name, f.Pod, f.Sandbox)
					}
				default:
					t.Errorf("%s removed in phase %q", f.Name, f.Phase)
				}
			}
			if fmt.Sprint(removed) != fmt.Sprint(sum.RemovedBy) || fmt.Sprint(kept) != fmt.Sprint(sum.Kept) {
				t.Errorf("files: removed %v, kept %v; summary: %v, %v", removed, kept, sum.RemovedBy, sum.Kept)
			}
			for _, p := range []prune.Phase{prune.PhaseResults, prune.PhaseScratch, prune.PhaseOther} {
				if byPhase[p] != sum.Scanned[p] {
					t.Errorf("%d files of phase %s, scanned %d", byPhase[p], p, sum.Scanned[p])
				}
			}
		})
	}
}

// TestRunLogsRemovals checks the record a real run leaves at info level: the
// first removals each with file, pod, uid and reason, then one line with
// how many more; a dry run logs its would-be removals at debug level only,
// and every line's keys are snake_case (issue 26).
func TestRunLogsRemovals(t *testing.T) {
	const logged = 100 // the executor's maxRemovalLogs
	for _, tc := range []struct {
		name      string
		stale     int // sandboxes of deleted pods, two results files and a scratch file each
		dryRun    bool
		level     slog.Level
		removedAt int // "removed" lines (a dry run's "would remove") at the level
		more      int // not_logged of the closing line, -1 for none
	}{
		{"few", 3, false, slog.LevelInfo, 9, -1},
		{"more than logged", 40, false, slog.LevelInfo, logged, 3*40 - logged},
		{"all at debug", 40, false, slog.LevelDebug, 3 * 40, 3*40 - logged},
		{"dry run at info: would-be removals, as a real run's", 3, true, slog.LevelInfo, 9, -1},
		{"dry run, more than logged", 40, true, slog.LevelInfo, logged, 3*40 - logged},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "multus")
			if err := os.MkdirAll(filepath.Join(dir, "results"), 0o700); err != nil {
				t.Fatal(err)
			}
			old := time.Now().Add(-time.Hour)
			for i := range tc.stale {
				pod := multuscache.Pod{Namespace: "default", Name: fmt.Sprintf("gone-%d", i), UID: multuscache.UID(fmt.Sprint(i))}
				if _, err := multuscache.Sandbox(dir, multuscache.NewSandboxID(), pod, multuscache.DefaultAttachments()[:2], old); err != nil {
					t.Fatal(err)
				}
			}
			var buf bytes.Buffer
			log := slog.New(slog.NewJSONHandler(&buf, &slog.HandlerOptions{Level: tc.level}))
			if _, err := prune.Run(t.Context(), prune.Views{Pods: prune.NewPodSet(nil)}, prune.Options{Config: prune.Config{Dir: dir, MinAge: time.Minute, DryRun: tc.dryRun}, Deps: prune.Deps{Logger: log}}); err != nil {
				t.Fatal(err)
			}
			removedAt, more := 0, -1
			for _, l := range bytes.Split(bytes.TrimSpace(buf.Bytes()), []byte("\n")) {
				if len(l) == 0 {
					continue
				}
				var line map[string]any
				if err := json.Unmarshal(l, &line); err != nil {
					t.Fatalf("%v: %s", err, l)
				}
				for k := range line {
					if k != strings.ToLower(k) || strings.Contains(k, "-") {
						t.Errorf("key %q is not snake_case: %s", k, l)
					}
				}
				switch line["msg"] {
				case "removed":
					removedAt++
					if line["phase"] == "results" && (line["pod"] == nil || line["pod_uid"] == nil || line["reason"] != "pod-gone") {
						t.Errorf("removal without pod, uid or reason: %s", l)
					}
					if line["file"] == nil || line["reason"] == nil {
						t.Errorf("removal without file or reason: %s", l)
					}
				case "would remove":
					if !tc.dryRun {
						t.Errorf("a real run's would-be removal: %s", l)
					}
					removedAt++
				case "more files removed than logged; see the summary's counts, or --log-level=debug for each",
					"more files would be removed than logged; see the summary's counts, or --log-level=debug for each":
					more = int(line["not_logged"].(float64))
				}
			}
			if removedAt != tc.removedAt || more != tc.more {
				t.Errorf("%d removed lines, not_logged %d; want %d, %d\n%s", removedAt, more, tc.removedAt, tc.more, buf.String())
			}
		})
	}
}

// slowReleaser is a CNI DEL that takes its time.
type slowReleaser struct{ d time.Duration }

func (r slowReleaser) Release(ctx context.Context, _ string, _ []byte) error {
	select {
	case <-time.After(r.d):
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// TestRunLogsCNIDelProgress checks that a run with CNI DEL says how far it
// got while it runs, not only at its end (issue 26).
func TestRunLogsCNIDelProgress(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "multus")
	if err := os.MkdirAll(filepath.Join(dir, "results"), 0o700); err != nil {
		t.Fatal(err)
	}
	for i := range 4 {
		pod := multuscache.Pod{Namespace: "default", Name: fmt.Sprintf("gone-%d", i), UID: multuscache.UID(fmt.Sprint(i))}
		if _, err := multuscache.Sandbox(dir, multuscache.NewSandboxID(), pod, multuscache.DefaultAttachments()[:1], time.Now().Add(-time.Hour)); err != nil {
			t.Fatal(err)
		}
	}
	var out framework.Buffer
	sum, err := prune.Run(t.Context(), prune.Views{Pods: prune.NewPodSet(nil)}, prune.Options{Config: prune.Config{Dir: dir, MinAge: time.Minute, Workers: 1, ProgressInterval: 20 * time.Millisecond}, Deps: prune.Deps{Release: slowReleaser{50 * time.Millisecond}, Logger: slog.New(slog.NewTextHandler(&out, nil))}})
	if err != nil || sum.CNIDel.Succeeded != 4 {
		t.Fatalf("%+v, %v", sum.CNIDel, err)
	}
	lines := strings.Count(out.String(), `msg="cni del in progress"`)
	if lines == 0 || !strings.Contains(out.String(), "cni_del.attempted=") || !strings.Contains(out.String(), "cni_del.succeeded=") {
		t.Fatalf("no progress lines in:\n%s", out.String())
	}
	// The ticker stops with the run.
	time.Sleep(100 * time.Millisecond)
	if n := strings.Count(out.String(), `msg="cni del in progress"`); n != lines {
		t.Errorf("%d progress lines after the run, %d at its end", n, lines)
	}
}

// TestRunAgesTrustedFrom checks that a run whose clock guard holds files
// back says until when, in its summary (issue 26).
func TestRunAgesTrustedFrom(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "multus")
	if err := os.MkdirAll(filepath.Join(dir, "results"), 0o700); err != nil {
		t.Fatal(err)
	}
	pod := multuscache.Pod{Namespace: "default", Name: "gone", UID: multuscache.UID("gone")}
	if _, err := multuscache.Sandbox(dir, multuscache.NewSandboxID(), pod, multuscache.DefaultAttachments()[:1], time.Now().Add(-time.Hour)); err != nil {
		t.Fatal(err)
	}
	from := time.Now().Add(10 * time.Minute).Truncate(time.Second)
	for _, tc := range []struct {
		name  string
		clock prune.ClockState
		want  time.Time
	}{
		{"just booted", prune.ClockState{Uptime: 5 * time.Minute, TrustedFrom: from}, from},
		{"settled", prune.ClockState{Uptime: time.Hour}, time.Time{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sum, err := prune.Run(t.Context(), prune.Views{Pods: prune.NewPodSet(nil), Clock: func(time.Duration) prune.ClockState { return tc.clock }}, prune.Options{Config: prune.Config{Dir: dir, MinAge: 15 * time.Minute, DryRun: true}})
			if err != nil {
				t.Fatal(err)
			}
			if !sum.AgesTrustedFrom.Equal(tc.want) {
				t.Errorf("AgesTrustedFrom %v, want %v", sum.AgesTrustedFrom, tc.want)
			}
			var b strings.Builder
			if err := sum.WriteText(&b); err != nil {
				t.Fatal(err)
			}
			said := strings.Contains(b.String(), "ages are trusted from "+tc.want.Format("15:04:05"))
			if said != !tc.want.IsZero() {
				t.Errorf("text says until when: %v, want %v:\n%s", said, !tc.want.IsZero(), b.String())
			}
		})
	}
}

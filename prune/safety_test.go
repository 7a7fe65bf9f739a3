package prune_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sweep-k8s/sweep/prune"
	"github.com/sweep-k8s/sweep/test/framework/multuscache"
)

// releaseFunc is a Releaser over a function.
type releaseFunc func(name string) error

func (f releaseFunc) Release(_ context.Context, name string, _ []byte) error { return f(name) }

// TestRunCountsVanished: a file that someone else (multus's own DEL, an
// admin) removes between the plan and the unlink was not removed by the
// prune, and is not counted as such.
func TestRunCountsVanished(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "multus")
	old := time.Now().Add(-time.Hour)
	if _, err := multuscache.Sandbox(dir, multuscache.NewSandboxID(), multuscache.Pod{Namespace: "default", Name: "gone", UID: multuscache.UID("gone")},
		multuscache.DefaultAttachments(), old); err != nil {
		t.Fatal(err)
	}
	// The DEL runs right before the unlink: the releaser takes the file
	// away, as a concurrent multus DEL would.
	rel := releaseFunc(func(name string) error { return os.Remove(filepath.Join(dir, "results", name)) })
	sum, err := prune.Run(t.Context(), prune.Views{Pods: prune.NewPodSet(nil)}, prune.Options{Config: prune.Config{Dir: dir, MinAge: time.Minute, Workers: 1}, Deps: prune.Deps{Release: rel}})
	if err != nil {
		t.Fatal(err)
	}
	if sum.Removed[prune.PhaseResults] != 0 || sum.Vanished[prune.PhaseResults] != 2 || sum.RemovedBy[prune.ReasonPodGone] != 0 {
		t.Fatalf("removed %v, by %v, vanished %v; want 0 removed and 2 vanished results files", sum.Removed, sum.RemovedBy, sum.Vanished)
	}
	if sum.Removed[prune.PhaseScratch] != 1 || sum.Remaining(prune.PhaseResults) != 0 {
		t.Fatalf("removed %v, remaining results %d", sum.Removed, sum.Remaining(prune.PhaseResults))
	}
	var b strings.Builder
	_ = sum.WriteText(&b)
	if !strings.Contains(b.String(), "vanished (removed by someone else meanwhile) 2") {
		t.Fatalf("text summary does not say what vanished:\n%s", b.String())
	}
}

// stalingIndex is an empty pod view that stays synced for n checks.
type stalingIndex struct{ n atomic.Int64 }

func (s *stalingIndex) Synced() bool                { return s.n.Add(-1) >= 0 }
func (s *stalingIndex) HasUID(string) bool          { return false }
func (s *stalingIndex) HasName(string, string) bool { return false }

// TestRunStaleViewCounts: a run that stops because the view went stale
// counts what it left as view-stale (not as errors) and spends none of its
// DEL budget on files it did not release.
func TestRunStaleViewCounts(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "multus")
	old := time.Now().Add(-time.Hour)
	for i := range 20 {
		pod := multuscache.Pod{Namespace: "default", Name: "gone", UID: multuscache.UID("gone-" + string(rune('a'+i)))}
		if _, err := multuscache.Sandbox(dir, multuscache.NewSandboxID(), pod, multuscache.DefaultAttachments(), old); err != nil {
			t.Fatal(err)
		}
	}
	var mu sync.Mutex
	var released []string
	rel := releaseFunc(func(name string) error {
		mu.Lock()
		defer mu.Unlock()
		released = append(released, name)
		return nil
	})
	idx := &stalingIndex{}
	idx.n.Store(1) // the check at the start only
	// One worker: with more, a second one may find the one DEL of the
	// budget taken by the first, which is about to find the view stale,
	// and defer its file before the run is known to stop (a flake of about
	// 1 in 100, more on a loaded machine).
	sum, err := prune.Run(t.Context(), prune.Views{Pods: idx}, prune.Options{Config: prune.Config{Dir: dir, MinAge: time.Minute, MaxReleases: 1, Workers: 1}, Deps: prune.Deps{Release: rel}})
	if !errors.Is(err, prune.ErrNotSynced) {
		t.Fatalf("err %v, want ErrNotSynced", err)
	}
	if len(released) != 0 || sum.CNIDel.Attempted != 0 {
		t.Fatalf("released %v (attempted %d) on a stale view", released, sum.CNIDel.Attempted)
	}
	if sum.Kept[prune.ReasonViewStale] == 0 || sum.Kept[prune.ReasonCNIDelDeferred] != 0 || sum.Kept[prune.ReasonError] != 0 || sum.Errors != 0 {
		t.Fatalf("kept %v, errors %d; want what was left counted as view-stale, no deferral, no error", sum.Kept, sum.Errors)
	}
	if n := len(entries(t, filepath.Join(dir, "results"))); n != 40 {
		t.Fatalf("%d results files left, want all 40", n)
	}
}

func entries(t *testing.T, dir string) []os.DirEntry {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	return ents
}

// TestRunConflictingIdentityNeverReleased: a results file that names two
// pods (the same key twice, the last one a live pod's) is kept and its DEL
// never runs, whichever of the two the prune's parser would have read.
func TestRunConflictingIdentityNeverReleased(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "multus")
	sandbox := multuscache.NewSandboxID()
	gone := multuscache.Pod{Namespace: "default", Name: "gone", UID: multuscache.UID("gone")}
	live := multuscache.Pod{Namespace: "default", Name: "live", UID: multuscache.UID("live")}
	paths, err := multuscache.Sandbox(dir, sandbox, gone, multuscache.DefaultAttachments()[:1], time.Now().Add(-time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	var results string
	for _, p := range paths {
		if strings.Contains(p, "results") {
			results = p
		}
	}
	data, err := os.ReadFile(results)
	if err != nil {
		t.Fatal(err)
	}
	// Append the live pod's UID to cniArgs: first says gone, last says live.
	conflicting := strings.Replace(string(data), `["K8S_POD_UID","`+gone.UID+`"]`,
		`["K8S_POD_UID","`+gone.UID+`"],["K8S_POD_UID","`+live.UID+`"]`, 1)
	if conflicting == string(data) {
		t.Fatal("fixture has no K8S_POD_UID pair")
	}
	old := time.Now().Add(-time.Hour)
	if err := os.WriteFile(results, []byte(conflicting), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(results, old, old); err != nil {
		t.Fatal(err)
	}
	rel := releaseFunc(func(name string) error { t.Errorf("DEL of %s", name); return nil })
	sum, err := prune.Run(t.Context(), prune.Views{Pods: prune.NewPodSet([]prune.PodRef{{Namespace: "default", Name: "live", UID: live.UID}})},
		prune.Options{Config: prune.Config{Dir: dir, MinAge: time.Minute}, Deps: prune.Deps{Release: rel}})
	if err != nil {
		t.Fatal(err)
	}
	if sum.Kept[prune.ReasonConflicting] != 1 || sum.Removed[prune.PhaseResults] != 0 || sum.Removed[prune.PhaseScratch] != 0 {
		t.Fatalf("kept %v, removed %v; want the file and its scratch file kept", sum.Kept, sum.Removed)
	}
}

// TestRunAgeGuards: an old-looking file is not judged by its age while the
// wall clock is unsettled, nor by a view taken before it changed.
func TestRunAgeGuards(t *testing.T) {
	clock := func(st prune.ClockState) func(time.Duration) prune.ClockState {
		return func(time.Duration) prune.ClockState { return st }
	}
	for _, tc := range []struct {
		name   string
		views  prune.Views
		reason prune.Reason
	}{
		{"clock set 2h forward within min-age", prune.Views{Clock: clock(prune.ClockState{Uptime: 24 * time.Hour, Forward: 2 * time.Hour})}, prune.ReasonClockUnsettled},
		{"booted 5 minutes ago", prune.Views{Clock: clock(prune.ClockState{Uptime: 5 * time.Minute})}, prune.ReasonClockUnsettled},
		{"view taken before the files were written", prune.Views{ViewTime: time.Now().Add(-time.Minute)}, prune.ReasonNewerThanView},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "multus")
			// Written now, with an mtime an hour old: what a forward step of
			// the clock, or a copy with preserved times, looks like.
			pod := multuscache.Pod{Namespace: "default", Name: "gone", UID: multuscache.UID("gone")}
			if _, err := multuscache.Sandbox(dir, multuscache.NewSandboxID(), pod, multuscache.DefaultAttachments(), time.Now().Add(-time.Hour)); err != nil {
				t.Fatal(err)
			}
			tc.views.Pods = prune.NewPodSet(nil)
			sum, err := prune.Run(t.Context(), tc.views, prune.Options{Config: prune.Config{Dir: dir, MinAge: 15 * time.Minute}})
			if err != nil {
				t.Fatal(err)
			}
			// The scratch file stays because its results files do.
			if sum.Removed[prune.PhaseResults]+sum.Removed[prune.PhaseScratch] != 0 || sum.Kept[tc.reason] != 2 ||
				sum.Kept[prune.ReasonSandboxReferenced] != 1 {
				t.Fatalf("removed %v, kept %v; want both results files kept as %s", sum.Removed, sum.Kept, tc.reason)
			}
		})
	}
}

// TestRunPaused: a pause is honoured before every removal and DEL, not
// only at the start: the run stops at the first one after it, keeps the
// rest as paused (not as errors or stale views) and returns ErrPaused.
func TestRunPaused(t *testing.T) {
	for _, tc := range []struct {
		name  string
		after int64 // removals allowed before the pause
	}{
		{"paused from the start", 0},
		{"paused during the run", 5},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "multus")
			old := time.Now().Add(-time.Hour)
			for i := range 10 {
				pod := multuscache.Pod{Namespace: "default", Name: "gone", UID: multuscache.UID("gone-" + string(rune('a'+i)))}
				if _, err := multuscache.Sandbox(dir, multuscache.NewSandboxID(), pod, multuscache.DefaultAttachments(), old); err != nil {
					t.Fatal(err)
				}
			}
			var asked, dels atomic.Int64
			paused := func() bool { return asked.Add(1) > tc.after }
			rel := releaseFunc(func(string) error { dels.Add(1); return nil })
			sum, err := prune.Run(t.Context(), prune.Views{Pods: prune.NewPodSet(nil)}, prune.Options{
				Config: prune.Config{Dir: dir, MinAge: time.Minute, Workers: 1},
				Deps:   prune.Deps{Release: rel, Paused: paused},
			})
			if !errors.Is(err, prune.ErrPaused) {
				t.Fatalf("err %v, want ErrPaused", err)
			}
			removed := sum.Removed[prune.PhaseResults] + sum.Removed[prune.PhaseScratch]
			// The DEL and the unlink of a results file are asked apart.
			if int64(removed) > tc.after || dels.Load() > tc.after {
				t.Errorf("removed %d, %d DELs after %d permitted checks", removed, dels.Load(), tc.after)
			}
			left := len(entries(t, filepath.Join(dir, "results")))
			// Paused from the start, the run scans nothing; paused during it,
			// what it leaves is kept as paused.
			if left != 20-sum.Removed[prune.PhaseResults] || (tc.after > 0) != (sum.Kept[prune.ReasonPaused] > 0) ||
				sum.Kept[prune.ReasonViewStale] != 0 || sum.Errors != 0 {
				t.Errorf("left %d, kept %v, errors %d: want the rest kept as paused", left, sum.Kept, sum.Errors)
			}
		})
	}
}

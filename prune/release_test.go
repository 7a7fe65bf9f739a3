package prune_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sweep-k8s/sweep/prune"
	"github.com/sweep-k8s/sweep/test/framework/multuscache"
)

// fakeReleaser records the files it was asked to release and fails for
// those whose pod name contains "fail".
type fakeReleaser struct {
	mu    sync.Mutex
	names []string
	dir   string
	t     *testing.T
}

func (f *fakeReleaser) Release(_ context.Context, name string, data []byte) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.names = append(f.names, name)
	// The data handed over is the file's content, and the file is still
	// there: the DEL comes before the unlink.
	disk, err := os.ReadFile(filepath.Join(f.dir, "results", name))
	if err != nil || string(disk) != string(data) {
		f.t.Errorf("release %s: data does not match the file on disk (%v)", name, err)
	}
	if strings.Contains(string(data), "fail") {
		return errors.New("plugin failed")
	}
	return nil
}

func TestRelease(t *testing.T) {
	old := time.Now().Add(-time.Hour)
	for _, tc := range []struct {
		name         string
		dryRun       bool
		max          int
		pods         []string // deleted pods, one sandbox (two results files) each
		wantReleased int      // Release calls
		wantCounts   prune.CNIDelCounts
		wantRemoved  int // results files removed (or would be)
		wantKept     map[prune.Reason]int
		wantErrors   int
	}{
		{
			name: "released then removed", pods: []string{"a", "b"},
			wantReleased: 4, wantCounts: prune.CNIDelCounts{Attempted: 4, Succeeded: 4}, wantRemoved: 4,
			wantKept: map[prune.Reason]int{prune.ReasonPodLive: 2},
		},
		{
			name: "failed release keeps the file", pods: []string{"a", "fail-1"},
			wantReleased: 4, wantCounts: prune.CNIDelCounts{Attempted: 4, Succeeded: 2, Failed: 2}, wantRemoved: 2,
			wantKept:   map[prune.Reason]int{prune.ReasonPodLive: 2, prune.ReasonCNIDelFailed: 2, prune.ReasonSandboxReferenced: 2},
			wantErrors: 2,
		},
		{
			name: "cap defers", pods: []string{"a", "b", "c"}, max: 2,
			wantReleased: 2, wantCounts: prune.CNIDelCounts{Attempted: 2, Succeeded: 2}, wantRemoved: 2,
			wantKept: map[prune.Reason]int{prune.ReasonPodLive: 2, prune.ReasonCNIDelDeferred: 4}, // scratch files kept: 2 to 4, by readdir order
		},
		{
			name: "dry run releases nothing", pods: []string{"a", "fail-1", "c"}, dryRun: true, max: 5,
			wantReleased: 0, wantCounts: prune.CNIDelCounts{Attempted: 5}, wantRemoved: 5,
			wantKept: map[prune.Reason]int{prune.ReasonPodLive: 2, prune.ReasonCNIDelDeferred: 1},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "multus")
			live := multuscache.Pod{Namespace: "default", Name: "live", UID: multuscache.UID("live")}
			if _, err := multuscache.Sandbox(dir, multuscache.NewSandboxID(), live, multuscache.DefaultAttachments(), old); err != nil {
				t.Fatal(err)
			}
			for _, p := range tc.pods {
				pod := multuscache.Pod{Namespace: "default", Name: p, UID: multuscache.UID(p)}
				if _, err := multuscache.Sandbox(dir, multuscache.NewSandboxID(), pod, multuscache.DefaultAttachments(), old); err != nil {
					t.Fatal(err)
				}
			}
			rel := &fakeReleaser{dir: dir, t: t}
			sum, err := prune.Run(t.Context(), prune.Views{Pods: prune.NewPodSet([]prune.PodRef{{Namespace: "default", Name: "live", UID: multuscache.UID("live")}})},
				prune.Options{Config: prune.Config{Dir: dir, MinAge: time.Minute, DryRun: tc.dryRun, MaxReleases: tc.max}, Deps: prune.Deps{Release: rel}})
			if err != nil {
				t.Fatal(err)
			}
			if len(rel.names) != tc.wantReleased {
				t.Errorf("%d Release calls, want %d", len(rel.names), tc.wantReleased)
			}
			if *sum.CNIDel != tc.wantCounts {
				t.Errorf("cni del counts %+v, want %+v", *sum.CNIDel, tc.wantCounts)
			}
			if sum.Removed[prune.PhaseResults] != tc.wantRemoved {
				t.Errorf("removed %d results files, want %d", sum.Removed[prune.PhaseResults], tc.wantRemoved)
			}
			for r, n := range tc.wantKept {
				if sum.Kept[r] != n {
					t.Errorf("kept %s: %d, want %d (all: %v)", r, sum.Kept[r], n, sum.Kept)
				}
			}
			if sum.Errors != tc.wantErrors {
				t.Errorf("%d errors, want %d", sum.Errors, tc.wantErrors)
			}
			ents, _ := os.ReadDir(filepath.Join(dir, "results"))
			want := 2*(1+len(tc.pods)) - tc.wantRemoved
			if tc.dryRun {
				want = 2 * (1 + len(tc.pods))
			}
			if len(ents) != want {
				t.Errorf("%d results files left, want %d", len(ents), want)
			}
		})
	}
}

func TestNoReleaserNoCounts(t *testing.T) {
	sum, err := prune.Run(t.Context(), prune.Views{Pods: prune.NewPodSet(nil)}, prune.Options{Config: prune.Config{Dir: t.TempDir()}})
	if err != nil {
		t.Fatal(err)
	}
	if sum.CNIDel != nil {
		t.Fatal("CNIDel counts without a Releaser")
	}
}

func TestSummaryTextCNIDel(t *testing.T) {
	for _, tc := range []struct {
		dryRun bool
		want   string
	}{
		{false, "  cni del: 3 attempted, 2 succeeded, 1 failed\n"},
		{true, "  cni del: would run 3\n"},
	} {
		dir := t.TempDir()
		sum, err := prune.Run(t.Context(), prune.Views{Pods: prune.NewPodSet(nil)}, prune.Options{Config: prune.Config{Dir: dir, DryRun: tc.dryRun}, Deps: prune.Deps{Release: &fakeReleaser{dir: dir, t: t}}})
		if err != nil {
			t.Fatal(err)
		}
		*sum.CNIDel = prune.CNIDelCounts{Attempted: 3, Succeeded: 2, Failed: 1}
		if tc.dryRun {
			*sum.CNIDel = prune.CNIDelCounts{Attempted: 3}
		}
		var b strings.Builder
		if err := sum.WriteText(&b); err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(b.String(), tc.want) {
			t.Errorf("dry run %v: text\n%s\nlacks %q", tc.dryRun, b.String(), tc.want)
		}
	}
}

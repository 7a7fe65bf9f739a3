package prune_test

import (
	"errors"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sweep-k8s/sweep/cachefile"
	"github.com/sweep-k8s/sweep/prune"
	"github.com/sweep-k8s/sweep/test/framework/multuscache"
)

// sandboxes is a SandboxIndex over a fixed set that can turn unsynced after
// n checks (n < 0: always synced).
type sandboxes struct {
	ids map[prune.SandboxID]struct{}
	n   atomic.Int64
}

func newSandboxes(ids ...string) *sandboxes {
	s := &sandboxes{ids: map[prune.SandboxID]struct{}{}}
	for _, id := range ids {
		sid, _ := cachefile.ParseSandboxID(id)
		s.ids[sid] = struct{}{}
	}
	s.n.Store(1 << 40)
	return s
}

func (s *sandboxes) Synced() bool                        { return s.n.Add(-1) >= 0 }
func (s *sandboxes) Has(id prune.SandboxID) bool         { _, ok := s.ids[id]; return ok }
func (s *sandboxes) EarlierBoot(id prune.SandboxID) bool { return s.Has(id) }

// livenessTree writes the sandboxes of one node through a reboot: pod "web"
// had sandbox before (boot A) and has sandbox after (boot B); pod "gone" was
// deleted and had sandbox dead.
type livenessTree struct {
	dir                 string
	before, after, dead string
	pods                *prune.PodSet
}

func newLivenessTree(t *testing.T) *livenessTree {
	t.Helper()
	lt := &livenessTree{
		dir:    filepath.Join(t.TempDir(), "multus"),
		before: multuscache.NewSandboxID(), after: multuscache.NewSandboxID(), dead: multuscache.NewSandboxID(),
		pods: prune.NewPodSet([]prune.PodRef{{Namespace: "default", Name: "web", UID: multuscache.UID("web")}}),
	}
	old := time.Now().Add(-time.Hour)
	web := multuscache.Pod{Namespace: "default", Name: "web", UID: multuscache.UID("web")}
	for _, s := range []struct {
		id  string
		pod multuscache.Pod
	}{{lt.before, web}, {lt.after, web}, {lt.dead, multuscache.Pod{Namespace: "default", Name: "gone", UID: multuscache.UID("gone")}}} {
		if _, err := multuscache.Sandbox(lt.dir, s.id, s.pod, multuscache.DefaultAttachments(), old); err != nil {
			t.Fatal(err)
		}
	}
	return lt
}

// sandboxesLeft returns the sandboxes whose scratch file is left.
func (lt *livenessTree) sandboxesLeft(t *testing.T) string {
	t.Helper()
	ents, err := os.ReadDir(lt.dir)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range ents {
		switch e.Name() {
		case lt.before:
			got = append(got, "before")
		case lt.after:
			got = append(got, "after")
		case lt.dead:
			got = append(got, "dead")
		}
	}
	sort.Strings(got)
	return strings.Join(got, ",")
}

func TestRunLiveness(t *testing.T) {
	tests := []struct {
		name      string
		pods      bool
		runtime   []string // names of the sandboxes the runtime knows
		earlier   []string // names of the sandboxes recorded under an earlier boot
		left      string
		removedBy map[prune.Reason]int
	}{
		{name: "api", pods: true, left: "after,before", removedBy: map[prune.Reason]int{prune.ReasonPodGone: 2, prune.ReasonOrphanScratch: 1}},
		{name: "api, reboot-aware", pods: true, earlier: []string{"before"}, left: "after",
			removedBy: map[prune.Reason]int{prune.ReasonPodGone: 2, prune.ReasonEarlierBoot: 3, prune.ReasonOrphanScratch: 1}},
		// A boot ID that changed without a reboot (a VM-isolated runtime
		// restarted the daemon's pod): both of web's sandboxes were recorded
		// under the old ID, so neither is newer than the other, and the pod
		// is live: nothing of web's goes.
		{name: "api, boot ID changed without a reboot", pods: true, earlier: []string{"before", "after"}, left: "after,before",
			removedBy: map[prune.Reason]int{prune.ReasonPodGone: 2, prune.ReasonEarlierBoot: 0, prune.ReasonOrphanScratch: 1}},
		{name: "cri", runtime: []string{"after"}, left: "after",
			removedBy: map[prune.Reason]int{prune.ReasonSandboxGone: 4, prune.ReasonOrphanScratch: 2}},
		{name: "cri, runtime still knows the old sandbox", runtime: []string{"after", "before"}, left: "after,before",
			removedBy: map[prune.Reason]int{prune.ReasonSandboxGone: 2, prune.ReasonOrphanScratch: 1}},
		{name: "both", pods: true, runtime: []string{"after"}, left: "after,before",
			removedBy: map[prune.Reason]int{prune.ReasonPodGone: 2, prune.ReasonOrphanScratch: 1}},
		{name: "both, runtime knows the dead pod's sandbox", pods: true, runtime: []string{"after", "dead"}, left: "after,before,dead",
			removedBy: map[prune.Reason]int{}},
		{name: "both, reboot-aware", pods: true, runtime: []string{"after"}, earlier: []string{"before"}, left: "after",
			removedBy: map[prune.Reason]int{prune.ReasonPodGone: 2, prune.ReasonEarlierBoot: 3, prune.ReasonOrphanScratch: 1}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			lt := newLivenessTree(t)
			names := map[string]string{"before": lt.before, "after": lt.after, "dead": lt.dead}
			ids := func(ns []string) []string {
				var out []string
				for _, n := range ns {
					out = append(out, names[n])
				}
				return out
			}
			opts := prune.Options{Config: prune.Config{Dir: lt.dir, MinAge: 15 * time.Minute}}
			var views prune.Views
			if tc.pods {
				views.Pods = lt.pods
			}
			if tc.runtime != nil {
				views.Sandboxes = newSandboxes(ids(tc.runtime)...)
			}
			if tc.earlier != nil {
				views.Boot = newSandboxes(ids(tc.earlier)...)
			}
			sum, err := prune.Run(t.Context(), views, opts)
			if err != nil {
				t.Fatal(err)
			}
			if got := lt.sandboxesLeft(t); got != tc.left {
				t.Errorf("sandboxes left %q, want %q", got, tc.left)
			}
			for r, n := range tc.removedBy {
				if sum.RemovedBy[r] != n {
					t.Errorf("removed %s: %d, want %d (all %v)", r, sum.RemovedBy[r], n, sum.RemovedBy)
				}
			}
			// The kept sandboxes, for the boot record: those left.
			kept := sum.KeptSandboxes()
			for n, id := range names {
				sid, _ := cachefile.ParseSandboxID(id)
				if _, ok := kept[sid]; ok != strings.Contains(tc.left, n) {
					t.Errorf("kept sandboxes: %s %v, want %v", n, ok, !ok)
				}
			}
		})
	}
}

func TestRunLivenessFailsClosed(t *testing.T) {
	t.Run("no view at all", func(t *testing.T) {
		lt := newLivenessTree(t)
		if _, err := prune.Run(t.Context(), prune.Views{}, prune.Options{Config: prune.Config{Dir: lt.dir}}); !errors.Is(err, prune.ErrNoLiveness) {
			t.Fatalf("err %v, want ErrNoLiveness", err)
		}
		if got := lt.sandboxesLeft(t); got != "after,before,dead" {
			t.Fatalf("left %q", got)
		}
	})
	for _, pods := range []bool{false, true} {
		for _, syncedFor := range []int64{0, 1} {
			lt := newLivenessTree(t)
			s := newSandboxes(lt.after)
			s.n.Store(syncedFor)
			var idx prune.PodIndex
			if pods {
				idx = lt.pods
			}
			sum, err := prune.Run(t.Context(), prune.Views{Pods: idx, Sandboxes: s}, prune.Options{Config: prune.Config{Dir: lt.dir, Workers: 1}})
			if !errors.Is(err, prune.ErrNotSynced) {
				t.Fatalf("pods %v, synced for %d: err %v, want ErrNotSynced", pods, syncedFor, err)
			}
			if sum.KeptSandboxes() != nil {
				t.Fatal("kept sandboxes of an interrupted run")
			}
			if got := lt.sandboxesLeft(t); got != "after,before,dead" {
				t.Fatalf("pods %v, synced for %d: left %q", pods, syncedFor, got)
			}
		}
	}
}

// TestRunLivenessRelease: CNI DEL replay with sandbox liveness alone (no pod
// index) and with an earlier boot: the DEL runs for every file removed, and
// the fresh-view check before it uses the runtime's view.
func TestRunLivenessRelease(t *testing.T) {
	for _, tc := range []struct {
		name      string
		pods      bool
		runtime   []string
		earlier   []string
		synced    int64
		released  int
		left      string
		wantError error
	}{
		{name: "cri", runtime: []string{"after"}, synced: 1 << 40, released: 4, left: "after"},
		{name: "api, reboot-aware", pods: true, earlier: []string{"before"}, synced: 1 << 40, released: 4, left: "after"},
		{name: "cri, runtime view lost before the first DEL", runtime: []string{"after"}, synced: 1, released: 0,
			left: "after,before,dead", wantError: prune.ErrNotSynced},
	} {
		t.Run(tc.name, func(t *testing.T) {
			lt := newLivenessTree(t)
			names := map[string]string{"before": lt.before, "after": lt.after, "dead": lt.dead}
			rel := &fakeReleaser{dir: lt.dir, t: t}
			opts := prune.Options{Config: prune.Config{Dir: lt.dir, MinAge: 15 * time.Minute, Workers: 1}, Deps: prune.Deps{Release: rel}}
			var views prune.Views
			if tc.pods {
				views.Pods = lt.pods
			}
			if tc.runtime != nil {
				var ids []string
				for _, n := range tc.runtime {
					ids = append(ids, names[n])
				}
				s := newSandboxes(ids...)
				s.n.Store(tc.synced)
				views.Sandboxes = s
			}
			if tc.earlier != nil {
				var ids []string
				for _, n := range tc.earlier {
					ids = append(ids, names[n])
				}
				views.Boot = newSandboxes(ids...)
			}
			_, err := prune.Run(t.Context(), views, opts)
			if !errors.Is(err, tc.wantError) {
				t.Fatalf("err %v, want %v", err, tc.wantError)
			}
			if len(rel.names) != tc.released {
				t.Errorf("released %v, want %d", rel.names, tc.released)
			}
			if got := lt.sandboxesLeft(t); got != tc.left {
				t.Errorf("left %q, want %q", got, tc.left)
			}
		})
	}
}

package prune_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sweep-k8s/sweep/prune"
	"github.com/sweep-k8s/sweep/test/framework/multuscache"
)

// runtimeTree is a node with both caches: multus's, with one live and one
// dead pod, and the runtime's own (/var/lib/cni/results) with one file of
// each kind the prune must judge there.
type runtimeTree struct {
	multus, runtime, outside string
	pods                     *prune.PodSet
	// running are the sandboxes the runtime lists: the live pods'.
	running []string
	// names of the runtime cache's entries by what they are.
	live, dead, young, unparseable, noUID, symlink, subdir string
}

func newRuntimeTree(t *testing.T) *runtimeTree {
	t.Helper()
	root := t.TempDir()
	rt := &runtimeTree{multus: filepath.Join(root, "multus"), runtime: filepath.Join(root, "results"), outside: t.TempDir()}
	old, young := time.Now().Add(-time.Hour), time.Now()
	livePod := multuscache.Pod{Namespace: "default", Name: "live", UID: multuscache.UID("live")}
	rt.pods = prune.NewPodSet([]prune.PodRef{{Namespace: "default", Name: "live", UID: livePod.UID}})
	write := func(pod multuscache.Pod, mtime time.Time) string {
		t.Helper()
		id := multuscache.NewSandboxID()
		p, err := multuscache.RuntimeSandbox(rt.runtime, id, pod, mtime)
		if err != nil {
			t.Fatal(err)
		}
		return filepath.Base(p)
	}
	liveID := multuscache.NewSandboxID()
	if _, err := multuscache.Sandbox(rt.multus, liveID, livePod, multuscache.DefaultAttachments(), old); err != nil {
		t.Fatal(err)
	}
	if _, err := multuscache.Sandbox(rt.multus, multuscache.NewSandboxID(),
		multuscache.Pod{Namespace: "default", Name: "gone", UID: multuscache.UID("gone")}, multuscache.DefaultAttachments(), old); err != nil {
		t.Fatal(err)
	}
	p, err := multuscache.RuntimeSandbox(rt.runtime, liveID, livePod, old)
	if err != nil {
		t.Fatal(err)
	}
	rt.live = filepath.Base(p)
	rt.running = []string{liveID}
	rt.dead = write(multuscache.Pod{Namespace: "default", Name: "gone", UID: multuscache.UID("gone")}, old)
	rt.young = write(multuscache.Pod{Namespace: "default", Name: "young", UID: multuscache.UID("young")}, young)
	// A container that is no pod's, as podman's CNI backend names it: no
	// view can prove it dead.
	rt.noUID = write(multuscache.Pod{Namespace: "podman", Name: "db"}, old)
	rt.unparseable = "k8s-pod-network-" + multuscache.NewSandboxID() + "-eth0"
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.WriteFile(filepath.Join(rt.runtime, rt.unparseable), []byte(`{"kind":"cniCacheV1","containerId":"`), 0o600))
	must(os.Chtimes(filepath.Join(rt.runtime, rt.unparseable), old, old))
	target := filepath.Join(rt.outside, "target")
	must(os.WriteFile(target, multuscache.RuntimeResultsJSON(multuscache.NewSandboxID(),
		multuscache.Pod{Namespace: "default", Name: "gone", UID: multuscache.UID("gone")}, multuscache.DefaultAttachments()[0]), 0o600))
	must(os.Chtimes(target, old, old))
	rt.symlink = "k8s-pod-network-" + multuscache.NewSandboxID() + "-eth0"
	must(os.Symlink(target, filepath.Join(rt.runtime, rt.symlink)))
	rt.subdir = "k8s-pod-network-" + multuscache.NewSandboxID() + "-eth0"
	must(os.Mkdir(filepath.Join(rt.runtime, rt.subdir), 0o700))
	return rt
}

func (rt *runtimeTree) left(t *testing.T) []string {
	t.Helper()
	ents, err := os.ReadDir(rt.runtime)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range ents {
		got = append(got, e.Name())
	}
	sort.Strings(got)
	return got
}

// diskBytes is what du counts of the regular files in dir.
func diskBytes(t *testing.T, dir string) int64 {
	t.Helper()
	var n int64
	err := filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return err
		}
		var st unix.Stat_t
		if err := unix.Lstat(p, &st); err != nil {
			return err
		}
		n += st.Blocks * 512
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// runtimeReleaser records the runtime cache files it is asked to release,
// and checks that each is still on disk with the content handed over.
type runtimeReleaser struct {
	mu    sync.Mutex
	dir   string
	names []string
	t     *testing.T
}

func (r *runtimeReleaser) Release(_ context.Context, name string, data []byte) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	disk, err := os.ReadFile(filepath.Join(r.dir, name))
	if os.IsNotExist(err) {
		return nil // a multus delegate's, in the other cache: not this test's
	}
	r.names = append(r.names, name)
	if err != nil || string(disk) != string(data) {
		r.t.Errorf("release %s: not the file on disk (%v)", name, err)
	}
	return nil
}

// TestRunRuntimeCache prunes the runtime's own cache beside multus's: its
// files are judged by the rules of multus's results files, every guard
// included, and counted apart.
func TestRunRuntimeCache(t *testing.T) {
	for _, tc := range []struct {
		name     string
		pods     bool // pod liveness
		runtime  bool // sandbox liveness
		dryRun   bool
		viewTime bool // a one-shot view taken before the files were written
		uptime   time.Duration
		// wantGone are the runtime cache entries removed (or that a dry
		// run would remove); the rest stay.
		wantGone func(rt *runtimeTree) []string
		wantKept map[prune.Reason]int
	}{
		{
			name: "api", pods: true,
			wantGone: func(rt *runtimeTree) []string { return []string{rt.dead} },
			wantKept: map[prune.Reason]int{prune.ReasonPodLive: 1, prune.ReasonTooYoung: 1, prune.ReasonUnparseable: 1,
				prune.ReasonNoIdentity: 1, prune.ReasonNotRegular: 2},
		},
		{
			name: "cri", runtime: true,
			wantGone: func(rt *runtimeTree) []string { return []string{rt.dead} },
			wantKept: map[prune.Reason]int{prune.ReasonSandboxLive: 1, prune.ReasonTooYoung: 1, prune.ReasonUnparseable: 1,
				prune.ReasonNoIdentity: 1, prune.ReasonNotRegular: 2},
		},
		{
			name: "both", pods: true, runtime: true,
			wantGone: func(rt *runtimeTree) []string { return []string{rt.dead} },
			wantKept: map[prune.Reason]int{prune.ReasonSandboxLive: 1, prune.ReasonTooYoung: 1, prune.ReasonUnparseable: 1,
				prune.ReasonNoIdentity: 1, prune.ReasonNotRegular: 2},
		},
		{
			name: "dry run", pods: true, dryRun: true,
			wantGone: func(rt *runtimeTree) []string { return []string{rt.dead} },
			wantKept: map[prune.Reason]int{prune.ReasonPodLive: 1, prune.ReasonTooYoung: 1, prune.ReasonUnparseable: 1,
				prune.ReasonNoIdentity: 1, prune.ReasonNotRegular: 2},
		},
		{
			name: "view older than the files", pods: true, viewTime: true,
			wantGone: func(*runtimeTree) []string { return nil },
			wantKept: map[prune.Reason]int{prune.ReasonPodLive: 1, prune.ReasonNewerThanView: 2, prune.ReasonUnparseable: 1,
				prune.ReasonNoIdentity: 1, prune.ReasonNotRegular: 2},
		},
		{
			name: "booted within the minimum age", pods: true, uptime: time.Minute,
			wantGone: func(*runtimeTree) []string { return nil },
			wantKept: map[prune.Reason]int{prune.ReasonPodLive: 1, prune.ReasonTooYoung: 1, prune.ReasonClockUnsettled: 1,
				prune.ReasonUnparseable: 1, prune.ReasonNoIdentity: 1, prune.ReasonNotRegular: 2},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rt := newRuntimeTree(t)
			before := rt.left(t)
			rel := &runtimeReleaser{dir: rt.runtime, t: t}
			opts := prune.Options{Config: prune.Config{Dir: rt.multus, RuntimeDir: rt.runtime, MinAge: 15 * time.Minute, DryRun: tc.dryRun}, Deps: prune.Deps{Release: rel}}
			var views prune.Views
			if tc.pods {
				views.Pods = rt.pods
			}
			if tc.runtime {
				views.Sandboxes = newSandboxes(rt.running...)
			}
			if tc.viewTime {
				views.ViewTime = time.Now().Add(-time.Minute)
			}
			if tc.uptime > 0 {
				views.Clock = func(time.Duration) prune.ClockState { return prune.ClockState{Uptime: tc.uptime} }
			}
			var mu sync.Mutex
			reported := map[string]prune.File{}
			opts.OnFile = func(f prune.File) {
				mu.Lock()
				defer mu.Unlock()
				if f.Cache == prune.CacheRuntime {
					reported[f.Name] = f
				}
			}
			sum, err := prune.Run(t.Context(), views, opts)
			if err != nil {
				t.Fatal(err)
			}
			gone := tc.wantGone(rt)
			want := before
			if !tc.dryRun {
				want = slices.DeleteFunc(slices.Clone(before), func(n string) bool { return slices.Contains(gone, n) })
			}
			if got := rt.left(t); !slices.Equal(got, want) {
				t.Errorf("left in the runtime cache:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
			}
			if _, err := os.Stat(filepath.Join(rt.outside, "target")); err != nil {
				t.Errorf("symlink target touched: %v", err)
			}

			if len(sum.Caches) != 2 || sum.Caches[0].Name != prune.CacheMultus || sum.Caches[1].Name != prune.CacheRuntime {
				t.Fatalf("caches: %+v", sum.Caches)
			}
			c := sum.Cache(prune.CacheRuntime)
			if c.Dir != rt.runtime || c.Scanned[prune.PhaseResults] != len(before) || c.Removed[prune.PhaseResults] != len(gone) ||
				c.Scanned[prune.PhaseScratch] != 0 || c.Errors != 0 {
				t.Errorf("runtime cache counts: %+v", c)
			}
			kept := map[prune.Reason]int{}
			for r, n := range c.Kept {
				if n > 0 {
					kept[r] = n
				}
			}
			if !mapsEqual(kept, tc.wantKept) {
				t.Errorf("runtime cache kept %v, want %v", kept, tc.wantKept)
			}
			m := sum.Cache(prune.CacheMultus)
			for _, p := range []prune.Phase{prune.PhaseResults, prune.PhaseScratch} {
				if sum.Removed[p] != m.Removed[p]+c.Removed[p] || sum.Scanned[p] != m.Scanned[p]+c.Scanned[p] {
					t.Errorf("totals of %s are not the caches' sums: %+v", p, sum)
				}
			}
			if got, want := c.DiskBytes, diskBytes(t, rt.runtime); got != want || got == 0 {
				t.Errorf("runtime cache disk bytes = %d, want %d (du of what is left)", got, want)
			}
			if got, want := m.DiskBytes, diskBytes(t, rt.multus); got != want || got == 0 {
				t.Errorf("multus cache disk bytes = %d, want %d", got, want)
			}

			var text strings.Builder
			if err := sum.WriteText(&text); err != nil {
				t.Fatal(err)
			}
			verb := "removed"
			if tc.dryRun {
				verb = "would remove"
			}
			if want := fmt.Sprintf("\n  runtime cache %s: scanned %d results; %s %d results\n", rt.runtime, len(before), verb, len(gone)); !strings.Contains(text.String(), want) {
				t.Errorf("text summary:\n%s\nlacks %q", text.String(), want)
			}
			if want := fmt.Sprintf("%s: scanned %d results, %d scratch,", rt.multus, m.Scanned[prune.PhaseResults], m.Scanned[prune.PhaseScratch]); !strings.HasPrefix(text.String(), want) {
				t.Errorf("text summary:\n%s\nwant its first line to count multus's cache alone: %q", text.String(), want)
			}

			// The DEL is the same as for multus's results files.
			if got := rel.names; tc.dryRun && len(got) != 0 || !tc.dryRun && !slices.Equal(got, gone) {
				t.Errorf("released %v, want %v (dry run %v)", got, gone, tc.dryRun)
			}
			if f, ok := reported[rt.dead]; !ok || f.Path() != filepath.Join(rt.runtime, rt.dead) || f.RelPath() != rt.dead {
				t.Errorf("reported %+v for %s", f, rt.dead)
			}
			if f := reported[rt.noUID]; f.Reason != prune.ReasonNoIdentity {
				t.Errorf("file of no pod's container: %+v", f)
			}
		})
	}
}

// TestRunRuntimeCacheRefused: a runtime cache that is missing or a symlink
// stops the run once multus's is done, with an error; nothing of it is
// touched.
func TestRunRuntimeCacheRefused(t *testing.T) {
	for _, tc := range []struct {
		name  string
		setup func(t *testing.T, rt *runtimeTree) string
	}{
		{"missing", func(t *testing.T, rt *runtimeTree) string { return filepath.Join(rt.outside, "none") }},
		{"symlink", func(t *testing.T, rt *runtimeTree) string {
			link := filepath.Join(rt.outside, "link")
			if err := os.Symlink(rt.runtime, link); err != nil {
				t.Fatal(err)
			}
			return link
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rt := newRuntimeTree(t)
			before := rt.left(t)
			dir := tc.setup(t, rt)
			sum, err := prune.Run(t.Context(), prune.Views{Pods: rt.pods}, prune.Options{Config: prune.Config{Dir: rt.multus, RuntimeDir: dir, MinAge: 15 * time.Minute}})
			if err == nil {
				t.Fatal("no error")
			}
			if got := rt.left(t); !slices.Equal(got, before) {
				t.Errorf("runtime cache touched: %v", got)
			}
			if sum.KeptSandboxes() != nil {
				t.Error("the boot record would be written from a run that did not read every cache")
			}
			if m := sum.Cache(prune.CacheMultus); m == nil || m.Removed[prune.PhaseResults] != 2 {
				t.Errorf("multus's cache was not pruned first: %+v", m)
			}
		})
	}
}

func mapsEqual[K comparable](a, b map[K]int) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

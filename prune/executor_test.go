package prune_test

import (
	"context"
	"errors"
	"io/fs"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/sweep-k8s/sweep/cachefile"
	"github.com/sweep-k8s/sweep/prune"
	"github.com/sweep-k8s/sweep/test/framework/multuscache"
)

// tree is a cache directory with one of everything the prune must handle.
type tree struct {
	dir, outside string
	live         []prune.PodRef
	want         []string // entries expected to remain, relative to dir
}

func newTree(t *testing.T) *tree {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "multus")
	outside := t.TempDir()
	old := time.Now().Add(-time.Hour)
	young := time.Now()
	tr := &tree{dir: dir, outside: outside}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	if err := os.MkdirAll(filepath.Join(dir, "results"), 0o700); err != nil {
		t.Fatal(err)
	}
	atts := multuscache.DefaultAttachments()
	sandbox := func(pod multuscache.Pod, mtime time.Time, keep bool) string {
		id := multuscache.NewSandboxID()
		paths, err := multuscache.Sandbox(dir, id, pod, atts, mtime)
		must(err)
		if keep {
			for _, p := range paths {
				rel, _ := filepath.Rel(dir, p)
				tr.want = append(tr.want, rel)
			}
		}
		return id
	}
	livePod := multuscache.Pod{Namespace: "default", Name: "live", UID: multuscache.UID("live")}
	web0New := multuscache.Pod{Namespace: "default", Name: "web-0", UID: multuscache.UID("web-0-new")}
	tr.live = []prune.PodRef{{Namespace: "default", Name: "live", UID: multuscache.UID("live")}, {Namespace: "default", Name: "web-0", UID: multuscache.UID("web-0-new")}}

	sandbox(livePod, old, true)                                                                                  // live pod: kept
	sandbox(multuscache.Pod{Namespace: "default", Name: "gone", UID: multuscache.UID("gone")}, old, false)       // deleted pod: removed
	sandbox(multuscache.Pod{Namespace: "default", Name: "web-0", UID: multuscache.UID("web-0-old")}, old, false) // same name, old UID: removed
	sandbox(web0New, old, true)                                                                                  // same name, new UID: kept
	sandbox(multuscache.Pod{Namespace: "default", Name: "young", UID: multuscache.UID("young")}, young, true)    // deleted but young: kept

	_, err := multuscache.FailedAdd(dir, multuscache.NewSandboxID(), old) // failed ADD: removed
	must(err)
	youngFailed := multuscache.NewSandboxID()
	_, err = multuscache.FailedAdd(dir, youngFailed, young) // failed ADD, young: kept
	must(err)
	tr.want = append(tr.want, youngFailed)

	// Unparseable results file: kept, and it keeps its sandbox's scratch file.
	corrupt := multuscache.NewSandboxID()
	_, err = multuscache.FailedAdd(dir, corrupt, old)
	must(err)
	cname := "results/k8s-pod-network-" + corrupt + "-eth0"
	must(os.WriteFile(filepath.Join(dir, cname), []byte(`{"kind":"cniCacheV1","containerId":"`), 0o600))
	must(os.Chtimes(filepath.Join(dir, cname), old, old))
	tr.want = append(tr.want, corrupt, cname)

	// Untouchables.
	target := filepath.Join(outside, "target")
	must(os.WriteFile(target, []byte("{}"), 0o600))
	symlinkID := multuscache.NewSandboxID()
	must(os.Symlink(target, filepath.Join(dir, symlinkID)))
	must(os.Symlink(target, filepath.Join(dir, "results", "net-"+symlinkID+"-eth0")))
	must(os.Mkdir(filepath.Join(dir, multuscache.NewSandboxID()), 0o700))
	must(os.WriteFile(filepath.Join(dir, "multus.kubeconfig"), []byte("x"), 0o600))
	must(os.WriteFile(filepath.Join(dir, strings.ToUpper(multuscache.NewSandboxID())), []byte("x"), 0o600))
	must(syscall.Mkfifo(filepath.Join(dir, "results", "fifo"), 0o600))
	l, err := net.Listen("unix", filepath.Join(dir, "results", "sock"))
	must(err)
	t.Cleanup(func() { l.Close() })
	for _, e := range must2(os.ReadDir(dir)) {
		if e.Name() != "results" && (e.Type()&fs.ModeSymlink != 0 || e.IsDir() || len(e.Name()) != 64 || strings.ToUpper(e.Name()) == e.Name()) {
			tr.want = append(tr.want, e.Name())
		}
	}
	tr.want = append(tr.want, "results/net-"+symlinkID+"-eth0", "results/fifo", "results/sock")
	sort.Strings(tr.want)
	return tr
}

func must2[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

func (tr *tree) remaining(t *testing.T) []string {
	t.Helper()
	var got []string
	for _, sub := range []string{"", "results"} {
		ents, err := os.ReadDir(filepath.Join(tr.dir, sub))
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range ents {
			if sub == "" && e.Name() == "results" {
				continue
			}
			got = append(got, filepath.Join(sub, e.Name()))
		}
	}
	sort.Strings(got)
	return got
}

func (tr *tree) all(t *testing.T) string {
	return strings.Join(tr.remaining(t), "\n")
}

func TestRun(t *testing.T) {
	tr := newTree(t)
	sum, err := prune.Run(t.Context(), prune.Views{Pods: prune.NewPodSet(tr.live)}, prune.Options{Config: prune.Config{Dir: tr.dir, MinAge: 15 * time.Minute}})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := strings.Join(tr.remaining(t), "\n"), strings.Join(tr.want, "\n"); got != want {
		t.Fatalf("remaining:\n%s\n\nwant:\n%s", got, want)
	}
	if _, err := os.Stat(filepath.Join(tr.outside, "target")); err != nil {
		t.Fatalf("symlink target touched: %v", err)
	}
	// gone + web-0 old: 2 sandboxes x 2 results; their scratch files + the old failed ADD.
	if sum.Removed[prune.PhaseResults] != 4 || sum.Removed[prune.PhaseScratch] != 3 || sum.Errors != 0 {
		t.Fatalf("summary: %+v", sum)
	}
	for r, n := range map[prune.Reason]int{prune.ReasonPodLive: 4, prune.ReasonTooYoung: 3, prune.ReasonUnparseable: 1, prune.ReasonNotRegular: 5, prune.ReasonSandboxReferenced: 4} {
		if sum.Kept[r] != n {
			t.Errorf("kept[%s] = %d, want %d (all: %v)", r, sum.Kept[r], n, sum.Kept)
		}
	}
	// A second run finds nothing more to do.
	sum, err = prune.Run(t.Context(), prune.Views{Pods: prune.NewPodSet(tr.live)}, prune.Options{Config: prune.Config{Dir: tr.dir, MinAge: 15 * time.Minute}})
	if err != nil || sum.Removed[prune.PhaseResults]+sum.Removed[prune.PhaseScratch] != 0 {
		t.Fatalf("second run: %+v, %v", sum, err)
	}
}

func TestRunDryRun(t *testing.T) {
	tr := newTree(t)
	before := tr.all(t)
	sum, err := prune.Run(t.Context(), prune.Views{Pods: prune.NewPodSet(tr.live)}, prune.Options{Config: prune.Config{Dir: tr.dir, MinAge: 15 * time.Minute, DryRun: true}})
	if err != nil {
		t.Fatal(err)
	}
	if after := tr.all(t); after != before {
		t.Fatalf("dry run changed the tree")
	}
	// The dry run reports what a real run removes, phase 2 included.
	if sum.Removed[prune.PhaseResults] != 4 || sum.Removed[prune.PhaseScratch] != 3 {
		t.Fatalf("summary: %+v", sum)
	}
}

// flakyIndex is synced for the first n checks, then not: a watch that broke
// in the middle of a run.
type flakyIndex struct {
	*prune.PodSet
	n atomic.Int64
}

func (f *flakyIndex) Synced() bool { return f.n.Add(-1) >= 0 }

func TestRunFailsClosed(t *testing.T) {
	tests := []struct {
		name      string
		syncedFor int64
		maxGone   int
	}{
		{"never synced", 0, 0},
		{"unsynced mid-run", 3, 2},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tr := newTree(t)
			before := len(tr.remaining(t))
			idx := &flakyIndex{PodSet: prune.NewPodSet(tr.live)}
			idx.n.Store(tc.syncedFor)
			_, err := prune.Run(t.Context(), prune.Views{Pods: idx}, prune.Options{Config: prune.Config{Dir: tr.dir, MinAge: 15 * time.Minute, Workers: 1}})
			if !errors.Is(err, prune.ErrNotSynced) {
				t.Fatalf("err = %v, want ErrNotSynced", err)
			}
			if gone := before - len(tr.remaining(t)); gone > tc.maxGone {
				t.Fatalf("%d entries removed on an unsynced view", gone)
			}
		})
	}
}

func TestRunRefusesSymlinkedResults(t *testing.T) {
	tr := newTree(t)
	// results/ replaced by a symlink to a directory full of stale-looking files.
	elsewhere := filepath.Join(tr.outside, "elsewhere")
	if err := os.Rename(filepath.Join(tr.dir, "results"), elsewhere); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(elsewhere, filepath.Join(tr.dir, "results")); err != nil {
		t.Fatal(err)
	}
	before, _ := os.ReadDir(elsewhere)
	beforeTop := tr.all(t)
	_, err := prune.Run(t.Context(), prune.Views{Pods: prune.NewPodSet(tr.live)}, prune.Options{Config: prune.Config{Dir: tr.dir, MinAge: 15 * time.Minute}})
	if err == nil {
		t.Fatal("prune followed a symlinked results directory")
	}
	after, _ := os.ReadDir(elsewhere)
	if len(after) != len(before) || tr.all(t) != beforeTop {
		t.Fatal("files removed although results/ is a symlink")
	}
}

// TestRunMissingResultsDir: multus before v3.7.2 kept delegate results
// outside its directory, which then holds scratch files only. "No results
// file names it" proves nothing there: every scratch file stays, whatever
// the liveness, since multus's later DEL reads it to find its delegates.
func TestRunMissingResultsDir(t *testing.T) {
	dir := t.TempDir()
	old := time.Now().Add(-time.Hour)
	ids := []string{multuscache.NewSandboxID(), multuscache.NewSandboxID()}
	for _, id := range ids {
		if _, err := multuscache.FailedAdd(dir, id, old); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		name  string
		views prune.Views
	}{
		{"api", prune.Views{Pods: prune.NewPodSet(nil)}},
		{"cri, runtime knows neither", prune.Views{Sandboxes: newSandboxes()}},
		{"api, both from an earlier boot", prune.Views{Pods: prune.NewPodSet(nil), Boot: newSandboxes(ids...)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sum, err := prune.Run(t.Context(), tc.views, prune.Options{Config: prune.Config{Dir: dir, MinAge: time.Minute}})
			if err != nil || sum.Removed[prune.PhaseScratch] != 0 || sum.Kept[prune.ReasonNoResultsDir] != 2 {
				t.Fatalf("sum %+v, err %v; want both scratch files kept as no-results-dir", sum, err)
			}
			for _, id := range ids {
				if _, err := os.Lstat(filepath.Join(dir, id)); err != nil {
					t.Fatal(err)
				}
			}
		})
	}
}

func TestRunCancelled(t *testing.T) {
	tr := newTree(t)
	before := tr.all(t)
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if _, err := prune.Run(ctx, prune.Views{Pods: prune.NewPodSet(tr.live)}, prune.Options{Config: prune.Config{Dir: tr.dir}}); !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v", err)
	}
	if tr.all(t) != before {
		t.Fatal("cancelled run removed files")
	}
}

// TestRunRemoveError: a file that cannot be removed (immutable, as on a
// read-only or damaged filesystem) is counted as an error; the rest of the
// run goes on, and the sandbox it names keeps its scratch file.
func TestRunRemoveError(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "multus") // on disk: tmpfs has no immutable flag
	old := time.Now().Add(-time.Hour)
	stuck := multuscache.NewSandboxID()
	paths, err := multuscache.Sandbox(dir, stuck, multuscache.Pod{Namespace: "default", Name: "a", UID: multuscache.UID("a")}, multuscache.DefaultAttachments(), old)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := multuscache.Sandbox(dir, multuscache.NewSandboxID(), multuscache.Pod{Namespace: "default", Name: "b", UID: multuscache.UID("b")}, multuscache.DefaultAttachments(), old); err != nil {
		t.Fatal(err)
	}
	immutable := paths[1] // a results file of the stuck sandbox
	if out, err := exec.Command("chattr", "+i", immutable).CombinedOutput(); err != nil {
		t.Fatalf("chattr +i (the test needs root and an ext4-like filesystem): %v: %s", err, out)
	}
	t.Cleanup(func() { _ = exec.Command("chattr", "-i", immutable).Run() })

	sum, err := prune.Run(t.Context(), prune.Views{Pods: prune.NewPodSet(nil)}, prune.Options{Config: prune.Config{Dir: dir, MinAge: time.Minute}})
	if err != nil {
		t.Fatal(err)
	}
	if sum.Errors != 1 || sum.Kept[prune.ReasonError] != 1 {
		t.Fatalf("errors %d, kept %v; want one error", sum.Errors, sum.Kept)
	}
	// Everything else went: the other sandbox whole, the stuck one's other
	// results file; its scratch file stays, since a results file names it.
	want := []string{stuck, "results/" + filepath.Base(immutable)}
	tr := &tree{dir: dir}
	if got := strings.Join(tr.remaining(t), "\n"); got != strings.Join(want, "\n") {
		t.Fatalf("remaining:\n%s\nwant:\n%s", got, strings.Join(want, "\n"))
	}
}

// TestRunHostileNames: odd names are handled like any other, and a symlink
// loop is an entry like any symlink: kept, never followed.
func TestRunHostileNames(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "multus")
	old := time.Now().Add(-time.Hour)
	id := multuscache.NewSandboxID()
	stale := multuscache.ResultsJSON(id, multuscache.Pod{Namespace: "default", Name: "x", UID: multuscache.UID("x")}, multuscache.DefaultAttachments()[0])
	if err := os.MkdirAll(filepath.Join(dir, "results"), 0o700); err != nil {
		t.Fatal(err)
	}
	write := func(rel string, data []byte) {
		t.Helper()
		p := filepath.Join(dir, rel)
		if err := os.WriteFile(p, data, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chtimes(p, old, old); err != nil {
			t.Fatal(err)
		}
	}
	write("results/net\n-"+id+"-eth0", stale) // removed: a stale cache file, whatever its name
	write("results/\xff\xfe-"+id+"-eth0", stale)
	write("notes\nwith newline", []byte("x"))
	write("\xff"+id[1:], []byte("x"))
	for _, l := range []string{"results/loop", "loop"} {
		if err := os.Symlink(filepath.Base(l), filepath.Join(dir, l)); err != nil {
			t.Fatal(err)
		}
	}
	sum, err := prune.Run(t.Context(), prune.Views{Pods: prune.NewPodSet(nil)}, prune.Options{Config: prune.Config{Dir: dir, MinAge: time.Minute}})
	if err != nil {
		t.Fatal(err)
	}
	tr := &tree{dir: dir}
	want := []string{"loop", "notes\nwith newline", "results/loop", "\xff" + id[1:]}
	sort.Strings(want)
	if got := strings.Join(tr.remaining(t), "|"); got != strings.Join(want, "|") {
		t.Fatalf("remaining %q, want %q", tr.remaining(t), want)
	}
	if sum.Removed[prune.PhaseResults] != 2 || sum.Kept[prune.ReasonNotRegular] != 1 || sum.Kept[prune.ReasonOtherName] != 3 {
		t.Fatalf("summary %+v", sum)
	}
}

// mountTmpfs mounts a fresh tmpfs with the given options on a temporary
// directory and unmounts it when the test ends. It needs root, as the tests
// of this package are run.
func mountTmpfs(t *testing.T, opts string) string {
	t.Helper()
	mnt := t.TempDir()
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", opts, "sweep-test", mnt).CombinedOutput(); err != nil {
		t.Fatalf("mount tmpfs (the test needs root): %v: %s", err, out)
	}
	t.Cleanup(func() { _ = exec.Command("umount", "-l", mnt).Run() })
	return mnt
}

// TestRunReadOnlyFilesystem: on a filesystem remounted read-only every
// removal fails; each failure is counted, every file is still visited, and
// the run ends normally with nothing removed.
func TestRunReadOnlyFilesystem(t *testing.T) {
	mnt := mountTmpfs(t, "size=4m,mode=0700")
	dir := filepath.Join(mnt, "multus")
	if err := multuscache.Node(dir, 20, nil, time.Now().Add(-time.Hour)); err != nil {
		t.Fatal(err)
	}
	tr := &tree{dir: dir}
	before := tr.all(t)
	if out, err := exec.Command("mount", "-o", "remount,ro", mnt).CombinedOutput(); err != nil {
		t.Fatalf("remount read-only: %v: %s", err, out)
	}
	var logs strings.Builder
	log := slog.New(slog.NewTextHandler(&logs, nil))
	sum, err := prune.Run(t.Context(), prune.Views{Pods: prune.NewPodSet(nil)}, prune.Options{Config: prune.Config{Dir: dir, MinAge: time.Minute}, Deps: prune.Deps{Logger: log}})
	if err != nil {
		t.Fatal(err)
	}
	// One warning per file would flood the log every run: 20, then a count.
	if n := strings.Count(logs.String(), "cannot remove file"); n != 20 {
		t.Errorf("%d per-file warnings, want 20", n)
	}
	if !strings.Contains(logs.String(), "more file problems than logged") {
		t.Errorf("no count of the problems not logged:\n%s", logs.String())
	}
	results := sum.Scanned[prune.PhaseResults]
	if results == 0 || sum.Errors != results || sum.Kept[prune.ReasonError] != results {
		t.Fatalf("scanned %d results files, errors %d, kept %v; want one error per results file", results, sum.Errors, sum.Kept)
	}
	// Each scratch file is still named by its kept results files.
	if sum.Kept[prune.ReasonSandboxReferenced] != sum.Scanned[prune.PhaseScratch] || sum.Removed[prune.PhaseScratch] != 0 {
		t.Fatalf("scratch: %+v", sum)
	}
	if after := tr.all(t); after != before {
		t.Fatalf("the tree changed on a read-only filesystem")
	}
}

// TestRunInodesExhausted is the state users find their nodes in: the cache
// filesystem has no free inode left. Removal needs none, so the prune works
// and gives the inodes back.
func TestRunInodesExhausted(t *testing.T) {
	mnt := mountTmpfs(t, "size=16m,nr_inodes=400,mode=0700")
	dir := filepath.Join(mnt, "multus")
	live := multuscache.Pod{Namespace: "default", Name: "live", UID: multuscache.UID("live")}
	old := time.Now().Add(-time.Hour)
	if _, err := multuscache.Sandbox(dir, multuscache.NewSandboxID(), live, multuscache.DefaultAttachments(), old); err != nil {
		t.Fatal(err)
	}
	var err error
	for i := 0; err == nil; i++ {
		_, err = multuscache.Sandbox(dir, multuscache.NewSandboxID(), multuscache.Pod{Namespace: "default", Name: "gone", UID: multuscache.UID("gone")}, multuscache.DefaultAttachments(), old)
		if i > 1000 {
			t.Fatal("the filesystem never filled up")
		}
	}
	if !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("filling the filesystem: %v, want ENOSPC", err)
	}
	var st syscall.Statfs_t
	if err := syscall.Statfs(mnt, &st); err != nil || st.Ffree != 0 {
		t.Fatalf("free inodes %d (%v), want 0", st.Ffree, err)
	}
	sum, err := prune.Run(t.Context(), prune.Views{Pods: prune.NewPodSet([]prune.PodRef{{Namespace: "default", Name: "live", UID: multuscache.UID("live")}})}, prune.Options{Config: prune.Config{Dir: dir, MinAge: time.Minute}})
	if err != nil {
		t.Fatal(err)
	}
	if sum.Errors != 0 || sum.Removed[prune.PhaseResults] == 0 || sum.Kept[prune.ReasonPodLive] != 2 {
		t.Fatalf("summary %+v", sum)
	}
	if err := syscall.Statfs(mnt, &st); err != nil || st.Ffree < 300 {
		t.Fatalf("free inodes after the prune: %d (%v)", st.Ffree, err)
	}
}

// TestRunOversized: results files bigger than any cache file are not read
// (a sparse 8 GiB one included) and are kept with their sandbox's scratch
// file, whatever they contain.
func TestRunOversized(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "multus")
	old := time.Now().Add(-time.Hour)
	pod := multuscache.Pod{Namespace: "default", Name: "x", UID: multuscache.UID("x")}
	big, sparse := multuscache.NewSandboxID(), multuscache.NewSandboxID()
	for _, id := range []string{big, sparse} {
		if _, err := multuscache.Sandbox(dir, id, pod, multuscache.DefaultAttachments()[:1], old); err != nil {
			t.Fatal(err)
		}
	}
	bigFile := filepath.Join(dir, "results", "k8s-pod-network-"+big+"-eth0")
	data, err := os.ReadFile(bigFile)
	if err != nil {
		t.Fatal(err)
	}
	// A stale cache file in every respect but its size.
	padded := append(data[:len(data)-1:len(data)-1], []byte(`,"pad":"`+strings.Repeat("x", prune.DefaultMaxFileSize)+`"}`)...)
	if _, err := cachefile.ParseCacheFile(padded); err != nil {
		t.Fatalf("the padded file does not parse: %v", err)
	}
	if err := os.WriteFile(bigFile, padded, 0o600); err != nil {
		t.Fatal(err)
	}
	sparseFile := filepath.Join(dir, "results", "k8s-pod-network-"+sparse+"-eth0")
	if err := os.Truncate(sparseFile, 8<<30); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{bigFile, sparseFile} {
		if err := os.Chtimes(f, old, old); err != nil {
			t.Fatal(err)
		}
	}
	tr := &tree{dir: dir}
	before := tr.all(t)
	sum, err := prune.Run(t.Context(), prune.Views{Pods: prune.NewPodSet(nil)}, prune.Options{Config: prune.Config{Dir: dir, MinAge: time.Minute}})
	if err != nil {
		t.Fatal(err)
	}
	if sum.Kept[prune.ReasonTooLarge] != 2 || sum.Kept[prune.ReasonSandboxReferenced] != 2 || sum.Errors != 0 {
		t.Fatalf("summary %+v", sum)
	}
	if tr.all(t) != before {
		t.Fatal("an oversized file or its scratch file was removed")
	}
}

// TestRunStopsOnClockSet: the wall clock set during a run, either way,
// stops it before its next removal (a paced run lasts up to an hour, and
// its age and newer-than-view rules read the wall clock); a clock that only
// runs keeps it going.
func TestRunStopsOnClockSet(t *testing.T) {
	const sandboxes = 20
	tests := []struct {
		name string
		// step is the wall clock's move against the monotonic clock once
		// the run has made its first removal check.
		step       time.Duration
		wantErr    error
		wantRemove bool // all stale files removed
	}{
		{name: "no set", step: 0, wantRemove: true},
		{name: "within the tolerance", step: 5 * time.Millisecond, wantRemove: true},
		{name: "set back an hour", step: -time.Hour, wantErr: prune.ErrNotSynced},
		{name: "set forward an hour", step: time.Hour, wantErr: prune.ErrNotSynced},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "multus")
			old := time.Now().Add(-time.Hour)
			for range sandboxes {
				gone := multuscache.Pod{Namespace: "default", Name: "gone", UID: multuscache.UID("gone")}
				if _, err := multuscache.Sandbox(dir, multuscache.NewSandboxID(), gone, multuscache.DefaultAttachments(), old); err != nil {
					t.Fatal(err)
				}
			}
			var checks atomic.Int64
			skew := func() time.Duration {
				if checks.Add(1) == 1 {
					return 0 // the run's first check: before the set
				}
				return tt.step
			}
			opts := prune.WithClockSkew(prune.Options{Config: prune.Config{Dir: dir, MinAge: time.Minute, Workers: 1}}, skew)
			sum, err := prune.Run(t.Context(), prune.Views{Pods: prune.NewPodSet(nil)}, opts)
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("err %v, want %v", err, tt.wantErr)
			}
			removed := sum.Removed[prune.PhaseResults] + sum.Removed[prune.PhaseScratch]
			if tt.wantRemove && removed != sandboxes*(len(multuscache.DefaultAttachments())+1) {
				t.Fatalf("removed %d files, want all; summary %+v", removed, sum)
			}
			if !tt.wantRemove && removed != 0 {
				t.Fatalf("removed %d files after the clock was set; summary %+v", removed, sum)
			}
		})
	}
}

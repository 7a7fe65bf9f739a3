package prune_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sweep-k8s/sweep/cachefile"
	"github.com/sweep-k8s/sweep/prune"
	"github.com/sweep-k8s/sweep/test/framework/multuscache"
)

// targetNode is a cache with one sandbox per pod: name → its sandbox and
// results files.
type targetNode struct {
	dir      string
	sandbox  map[string]string
	results  map[string][]string
	uid      map[string]string
	sandboxV *sandboxes
}

// newTargetNode writes one sandbox per pod of ages (pod name → age of its
// files).
func newTargetNode(t *testing.T, ages map[string]time.Duration) *targetNode {
	t.Helper()
	n := &targetNode{dir: filepath.Join(t.TempDir(), "multus"), sandbox: map[string]string{}, results: map[string][]string{},
		uid: map[string]string{}, sandboxV: newSandboxes()}
	for name, age := range ages {
		sb, uid := multuscache.NewSandboxID(), multuscache.UID(name)
		paths, err := multuscache.Sandbox(n.dir, sb, multuscache.Pod{Namespace: "ns", Name: name, UID: uid},
			multuscache.DefaultAttachments(), time.Now().Add(-age))
		if err != nil {
			t.Fatal(err)
		}
		n.sandbox[name], n.uid[name] = sb, uid
		for _, p := range paths[1:] {
			n.results[name] = append(n.results[name], filepath.Base(p))
		}
	}
	return n
}

func (n *targetNode) uids(names ...string) map[string]struct{} {
	s := map[string]struct{}{}
	for _, name := range names {
		s[n.uid[name]] = struct{}{}
	}
	return s
}

func (n *targetNode) exists(t *testing.T, path string) bool {
	t.Helper()
	_, err := os.Lstat(filepath.Join(n.dir, path))
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Fatal(err)
	}
	return err == nil
}

// TestTargetedRun: a check of deleted pods finds and removes only the files
// of the pods it targets, by the rules of a full run with the minimum age
// of a pod known dead (Config.ADDBound, 5m here, as --min-age is longer): a
// target the view still holds keeps its files, another pod's file that the
// memory of the caches wrongly gives to a target stays (not-target), a file
// younger than the bound stays and is worth a retry once old enough, a
// sandbox the runtime still lists keeps its results and scratch files and
// is worth a retry, and a dead pod not targeted is left to the scheduled
// run.
func TestTargetedRun(t *testing.T) {
	n := newTargetNode(t, map[string]time.Duration{
		"gone": 10 * time.Minute, "live": 10 * time.Minute, "other-dead": 10 * time.Minute,
		"young": 30 * time.Second, "running": 10 * time.Minute,
	})
	sid, _ := cachefile.ParseSandboxID(n.sandbox["running"])
	n.sandboxV.ids[sid] = struct{}{}
	pods := prune.NewPodSet([]prune.PodRef{{Namespace: "ns", Name: "live", UID: n.uid["live"]}})

	files := prune.NewPodFiles()
	// Remembered as gone's, though it names other-dead (rewritten since):
	// the run reads it again and keeps it.
	misremembered := n.results["other-dead"][0]
	files.Observe(prune.File{Cache: prune.CacheMultus, Phase: prune.PhaseResults, Name: misremembered, Pod: prune.PodRef{UID: n.uid["gone"]}})
	cfg := prune.Config{Dir: n.dir, MinAge: time.Hour, Workers: 2}
	var outcomes []prune.File
	sum, err := prune.Run(t.Context(), prune.Views{Pods: pods, Sandboxes: n.sandboxV},
		prune.Options{Config: cfg, Deps: prune.Deps{OnFile: func(f prune.File) { outcomes = append(outcomes, f) }, PodFiles: files},
			Targets: &prune.Targets{UIDs: n.uids("gone", "young", "running", "live")}})
	if err != nil {
		t.Fatal(err)
	}
	for name, gone := range map[string]bool{"gone": true, "live": false, "other-dead": false, "young": false, "running": false} {
		for _, f := range n.results[name] {
			if n.exists(t, "results/"+f) == gone {
				t.Errorf("%s: results file %s: removed %v, want %v", name, f, !gone, gone)
			}
		}
		if n.exists(t, n.sandbox[name]) == gone {
			t.Errorf("%s: scratch file: removed %v, want %v", name, !gone, gone)
		}
	}
	wantKept := map[prune.Reason]int{prune.ReasonNotTarget: 1, prune.ReasonPodLive: 2, prune.ReasonTooYoung: 2, prune.ReasonSandboxLive: 2,
		prune.ReasonSandboxReferenced: 3}
	if !equalCounts(sum.Kept, wantKept) {
		t.Errorf("kept %v, want %v", sum.Kept, wantKept)
	}
	if sum.Removed[prune.PhaseResults] != 2 || sum.Removed[prune.PhaseScratch] != 1 {
		t.Errorf("removed %v, want the gone pod's 2 results files and its scratch file", sum.Removed)
	}
	if len(outcomes) != 13 {
		t.Errorf("%d outcomes reported, want 13: 9 results files, 4 scratch files", len(outcomes))
	}
	if sum.KeptSandboxes() != nil {
		t.Error("a targeted run read a few files: it must not claim to know every sandbox kept (the boot record)")
	}
	// Each pod's outcome, which says whether a check tries it again.
	tg := sum.Targeted
	if tg == nil || tg.Read != 9 || tg.Unread != 0 {
		t.Fatalf("targeted counts %+v, want 9 files read (10 less the one remembered)", tg)
	}
	youngAt := time.Now().Add(-30 * time.Second).Add(5*time.Minute + time.Second)
	for name, want := range map[string]prune.PodOutcome{
		"gone":    {Removed: 2},
		"live":    {Kept: 2},
		"running": {Kept: 2, Retry: true},
		"young":   {Kept: 2, Retry: true, RetryAt: youngAt},
	} {
		got := tg.Pods[n.uid[name]]
		if d := got.RetryAt.Sub(want.RetryAt); d < -5*time.Second || d > 5*time.Second {
			t.Errorf("%s: retry at %v, want about %v", name, got.RetryAt, want.RetryAt)
		}
		got.RetryAt = want.RetryAt
		if got != want {
			t.Errorf("%s: outcome %+v, want %+v", name, got, want)
		}
	}
	if len(tg.Pods) != 4 {
		t.Errorf("outcomes of %d pods, want the 4 targets': %v", len(tg.Pods), tg.Pods)
	}
}

// TestTargetedScratchReferenced: a targeted pod's scratch file stays while
// a results file left in results/ names its sandbox, although the run read
// only the targets' files.
func TestTargetedScratchReferenced(t *testing.T) {
	n := newTargetNode(t, map[string]time.Duration{"gone": 10 * time.Minute})
	sb := n.sandbox["gone"]
	// Another network's file of the same sandbox that names another pod
	// (made by hand; multus never would): not a target, and it keeps the
	// scratch file.
	other := filepath.Join(n.dir, "results", "extra-net-"+sb+"-net9")
	if err := os.WriteFile(other, multuscache.ResultsJSON(sb, multuscache.Pod{Namespace: "ns", Name: "x", UID: multuscache.UID("x")},
		multuscache.Attachment{Network: "extra-net", IfName: "net9", IP: "10.9.0.2/24"}), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := prune.Config{Dir: n.dir, MinAge: time.Hour, Workers: 1}
	sum, err := prune.Run(t.Context(), prune.Views{Pods: prune.NewPodSet(nil)},
		prune.Options{Config: cfg, Targets: &prune.Targets{UIDs: n.uids("gone")}})
	if err != nil {
		t.Fatal(err)
	}
	if sum.Removed[prune.PhaseResults] != 2 || !n.exists(t, sb) || sum.Kept[prune.ReasonSandboxReferenced] != 1 {
		t.Fatalf("removed %v, kept %v, scratch there %v; want 2 results removed, the scratch file kept as referenced",
			sum.Removed, sum.Kept, n.exists(t, sb))
	}
	if !n.exists(t, "results/"+filepath.Base(other)) {
		t.Fatal("another pod's file was removed by a targeted run")
	}
}

// TestPodFilesReadsOnce: a results file is read by the first Find that
// lists it, or never when a run reported it (Observe); a later Find reads
// only what is new, and forgets what went. A file that names no pod yet
// (being written) is read again until it does.
func TestPodFilesReadsOnce(t *testing.T) {
	n := newTargetNode(t, map[string]time.Duration{"a": time.Hour, "b": time.Hour})
	cfg := prune.Config{Dir: n.dir}
	files := prune.NewPodFiles()
	var partial string
	files.Observe(prune.File{Cache: prune.CacheMultus, Phase: prune.PhaseResults, Name: n.results["a"][0],
		Pod: prune.PodRef{UID: n.uid["a"]}, ModTime: time.Now()})
	steps := []struct {
		name     string
		before   func()
		uids     []string
		found    int
		read     int
		remember int
	}{
		{name: "first", uids: []string{"a"}, found: 2, read: 3, remember: 4},
		{name: "nothing new", uids: []string{"a", "b"}, found: 4, read: 0, remember: 4},
		{name: "one pod more", before: func() {
			if _, err := multuscache.Sandbox(n.dir, multuscache.NewSandboxID(), multuscache.Pod{Namespace: "ns", Name: "c", UID: multuscache.UID("c")},
				multuscache.DefaultAttachments(), time.Now()); err != nil {
				t.Fatal(err)
			}
		}, uids: []string{"c"}, found: 2, read: 2, remember: 6},
		{name: "a file being written", before: func() {
			partial = filepath.Join(n.dir, "results", "net-"+multuscache.NewSandboxID()+"-eth0")
			if err := os.WriteFile(partial, []byte(`{"kind":"cniCacheV1","containerId":`), 0o600); err != nil {
				t.Fatal(err)
			}
		}, uids: []string{"d"}, found: 0, read: 1, remember: 6},
		{name: "written since: read again", before: func() {
			sb := strings.TrimSuffix(strings.TrimPrefix(filepath.Base(partial), "net-"), "-eth0")
			if err := os.WriteFile(partial, multuscache.ResultsJSON(sb, multuscache.Pod{Namespace: "ns", Name: "d", UID: multuscache.UID("d")},
				multuscache.Attachment{Network: "net", IfName: "eth0", IP: "10.1.0.2/24"}), 0o600); err != nil {
				t.Fatal(err)
			}
		}, uids: []string{"d"}, found: 1, read: 1, remember: 7},
		{name: "one pod gone", before: func() {
			for _, f := range n.results["b"] {
				if err := os.Remove(filepath.Join(n.dir, "results", f)); err != nil {
					t.Fatal(err)
				}
			}
		}, uids: []string{"b"}, found: 0, read: 0, remember: 5},
	}
	for _, st := range steps {
		if st.before != nil {
			st.before()
		}
		uids := map[string]struct{}{}
		for _, name := range st.uids {
			uids[multuscache.UID(name)] = struct{}{}
		}
		found, stats, err := files.Find(cfg, uids)
		if err != nil {
			t.Fatal(err)
		}
		if len(found[prune.CacheMultus]) != st.found || stats.Read != st.read || files.Len() != st.remember {
			t.Fatalf("%s: found %d, read %d, remembers %d; want %d, %d, %d", st.name, len(found[prune.CacheMultus]), stats.Read,
				files.Len(), st.found, st.read, st.remember)
		}
	}
}

// TestTargetsInvalid: a targeted run without a UID removes nothing.
func TestTargetsInvalid(t *testing.T) {
	n := newTargetNode(t, map[string]time.Duration{"gone": time.Hour})
	_, err := prune.Run(t.Context(), prune.Views{Pods: prune.NewPodSet(nil)},
		prune.Options{Config: prune.Config{Dir: n.dir}, Targets: &prune.Targets{}})
	if !errors.Is(err, prune.ErrTargetsInvalid) || !n.exists(t, n.sandbox["gone"]) {
		t.Fatalf("err %v; want ErrTargetsInvalid and nothing removed", err)
	}
}

// TestTargetedReservations: a check releases the reservations of the
// targeted pods' sandboxes alone, and counts no other (an orphan of
// another sandbox is the scheduled run's); a reservation whose sandbox a
// file of the runtime's cache still names is kept for that file's DEL, as
// in a full run, although the check did not read the file.
func TestTargetedReservations(t *testing.T) {
	for _, tc := range []struct {
		name         string
		runtimeNamed bool
		released     int
		kept         map[prune.Reason]int
	}{
		{name: "released", released: 1, kept: map[prune.Reason]int{}},
		{name: "named by the runtime's cache", runtimeNamed: true, kept: map[prune.Reason]int{prune.ReasonCacheNamed: 1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rt := newReservationTree(t)
			gone, uid := multuscache.NewSandboxID(), multuscache.UID("gone")
			hourAgo := time.Now().Add(-time.Hour)
			paths, err := multuscache.Sandbox(rt.multus, gone, multuscache.Pod{Namespace: "default", Name: "gone", UID: uid},
				multuscache.DefaultAttachments(), hourAgo)
			if err != nil {
				t.Fatal(err)
			}
			writeReservation(t, rt.net, "10.1.0.6", gone+"\r\nnet1", hourAgo)
			args := rt.opts()
			if tc.runtimeNamed {
				args.RuntimeDir = runtimeCacheOf(t, rt, gone)
			}
			if len(paths) < 2 {
				t.Fatalf("sandbox files %v, want a scratch file and results files", paths)
			}
			args.Targets = &prune.Targets{UIDs: map[string]struct{}{uid: {}}}
			sum, err := prune.Run(t.Context(), args.Views, args.Options)
			if err != nil {
				t.Fatal(err)
			}
			r := sum.Reservations
			if r.Released != tc.released || r.Scanned != 1 || !equalCounts(r.Kept, tc.kept) {
				t.Fatalf("released %d, scanned %d, kept %v; want %d, 1 (the target's alone), %v", r.Released, r.Scanned, r.Kept, tc.released, tc.kept)
			}
			want := "10.1.0.2 10.1.0.3 10.1.0.4 10.1.0.5 last_reserved_ip.0 lock"
			if tc.released == 0 {
				want = "10.1.0.2 10.1.0.3 10.1.0.4 10.1.0.5 10.1.0.6 last_reserved_ip.0 lock"
			}
			if got := rt.left(t); got != want {
				t.Fatalf("left %q, want %q: another sandbox's orphan (10.1.0.5) is the scheduled run's", got, want)
			}
		})
	}
}

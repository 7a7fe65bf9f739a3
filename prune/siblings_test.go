package prune

import (
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/sweep-k8s/sweep/cachefile"
	"github.com/sweep-k8s/sweep/test/framework/multuscache"
)

// TestPlannerCarriable pins which decisions may decide a results file's
// siblings unread: only a removal for the pod's or the sandbox's fate, from
// a file that parsed, names a pod UID and whose containerId is the sandbox
// its name carries.
func TestPlannerCarriable(t *testing.T) {
	sandbox, other := multuscache.NewSandboxID(), multuscache.NewSandboxID()
	name := "k8s-pod-network-" + sandbox + "-eth0"
	uid := multuscache.UID("gone")
	entry := func(mod func(*ResultsEntry)) ResultsEntry {
		e := ResultsEntry{Entry: Entry{Name: name},
			Cache: cachefile.CacheFile{ContainerID: sandbox, PodNamespace: "default", PodName: "gone", PodUID: uid}}
		if mod != nil {
			mod(&e)
		}
		return e
	}
	pods := Planner{Index: NewPodSet(nil), NodeName: "node-a"}
	for _, tc := range []struct {
		name string
		p    Planner
		e    ResultsEntry
		d    Decision
		want bool
	}{
		{"pod-gone from a file that names its sandbox and pod", pods, entry(nil), remove(ReasonPodGone), true},
		{"sandbox-gone, the runtime's verdict", Planner{Sandboxes: fakeSandboxes{}}, entry(nil), remove(ReasonSandboxGone), true},
		{"a keep is never carried: every live pod's file is read", pods, entry(nil), keep(ReasonPodLive), false},
		{"a file too young to go decides nothing of its siblings' ages", pods, entry(nil), keep(ReasonTooYoung), false},
		{"earlier-boot needs its own witness", pods, entry(nil), remove(ReasonEarlierBoot), false},
		{"pod-name-gone: no UID", pods, entry(func(e *ResultsEntry) { e.Cache.PodUID = "" }), remove(ReasonPodNameGone), false},
		{"no pod UID", pods, entry(func(e *ResultsEntry) { e.Cache.PodUID = "" }), remove(ReasonPodGone), false},
		{"unparsed", pods, entry(func(e *ResultsEntry) { e.ParseReason = ReasonUnparseable }), remove(ReasonPodGone), false},
		{"containerId another sandbox than the name's", pods, entry(func(e *ResultsEntry) { e.Cache.ContainerID = other }), remove(ReasonPodGone), false},
		{"no containerId", pods, entry(func(e *ResultsEntry) { e.Cache.ContainerID = "" }), remove(ReasonPodGone), false},
		{"a name without a sandbox", pods, entry(func(e *ResultsEntry) { e.Name = "stray" }), remove(ReasonPodGone), false},
		{"a static pod's name: judged by each file's mtime", pods, entry(func(e *ResultsEntry) { e.Cache.PodName = "etcd-node-a" }), remove(ReasonPodGone), false},
		{"the runtime's cache keeps files without a UID", Planner{Index: NewPodSet(nil), RequirePodUID: true}, entry(nil), remove(ReasonPodGone), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.p.Carriable(tc.e, tc.d); got != tc.want {
				t.Fatalf("Carriable = %v, want %v", got, tc.want)
			}
		})
	}
}

// TestPlannerSibling: a sibling decided unread is judged by its own times,
// as any removal: age, the clock guard and the view's time.
func TestPlannerSibling(t *testing.T) {
	now := time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)
	p := Planner{Now: now, MinAge: 15 * time.Minute, Clock: ClockState{Uptime: 24 * time.Hour}, ViewTime: now.Add(-time.Second)}
	old := now.Add(-time.Hour)
	for _, tc := range []struct {
		name       string
		p          Planner
		mtime, ctm time.Time
		want       Decision
	}{
		{"old: as its sibling", p, old, old, remove(ReasonPodGone)},
		{"younger than the minimum age", p, now.Add(-time.Minute), now.Add(-time.Minute), keep(ReasonTooYoung)},
		{"changed after the view", p, old, now, keep(ReasonNewerThanView)},
		{"the clock stepped forward within the minimum age", func() Planner { q := p; q.Clock.Forward = 2 * time.Hour; return q }(), old, old, keep(ReasonClockUnsettled)},
		{"booted within the minimum age", func() Planner { q := p; q.Clock.Uptime = time.Minute; return q }(), old, old, keep(ReasonClockUnsettled)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.p.Sibling(Entry{Name: "f", ModTime: tc.mtime, ChangeTime: tc.ctm}, ReasonPodGone); got != tc.want {
				t.Fatalf("Sibling = %+v, want %+v", got, tc.want)
			}
		})
	}
}

// fakeSandboxes is a runtime's view listing ids.
type fakeSandboxes map[SandboxID]struct{}

func (s fakeSandboxes) Synced() bool          { return true }
func (s fakeSandboxes) Has(id SandboxID) bool { _, ok := s[id]; return ok }

// TestWorkerSiblings handles the results files of one sandbox in a given
// order, on one worker, and checks which were opened, what each became and
// whose it reports. The first file (A) is always a real one of a deleted
// pod; its sibling (B) varies. The order is the test's, not the
// directory's, so that which sibling decides is known.
func TestWorkerSiblings(t *testing.T) {
	old := time.Now().Add(-time.Hour)
	gone := multuscache.Pod{Namespace: "default", Name: "gone", UID: multuscache.UID("gone")}
	live := multuscache.Pod{Namespace: "default", Name: "live", UID: multuscache.UID("live")}
	atts := multuscache.DefaultAttachments()
	type want struct {
		reason Reason
		remove bool
		pod    string // the File's Pod.Name
	}
	for _, tc := range []struct {
		name string
		// sibling writes B into the results directory as sandbox's, and
		// returns its name; nil: the test's real sibling.
		sibling func(t *testing.T, results, sandbox, liveSandbox string) string
		runtime bool // the runtime's view alone; else the pods'
		bFirst  bool
		opened  int
		a, b    want
	}{
		{name: "a real sibling of a removed file is removed unread", opened: 1,
			a: want{ReasonPodGone, true, "gone"}, b: want{ReasonPodGone, true, "gone"}},
		{name: "read first, the sibling decides the other", bFirst: true, opened: 1,
			a: want{ReasonPodGone, true, "gone"}, b: want{ReasonPodGone, true, "gone"}},
		{name: "with the runtime's view alone, the sandbox in the name decides", runtime: true, opened: 1,
			a: want{ReasonSandboxGone, true, "gone"}, b: want{ReasonSandboxGone, true, "gone"}},
		{name: "a sibling that names another, live pod goes as its sandbox's, unread", opened: 1,
			sibling: func(t *testing.T, results, sandbox, liveSandbox string) string {
				n := atts[1].Network + "-" + sandbox + "-" + atts[1].IfName
				write(t, filepath.Join(results, n), multuscache.ResultsJSON(liveSandbox, live, atts[1]), old)
				return n
			},
			a: want{ReasonPodGone, true, "gone"}, b: want{ReasonPodGone, true, "gone"}},
		{name: "read first, the sibling that names a live pod is kept, and decides nothing", bFirst: true, opened: 2,
			sibling: func(t *testing.T, results, sandbox, liveSandbox string) string {
				n := atts[1].Network + "-" + sandbox + "-" + atts[1].IfName
				write(t, filepath.Join(results, n), multuscache.ResultsJSON(liveSandbox, live, atts[1]), old)
				return n
			},
			a: want{ReasonPodGone, true, "gone"}, b: want{ReasonPodLive, false, "live"}},
		{name: "a corrupt sibling goes as its sandbox's, unread", opened: 1,
			sibling: func(t *testing.T, results, sandbox, _ string) string {
				n := atts[1].Network + "-" + sandbox + "-" + atts[1].IfName
				write(t, filepath.Join(results, n), []byte(`{"kind":"cniCacheV1","contai`), old)
				return n
			},
			a: want{ReasonPodGone, true, "gone"}, b: want{ReasonPodGone, true, "gone"}},
		{name: "read first, a corrupt sibling is kept and decides nothing", bFirst: true, opened: 2,
			sibling: func(t *testing.T, results, sandbox, _ string) string {
				n := atts[1].Network + "-" + sandbox + "-" + atts[1].IfName
				write(t, filepath.Join(results, n), []byte(`{"kind":"cniCacheV1","contai`), old)
				return n
			},
			a: want{ReasonPodGone, true, "gone"}, b: want{ReasonUnparseable, false, ""}},
		{name: "a symlink sibling is kept, never followed", opened: 1,
			sibling: func(t *testing.T, results, sandbox, _ string) string {
				n := atts[1].Network + "-" + sandbox + "-" + atts[1].IfName
				target := filepath.Join(t.TempDir(), "target")
				write(t, target, []byte("not ours"), old)
				if err := os.Symlink(target, filepath.Join(results, n)); err != nil {
					t.Fatal(err)
				}
				return n
			},
			a: want{ReasonPodGone, true, "gone"}, b: want{ReasonNotRegular, false, ""}},
		{name: "a young sibling is kept: its ADD may be under way", opened: 1,
			sibling: func(t *testing.T, results, sandbox, _ string) string {
				n := atts[1].Network + "-" + sandbox + "-" + atts[1].IfName
				write(t, filepath.Join(results, n), multuscache.ResultsJSON(sandbox, gone, atts[1]), time.Now())
				return n
			},
			a: want{ReasonPodGone, true, "gone"}, b: want{ReasonTooYoung, false, "gone"}},
		{name: "a file of a live pod's sandbox decides nothing: its sibling is read", opened: 2,
			sibling: func(t *testing.T, results, sandbox, _ string) string {
				// Both files name the live pod: A is rewritten.
				a := atts[0].Network + "-" + sandbox + "-" + atts[0].IfName
				write(t, filepath.Join(results, a), multuscache.ResultsJSON(sandbox, live, atts[0]), old)
				n := atts[1].Network + "-" + sandbox + "-" + atts[1].IfName
				write(t, filepath.Join(results, n), multuscache.ResultsJSON(sandbox, live, atts[1]), old)
				return n
			},
			a: want{ReasonPodLive, false, "live"}, b: want{ReasonPodLive, false, "live"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "multus")
			results := filepath.Join(dir, "results")
			sandbox, liveSandbox := multuscache.NewSandboxID(), multuscache.NewSandboxID()
			if _, err := multuscache.Sandbox(dir, liveSandbox, live, atts, old); err != nil {
				t.Fatal(err)
			}
			a := atts[0].Network + "-" + sandbox + "-" + atts[0].IfName
			write(t, filepath.Join(results, a), multuscache.ResultsJSON(sandbox, gone, atts[0]), old)
			b := atts[1].Network + "-" + sandbox + "-" + atts[1].IfName
			if tc.sibling != nil {
				b = tc.sibling(t, results, sandbox, liveSandbox)
			} else {
				write(t, filepath.Join(results, b), multuscache.ResultsJSON(sandbox, gone, atts[1]), old)
			}
			liveID, _ := cachefile.ParseSandboxID(liveSandbox)
			p := Planner{Now: time.Now(), MinAge: 15 * time.Minute, Clock: ClockState{Uptime: 24 * time.Hour}, NodeName: "node-a"}
			if tc.runtime {
				p.Sandboxes = fakeSandboxes{liveID: {}}
			} else {
				p.Index = NewPodSet([]PodRef{{Namespace: live.Namespace, Name: live.Name, UID: live.UID}})
			}
			order := []string{a, b}
			if tc.bFirst {
				order = []string{b, a}
			}
			files, w := handleResults(t, dir, p, order)
			got := map[string]want{}
			for _, f := range files {
				got[f.Name] = want{f.Reason, f.Remove, f.Pod.Name}
			}
			if got[a] != tc.a || got[b] != tc.b {
				t.Errorf("A %+v, B %+v; want %+v, %+v", got[a], got[b], tc.a, tc.b)
			}
			if w.counts.opened != tc.opened {
				t.Errorf("%d results files opened, want %d", w.counts.opened, tc.opened)
			}
			for name, st := range map[string]want{a: tc.a, b: tc.b} {
				_, err := os.Lstat(filepath.Join(results, name))
				if gone := os.IsNotExist(err); gone != st.remove {
					t.Errorf("%s gone %v, want %v (%v)", name, gone, st.remove, err)
				}
			}
			id, _ := cachefile.ParseSandboxID(sandbox)
			_, referenced := w.referenced[id]
			if kept := !tc.a.remove || !tc.b.remove; referenced != kept {
				t.Errorf("sandbox referenced for its scratch file: %v, want %v", referenced, kept)
			}
			for _, f := range []string{liveSandbox, "results/" + atts[0].Network + "-" + liveSandbox + "-" + atts[0].IfName} {
				if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
					t.Errorf("the live pod's %s: %v", f, err)
				}
			}
		})
	}
}

// handleResults runs the results phase's worker over names in this order,
// on one worker with the run's shared verdicts, and returns what it
// reported.
func handleResults(t *testing.T, dir string, p Planner, names []string) ([]File, *worker) {
	t.Helper()
	var files []File
	e := &executor{
		opts:     Options{Config: Config{Dir: dir}.withDefaults(1), Deps: Deps{Logger: slog.New(slog.DiscardHandler), Now: time.Now, OnFile: func(f File) { files = append(files, f) }}},
		views:    Views{Pods: p.Index, Sandboxes: p.Sandboxes},
		planner:  p,
		started:  time.Now(),
		skew:     func() time.Duration { return 0 },
		named:    map[SandboxID]struct{}{},
		targeted: map[SandboxID]struct{}{},
		siblings: newSiblingVerdicts(),
	}
	w := e.newWorker(t.Context(), cache{name: CacheMultus, dir: dir}, PhaseResults)
	results, err := os.Open(filepath.Join(dir, "results"))
	if err != nil {
		t.Fatal(err)
	}
	defer results.Close()
	for _, name := range names {
		fi, err := os.Lstat(filepath.Join(dir, "results", name))
		if err != nil {
			t.Fatal(err)
		}
		w.results(int(results.Fd()), name, fi.Mode().Type(), nil)
	}
	return files, w
}

func write(t *testing.T, path string, data []byte, mtime time.Time) {
	t.Helper()
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(path, mtime, mtime); err != nil {
		t.Fatal(err)
	}
}

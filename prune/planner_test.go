package prune

import (
	"github.com/sweep-k8s/sweep/cachefile"

	"testing"
	"time"
)

// settled is the clock of a node up for a day, with no forward step in the
// last minimum age.
var settled = ClockState{Uptime: 24 * time.Hour}

// UIDs of the API server's form: pods that are gone, and a pod re-created
// under the name of a gone one.
const (
	goneUID = "0b1f6c0e-6a57-4c1e-9d4e-2f7a9e0c1d2e"
	newUID  = "7d3c2b1a-0f9e-4d8c-b7a6-5e4d3c2b1a09"
)

func TestPlannerResults(t *testing.T) {
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	old, young := now.Add(-time.Hour), now.Add(-time.Minute)
	idx := NewPodSet([]PodRef{
		{Namespace: "default", Name: "live-2", UID: liveUID},
		// web-0 came back with the same name and a new UID.
		{Namespace: "default", Name: "web-0", UID: newUID},
	})
	p := Planner{Index: idx, Now: now, MinAge: 15 * time.Minute, Clock: settled}
	entry := func(mtime time.Time, cf cachefile.CacheFile) ResultsEntry {
		return ResultsEntry{Entry: Entry{Name: "net-" + liveSandbox + "-eth0", ModTime: mtime}, Cache: cf}
	}
	tests := []struct {
		name string
		e    ResultsEntry
		want Decision
	}{
		{"live pod by UID", entry(old, cachefile.CacheFile{PodUID: liveUID, PodNamespace: "default", PodName: "live-2"}), keep(ReasonPodLive)},
		{"deleted pod", entry(old, cachefile.CacheFile{PodUID: goneUID, PodNamespace: "default", PodName: "gone"}), remove(ReasonPodGone)},
		{"deleted pod, young file", entry(young, cachefile.CacheFile{PodUID: goneUID}), keep(ReasonTooYoung)},
		{"deleted pod, file from the future", entry(now.Add(time.Hour), cachefile.CacheFile{PodUID: goneUID}), keep(ReasonTooYoung)},
		{"exactly min-age old", entry(now.Add(-15*time.Minute), cachefile.CacheFile{PodUID: goneUID}), remove(ReasonPodGone)},
		{"same name, old UID", entry(old, cachefile.CacheFile{PodUID: goneUID, PodNamespace: "default", PodName: "web-0"}), remove(ReasonPodGone)},
		{"live pod young file", entry(young, cachefile.CacheFile{PodUID: liveUID}), keep(ReasonPodLive)},
		{"no UID, name live", entry(old, cachefile.CacheFile{PodNamespace: "default", PodName: "web-0"}), keep(ReasonPodLive)},
		{"no UID, name gone", entry(old, cachefile.CacheFile{PodNamespace: "default", PodName: "gone"}), remove(ReasonPodNameGone)},
		{"no UID, name only", entry(old, cachefile.CacheFile{PodName: "web-0"}), keep(ReasonNoIdentity)},
		{"no identity", entry(old, cachefile.CacheFile{ContainerID: liveSandbox}), keep(ReasonNoIdentity)},
		{"unparseable", ResultsEntry{Entry: Entry{ModTime: old}, ParseReason: ReasonUnparseable}, keep(ReasonUnparseable)},
		{"legacy", ResultsEntry{Entry: Entry{ModTime: old}, ParseReason: ReasonNotCache}, keep(ReasonNotCache)},
		{"too large", ResultsEntry{Entry: Entry{ModTime: old}, ParseReason: ReasonTooLarge}, keep(ReasonTooLarge)},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := p.Results(tc.e); got != tc.want {
				t.Fatalf("got %+v, want %+v", got, tc.want)
			}
		})
	}
}

func TestPlannerScratch(t *testing.T) {
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	p := Planner{Index: NewPodSet(nil), Now: now, MinAge: 15 * time.Minute, Clock: settled}
	live, _ := cachefile.ParseSandboxID(liveSandbox)
	failed, _ := cachefile.ParseSandboxID(failedAdd)
	referenced := map[SandboxID]struct{}{live: {}}
	tests := []struct {
		name  string
		id    SandboxID
		mtime time.Time
		want  Decision
	}{
		{"referenced", live, now.Add(-time.Hour), keep(ReasonSandboxReferenced)},
		{"orphan", failed, now.Add(-time.Hour), remove(ReasonOrphanScratch)},
		{"young orphan", failed, now.Add(-time.Minute), keep(ReasonTooYoung)},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := p.Scratch(Entry{Name: tc.id.String(), ModTime: tc.mtime}, tc.id, referenced)
			if got != tc.want {
				t.Fatalf("got %+v, want %+v", got, tc.want)
			}
		})
	}
}

func TestResultsEntrySandboxes(t *testing.T) {
	live, _ := cachefile.ParseSandboxID(liveSandbox)
	thick, _ := cachefile.ParseSandboxID(thickSandbox)
	tests := []struct {
		name string
		e    ResultsEntry
		want []SandboxID
	}{
		{"name and containerId agree", ResultsEntry{Entry: Entry{Name: "n-" + liveSandbox + "-eth0"}, Cache: cachefile.CacheFile{ContainerID: liveSandbox}}, []SandboxID{live}},
		{"name and containerId differ", ResultsEntry{Entry: Entry{Name: "n-" + liveSandbox + "-eth0"}, Cache: cachefile.CacheFile{ContainerID: thickSandbox}}, []SandboxID{live, thick}},
		{"unparseable: name only", ResultsEntry{Entry: Entry{Name: "n-" + liveSandbox + "-eth0"}, ParseReason: ReasonUnparseable, Cache: cachefile.CacheFile{ContainerID: thickSandbox}}, []SandboxID{live}},
		{"odd name: containerId only", ResultsEntry{Entry: Entry{Name: "odd"}, Cache: cachefile.CacheFile{ContainerID: thickSandbox}}, []SandboxID{thick}},
	}
	for _, tc := range tests {
		got := tc.e.Sandboxes()
		if len(got) != len(tc.want) {
			t.Errorf("%s: got %v, want %v", tc.name, got, tc.want)
			continue
		}
		for i := range got {
			if got[i] != tc.want[i] {
				t.Errorf("%s: got %v, want %v", tc.name, got, tc.want)
			}
		}
	}
}

// sandboxSet is a SandboxIndex and a BootRecord over a fixed set.
type sandboxSet map[SandboxID]struct{}

func (s sandboxSet) Synced() bool                  { return true }
func (s sandboxSet) Has(id SandboxID) bool         { _, ok := s[id]; return ok }
func (s sandboxSet) EarlierBoot(id SandboxID) bool { return s.Has(id) }

func sid(t *testing.T, s string) SandboxID {
	t.Helper()
	id, ok := cachefile.ParseSandboxID(s)
	if !ok {
		t.Fatalf("bad sandbox id %q", s)
	}
	return id
}

func TestPlannerLiveness(t *testing.T) {
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	old, young := now.Add(-time.Hour), now.Add(-time.Minute)
	known := sid(t, liveSandbox) // the runtime knows it
	// failedAdd: unknown to the runtime, never recorded.
	prior := sid(t, thickSandbox) // recorded under an earlier boot, unknown to the runtime
	pods := NewPodSet([]PodRef{{Namespace: "default", Name: "live", UID: liveUID}})
	runtime := sandboxSet{known: {}}
	boot := sandboxSet{prior: {}, known: {}}
	file := func(mtime time.Time, sandbox, containerID, uid string) ResultsEntry {
		return ResultsEntry{
			Entry: Entry{Name: "net-" + sandbox + "-eth0", ModTime: mtime},
			Cache: cachefile.CacheFile{ContainerID: containerID, PodUID: uid, PodNamespace: "default", PodName: "x"},
		}
	}
	var (
		api      = Planner{Index: pods, Now: now, MinAge: 15 * time.Minute, Clock: settled}
		cri      = Planner{Sandboxes: runtime, Now: now, MinAge: 15 * time.Minute, Clock: settled}
		witness  = Decision{Reason: ReasonPodLive, NeedsWitness: true}
		both     = Planner{Index: pods, Sandboxes: runtime, Now: now, MinAge: 15 * time.Minute, Clock: settled}
		apiBoot  = Planner{Index: pods, Boot: boot, Now: now, MinAge: 15 * time.Minute, Clock: settled}
		criBoot  = Planner{Sandboxes: runtime, Boot: boot, Now: now, MinAge: 15 * time.Minute, Clock: settled}
		bothBoot = Planner{Index: pods, Sandboxes: runtime, Boot: boot, Now: now, MinAge: 15 * time.Minute, Clock: settled}
	)
	tests := []struct {
		name string
		p    Planner
		e    ResultsEntry
		want Decision
	}{
		// cri: the runtime alone decides; the pod is not looked at.
		{"cri: sandbox known, pod gone", cri, file(old, liveSandbox, liveSandbox, goneUID), keep(ReasonSandboxLive)},
		{"cri: sandbox gone, pod live", cri, file(old, failedAdd, failedAdd, liveUID), remove(ReasonSandboxGone)},
		{"cri: sandbox gone, young", cri, file(young, failedAdd, failedAdd, liveUID), keep(ReasonTooYoung)},
		{"cri: name and containerId disagree, one known", cri, file(old, failedAdd, liveSandbox, goneUID), keep(ReasonSandboxLive)},
		{"cri: name and containerId disagree, other known", cri, file(old, liveSandbox, failedAdd, goneUID), keep(ReasonSandboxLive)},
		{"cri: no sandbox at all", cri, ResultsEntry{Entry: Entry{Name: "odd", ModTime: old}, Cache: cachefile.CacheFile{PodUID: goneUID}}, keep(ReasonNoIdentity)},
		{"cri: no pod identity, sandbox gone", cri, file(old, failedAdd, failedAdd, ""), remove(ReasonSandboxGone)},
		// both: a removal needs the pod gone and the sandbox unknown.
		{"both: pod live, sandbox gone", both, file(old, failedAdd, failedAdd, liveUID), keep(ReasonPodLive)},
		{"both: pod gone, sandbox known", both, file(old, liveSandbox, liveSandbox, goneUID), keep(ReasonSandboxLive)},
		{"both: pod gone, sandbox gone", both, file(old, failedAdd, failedAdd, goneUID), remove(ReasonPodGone)},
		{"both: pod gone, no sandbox", both, ResultsEntry{Entry: Entry{Name: "odd", ModTime: old}, Cache: cachefile.CacheFile{PodUID: goneUID}}, keep(ReasonNoIdentity)},
		// api: unchanged, the runtime is not asked.
		{"api: pod live", api, file(old, failedAdd, failedAdd, liveUID), keep(ReasonPodLive)},
		{"api: pod gone", api, file(old, liveSandbox, liveSandbox, goneUID), remove(ReasonPodGone)},
		// Reboot-aware: an earlier boot's sandbox goes even when its pod is
		// live, once as old as any other file must be. Pods alone: an
		// earlier boot's sandbox of a live pod waits for a witness
		// (Witnessed, which applies the age rules).
		{"boot: earlier boot, pod live", apiBoot, file(old, thickSandbox, thickSandbox, liveUID), witness},
		{"boot: earlier boot, young mtime", apiBoot, file(young, thickSandbox, thickSandbox, liveUID), witness},
		{"boot: earlier boot, mtime from the future", apiBoot, file(now.Add(24*time.Hour), thickSandbox, thickSandbox, liveUID), witness},
		{"boot: earlier boot, pod gone", apiBoot, file(old, thickSandbox, thickSandbox, goneUID), remove(ReasonPodGone)},
		{"boot: earlier boot, pod gone, young", apiBoot, file(young, thickSandbox, thickSandbox, goneUID), keep(ReasonTooYoung)},
		{"boot: current boot, pod live", apiBoot, file(old, failedAdd, failedAdd, liveUID), keep(ReasonPodLive)},
		{"boot: name earlier, containerId not", apiBoot, file(old, thickSandbox, failedAdd, liveUID), keep(ReasonPodLive)},
		{"boot: containerId earlier, name not", apiBoot, file(old, failedAdd, thickSandbox, liveUID), keep(ReasonPodLive)},
		{"boot: unparseable file of an earlier boot", apiBoot, ResultsEntry{Entry: Entry{Name: "net-" + thickSandbox + "-eth0", ModTime: old}, ParseReason: ReasonUnparseable}, keep(ReasonUnparseable)},
		{"boot: earlier boot, no UID, name gone", apiBoot, file(old, thickSandbox, thickSandbox, ""), remove(ReasonPodNameGone)},
		{"boot+cri: earlier boot, runtime knows it", criBoot, file(old, liveSandbox, liveSandbox, liveUID), keep(ReasonSandboxLive)},
		{"boot+cri: earlier boot, runtime does not", criBoot, file(old, thickSandbox, thickSandbox, liveUID), remove(ReasonEarlierBoot)},
		{"boot+cri: earlier boot, runtime does not, young", criBoot, file(young, thickSandbox, thickSandbox, liveUID), keep(ReasonTooYoung)},
		{"boot+both: earlier boot, runtime does not, young", bothBoot, file(young, thickSandbox, thickSandbox, liveUID), keep(ReasonTooYoung)},
		{"boot+both: earlier boot, pod live, runtime does not know it", bothBoot, file(old, thickSandbox, thickSandbox, liveUID), remove(ReasonEarlierBoot)},
		{"boot+both: earlier boot, runtime knows it", bothBoot, file(old, liveSandbox, liveSandbox, goneUID), keep(ReasonSandboxLive)},
		// The runtime's cache: a file must name its pod's UID, whatever
		// the liveness and before the boot record; with one, the rules
		// are multus's.
		{"runtime cache, cri: no UID, sandbox gone", withUID(cri), file(old, failedAdd, failedAdd, ""), keep(ReasonNoIdentity)},
		{"runtime cache, api: no UID, name gone", withUID(api), file(old, failedAdd, failedAdd, ""), keep(ReasonNoIdentity)},
		{"runtime cache, boot+cri: no UID, earlier boot", withUID(criBoot), file(old, thickSandbox, thickSandbox, ""), keep(ReasonNoIdentity)},
		{"runtime cache, cri: UID, sandbox gone", withUID(cri), file(old, failedAdd, failedAdd, goneUID), remove(ReasonSandboxGone)},
		{"runtime cache, both: UID, sandbox known", withUID(both), file(old, liveSandbox, liveSandbox, goneUID), keep(ReasonSandboxLive)},
		{"runtime cache, api: UID, pod gone, young", withUID(api), file(young, failedAdd, failedAdd, goneUID), keep(ReasonTooYoung)},
		{"runtime cache, unparseable", withUID(api), ResultsEntry{Entry: Entry{ModTime: old}, ParseReason: ReasonUnparseable}, keep(ReasonUnparseable)},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.p.Results(tc.e); got != tc.want {
				t.Fatalf("got %+v, want %+v", got, tc.want)
			}
		})
	}
}

// withUID is p as it plans the runtime's cache.
func withUID(p Planner) Planner {
	p.RequirePodUID = true
	return p
}

func TestPlannerScratchSandboxLive(t *testing.T) {
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	known, gone := sid(t, liveSandbox), sid(t, failedAdd)
	prior := sid(t, thickSandbox)
	none := map[SandboxID]struct{}{}
	cri := Planner{Sandboxes: sandboxSet{known: {}}, Now: now, MinAge: 15 * time.Minute, Clock: settled}
	boot := Planner{Index: NewPodSet(nil), Sandboxes: sandboxSet{known: {}}, Boot: sandboxSet{prior: {}, known: {}}, Now: now, MinAge: 15 * time.Minute, Clock: settled}
	for _, tc := range []struct {
		name  string
		p     Planner
		id    SandboxID
		mtime time.Time
		ref   map[SandboxID]struct{}
		want  Decision
	}{
		{"runtime knows the sandbox", cri, known, now.Add(-time.Hour), none, keep(ReasonSandboxLive)},
		{"runtime does not", cri, gone, now.Add(-time.Hour), none, remove(ReasonOrphanScratch)},
		{"earlier boot, old", boot, prior, now.Add(-time.Hour), none, remove(ReasonEarlierBoot)},
		// A boot ID can change without a reboot: the age rules apply to
		// earlier-boot files too.
		{"earlier boot, young", boot, prior, now.Add(-time.Second), none, keep(ReasonTooYoung)},
		{"earlier boot, mtime from the future", boot, prior, now.Add(time.Hour), none, keep(ReasonTooYoung)},
		{"earlier boot, still referenced", boot, prior, now.Add(-time.Hour), map[SandboxID]struct{}{prior: {}}, keep(ReasonSandboxReferenced)},
		{"earlier boot, runtime knows it", boot, known, now.Add(-time.Hour), none, keep(ReasonSandboxLive)},
		{"current boot, young", boot, gone, now, none, keep(ReasonTooYoung)},
		// No results directory (multus before v3.7.2): nothing is proven
		// unreferenced, so only liveness could condemn, and it does not.
		{"no results dir, runtime does not know it", cri, gone, now.Add(-time.Hour), nil, keep(ReasonNoResultsDir)},
		{"no results dir, earlier boot", boot, prior, now.Add(-time.Hour), nil, keep(ReasonNoResultsDir)},
	} {
		if got := tc.p.Scratch(Entry{Name: tc.id.String(), ModTime: tc.mtime}, tc.id, tc.ref); got != tc.want {
			t.Errorf("%s: got %+v, want %+v", tc.name, got, tc.want)
		}
	}
}

// TestPlannerStaticPods covers the pods whose UID the API server knows only
// through a mirror pod.
func TestPlannerStaticPods(t *testing.T) {
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	old := now.Add(-time.Hour)
	const (
		hash    = "c6e40cad3a1e4b4a8bd2f3f1c2e1a0b9" // the kubelet's manifest hash
		mirror  = "5cd80207-4f1e-4b7a-9a3c-2d1e0f9a8b7c"
		node    = "node-a"
		ownUID  = "11111111-2222-4333-8444-555555555555" // set by the manifest itself
		unknown = "ffffffffffffffffffffffffffffffff"
	)
	pods := NewPodSet([]PodRef{{Namespace: "kube-system", Name: "etcd-" + node, UID: mirror, MirrorUID: hash}})
	runtime := sandboxSet{sid(t, liveSandbox): {}}
	api := Planner{Index: pods, NodeName: node, Now: now, MinAge: 15 * time.Minute, Clock: settled}
	both := api
	both.Sandboxes = runtime
	seen := api
	seen.Mirrors = mirrorsSeen{ownUID: {}}
	aged := func(e ResultsEntry, age time.Duration) ResultsEntry {
		e.ModTime = now.Add(-age)
		return e
	}
	file := func(sandbox, uid, name string) ResultsEntry {
		return ResultsEntry{Entry: Entry{Name: "net-" + sandbox + "-eth0", ModTime: old},
			Cache: cachefile.CacheFile{ContainerID: sandbox, PodUID: uid, PodNamespace: "kube-system", PodName: name}}
	}
	for _, tc := range []struct {
		name string
		p    Planner
		e    ResultsEntry
		want Decision
	}{
		{"mirror pod names the hash", api, file(failedAdd, hash, "etcd-"+node), keep(ReasonPodLive)},
		{"the mirror pod's own UID", api, file(failedAdd, mirror, "etcd-"+node), keep(ReasonPodLive)},
		{"hash without a mirror pod", api, file(failedAdd, unknown, "kube-proxy-"+node), keep(ReasonStaticPod)},
		{"hash, a name of any form", api, file(failedAdd, unknown, "x"), keep(ReasonStaticPod)},
		{"UUID set by the manifest, no mirror", api, file(failedAdd, ownUID, "static-"+node), keep(ReasonStaticPod)},
		{"no UID, static name, no mirror", api, file(failedAdd, "", "static-"+node), keep(ReasonStaticPod)},
		// A name is evidence only for StaticNameGrace past the minimum age:
		// OpenShift's installer-<rev>-<node> pods are ordinary pods.
		{"UUID, static name, past the grace", api, aged(file(failedAdd, ownUID, "installer-3-"+node), 15*time.Minute+StaticNameGrace+time.Second), remove(ReasonPodGone)},
		{"UUID, static name, within the grace", api, aged(file(failedAdd, ownUID, "installer-3-"+node), 15*time.Minute+StaticNameGrace-time.Second), keep(ReasonStaticPod)},
		{"no UID, static name, past the grace", api, aged(file(failedAdd, "", "static-"+node), 2*time.Hour), remove(ReasonPodNameGone)},
		{"UUID of a mirror seen before, past the grace", seen, aged(file(failedAdd, ownUID, "static-"+node), 24*time.Hour), keep(ReasonStaticPod)},
		{"UUID of a mirror seen before, a name not static", seen, aged(file(failedAdd, ownUID, "web-1"), 24*time.Hour), remove(ReasonPodGone)},
		{"hash, far past the grace", api, aged(file(failedAdd, unknown, "x"), 24*time.Hour), keep(ReasonStaticPod)},
		{"no UID, mirror pod by name", api, file(failedAdd, "", "etcd-"+node), keep(ReasonPodLive)},
		{"an API pod that is gone", api, file(failedAdd, goneUID, "web-1"), remove(ReasonPodGone)},
		// both: the API server abstains, the runtime decides.
		{"both: hash, no mirror, runtime knows it", both, file(liveSandbox, unknown, "x-"+node), keep(ReasonSandboxLive)},
		{"both: hash, no mirror, runtime does not", both, file(failedAdd, unknown, "x-"+node), remove(ReasonSandboxGone)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.p.Results(tc.e); got != tc.want {
				t.Fatalf("got %+v, want %+v", got, tc.want)
			}
		})
	}
}

// TestPlannerAgeGuards covers what makes an old-looking file young: a fresh
// boot (TestPlannerClock has the steps of the clock), and a view taken
// before the file changed.
func TestPlannerAgeGuards(t *testing.T) {
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	old := now.Add(-time.Hour)
	viewAt := now.Add(-10 * time.Second)
	p := Planner{Index: NewPodSet(nil), Now: now, MinAge: 15 * time.Minute, Clock: settled}
	unsettled := p
	unsettled.Clock = ClockState{Uptime: 14 * time.Minute}
	cri := Planner{Sandboxes: sandboxSet{}, Now: now, MinAge: 15 * time.Minute, Clock: settled, ViewTime: viewAt}
	zeroAge := cri
	zeroAge.MinAge = 0
	results := func(changed time.Time) ResultsEntry {
		return ResultsEntry{Entry: Entry{Name: "net-" + failedAdd + "-eth0", ModTime: old, ChangeTime: changed},
			Cache: cachefile.CacheFile{ContainerID: failedAdd, PodUID: goneUID}}
	}
	id := sid(t, failedAdd)
	for _, tc := range []struct {
		name string
		got  Decision
		want Decision
	}{
		{"settled clock", p.Results(results(old)), remove(ReasonPodGone)},
		{"booted within min-age", unsettled.Results(results(old)), keep(ReasonClockUnsettled)},
		{"scratch, booted within min-age", unsettled.Scratch(Entry{ModTime: old, ChangeTime: old}, id, map[SandboxID]struct{}{}), keep(ReasonClockUnsettled)},
		{"changed before the view", cri.Results(results(viewAt.Add(-100 * time.Millisecond))), remove(ReasonSandboxGone)},
		{"changed after the view", cri.Results(results(viewAt.Add(time.Second))), keep(ReasonNewerThanView)},
		{"changed just before the view (inode clock lags)", cri.Results(results(viewAt.Add(-20 * time.Millisecond))), keep(ReasonNewerThanView)},
		{"min-age 0, changed after the view", zeroAge.Results(results(now)), keep(ReasonNewerThanView)},
		{"scratch changed after the view", cri.Scratch(Entry{ModTime: old, ChangeTime: now}, id, map[SandboxID]struct{}{}), keep(ReasonNewerThanView)},
	} {
		if tc.got != tc.want {
			t.Errorf("%s: got %+v, want %+v", tc.name, tc.got, tc.want)
		}
	}
}

// TestPlannerClock: a file is distrusted only when its age by the wall clock
// could come from the uptime rule or from forward steps within the last
// minimum age; a step of any size holds back only the files within its size
// of the minimum age.
func TestPlannerClock(t *testing.T) {
	const minAge = 15 * time.Minute
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	viewAt := now.Add(-10 * time.Second)
	for _, tc := range []struct {
		name     string
		clock    ClockState
		age      time.Duration // by the wall clock
		viewTime time.Time
		want     Reason
	}{
		{"no step, old", settled, minAge + time.Nanosecond, time.Time{}, ""},
		{"no step, exactly min-age", settled, minAge, time.Time{}, ""},
		{"no step, young", settled, minAge - time.Second, time.Time{}, ReasonTooYoung},
		{"from the future", settled, -time.Hour, time.Time{}, ReasonTooYoung},
		{"1ns forward, at the edge", ClockState{Uptime: 24 * time.Hour, Forward: time.Nanosecond}, minAge, time.Time{}, ReasonClockUnsettled},
		{"1ns forward, past it", ClockState{Uptime: 24 * time.Hour, Forward: time.Nanosecond}, minAge + time.Nanosecond, time.Time{}, ""},
		{"1s forward, within it", ClockState{Uptime: 24 * time.Hour, Forward: time.Second}, minAge + 500*time.Millisecond, time.Time{}, ReasonClockUnsettled},
		{"1s forward, past it", ClockState{Uptime: 24 * time.Hour, Forward: time.Second}, minAge + 2*time.Second, time.Time{}, ""},
		{"1h forward, within it", ClockState{Uptime: 24 * time.Hour, Forward: time.Hour}, minAge + 30*time.Minute, time.Time{}, ReasonClockUnsettled},
		{"1h forward, past it", ClockState{Uptime: 24 * time.Hour, Forward: time.Hour}, minAge + time.Hour + time.Second, time.Time{}, ""},
		{"1h forward, young", ClockState{Uptime: 24 * time.Hour, Forward: time.Hour}, time.Minute, time.Time{}, ReasonTooYoung},
		{"decades forward (set from 1970)", ClockState{Uptime: 24 * time.Hour, Forward: 56 * 365 * 24 * time.Hour}, 50 * 365 * 24 * time.Hour, time.Time{}, ReasonClockUnsettled},
		{"booted within min-age", ClockState{Uptime: minAge - time.Second}, 30 * 24 * time.Hour, time.Time{}, ReasonClockUnsettled},
		{"uptime unknown", ClockState{}, 30 * 24 * time.Hour, time.Time{}, ReasonClockUnsettled},
		{"changed after the view, clock stepped", ClockState{Uptime: 24 * time.Hour, Forward: time.Hour}, 2 * time.Hour, viewAt, ReasonNewerThanView},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := Planner{Index: NewPodSet(nil), Now: now, MinAge: minAge, Clock: tc.clock, ViewTime: tc.viewTime}
			mtime := now.Add(-tc.age)
			if got := p.young(Entry{ModTime: mtime, ChangeTime: now}); got != tc.want {
				t.Fatalf("young: %q, want %q", got, tc.want)
			}
		})
	}
}

func TestPlannerWitnessed(t *testing.T) {
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	p := Planner{Now: now, MinAge: 15 * time.Minute, Clock: settled}
	old, young := Entry{ModTime: now.Add(-time.Hour)}, Entry{ModTime: now.Add(-time.Second)}
	if got := p.Witnessed(old, true); got != remove(ReasonEarlierBoot) {
		t.Errorf("with a newer sandbox: got %+v", got)
	}
	if got := p.Witnessed(old, false); got != keep(ReasonPodLive) {
		t.Errorf("without: got %+v", got)
	}
	// A boot ID can change without a reboot while an ADD runs: a young
	// file of an earlier boot waits for its age as any other.
	if got := p.Witnessed(young, true); got != keep(ReasonTooYoung) {
		t.Errorf("young, with a newer sandbox: got %+v", got)
	}
}

// mirrorsSeen is a MirrorHistory of fixed UIDs.
type mirrorsSeen map[string]struct{}

func (m mirrorsSeen) SeenMirror(uid string) bool { _, ok := m[uid]; return ok }

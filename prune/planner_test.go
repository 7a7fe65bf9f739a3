package prune

import (
	"testing"
	"time"
)

func TestPlannerResults(t *testing.T) {
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	old, young := now.Add(-time.Hour), now.Add(-time.Minute)
	idx := NewPodSet([]PodRef{
		{Namespace: "default", Name: "live-2", UID: liveUID},
		// web-0 came back with the same name and a new UID.
		{Namespace: "default", Name: "web-0", UID: "new-uid"},
	})
	p := Planner{Index: idx, Now: now, MinAge: 15 * time.Minute}
	entry := func(mtime time.Time, cf CacheFile) ResultsEntry {
		return ResultsEntry{Entry: Entry{Name: "net-" + liveSandbox + "-eth0", ModTime: mtime}, Cache: cf}
	}
	tests := []struct {
		name string
		e    ResultsEntry
		want Decision
	}{
		{"live pod by UID", entry(old, CacheFile{PodUID: liveUID, PodNamespace: "default", PodName: "live-2"}), keep(ReasonPodLive)},
		{"deleted pod", entry(old, CacheFile{PodUID: "gone", PodNamespace: "default", PodName: "gone"}), remove(ReasonPodGone)},
		{"deleted pod, young file", entry(young, CacheFile{PodUID: "gone"}), keep(ReasonTooYoung)},
		{"deleted pod, file from the future", entry(now.Add(time.Hour), CacheFile{PodUID: "gone"}), keep(ReasonTooYoung)},
		{"exactly min-age old", entry(now.Add(-15*time.Minute), CacheFile{PodUID: "gone"}), remove(ReasonPodGone)},
		{"same name, old UID", entry(old, CacheFile{PodUID: "old-uid", PodNamespace: "default", PodName: "web-0"}), remove(ReasonPodGone)},
		{"live pod young file", entry(young, CacheFile{PodUID: liveUID}), keep(ReasonPodLive)},
		{"no UID, name live", entry(old, CacheFile{PodNamespace: "default", PodName: "web-0"}), keep(ReasonPodLive)},
		{"no UID, name gone", entry(old, CacheFile{PodNamespace: "default", PodName: "gone"}), remove(ReasonPodNameGone)},
		{"no UID, name only", entry(old, CacheFile{PodName: "web-0"}), keep(ReasonNoIdentity)},
		{"no identity", entry(old, CacheFile{ContainerID: liveSandbox}), keep(ReasonNoIdentity)},
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
	p := Planner{Index: NewPodSet(nil), Now: now, MinAge: 15 * time.Minute}
	live, _ := ParseSandboxID(liveSandbox)
	failed, _ := ParseSandboxID(failedAdd)
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
	live, _ := ParseSandboxID(liveSandbox)
	thick, _ := ParseSandboxID(thickSandbox)
	tests := []struct {
		name string
		e    ResultsEntry
		want []SandboxID
	}{
		{"name and containerId agree", ResultsEntry{Entry: Entry{Name: "n-" + liveSandbox + "-eth0"}, Cache: CacheFile{ContainerID: liveSandbox}}, []SandboxID{live}},
		{"name and containerId differ", ResultsEntry{Entry: Entry{Name: "n-" + liveSandbox + "-eth0"}, Cache: CacheFile{ContainerID: thickSandbox}}, []SandboxID{live, thick}},
		{"unparseable: name only", ResultsEntry{Entry: Entry{Name: "n-" + liveSandbox + "-eth0"}, ParseReason: ReasonUnparseable, Cache: CacheFile{ContainerID: thickSandbox}}, []SandboxID{live}},
		{"odd name: containerId only", ResultsEntry{Entry: Entry{Name: "odd"}, Cache: CacheFile{ContainerID: thickSandbox}}, []SandboxID{thick}},
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
	id, ok := ParseSandboxID(s)
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
			Cache: CacheFile{ContainerID: containerID, PodUID: uid, PodNamespace: "default", PodName: "x"},
		}
	}
	var (
		api      = Planner{Index: pods, Now: now, MinAge: 15 * time.Minute}
		cri      = Planner{Sandboxes: runtime, Now: now, MinAge: 15 * time.Minute}
		both     = Planner{Index: pods, Sandboxes: runtime, Now: now, MinAge: 15 * time.Minute}
		apiBoot  = Planner{Index: pods, Boot: boot, Now: now, MinAge: 15 * time.Minute}
		criBoot  = Planner{Sandboxes: runtime, Boot: boot, Now: now, MinAge: 15 * time.Minute}
		bothBoot = Planner{Index: pods, Sandboxes: runtime, Boot: boot, Now: now, MinAge: 15 * time.Minute}
	)
	tests := []struct {
		name string
		p    Planner
		e    ResultsEntry
		want Decision
	}{
		// cri: the runtime alone decides; the pod is not looked at.
		{"cri: sandbox known, pod gone", cri, file(old, liveSandbox, liveSandbox, "gone"), keep(ReasonSandboxLive)},
		{"cri: sandbox gone, pod live", cri, file(old, failedAdd, failedAdd, liveUID), remove(ReasonSandboxGone)},
		{"cri: sandbox gone, young", cri, file(young, failedAdd, failedAdd, liveUID), keep(ReasonTooYoung)},
		{"cri: name and containerId disagree, one known", cri, file(old, failedAdd, liveSandbox, "gone"), keep(ReasonSandboxLive)},
		{"cri: name and containerId disagree, other known", cri, file(old, liveSandbox, failedAdd, "gone"), keep(ReasonSandboxLive)},
		{"cri: no sandbox at all", cri, ResultsEntry{Entry: Entry{Name: "odd", ModTime: old}, Cache: CacheFile{PodUID: "gone"}}, keep(ReasonNoIdentity)},
		{"cri: no pod identity, sandbox gone", cri, file(old, failedAdd, failedAdd, ""), remove(ReasonSandboxGone)},
		// both: a removal needs the pod gone and the sandbox unknown.
		{"both: pod live, sandbox gone", both, file(old, failedAdd, failedAdd, liveUID), keep(ReasonPodLive)},
		{"both: pod gone, sandbox known", both, file(old, liveSandbox, liveSandbox, "gone"), keep(ReasonSandboxLive)},
		{"both: pod gone, sandbox gone", both, file(old, failedAdd, failedAdd, "gone"), remove(ReasonPodGone)},
		{"both: pod gone, no sandbox", both, ResultsEntry{Entry: Entry{Name: "odd", ModTime: old}, Cache: CacheFile{PodUID: "gone"}}, keep(ReasonNoIdentity)},
		// api: unchanged, the runtime is not asked.
		{"api: pod live", api, file(old, failedAdd, failedAdd, liveUID), keep(ReasonPodLive)},
		{"api: pod gone", api, file(old, liveSandbox, liveSandbox, "gone"), remove(ReasonPodGone)},
		// Reboot-aware: an earlier boot's sandbox goes even when its pod is
		// live, and even when its mtime looks young (clocks jump at boot).
		{"boot: earlier boot, pod live", apiBoot, file(old, thickSandbox, thickSandbox, liveUID), remove(ReasonEarlierBoot)},
		{"boot: earlier boot, young mtime", apiBoot, file(young, thickSandbox, thickSandbox, liveUID), remove(ReasonEarlierBoot)},
		{"boot: earlier boot, mtime from the future", apiBoot, file(now.Add(24*time.Hour), thickSandbox, thickSandbox, liveUID), remove(ReasonEarlierBoot)},
		{"boot: current boot, pod live", apiBoot, file(old, failedAdd, failedAdd, liveUID), keep(ReasonPodLive)},
		{"boot: name earlier, containerId not", apiBoot, file(old, thickSandbox, failedAdd, liveUID), keep(ReasonPodLive)},
		{"boot: containerId earlier, name not", apiBoot, file(old, failedAdd, thickSandbox, liveUID), keep(ReasonPodLive)},
		{"boot: unparseable file of an earlier boot", apiBoot, ResultsEntry{Entry: Entry{Name: "net-" + thickSandbox + "-eth0", ModTime: old}, ParseReason: ReasonUnparseable}, keep(ReasonUnparseable)},
		{"boot: earlier boot, no pod identity", apiBoot, file(old, thickSandbox, thickSandbox, ""), remove(ReasonEarlierBoot)},
		{"boot+cri: earlier boot, runtime knows it", criBoot, file(old, liveSandbox, liveSandbox, liveUID), keep(ReasonSandboxLive)},
		{"boot+cri: earlier boot, runtime does not", criBoot, file(old, thickSandbox, thickSandbox, liveUID), remove(ReasonEarlierBoot)},
		{"boot+both: earlier boot, pod live, runtime does not know it", bothBoot, file(old, thickSandbox, thickSandbox, liveUID), remove(ReasonEarlierBoot)},
		{"boot+both: earlier boot, runtime knows it", bothBoot, file(old, liveSandbox, liveSandbox, "gone"), keep(ReasonSandboxLive)},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.p.Results(tc.e); got != tc.want {
				t.Fatalf("got %+v, want %+v", got, tc.want)
			}
		})
	}
}

func TestPlannerScratchSandboxLive(t *testing.T) {
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	known, gone := sid(t, liveSandbox), sid(t, failedAdd)
	prior := sid(t, thickSandbox)
	cri := Planner{Sandboxes: sandboxSet{known: {}}, Now: now, MinAge: 15 * time.Minute}
	boot := Planner{Index: NewPodSet(nil), Sandboxes: sandboxSet{known: {}}, Boot: sandboxSet{prior: {}, known: {}}, Now: now, MinAge: 15 * time.Minute}
	for _, tc := range []struct {
		name  string
		p     Planner
		id    SandboxID
		mtime time.Time
		ref   map[SandboxID]struct{}
		want  Decision
	}{
		{"runtime knows the sandbox", cri, known, now.Add(-time.Hour), nil, keep(ReasonSandboxLive)},
		{"runtime does not", cri, gone, now.Add(-time.Hour), nil, remove(ReasonOrphanScratch)},
		{"earlier boot, mtime from the future", boot, prior, now.Add(time.Hour), nil, remove(ReasonEarlierBoot)},
		{"earlier boot, still referenced", boot, prior, now.Add(-time.Hour), map[SandboxID]struct{}{prior: {}}, keep(ReasonSandboxReferenced)},
		{"earlier boot, runtime knows it", boot, known, now.Add(-time.Hour), nil, keep(ReasonSandboxLive)},
		{"current boot, young", boot, gone, now, nil, keep(ReasonTooYoung)},
	} {
		if got := tc.p.Scratch(Entry{Name: tc.id.String(), ModTime: tc.mtime}, tc.id, tc.ref); got != tc.want {
			t.Errorf("%s: got %+v, want %+v", tc.name, got, tc.want)
		}
	}
}

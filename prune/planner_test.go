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

package report

import (
	"log/slog"
	"slices"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/sweep-k8s/sweep/prune"
)

func TestEventNote(t *testing.T) {
	for _, tc := range []struct {
		name string
		sum  *prune.Summary
		want string
	}{
		{"nothing removed", &prune.Summary{FileCounts: prune.FileCounts{RemovedBy: map[prune.Reason]int{}}}, ""},
		{"a dry run", &prune.Summary{DryRun: true, FileCounts: prune.FileCounts{RemovedBy: map[prune.Reason]int{prune.ReasonPodGone: 3}}}, ""},
		{"removals, the most first", &prune.Summary{FileCounts: prune.FileCounts{RemovedBy: map[prune.Reason]int{prune.ReasonOrphanScratch: 4, prune.ReasonPodGone: 8, prune.ReasonEarlierBoot: 0}}},
			"removed 12 cache files (pod-gone 8, orphan-scratch 4)"},
		{"with DELs and releases", &prune.Summary{FileCounts: prune.FileCounts{RemovedBy: map[prune.Reason]int{prune.ReasonPodGone: 2}},
			CNIDel: &prune.CNIDelCounts{Attempted: 3, Succeeded: 2}, Reservations: &prune.ReservationCounts{Released: 5}},
			"removed 2 cache files (pod-gone 2); released 5 host-local reservations; 2 CNI DELs"},
		{"releases alone", &prune.Summary{FileCounts: prune.FileCounts{RemovedBy: map[prune.Reason]int{}}, Reservations: &prune.ReservationCounts{Released: 1}},
			"released 1 host-local reservations"},
	} {
		if got := eventNote(tc.sum); got != tc.want {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.want)
		}
	}
}

// TestNodeEventsAggregate: at most one Normal Event per node every
// normalEvery. The first run that removes something after a quiet window
// is posted at once; the runs within the window after it are counted and
// posted together when it ends (a series of as many runs, the counts in
// the note), or when the daemon stops; a run that removed nothing, or a
// dry run, counts for nothing. Warnings keep their own pace.
func TestNodeEventsAggregate(t *testing.T) {
	scheme := runtime.NewScheme()
	dc := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(scheme, map[schema.GroupVersionResource]string{eventsResource: "EventList"})
	var created []*unstructured.Unstructured
	dc.PrependReactor("create", "events", func(a k8stesting.Action) (bool, runtime.Object, error) {
		created = append(created, a.(k8stesting.CreateAction).GetObject().(*unstructured.Unstructured))
		return true, nil, nil
	})
	n := NewNodeEvents(dc, "node-a", func() string { return "uid-a" }, slog.New(slog.DiscardHandler))
	now := time.Date(2026, 12, 6, 10, 0, 0, 0, time.UTC)
	n.now = func() time.Time { return now }
	var timers []func()
	var waits []time.Duration
	n.after = func(d time.Duration, f func()) { waits, timers = append(waits, d), append(timers, f) }
	removed := func(k int) Run {
		return Run{Summary: &prune.Summary{FileCounts: prune.FileCounts{RemovedBy: map[prune.Reason]int{prune.ReasonPodGone: k}}}}
	}
	nothing := Run{Summary: &prune.Summary{FileCounts: prune.FileCounts{RemovedBy: map[prune.Reason]int{}}}}
	dry := Run{Summary: &prune.Summary{DryRun: true, FileCounts: prune.FileCounts{RemovedBy: map[prune.Reason]int{prune.ReasonPodGone: 9}}}}
	notes := func() []string {
		var out []string
		for _, ev := range created {
			out = append(out, ev.Object["type"].(string)+": "+ev.Object["note"].(string))
		}
		return out
	}

	n.Report(t.Context(), removed(2)) // the first: at once
	for i := range 30 {               // a check a deleted pod, every 10s
		now = now.Add(10 * time.Second)
		n.Report(t.Context(), removed(2))
		if i%3 == 0 {
			n.Report(t.Context(), nothing)
			n.Report(t.Context(), dry)
		}
	}
	n.Warn(t.Context(), WarnUnproven, "unproven")
	if got, want := notes(), []string{"Normal: removed 2 cache files (pod-gone 2)", "Warning: unproven"}; !slices.Equal(got, want) {
		t.Fatalf("Events within the window %q, want %q", got, want)
	}
	if len(timers) != 1 || waits[0] != normalEvery-10*time.Second {
		t.Fatalf("timers %v, want one at the end of the window", waits)
	}
	now = now.Add(normalEvery - 5*time.Minute)
	timers[0]()
	ev := created[2]
	if got, want := ev.Object["note"], "removed 60 cache files (pod-gone 60) in 30 runs, 10:00:10 to 10:05:00"; got != want {
		t.Errorf("the window's note %q, want %q", got, want)
	}
	series, _, _ := unstructured.NestedMap(ev.Object, "series")
	if series["count"] != int64(30) || series["lastObservedTime"] != "2026-12-06T10:05:00.000000Z" || ev.Object["eventTime"] != "2026-12-06T10:00:10.000000Z" {
		t.Errorf("series %v, eventTime %v", series, ev.Object["eventTime"])
	}

	// A run within the next window waits for it; the daemon's stop posts
	// it. A run after a quiet window is posted at once.
	now = now.Add(time.Minute)
	n.Report(t.Context(), removed(1))
	if len(created) != 3 || len(timers) != 2 {
		t.Fatalf("%d Events and %d timers, want 3 and 2", len(created), len(timers))
	}
	n.Flush(t.Context())
	n.Flush(t.Context())
	if got := notes()[3:]; !slices.Equal(got, []string{"Normal: removed 1 cache files (pod-gone 1)"}) {
		t.Errorf("at the stop: %q", got)
	}
	if _, ok := created[3].Object["series"]; ok {
		t.Error("a series of one run")
	}
	timers[1]() // fires after the stop: nothing left to post
	now = now.Add(normalEvery)
	n.Report(t.Context(), removed(4))
	if len(created) != 5 || len(timers) != 2 {
		t.Errorf("%d Events and %d timers after a quiet window, want 5 and 2", len(created), len(timers))
	}
}

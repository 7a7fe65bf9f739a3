package report

import (
	"testing"

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

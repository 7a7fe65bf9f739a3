package liveness

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// TestTerminations pins until when a pod that left the view may still run,
// by the kubelet's rules for its grace: the graceful termination the view
// saw begin, timed from when it first saw it, and never shortened by a
// later, shorter deletion (a kubelet already stopping the pod keeps its
// first grace); without one (a force deletion outright, a deletion while
// the watch was down), the spec's grace from the departure.
func TestTerminations(t *testing.T) {
	base := time.Unix(1_000_000, 0)
	type step struct {
		at     time.Duration // after base
		delTS  time.Duration // the deletionTimestamp, after base; 0 for none
		grace  int64         // deletionGracePeriodSeconds, with delTS
		gone   bool          // the pod leaves the view at this step
		noSpec bool          // the pod shows no terminationGracePeriodSeconds
	}
	for _, tc := range []struct {
		name  string
		spec  int64
		steps []step
		want  time.Duration // runsUntil, after base
	}{
		{name: "a graceful deletion of 600s, force-deleted 10s later", spec: 30,
			steps: []step{{at: 0}, {at: 5 * time.Second, delTS: 605 * time.Second, grace: 600}, {at: 15 * time.Second, gone: true}},
			want:  605 * time.Second},
		{name: "shortened to 30s, then to 0 by a force deletion: the first grace stands", spec: 30,
			steps: []step{{at: 0, delTS: 600 * time.Second, grace: 600}, {at: 10 * time.Second, delTS: 40 * time.Second, grace: 30},
				{at: 12 * time.Second, delTS: 12 * time.Second, grace: 0}, {at: 12 * time.Second, gone: true}},
			want: 600 * time.Second},
		{name: "status updates of a terminating pod do not move its end", spec: 30,
			steps: []step{{at: 0, delTS: 600 * time.Second, grace: 600}, {at: 100 * time.Second, delTS: 600 * time.Second, grace: 600},
				{at: 200 * time.Second, gone: true}},
			want: 600 * time.Second},
		{name: "force-deleted outright: the spec's grace from the departure", spec: 120,
			steps: []step{{at: 0}, {at: 50 * time.Second, delTS: 50 * time.Second, grace: 0}, {at: 50 * time.Second, gone: true}},
			want:  170 * time.Second},
		{name: "gone while the watch was down: the spec's grace", spec: 3600,
			steps: []step{{at: 0}, {at: 10 * time.Second, gone: true}},
			want:  3610 * time.Second},
		{name: "no grace in the spec: the API server's default",
			steps: []step{{at: 0, noSpec: true}, {at: 10 * time.Second, gone: true}},
			want:  40 * time.Second},
		{name: "deleted by its kubelet after a graceful termination: until its end", spec: 30,
			steps: []step{{at: 0, delTS: 30 * time.Second, grace: 30}, {at: 20 * time.Second, gone: true}},
			want:  30 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			now := base
			tr := newTerminations()
			tr.now = func() time.Time { return now }
			var got time.Time
			for _, st := range tc.steps {
				now = base.Add(st.at)
				if st.gone {
					got = tr.gone("uid-a", "ns/a")
					continue
				}
				p := &viewPod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "a", UID: types.UID("uid-a")}}
				if !st.noSpec {
					g := tc.spec
					p.Spec.TerminationGracePeriodSeconds = &g
				}
				if st.delTS != 0 {
					ts, g := metav1.NewTime(base.Add(st.delTS)), st.grace
					p.DeletionTimestamp, p.DeletionGracePeriodSeconds = &ts, &g
				}
				tr.observe(p)
			}
			if want := base.Add(tc.want); !got.Equal(want) {
				t.Fatalf("runs until %s after base, want %s", got.Sub(base), tc.want)
			}
			for _, at := range []time.Duration{tc.want - time.Second, tc.want} {
				now = base.Add(at)
				runs := at < tc.want
				if tr.runs("uid-a") != runs || tr.runsName("ns/a") != runs {
					t.Errorf("at %s: runs %v, runsName %v; want %v", at, tr.runs("uid-a"), tr.runsName("ns/a"), runs)
				}
			}
			// Forgotten once ended: the next departure expires it.
			tr.gone("uid-b", "ns/b")
			if _, ok := tr.pods["uid-a"]; ok {
				t.Error("an ended pod is still remembered")
			}
		})
	}
}
